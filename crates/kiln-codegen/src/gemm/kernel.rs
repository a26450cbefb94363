//! Register-blocked micro-kernels (GotoBLAS/BLIS "micro-kernel", Goto & van de Geijn 2008, §6;
//! Van Zee & van de Geijn 2015, §3) for each vector width kiln targets.
//!
//! Needs: A packed as `kc` columns of `mr` floats (one MR-row panel) or A's own rows, B as `kc`
//! rows of `nr` floats `ldb` apart (a packed panel, `ldb = nr`, 64-byte aligned rows, or B's
//! own rows read in place), `nr` a multiple of the vector length.
//! Guarantees: `c[i*ldc + j] (+)= sum_p a[p*mr + i] * b[p*ldb + j]` for the whole `mr x nr` tile,
//! with `mr x nr/VL` vector accumulators held in registers, one broadcast of an A scalar times one
//! B vector per fused multiply-add. Loads and stores go through `memcpy`, so no alignment or
//! aliasing assumption is made about `c`.
//!
//! The width is chosen by the C preprocessor (`__AVX512F__` -> 64 bytes, `__AVX__` -> 32,
//! otherwise 16), so the same source cross-compiles; each width has its own set of shapes.

use super::emit::CWriter;
use super::epilogue::FusedEpilogue;

/// The register tile of one micro-kernel: `mr` rows (broadcast A scalars) by `nr` columns
/// (`nr / VL` vectors of B).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelShape {
    pub mr: usize,
    pub nr: usize,
}

/// A micro-kernel shape with its relative speed when its operands sit in L1 (1.0 = FMA peak),
/// used to trade padding waste against kernel quality.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RatedShape {
    pub shape: KernelShape,
    pub speed: f64,
}

/// One vector width the generated C supports, selected by a preprocessor condition.
#[derive(Debug)]
pub(crate) struct VectorTarget {
    /// Vector size in bytes (vector length VL = bytes / 4 floats).
    pub bytes: usize,
    /// The preprocessor condition selecting it; the last target is the fallback (`1`).
    pub condition: &'static str,
    /// Register tiles to choose from (each must fit the register file with room for B vectors
    /// and the broadcast scalar).
    pub shapes: &'static [RatedShape],
    /// Deepest K block: long enough to amortise the C tile's read-modify-write per block,
    /// measured best on Zen 4 for every AVX-512 shape (192-512 all within noise).
    pub kc_max: usize,
    /// Typical L2 per core in bytes, where the target description does not give it
    /// (`Tuning::l2_bytes`): a packed A block (mc x kc) takes up to 3/4 of it.
    pub l2_bytes: usize,
    /// Typical L1 data cache per core in bytes, where the target description does not give
    /// it (`Tuning::l1_bytes`): whether the next prepacked weight panel is prefetched.
    pub l1_bytes: usize,
}

const fn rated(mr: usize, nr: usize, speed: f64) -> RatedShape {
    RatedShape {
        shape: KernelShape { mr, nr },
        speed,
    }
}

/// AVX-512: 32 zmm registers. The first three ran at the FMA peak (~118 GFLOP/s) with operands in
/// L1 on one Zen 4 core, so padding waste decides between them. 8x32 is for 32 columns under an A
/// read through row pointers (at most 8 rows): DenseNet's 3x3 convolutions to 32 channels
/// (`gemm_bench 3136 32 1152 2 --conv3x3 --nhwc --prepacked`, Zen 5) ran at 66% of peak as 8x48
/// and 94% as 8x32; a little slower per FMA than the others (more broadcasts per FMA).
const AVX512_SHAPES: &[RatedShape] = &[
    rated(14, 32, 1.0),
    rated(8, 48, 1.0),
    rated(6, 64, 1.0),
    rated(28, 16, 0.9),
    rated(8, 32, 0.95),
];
/// AVX/AVX2: 16 ymm registers -> 12 accumulators (the classic 6x16 Haswell kernel). 4x24
/// needs all 16 registers (12 accumulators, 3 B vectors, the broadcast) and GCC spills: on a
/// Zen 3 (AVX2, 2 threads, `gemm_bench 1536 3072 768 2 --pack-b 1 --transposed 0 --shape S`)
/// 6x16 ran at 80% of the FMA peak and 4x24 at 63%, so 4x24 only pays where 6-row tiles
/// waste a fifth of their rows.
const AVX_SHAPES: &[RatedShape] = &[rated(6, 16, 1.0), rated(4, 24, 0.78)];
/// 16-byte vectors (SSE, NEON, anything else): 12 accumulators fit 16 registers.
const GENERIC_SHAPES: &[RatedShape] = &[rated(6, 8, 1.0), rated(4, 12, 0.97)];

/// The targets in `#if ... #elif ... #else` order.
pub(crate) const TARGETS: &[VectorTarget] = &[
    VectorTarget {
        bytes: 64,
        condition: "defined(__AVX512F__)",
        shapes: AVX512_SHAPES,
        kc_max: 256,
        l2_bytes: 1 << 20,
        l1_bytes: 32 << 10,
    },
    VectorTarget {
        bytes: 32,
        condition: "defined(__AVX__)",
        shapes: AVX_SHAPES,
        kc_max: 256,
        l2_bytes: 256 << 10,
        l1_bytes: 32 << 10,
    },
    VectorTarget {
        bytes: 16,
        condition: "1",
        shapes: GENERIC_SHAPES,
        kc_max: 256,
        l2_bytes: 256 << 10,
        l1_bytes: 32 << 10,
    },
];

impl VectorTarget {
    pub(crate) fn vector_len(&self) -> usize {
        self.bytes / 4
    }
}

/// Where the micro-kernel reads A from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ASource {
    /// A packed panel: `a[p*mr + i]`.
    Packed,
    /// A's own rows, contiguous along K: `a[i*lda + p]` (no packing; extra `lda` argument).
    Rows,
    /// A row per pointer, contiguous along K: `a[i][p]` (a convolution's NHWC image read in
    /// place, a pointer to zeros for padding).
    Pointers,
    /// A row per pointer and a per-K offset shared by all rows: `a[i][koff[p]]` (an NCHW
    /// image's zero-padded copy read as pixel rows).
    Offsets,
}

impl ASource {
    pub(crate) const ALL: [ASource; 4] = [
        ASource::Packed,
        ASource::Rows,
        ASource::Pointers,
        ASource::Offsets,
    ];
}

/// The C name of the micro-kernel for a shape and A source (one per shape and width; only one
/// width's kernels survive the preprocessor): the shared one, or a gemm's own variant that
/// applies its epilogue.
pub(crate) fn ukernel_name(
    shape: KernelShape,
    source: ASource,
    epilogue: Option<&FusedEpilogue>,
) -> String {
    let suffix = match source {
        ASource::Packed => "",
        ASource::Rows => "_rows",
        ASource::Pointers => "_pointers",
        ASource::Offsets => "_offsets",
    };
    let owner = epilogue.map_or("kiln_gemm", |e| e.gemm.as_str());
    format!("{owner}_ukernel_{}x{}{suffix}", shape.mr, shape.nr)
}

/// Emits `#if cond / #elif cond / #else` chains around per-target code.
pub(crate) fn for_each_target(w: &mut CWriter, mut body: impl FnMut(&mut CWriter, &VectorTarget)) {
    for (index, target) in TARGETS.iter().enumerate() {
        let last = index + 1 == TARGETS.len();
        match (index, last) {
            (0, _) => w.directive(format!("#if KILN_VBYTES == {}", target.bytes)),
            (_, true) => w.directive(format!("#else /* KILN_VBYTES == {} */", target.bytes)),
            _ => w.directive(format!("#elif KILN_VBYTES == {}", target.bytes)),
        }
        body(w, target);
    }
    w.directive("#endif");
}

/// Emits `body` (micro-kernels) with `x * y + z` contracted into FMAs: GCC does so by default,
/// but not in ISO C mode (-std=c11, which defines __STRICT_ANSI__), where the kernels ask for it
/// themselves.
pub(crate) fn contracted(w: &mut CWriter, body: impl FnOnce(&mut CWriter)) {
    let iso_gcc = "#if defined(__GNUC__) && !defined(__clang__) && defined(__STRICT_ANSI__)";
    w.directive(iso_gcc);
    w.directive("#pragma GCC push_options");
    w.directive("#pragma GCC optimize(\"fp-contract=fast\")");
    w.directive("#endif");
    body(w);
    w.directive(iso_gcc);
    w.directive("#pragma GCC pop_options");
    w.directive("#endif");
}

/// Emits the fully unrolled micro-kernel for `shape` on vectors of `vl` floats. With an
/// epilogue, the kernel takes `kiln_last` (apply it), the batch index and the tile's first kernel
/// row and column, then the gemm's parameters, and applies the epilogue to every accumulator
/// before the store when `kiln_last` is set.
pub(crate) fn emit_ukernel(
    w: &mut CWriter,
    shape: KernelShape,
    vl: usize,
    source: ASource,
    epilogue: Option<&FusedEpilogue>,
) {
    let KernelShape { mr, nr } = shape;
    let nv = nr / vl;
    let (a_what, a_type) = match source {
        ASource::Packed => ("A panel", "const float* restrict a"),
        ASource::Rows => ("A rows", "const float* restrict a, long lda"),
        ASource::Pointers => ("A row pointers", "const float* const* restrict a"),
        ASource::Offsets => (
            "A row pointers at K offsets",
            "const float* const* restrict a, const long* restrict koff",
        ),
    };
    w.line(format!(
        "/* C[{mr} x {nr}] (+)= {a_what} ({mr} x kc) * B rows (kc x {nr}, ldb apart): {mr}x{nv} vector accumulators. */"
    ));
    let extra = epilogue.map_or(String::new(), |e| {
        format!(
            ", int kiln_last, long kiln_b, long kiln_r0, long kiln_c0, {}",
            e.params
        )
    });
    w.open(format!(
        "KILN_STATIC_INLINE void {}(long kc, {a_type}, const float* restrict b, long ldb, float* restrict c, long ldc, int accumulate{extra})",
        ukernel_name(shape, source, epilogue)
    ));
    for i in 0..mr {
        let decls: Vec<String> = (0..nv).map(|j| format!("c{i}_{j} = {{0}}")).collect();
        w.line(format!("kiln_vf {};", decls.join(", ")));
    }
    // Ask for the C tile now: its lines (often in L3 or memory) arrive while the FMAs run
    // instead of stalling the final read-modify-write.
    for i in 0..mr {
        let lines: Vec<String> = (0..nr.div_ceil(16))
            .map(|line| format!("__builtin_prefetch(c + {i} * ldc + {}, 1, 3);", line * 16))
            .collect();
        w.line(lines.join(" "));
    }
    if matches!(source, ASource::Pointers | ASource::Offsets) {
        let rows: Vec<String> = (0..mr).map(|i| format!("a{i} = a[{i}]")).collect();
        w.line(format!(
            "const float* restrict {};",
            rows.join(", *restrict ")
        ));
    }
    w.open("for (long p = 0; p < kc; p++)");
    if source == ASource::Offsets {
        w.line("const long o = koff[p];");
    }
    let loads: Vec<String> = (0..nv)
        .map(|j| format!("b{j} = kiln_vload(b + {})", j * vl))
        .collect();
    w.line(format!("const kiln_vf {};", loads.join(", ")));
    for i in 0..mr {
        let fmas: Vec<String> = (0..nv)
            .map(|j| format!("c{i}_{j} = b{j} * x + c{i}_{j};"))
            .collect();
        let x = match source {
            ASource::Packed => format!("a[{i}]"),
            ASource::Rows => format!("a[{i} * lda]"),
            ASource::Pointers => format!("a{i}[p]"),
            ASource::Offsets => format!("a{i}[o]"),
        };
        w.line(format!("{{ const float x = {x}; {} }}", fmas.join(" ")));
    }
    match source {
        ASource::Packed => w.line(format!("a += {mr};")),
        ASource::Rows => w.line("a += 1;"),
        ASource::Pointers | ASource::Offsets => {}
    }
    w.line("b += ldb;");
    w.close();
    w.open("if (accumulate)");
    for i in 0..mr {
        for j in 0..nv {
            w.line(format!(
                "c{i}_{j} += kiln_vload(c + {i} * ldc + {});",
                j * vl
            ));
        }
    }
    w.close();
    if let Some(e) = epilogue {
        w.open("if (kiln_last)");
        for i in 0..mr {
            for j in 0..nv {
                w.line(format!(
                    "c{i}_{j} = {}(c{i}_{j}, kiln_b, kiln_r0 + {i}, kiln_c0 + {}, {});",
                    e.lanes(),
                    j * vl,
                    e.args
                ));
            }
        }
        w.close();
    }
    for i in 0..mr {
        let stores: Vec<String> = (0..nv)
            .map(|j| format!("kiln_vstore(c + {i} * ldc + {}, c{i}_{j});", j * vl))
            .collect();
        w.line(stores.join(" "));
    }
    w.close();
}

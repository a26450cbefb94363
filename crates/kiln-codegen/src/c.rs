//! The C printer for loop IR kernels (CPU dialect).
//!
//! Needs: a scheduled [`Kernel`] whose element types the C backend has
//! (see [`scalar_c::c_type`]).
//! Guarantees: one C11 function `int NAME(void* const* restrict args)`
//! taking the kernel's buffers in order (inputs `const T* restrict`,
//! outputs `T* restrict`; no `restrict` on an in-place pair), returning 0, or 1 when a data-dependent index
//! was out of range (that read then reads element 0, never outside the
//! buffer). Parallel loops become `omp parallel for` (one whose iterations
//! combine partial results into outer locals becomes a region with a
//! copy per thread, combined in thread order or atomically,
//! `c/combine.rs`), vectorized loops
//! `omp simd`, unrolled loops `GCC unroll`; without OpenMP the pragmas are
//! ignored and the code stays correct. Floor division and remainder use
//! plain `/` and `%` where the dividend is provably non-negative.

mod arg_reduction;
mod combine;
pub(crate) mod gemm_kernel;
mod half_blocks;
mod omp_clauses;
mod statements;
mod values;

pub use values::literal;

use crate::gemm::{GemmWorkspace, Tuning};
use crate::scalar_c::{c_type, call_c, call_dtype, narrow, round_to, storage_type, widen};
use gemm_kernel::gemm_kernel_c;
use half_blocks::{narrowed_stores, widened_reads, BlockAccess, NARROW_BLOCK, WIDEN_BLOCK};
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_loop::{Atom, Extent, Idx, Kernel, Loop, LoopKind, Scope, Stmt, Val};
use kiln_ops::te::Combiner;
use kiln_target::TargetDesc;
use omp_clauses::{
    array_reduction_clause, flagged_extreme_step, nan_flag, nan_flag_type, reduction_clause,
};
use std::collections::HashMap;
use std::fmt::Write;

/// Headers and helpers every generated C file starts with.
pub fn prelude() -> String {
    let mut s = prelude_without_half_blocks();
    s.push_str(half_blocks::HALF_BLOCKS);
    s
}

/// The [`prelude`] of a compile unit holding the C `source`: the f16 block
/// conversions, and with them the target's intrinsics header (most of the
/// prelude's parsing time, BENCHMARKS.md session 26), only when `source`
/// calls them.
pub fn prelude_for(source: &str) -> String {
    if half_blocks::called_in(source) {
        prelude()
    } else {
        prelude_without_half_blocks()
    }
}

fn prelude_without_half_blocks() -> String {
    let mut s = String::from(
        "#include <stdint.h>\n#include <math.h>\n#include <string.h>\n#include <stdlib.h>\n",
    );
    // Scalar helpers must inline into every kernel's loops (to vectorize
    // them), even in a file of many kernels where the compiler's growth
    // limits would stop plain `inline`.
    s.push_str(
        "#if defined(__GNUC__)\n#define KILN_INLINE static inline __attribute__((always_inline, unused))\n#else\n#define KILN_INLINE static inline\n#endif\n",
    );
    // kiln jams loops itself (`kiln-loop` jam.rs) where its schedule says
    // so. GCC's own unroll-and-jam (on at -O3) also jams a split
    // reduction's row loop around its vectorized column loop and then
    // leaves the jammed body scalar (VGG's 25088x4096 classifier ran at
    // half the memory bandwidth: BENCHMARKS.md, session 18). A pragma
    // rather than a flag, since Clang rejects the flag.
    s.push_str(
        "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC optimize(\"no-loop-unroll-and-jam\")\n#endif\n",
    );
    s.push_str(
        "#define KILN_SET_ERR(e) __atomic_store_n(e, 1, __ATOMIC_RELAXED)\n#if defined(__clang__)\n#define KILN_UNROLL _Pragma(\"unroll\")\n#else\n#define KILN_UNROLL _Pragma(\"GCC unroll 16\")\n#endif\n",
    );
    // `KILN_ROLLED` (kept rolled: see `c/statements.rs`
    // `holds_simd_reduction`) comes with the gemm prelude below.
    s.push_str(INDEX_HELPERS);
    s.push_str(crate::scalar_c::PRELUDE);
    s.push_str(crate::gemm::gemm_prelude());
    s
}

/// Floor division, remainder and checked data-dependent indices, for
/// every dialect (each defines `KILN_INLINE` and `KILN_SET_ERR` first).
pub(crate) const INDEX_HELPERS: &str = r#"
KILN_INLINE int64_t kiln_fdiv(int64_t a, int64_t d) { int64_t q = a / d; return (a % d != 0 && a < 0) ? q - 1 : q; }
KILN_INLINE int64_t kiln_fmod(int64_t a, int64_t d) { int64_t r = a % d; return r < 0 ? r + d : r; }
KILN_INLINE int64_t kiln_idx(int64_t v, int64_t n, int* err) {
  if (v < 0) v += n;
  if (v < 0 || v >= n) { KILN_SET_ERR(err); return 0; }
  return v;
}
"#;

/// Suffix of a gemm kernel's prepacking entry points: `int NAME_prepack(void* const* args)`
/// (the kernel's buffers, then where to write the packing) and `long NAME_prepack_floats(void)`
/// (its size). Present when `kernel_c` chose to prepack a constant factor; the kernel itself
/// then takes the packing as one more argument after its buffers.
pub const PREPACK_SUFFIX: &str = "_prepack";

/// The entry points of kernel `name` as calls of kernel `to`, whose C is
/// the same but for its name: `int NAME(void* const*)` and, when
/// `prepacked`, the [`PREPACK_SUFFIX`] pair.
pub fn forwarding_kernel_c(name: &str, to: &str, prepacked: bool) -> String {
    let mut c = format!(
        "int {to}(void* const* restrict args);\n\
         int {name}(void* const* restrict args) {{ return {to}(args); }}\n"
    );
    if prepacked {
        let (from, to) = (
            format!("{name}{PREPACK_SUFFIX}"),
            format!("{to}{PREPACK_SUFFIX}"),
        );
        c += &format!(
            "long {to}_floats(void);\n\
             long {from}_floats(void) {{ return {to}_floats(); }}\n\
             int {to}(void* const* restrict args);\n\
             int {from}(void* const* restrict args) {{ return {to}(args); }}\n"
        );
    }
    c
}

/// Prints `k` as a C function for `target` (a gemm's cache blocking reads
/// its L2). `alias`: an input buffer the output may share (in-place
/// execution); neither gets `restrict`. `constants`: input buffers whose
/// values are known before any run (weights), which a gemm may pack once
/// ([`PREPACK_SUFFIX`]). `tuning` overrides a gemm's own choices (`kiln
/// tune`'s measured best; the default overrides nothing).
pub fn kernel_c(
    k: &Kernel,
    alias: Option<usize>,
    constants: &[usize],
    target: &TargetDesc,
    tuning: &Tuning,
) -> Result<KernelSource> {
    if let [Stmt::Gemm(g)] = k.body.as_slice() {
        let tuning = Tuning {
            l2_bytes: tuning.l2_bytes.or(Some(target.l2_per_core())),
            l1_bytes: tuning.l1_bytes.or(Some(target.l1_per_core())),
            ..tuning.clone()
        };
        return gemm_kernel_c(k, g, constants, &tuning);
    }
    let mut p = Printer::new(k);
    p.half_conversions = target.half_conversions;
    p.masked_lanes = target.masked_vectors().then(|| target.f32_lanes() as i64);
    // An in-place pair may alias: neither gets `restrict`.
    let restrict = |i: usize| alias.is_none() || !(k.buffers[i].output || alias == Some(i));
    let args = buffer_arguments(k, &restrict)?;
    write!(
        p.out,
        "int {}(void* const* restrict args) {{\n{args}",
        k.name
    )
    .ok();
    writeln!(p.out, "  int err = 0;").ok();
    for s in &k.body {
        p.stmt(s, 1)?;
    }
    writeln!(p.out, "  return err;\n}}").ok();
    Ok(KernelSource {
        c: p.out,
        packed_buffer: None,
        workspace: GemmWorkspace::default(),
    })
}

/// A kernel's C source.
#[derive(Debug, Clone)]
pub struct KernelSource {
    pub c: String,
    /// The buffer whose packing the kernel reads instead of it: it has the
    /// [`PREPACK_SUFFIX`] entry points and takes the packing after its
    /// buffers.
    pub packed_buffer: Option<usize>,
    /// Scratch memory it takes as its last argument (after the packing),
    /// 64-byte aligned, when nonzero.
    pub workspace: GemmWorkspace,
}

/// `T* NAME = (T*)args[i];` for each of `k`'s parameters (inputs `const`;
/// `restrict` where `restrict(i)`).
fn buffer_arguments(k: &Kernel, restrict: &dyn Fn(usize) -> bool) -> Result<String> {
    let mut s = String::new();
    let params = k.buffers.iter().filter(|b| b.scope == Scope::Param);
    for (i, b) in params.enumerate() {
        let ty = storage_type(b.dtype)?;
        let konst = if b.output { "" } else { "const " };
        let qualifier = if restrict(i) { "restrict " } else { "" };
        // A kernel need not read every buffer (a reshape's shape input).
        writeln!(
            s,
            "  {konst}{ty}* {qualifier}{0} = ({konst}{ty}*)args[{i}];\n  (void){0};",
            b.name
        )
        .ok();
    }
    Ok(s)
}

pub(crate) struct Printer<'a> {
    pub(crate) k: &'a Kernel,
    pub(crate) out: String,
    /// Value range of each enclosing loop variable.
    pub(crate) ranges: HashMap<String, (i64, i64)>,
    /// Element type of each local scalar.
    pub(crate) locals: HashMap<String, DType>,
    /// The innermost enclosing vectorized (`omp simd`) loop: its variable and extent.
    simd: Option<(String, i64)>,
    /// Print every guarded read as a conditional read (`g ? buf[i] : 0`); the CUDA
    /// printer's choice (see [`Printer::conditional_read`], [`Printer::for_gpu`]).
    conditional_reads: bool,
    /// Float max/min locals whose NaN the enclosing vectorized loops track in a flag.
    nan_flagged: Vec<String>,
    /// Whether vector loops convert their f16 elements a block at a time with the
    /// target's instructions (`c/half_blocks.rs`).
    half_conversions: bool,
    /// f32 lanes of the target's masked vectors (`TargetDesc::masked_vectors`): a short
    /// vector loop runs over whole vectors, its body guarded (`c/statements.rs`
    /// `padded_bound`).
    masked_lanes: Option<i64>,
    /// f16 reads the enclosing vector loop takes from arrays widened before it.
    widened: Vec<BlockAccess>,
    /// f16 stores the enclosing vector loop makes to arrays narrowed after it.
    narrowed: Vec<BlockAccess>,
    /// Block arrays declared so far (their names are numbered).
    block_arrays: usize,
    /// The next loop is workshared by an `omp for` already printed before it
    /// (`c/combine.rs`), so no other pragma may come between them.
    workshared: bool,
}

impl<'a> Printer<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Printer<'a> {
        Printer {
            k,
            out: String::new(),
            ranges: HashMap::new(),
            locals: HashMap::new(),
            simd: None,
            conditional_reads: false,
            nan_flagged: Vec::new(),
            half_conversions: false,
            masked_lanes: None,
            widened: Vec::new(),
            narrowed: Vec::new(),
            block_arrays: 0,
            workshared: false,
        }
    }

    /// A printer for GPU code: a thread reads under its guard (the masked
    /// unconditional reads work around a host C compiler's bug, which NVRTC
    /// does not share).
    pub(crate) fn for_gpu(k: &'a Kernel) -> Printer<'a> {
        Printer {
            conditional_reads: true,
            ..Printer::new(k)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c_of(text: &str) -> Result<String> {
        let k = kiln_loop::parse_kernel(text)?;
        Ok(kernel_c(
            &k,
            None,
            &[],
            &kiln_target::CpuPreset::X86_64V4.desc(2),
            &Tuning::default(),
        )?
        .c)
    }

    #[test]
    fn a_reduction_split_across_threads_combines_private_copies() {
        let sum = "kernel k(in0: f32[8,40], out out0: f32[40]) {
  for i1 in 0..40 {
    out0[i1] = 0.0:f32
  }
  parallel for r0 in 0..8 {
    vectorized for i1 in 0..40 {
      out0[i1] = Add(out0[i1], in0[40*r0 + i1])
    }
  }
}";
        let c = c_of(sum).expect("C");
        assert!(
            c.contains("KILN_OMP(omp parallel for reduction(+:out0[0:40]))"),
            "{c}"
        );
        let max = sum.replace("0.0:f32", "-inf:f32").replace("Add(", "Max(");
        let c = c_of(&max).expect("C");
        assert!(c.contains("reduction(kiln_rmaxf:out0[0:40])"), "{c}");
    }

    #[test]
    fn a_local_buffer_declared_in_a_parallel_loop_is_each_iteration_s_own() {
        let cached = "kernel k(in0: f32[8,40], out out0: f32[8,40]) {
  parallel for r0 in 0..8 {
    alloc t: f32[40]
    for i1 in 0..40 {
      t[i1] = in0[40*r0 + i1]
    }
    for i1 in 0..40 {
      out0[40*r0 + i1] = t[i1]
    }
  }
}";
        let c = c_of(cached).expect("C");
        assert!(c.contains("KILN_OMP(omp parallel for)\n"), "{c}");
    }

    #[test]
    fn a_parallel_loop_overwriting_the_same_elements_is_an_error() {
        let race = "kernel k(in0: f32[8,40], out out0: f32[40]) {
  parallel for r0 in 0..8 {
    for i1 in 0..40 {
      out0[i1] = in0[40*r0 + i1]
    }
  }
}";
        let err = c_of(race).expect_err("a race").to_string();
        assert!(err.contains("parallel loop 'r0' stores to out0"), "{err}");
    }

    /// A serial loop around a vectorized reduction is printed `KILN_ROLLED` (not one
    /// around a vectorized copy): GCC's full unrolling left the copies of the simd sum scalar.
    #[test]
    fn loops_around_simd_reductions_stay_rolled() {
        let split = "kernel k(in0: f32[4,768], out out0: f32[4]) {
  for o in 0..4 {
    let acc: f32 = 0.0:f32
    for r0o in 0..2 {
      vectorized for r0i in 0..min(512, 768 - 512*r0o) {
        acc = sum(acc, in0[512*r0o + r0i + 768*o])
      }
    }
    out0[o] = acc
  }
}";
        let c = c_of(split).expect("C");
        // Both serial loops hold the simd reduction; the simd loop itself is not marked.
        assert_eq!(c.matches("KILN_ROLLED\n").count(), 2, "{c}");
        assert!(c.contains("KILN_ROLLED\n    for (int64_t r0o = 0;"), "{c}");
        let copy = "kernel k(in0: f32[4,768], out out0: f32[4,768]) {
  for o in 0..4 {
    for r0o in 0..2 {
      vectorized for r0i in 0..min(512, 768 - 512*r0o) {
        out0[512*r0o + r0i + 768*o] = in0[512*r0o + r0i + 768*o]
      }
    }
  }
}";
        let c = c_of(copy).expect("C");
        assert!(!c.contains("KILN_ROLLED\n"), "{c}");
    }

    /// Differential finding 268: GCC 12.2 gave a group of masked loads one vector's mask.
    #[test]
    fn guarded_reads_are_conditional_only_where_gcc_cannot_mix_up_their_masks() {
        let window = "kernel k(in0: f32[3,3,5,3], out out0: f32[3,3,6,3]) {
  for i0 in 0..3 {
    for i1 in 0..3 {
      for i2 in 0..6 {
        for i3 in 0..3 {
          let acc: f32 = -inf:f32
          for r0 in 0..2 {
            acc = max(acc, Where(inbounds(i2 + r0 - 1 < 5), in0[45*i0 + 15*i1 + 3*i2 + 3*r0 + i3 - 3 if i2 + r0 - 1 < 5], -inf:f32))
          }
          out0[54*i0 + 18*i1 + 3*i2 + i3] = acc
        }
      }
    }
  }
}";
        let c = c_of(window).expect("C");
        assert!(!c.contains("? in0["), "{c}");
        assert!(c.contains("kiln_select_f32(((((i2 + r0 + -1) >= 0) & ((i2 + r0 + -1) < 5))) != 0, (float)(kiln_keep_f32("), "{c}");
        assert!(
            c.contains("in0[(45*i0 + 15*i1 + 3*i2 + 3*r0 + i3 + -3) & -(int64_t)"),
            "{c}"
        );
        // Channels-last: the vectorized loop reads at unit stride.
        let simd = |i3: &str, extent: usize| {
            window
                .replace(
                    "for i3 in 0..3",
                    &format!("vectorized for i3 in 0..{extent}"),
                )
                .replace("f32[3,3,5,3]", &format!("f32[3,3,5,{}]", 2 * extent))
                .replace("f32[3,3,6,3]", &format!("f32[3,3,6,{extent}]"))
                .replace("r0 + i3 - 3 if", &format!("r0 + {i3} - 3 if"))
        };
        let c = c_of(&simd("i3", 32)).expect("C");
        assert!(c.contains("? in0[(45*i0"), "{c}");
        assert!(!c.contains("kiln_keep_f32(("), "{c}");
        // At stride 2 under a guard independent of i3, all lanes share the mask.
        let c = c_of(&simd("2*i3", 32)).expect("C");
        assert!(c.contains("? in0[(45*i0"), "{c}");
        // A loop GCC may unroll before vectorizing another, or a guard on the vectorized
        // loop at stride 2: unconditional.
        let on_i3 = simd("2*i3", 32)
            .replace(
                "inbounds(i2 + r0 - 1 < 5)",
                "inbounds(i2 + r0 - 1 < 5 && 2*i3 - 1 < 64)",
            )
            .replace(
                "if i2 + r0 - 1 < 5]",
                "if i2 + r0 - 1 < 5 && 2*i3 - 1 < 64]",
            );
        for text in [simd("i3", 8), on_i3] {
            let c = c_of(&text).expect("C");
            assert!(!c.contains("? in0["), "{c}");
        }
    }

    /// A short vector loop runs whole masked vectors on AVX-512 only when every read and
    /// store is contiguous along it, it has over 16 iterations and its body reads at most
    /// `PADDED_MAX_LOADS` times (`padded_bound`).
    #[test]
    fn short_vector_loops_are_padded_only_where_gcc_masks_them() {
        let rows = |extent: usize, read: &str| {
            format!(
                "kernel k(in0: f32[4,{extent}], in1: f32[4], out out0: f32[4,{extent}]) {{
  for o in 0..4 {{
    vectorized for j in 0..{extent} {{
      out0[{extent}*o + j] = Mul({read}, 2.0:f32)
    }}
  }}
}}"
            )
        };
        let c = c_of(&rows(20, "in0[20*o + j]")).expect("C");
        assert!(c.contains("j < 32; ++j) if (j < 20) {"), "{c}");
        let taps = |n: usize| {
            let reads: Vec<String> = (0..n).map(|t| format!("in0[j + {t}]")).collect();
            reads.join(", ")
        };
        let many =
            |n: usize| rows(20, &format!("Max({})", taps(n))).replace("f32[4,20]", "f32[4,40]");
        let c = c_of(&many(statements::PADDED_MAX_LOADS)).expect("C");
        assert!(c.contains("if (j < 20)"), "{c}");
        // A whole number of vectors, 16 iterations or fewer, a read the same for every
        // lane, or one not at unit stride: the loop as it is.
        for (extent, read) in [
            (32, "in0[32*o + j]"),
            (12, "in0[12*o + j]"),
            (20, "in1[o]"),
            (20, "in0[2*j]"),
        ] {
            let c = c_of(&rows(extent, read)).expect("C");
            assert!(!c.contains(") if (j <"), "{extent} {read}: {c}");
        }
        let c = c_of(&many(statements::PADDED_MAX_LOADS + 1)).expect("C");
        assert!(!c.contains(") if (j <"), "{c}");
    }
}

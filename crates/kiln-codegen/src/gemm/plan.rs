//! Chooses, per vector target, the micro-kernel shape, the orientation (`C = A B` or
//! `C^T = B^T A^T`), whether A is packed, and the cache blocking of one matmul (GotoBLAS/BLIS
//! blocking: Goto & van de Geijn 2008 §6-7; Low et al. 2016, "Analytical modeling is enough").
//!
//! Needs a validated spec. Guarantees `kc <= k`, at least one panel per block, and the
//! candidate with the least modelled time (`modelled_cycles`: micro-kernel work on the padded
//! tiles, packing traffic, scalar copies of C). Blocks follow the cache model: K blocks as deep
//! as the target's measured `kc_max` (the C tile's read-modify-write is paid once per K block);
//! one packed A block (`mc x kc`) fills about 3/4 of L2, since the micro-kernel streams it once
//! per B micro-panel; packed B blocks (`kc x nc`, see `NC_MAX`) stay in L2, each micro-panel read once per A
//! block. The thread split is decided at run time in C (`kiln_gemm_split`), from these sizes.

use super::kernel::{KernelShape, VectorTarget};
use super::pack::Side;
use super::view::{Axis, View};
use super::window::packs_by_gather;
use super::{Factor, GemmSpec, Operand, Tuning};

/// How one matmul is computed on one vector target.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    pub shape: KernelShape,
    /// Computes `C^T = B^T A^T`: kernel rows run along C's columns.
    pub transposed: bool,
    /// Kernel-orientation sizes (M', N' swap when transposed).
    pub m: usize,
    pub n: usize,
    /// Depth of one K block (K is cut into equal blocks of at most the cache-model depth).
    pub kc: usize,
    /// Largest M block and N block, in panels of `mr` rows and `nr` columns.
    pub mc_panels: usize,
    pub nc_panels: usize,
    /// Pack A into panels; otherwise the micro-kernel reads A's rows in place (only when A is
    /// strided and contiguous along K; a partial last panel is still packed).
    pub pack_a: bool,
    /// Pack B into panels; otherwise the micro-kernel reads B's rows in place (only when B is
    /// strided, contiguous along N and not prepacked; a partial last panel is still packed).
    pub pack_b: bool,
    /// A convolution window operand is packed from a zero-padded copy of its image by per-pixel
    /// offsets (`window::packs_by_gather`).
    pub staged: bool,
    /// The kernel-orientation factor read from its prepacked panels (never packed per call).
    pub prepacked: Option<Side>,
    /// With B prepacked: each tile prefetches its share of the panel the task reads next
    /// (`prefetches_next_panel`).
    pub prefetch_b: bool,
    /// Each tile runs all K blocks before the next tile (B's panels of every block packed
    /// first), instead of every tile once per K block (`runs_k_inside_tiles`).
    pub k_inner: bool,
}

impl Plan {
    pub(crate) fn m_panels(&self) -> usize {
        self.m.div_ceil(self.shape.mr)
    }

    pub(crate) fn n_panels(&self) -> usize {
        self.n.div_ceil(self.shape.nr)
    }

    fn m_blocks(&self) -> usize {
        self.m_panels().div_ceil(self.mc_panels)
    }

    fn n_blocks(&self) -> usize {
        self.n_panels().div_ceil(self.nc_panels)
    }
}

/// Largest N block (columns). A task packs its whole N block before the micro-kernels read it
/// back; blocks of 512 columns stay in L2 for kc up to 256. Measured with `gemm_bench` on
/// Zen 4 (2 threads): 4096 cost 10-25 points of peak on few-row shapes (24x3136x144: 56% ->
/// 67%, 96x12544x16: 62% -> 80%) and 512 was level or better on square and transformer shapes.
const NC_MAX: usize = 512;

/// Widest A tile read in place over several K blocks: more row streams spill the kernel's
/// address registers (14x32 reading A in place measured 20% slower on Zen 4).
const IN_PLACE_MAX_ROWS: usize = 8;

/// The micro-kernel's slowdown reading a wider A tile in place (one K block), against reading
/// panels. Measured with `gemm_bench` on Zen 4, 2 threads: in place and packed run level at
/// 784x192x32 (83% vs 86%), packed is better at 3136x144x24 (95% vs 87%), and few columns make
/// packing dominate (12544x16x32: 85% in place vs 33% packed; 3136x24x144: 71% vs 52%).
const IN_PLACE_SLOWDOWN: f64 = 1.25;

/// The fixed cost of one run of the window packer (bounds, clamps, three loops), in cycles.
/// Fitted on ResNet-50's first convolution (7x7, stride 2, 112-wide output rows, NHWC output):
/// the transposed 14x32 plan (A panels of 14 pixels, C stored directly) ran 1.82-1.85 ms,
/// against 1.57-1.59 ms for 8x48 untransposed (B panels of 48 pixels, C copied per tile);
/// without a per-run cost the model preferred the former.
const WINDOW_RUN_CYCLES: f64 = 48.0;

pub(crate) fn plan(spec: &GemmSpec, target: &VectorTarget, tuning: &Tuning) -> Plan {
    let mut best: Option<(f64, Plan)> = None;
    for rated in target.shapes {
        if tuning.shape.is_some_and(|forced| forced != rated.shape) {
            continue;
        }
        for transposed in [false, true] {
            if tuning.transposed.is_some_and(|forced| forced != transposed) {
                continue;
            }
            for (pack_a, pack_b) in [(true, true), (false, true), (true, false), (false, false)] {
                let packing = Packing {
                    a: pack_a,
                    b: pack_b,
                };
                let Some(plan) = candidate(spec, target, tuning, rated.shape, transposed, packing)
                else {
                    continue;
                };
                let cycles = modelled_cycles(spec, target, &plan, rated.speed);
                if best
                    .as_ref()
                    .is_none_or(|(best_cycles, _)| cycles < *best_cycles)
                {
                    best = Some((cycles, plan));
                }
            }
        }
    }
    match best {
        Some((_, plan)) => plan,
        // Only a forced shape this target lacks gets here: use the target's first shape.
        None => {
            let fallback = Tuning {
                shape: None,
                ..tuning.clone()
            };
            plan(spec, target, &fallback)
        }
    }
}

/// Which operands are packed per call (the rest are read in place).
#[derive(Clone, Copy, Debug)]
struct Packing {
    a: bool,
    b: bool,
}

/// The plan for one (shape, orientation, packing) choice, or `None` when that choice is ruled
/// out (an operand not readable in place, or the tuning forbids it).
fn candidate(
    spec: &GemmSpec,
    target: &VectorTarget,
    tuning: &Tuning,
    shape: KernelShape,
    transposed: bool,
    packing: Packing,
) -> Option<Plan> {
    let prepacked = prepacked_side(spec, transposed);
    let a_allowed = if prepacked == Some(Side::A) {
        // Packed once before any call: A is always read from panels.
        packing.a
    } else if View::new(&spec.a, transposed).offsets_window().is_some() {
        // A pointer per pixel into the staged image: no K block limit.
        choice_allowed(packing.a, tuning.pack_a, true, true)
    } else if let Some(window) = View::new(&spec.a, transposed).rows_window() {
        // Row pointers: one per kernel row, held in registers, and K blocks within one tap.
        let in_place_possible =
            shape.mr <= IN_PLACE_MAX_ROWS && tap_block(window.channels, tuning, target).is_some();
        choice_allowed(
            packing.a,
            tuning.pack_a,
            in_place_possible,
            in_place_possible,
        )
    } else {
        let in_place_possible = in_place_stride(spec, transposed, Side::A).is_some();
        let wide_ok = shape.mr <= IN_PLACE_MAX_ROWS || spec.k <= target.kc_max;
        choice_allowed(
            packing.a,
            tuning.pack_a,
            in_place_possible && wide_ok,
            in_place_possible,
        )
    };
    let b_allowed = if prepacked == Some(Side::B) {
        packing.b
    } else {
        let stride = in_place_stride(spec, transposed, Side::B);
        let aligned = b_rows_aligned(spec, transposed, target);
        choice_allowed(
            packing.b,
            tuning.pack_b,
            stride.is_some() && aligned && !b_rows_pages_apart(spec, transposed),
            stride.is_some(),
        )
    };
    (a_allowed && b_allowed)
        .then(|| blocked(spec, target, tuning, shape, transposed, packing, prepacked))
}

/// Whether packing an operand (`pack`) or reading it in place is a candidate: a forced choice
/// is kept (forcing in place falls back to packing where the operand cannot be read in place);
/// otherwise packing always is, and in place where `in_place_default` allows.
fn choice_allowed(
    pack: bool,
    forced: Option<bool>,
    in_place_default: bool,
    in_place_possible: bool,
) -> bool {
    match forced {
        Some(forced) => pack == forced || (!forced && pack && !in_place_possible),
        None => pack || in_place_default,
    }
}

/// The kernel-orientation side of the spec's prepacked factor.
fn prepacked_side(spec: &GemmSpec, transposed: bool) -> Option<Side> {
    let factor = spec.prepacked.as_ref()?.factor;
    Some(match (factor, transposed) {
        (Factor::A, false) | (Factor::B, true) => Side::A,
        (Factor::B, false) | (Factor::A, true) => Side::B,
    })
}

/// The K block of an NHWC window read through row pointers: the largest divisor of the
/// channel count up to the cache-model depth, so no block straddles two taps. `None` when
/// that is below 8 (few channels: packing pays better), unless the tuning forces the depth.
fn tap_block(channels: usize, tuning: &Tuning, target: &VectorTarget) -> Option<usize> {
    let kc_max = tuning.kc.unwrap_or(target.kc_max).max(1);
    let block = (1..=kc_max.min(channels))
        .rev()
        .find(|d| channels.is_multiple_of(*d))?;
    (block >= 8 || tuning.kc.is_some()).then_some(block)
}

/// Whether every row of B (kernel orientation) starts on a vector boundary when the operand
/// does: B's rows read in place ran at 86-95% of peak with rows 64-byte aligned and at 42-65%
/// with rows 196 or 49 floats apart (`gemm_bench` on Zen 4, 2 threads, against 69-76% packed).
fn b_rows_aligned(spec: &GemmSpec, transposed: bool, target: &VectorTarget) -> bool {
    let b = if transposed { &spec.a } else { &spec.b };
    let vl = target.vector_len() as isize;
    View::new(b, transposed)
        .kernel_strides()
        .is_some_and(|(batch, row, _)| batch % vl == 0 && row % vl == 0)
}

/// Whether B's rows (kernel orientation) lie a whole number of 4 KiB pages apart. A panel's
/// rows then share their address bits below the page size, which index an L1's sets (and the
/// low bits of an L2's): the panel, reread for every A tile, keeps few of its lines cached.
/// `gemm_bench 1024 N 1024 1 --pack-b 0|1` on Zen 4 (AVX2, 32 KiB L1, 1 MiB L2): in place ran
/// at 60-70% of peak with rows 4, 8 or 16 KiB apart (N = 1024, 2048, 4096) against 63-81%
/// packed, and at 90-96% against 83-91% packed with rows 256 B to 3 KiB apart (BENCHMARKS.md,
/// session 20).
///
/// In a batched product (each B used for fewer rows of A, Winograd's 16 products) rows a
/// multiple of 1 KiB apart count too, which leaves a panel at most 4 of an L1's sets per
/// way: packed, `[16, 256, 512] × [16, 512, 512]` ran 14.1 ms against 18.0 in place and
/// `[16, 784, 256] × [16, 256, 256]` 10.1-10.6 against 12.0 (`kiln bench`, Zen 4, 2
/// threads; BENCHMARKS.md, issue 19, session 25).
fn b_rows_pages_apart(spec: &GemmSpec, transposed: bool) -> bool {
    const PAGE_FLOATS: isize = 4096 / std::mem::size_of::<f32>() as isize;
    let apart = match spec.batch {
        1 => PAGE_FLOATS,
        _ => PAGE_FLOATS / 4,
    };
    let b = if transposed { &spec.a } else { &spec.b };
    View::new(b, transposed)
        .kernel_strides()
        .is_some_and(|(_, row, _)| row != 0 && row % apart == 0)
}

/// The cache blocking of one (shape, orientation, packing) choice.
fn blocked(
    spec: &GemmSpec,
    target: &VectorTarget,
    tuning: &Tuning,
    shape: KernelShape,
    transposed: bool,
    packing: Packing,
    prepacked: Option<Side>,
) -> Plan {
    let (m, n) = if transposed {
        (spec.n, spec.m)
    } else {
        (spec.m, spec.n)
    };
    let kc_max = tuning.kc.unwrap_or(target.kc_max).max(1);
    let pointer_rows = View::new(&spec.a, transposed)
        .rows_window()
        .filter(|_| !packing.a);
    let kc = match pointer_rows.and_then(|window| tap_block(window.channels, tuning, target)) {
        Some(kc) => kc,
        None => spec.k.div_ceil(spec.k.div_ceil(kc_max)),
    };
    let l2_bytes = tuning.l2_bytes.unwrap_or(target.l2_bytes);
    let mc_max = tuning.mc.unwrap_or(l2_bytes * 3 / 4 / (kc * 4));
    let nc_max = tuning.nc.unwrap_or(NC_MAX);
    let n_block = n.min(nc_max.max(shape.nr)).div_ceil(shape.nr) * shape.nr;
    let b_block_bytes = spec.k * n_block * std::mem::size_of::<f32>();
    let k_inner = pointer_rows.is_some()
        && runs_k_inside_tiles(spec.k, kc, packing, prepacked, b_block_bytes, l2_bytes);
    Plan {
        shape,
        transposed,
        m,
        n,
        kc,
        mc_panels: (mc_max / shape.mr).max(1),
        nc_panels: (nc_max / shape.nr).max(1),
        pack_a: packing.a,
        pack_b: packing.b,
        staged: staged(spec, tuning, transposed, packing),
        prepacked,
        prefetch_b: prepacked == Some(Side::B)
            && prefetches_next_panel(tuning, target, kc, shape.nr),
        k_inner,
    }
}

/// Whether a plan reading A through row pointers (a window whose K blocks are its taps) runs
/// each tile's K blocks together: when K takes several blocks and B, packed per task, fits in
/// a quarter of L2 for all of K. Run block by block over every tile, each tile's partial sums
/// go back to C (or through a clipped tile's scalar copy) after every tap; together they stay
/// in registers and L1, and only the tile's row pointers are rebuilt per tap. A grouped 3x3
/// convolution of 24 channels per group (N = 24 under 32-column tiles, all copied) ran 1.5x
/// faster so (BENCHMARKS.md, session 32).
fn runs_k_inside_tiles(
    k: usize,
    kc: usize,
    packing: Packing,
    prepacked: Option<Side>,
    b_block_bytes: usize,
    l2_bytes: usize,
) -> bool {
    k > kc && packing.b && prepacked.is_none() && b_block_bytes <= l2_bytes / 4
}

/// Whether a prepacked B's next panel (`kc x nr` floats) is prefetched while the current one
/// is in use: unless the tuning decides, only when the two panels together fit in L1. x86
/// prefetches fill L1 too (on AMD every hint does), so a panel as large as L1 evicts the
/// panel and A rows in use (BENCHMARKS.md, session 18: 8x48 panels of depth 256 on a 48 KiB
/// L1 ran faster without; 6x16 ones on a 32 KiB L1 faster with, session 8).
fn prefetches_next_panel(tuning: &Tuning, target: &VectorTarget, kc: usize, nr: usize) -> bool {
    let l1_bytes = tuning.l1_bytes.unwrap_or(target.l1_bytes);
    tuning
        .prefetch
        .unwrap_or(2 * kc * nr * std::mem::size_of::<f32>() <= l1_bytes)
}

/// Whether the plan reads a window operand from a staged copy: B packed by gathers (only B
/// can be a window whose panels run along its pixels, its columns, in either orientation), or
/// an NCHW window read as pixel rows through offsets.
fn staged(spec: &GemmSpec, tuning: &Tuning, transposed: bool, packing: Packing) -> bool {
    let gathered =
        matches!(&spec.b, Operand::Window(window) if packs_by_gather(window, tuning.staged));
    let offsets = View::new(&spec.a, transposed).offsets_window().is_some() && !packing.a;
    gathered || offsets
}

/// The row stride (in kernel orientation) of A or B when the operand is strided with unit
/// stride along its rows, so the micro-kernel can read it in place: A's elements broadcast
/// along K, B's rows loaded as vectors.
fn in_place_stride(spec: &GemmSpec, transposed: bool, side: Side) -> Option<isize> {
    let operand = match (side, transposed) {
        (Side::A, false) | (Side::B, true) => &spec.a,
        (Side::B, false) | (Side::A, true) => &spec.b,
    };
    match View::new(operand, transposed).kernel_strides() {
        Some((_, row, 1)) => Some(row),
        _ => None,
    }
}

/// Modelled time in vector-FMA cycles: the micro-kernel on padded tiles at the shape's speed,
/// a scalar copy of every tile per K block when C's kernel columns are not contiguous, and
/// packing (each B block once per M block, each A block once per N block, at a per-element
/// cost that depends on how the operand is laid out).
fn modelled_cycles(spec: &GemmSpec, target: &VectorTarget, plan: &Plan, speed: f64) -> f64 {
    let (mr, nr) = (plan.shape.mr, plan.shape.nr);
    let (k, batch) = (spec.k as f64, spec.batch as f64);
    let padded = (plan.m_panels() * mr * plan.n_panels() * nr) as f64;
    let mut kernel = batch * padded * k / target.vector_len() as f64 / speed;
    if !plan.pack_a && mr > IN_PLACE_MAX_ROWS {
        kernel *= IN_PLACE_SLOWDOWN;
    }
    let contiguous_c = View::new(&spec.c, plan.transposed)
        .kernel_strides()
        .is_some_and(|(_, _, col)| col == 1);
    let copy = if contiguous_c {
        0.0
    } else {
        // A scalar read-modify-write per element and K block against kc/VL vector FMAs.
        kernel * 2.0 * target.vector_len() as f64 / plan.kc as f64
    };
    let (a, b) = if plan.transposed {
        (&spec.b, &spec.a)
    } else {
        (&spec.a, &spec.b)
    };
    let pack_a = if plan.pack_a && plan.prepacked != Some(Side::A) {
        let per_element = pack_cost(&View::new(a, plan.transposed), Axis::Row, plan);
        batch * (plan.m * spec.k * plan.n_blocks()) as f64 * per_element
    } else {
        0.0
    };
    let pack_b = if plan.prepacked == Some(Side::B) || !plan.pack_b {
        0.0
    } else {
        let per_element = pack_cost(&View::new(b, plan.transposed), Axis::Col, plan);
        batch * (spec.k * plan.n * plan.m_blocks()) as f64 * per_element
    };
    kernel + copy + pack_a + pack_b
}

/// Cycles to pack one element whose panel runs along kernel axis `panel`, as measured on
/// Zen 4 with operands coming from L3 or memory: a copy along contiguous memory (row-major B,
/// convolution windows) ~1.5, a transposition (contiguous along the depth) ~3.5, anything
/// else (gathers, expressions with div/mod) ~5. A window packed by runs of image rows also
/// pays `WINDOW_RUN_CYCLES` per run, and a run ends at a panel's edge or an output row's.
fn pack_cost(view: &View, panel: Axis, plan: &Plan) -> f64 {
    if let Some(window) = view.window_along(panel) {
        if plan.staged {
            return 1.5;
        }
        let width = match panel {
            Axis::Row => plan.shape.mr,
            Axis::Col => plan.shape.nr,
        };
        return 1.5 + WINDOW_RUN_CYCLES / width.min(window.out[1]) as f64;
    }
    match view.kernel_strides() {
        Some((_, row, col)) => {
            let (along_panel, along_depth) = match panel {
                Axis::Row => (row, col),
                Axis::Col => (col, row),
            };
            match (along_panel.unsigned_abs(), along_depth.unsigned_abs()) {
                (0 | 1, _) => 1.5,
                (_, 0 | 1) => 3.5,
                _ => 5.0,
            }
        }
        None => 5.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::kernel::TARGETS;
    use crate::gemm::{Operand, Param, Window, WindowLayout};

    fn row_major(m: usize, n: usize, k: usize) -> GemmSpec {
        let strided = |param: &str, row: usize| Operand::Strided {
            param: param.into(),
            batch: 0,
            row: row as isize,
            col: 1,
        };
        GemmSpec {
            name: "mm".into(),
            params: ["A", "B", "C"].map(|p| Param::new("float*", p)).to_vec(),
            batch: 1,
            m,
            n,
            k,
            a: strided("A", k),
            b: strided("B", n),
            c: strided("C", n),
            epilogue: None,
            prepacked: None,
        }
    }

    #[test]
    fn few_columns_read_weights_in_place_instead_of_transposing_them() {
        // ResNet-50 stage 5: 512 x 49 x 2048. Transposing puts the large A through a
        // transposing pack; reading it in place measured 86 vs 58 GFLOP/s on one Zen 4 core.
        let plan = plan(&row_major(512, 49, 2048), &TARGETS[0], &Tuning::default());
        assert!(!plan.transposed && !plan.pack_a, "{plan:?}");
    }

    #[test]
    fn the_packed_a_block_follows_the_targets_l2() {
        let spec = row_major(3072, 768, 768);
        let with = |l2: usize| {
            let tuning = Tuning {
                l2_bytes: Some(l2),
                ..Tuning::default()
            };
            plan(&spec, &TARGETS[0], &tuning).mc_panels
        };
        assert!(
            with(256 << 10) < with(1 << 20),
            "{} {}",
            with(256 << 10),
            with(1 << 20)
        );
        assert!(with(1 << 20) < with(4 << 20));
    }

    #[test]
    fn aligned_b_rows_are_read_in_place_and_misaligned_ones_packed() {
        // ResNet-50's 1x1 convolutions: 3136 pixels (rows 64-byte aligned) and 196 (not).
        let aligned = plan(&row_major(64, 3136, 256), &TARGETS[0], &Tuning::default());
        assert!(!aligned.pack_b, "{aligned:?}");
        let misaligned = plan(&row_major(256, 196, 1024), &TARGETS[0], &Tuning::default());
        assert!(misaligned.pack_b, "{misaligned:?}");
    }

    #[test]
    fn b_rows_whole_pages_apart_are_packed() {
        let untransposed = Tuning {
            transposed: Some(false),
            ..Tuning::default()
        };
        for target in TARGETS {
            // 1024 floats: rows 4 KiB apart; 768: 3 KiB apart.
            let paged = plan(&row_major(1024, 1024, 1024), target, &untransposed);
            assert!(paged.pack_b, "{paged:?}");
            let unpaged = plan(&row_major(1024, 768, 1024), target, &untransposed);
            assert!(!unpaged.pack_b, "{unpaged:?}");
        }
    }

    #[test]
    fn nhwc_windows_are_read_through_row_pointers_in_blocks_within_a_tap() {
        let mut spec = row_major(196, 256, 9 * 384);
        spec.a = Operand::Window(square_window(384, 14, 3, 1, WindowLayout::ChannelsLast));
        let plan = plan(&spec, &TARGETS[0], &Tuning::default());
        assert!(!plan.pack_a && !plan.transposed, "{plan:?}");
        assert!(plan.shape.mr <= IN_PLACE_MAX_ROWS, "{plan:?}");
        assert_eq!(plan.kc, 192, "the largest divisor of 384 up to 256");
    }

    #[test]
    fn grouped_window_products_run_their_taps_inside_each_tile() {
        // RegNetX-1.6GF's grouped 3x3 convolutions: 17 groups of 24 channels over 14x14.
        let strided = |param: &str| Operand::Strided {
            param: param.into(),
            batch: 24,
            row: 408,
            col: 1,
        };
        let mut spec = row_major(196, 24, 9 * 24);
        spec.batch = 17;
        spec.a = Operand::Window(Window {
            batch: 24,
            pixel_stride: 408,
            ..square_window(24, 14, 3, 1, WindowLayout::ChannelsLast)
        });
        (spec.b, spec.c) = (strided("B"), strided("C"));
        let grouped = plan(&spec, &TARGETS[0], &Tuning::default());
        assert!(grouped.k_inner && grouped.kc == 24, "{grouped:?}");
        // A wide layer's weights (3456 x 256 floats) are more than a quarter of L2.
        let mut wide = row_major(196, 256, 9 * 384);
        wide.a = Operand::Window(square_window(384, 14, 3, 1, WindowLayout::ChannelsLast));
        let wide = plan(&wide, &TARGETS[0], &Tuning::default());
        assert!(!wide.k_inner, "{wide:?}");
    }

    #[test]
    fn nchw_pixel_rows_are_read_from_a_staged_copy_in_one_k_block() {
        // ResNet-50's first convolution: 12544 pixels x 64 channels, K = 3 x 7 x 7.
        let mut spec = row_major(112 * 112, 64, 147);
        spec.a = Operand::Window(square_window(3, 112, 7, 2, WindowLayout::Rows));
        for target in TARGETS {
            let plan = plan(&spec, target, &Tuning::default());
            assert!(!plan.pack_a && !plan.transposed && plan.staged, "{plan:?}");
            assert_eq!(plan.kc, 147, "{plan:?}");
        }
    }

    /// A `kernel x kernel` window (padding `kernel / 2`) over `channels`, `out x out` pixels.
    fn square_window(
        channels: usize,
        out: usize,
        kernel: usize,
        stride: usize,
        layout: WindowLayout,
    ) -> Window {
        Window {
            param: "A".into(),
            batch: 0,
            channels,
            pixel_stride: channels,
            size: [out * stride; 2],
            out: [out; 2],
            kernel: [kernel; 2],
            stride: [stride; 2],
            pad: [kernel / 2; 2],
            dilation: [1, 1],
            layout,
            images: 1,
            image_stride: 0,
        }
    }

    #[test]
    fn square_matmul_wastes_little_padding() {
        let plan = plan(
            &row_major(1024, 1024, 1024),
            &TARGETS[0],
            &Tuning::default(),
        );
        let padded = plan.m_panels() * plan.shape.mr * plan.n_panels() * plan.shape.nr;
        assert!(padded as f64 <= 1024.0 * 1024.0 * 1.01, "{plan:?}");
        assert!(!plan.transposed);
    }

    #[test]
    fn forced_choices_are_respected() {
        let tuning = Tuning {
            shape: Some(KernelShape { mr: 14, nr: 32 }),
            transposed: Some(true),
            pack_a: Some(true),
            kc: Some(16),
            ..Tuning::default()
        };
        let plan = plan(&row_major(30, 40, 50), &TARGETS[0], &tuning);
        assert_eq!(plan.shape, KernelShape { mr: 14, nr: 32 });
        assert!(plan.transposed && plan.pack_a);
        assert_eq!(plan.kc, 50usize.div_ceil(4));
    }
}

//! The CUDA matrix-product template: a [`Gemm`] statement as one tiled
//! kernel with shared-memory staging.
//!
//! Needs: a gemm whose factors and epilogue compute f32 (the C dialect's
//! rule too). Guarantees: `C[b, r, c] = epilogue(Σ_k A[b, r, k]·B[b, k, c])`
//! for every element: each block computes 64×64 tiles of C, or 128×128
//! when both sides of C are that large (grid-stride over tiles and
//! batches, so any grid is correct), staging a tile's rows of A and
//! columns of B 16 or 32 deep in shared memory per step, up to three steps
//! in flight (see [`Blocking::of`]). Operands are read
//! through their offset expressions (strides, implicit-GEMM windows with
//! their guards, computed prologues), so every gemm the loop IR describes
//! runs; elements outside the matrix read as zero and are never stored.
//!
//! Who multiplies ([`Unit`]): by default CUDA cores in f32, each of the
//! 256 threads accumulating 4×4 (8×8) elements in registers, rows
//! `ty + 16i` and columns `tx + 16j` (neighbouring threads read
//! neighbouring shared words and store neighbouring elements of C; A's
//! staging rows are padded by one word so its transposed stores spread
//! over the banks). Where the target allows TF32 (`GpuDesc::tf32`, sm_80
//! on), tensor cores: factors are rounded to TF32 as they are staged, and
//! the 8 warps (2 × 4 over the tile) each multiply-add 16×8 fragments with
//! `mma.sync.m16n8k8` into f32 accumulators (the fragment layout of the
//! PTX ISA's "Matrix Fragments for mma.m16n8k8", `.tf32`).
//!
//! When the tiles are too few to occupy the GPU (a convolution late in a
//! network at batch 1: few channels × few pixels, long reductions), the
//! depth is split over `splits` blocks per tile (split-K): each stores its
//! partial tile, and the last block of the tile to finish (an atomic
//! counter) adds the partials in split order — deterministic — and applies
//! the epilogue. Partials and counters are the module's own global memory,
//! so the kernel stays one launch with no workspace.

mod steps;

use super::{Frame, LaunchFunction};
use crate::c::gemm_kernel::{epilogue, with_gemm_ranges};
use crate::c::Printer;
use kiln_ir::{bail, DType, Result};
use kiln_loop::{Gemm, Kernel};
use kiln_target::GpuDesc;
use steps::{simt_step, tf32_step, Factor};

/// Threads per block: 256 (as 16×16 threads each computing a
/// `micro`×`micro` sub-tile, or 8 warps of tensor-core fragments).
pub const THREADS: u32 = 256;
/// Depths per staging step and steps in flight, the deepest first: more
/// depth per step means fewer barriers per multiply-add, more steps in
/// flight hide more of global memory's latency behind the multiply-adds
/// (asynchronous copies only).
const PIPELINES: [(i64, i64); 3] = [(32, 3), (16, 3), (16, 2)];
/// Largest grid dimension a launch may use in y and z (and that x uses).
const MAX_GRID: i64 = 65535;
/// Most partial-tile elements a split gemm keeps (16 MiB of f32).
const MAX_PARTIALS: i64 = 1 << 22;
/// Fewest depth steps one split takes.
const MIN_SPLIT_STEPS: i64 = 4;

/// What multiplies: CUDA cores in f32 (fused multiply-adds), or tensor
/// cores on factors rounded to TF32 (`mma.sync` m16n8k8, f32
/// accumulators), where the target allows it ([`GpuDesc::tf32_products`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Simt,
    Tf32,
}

impl Unit {
    /// Words each staged row of A and of B is padded by. CUDA cores read
    /// A's column across threads, so A is staged depth by depth (one word
    /// spreads its transposed stores over the banks). Tensor cores stage
    /// A row by row (`depth + 4` words: a fragment load's 8 rows × 4
    /// depths fall in 32 different banks, and a row's depths can be copied
    /// 16 bytes at a time); B's fragment load reads 4 depths × 8 columns,
    /// which a row of `tile + 8` words puts in 32 different banks.
    fn padding(self) -> (i64, i64) {
        match self {
            Unit::Simt => (1, 0),
            Unit::Tf32 => (4, 8),
        }
    }

    /// The shape of one staged step of A, `tile` rows `depth` deep:
    /// `[depth][tile + pad]` on CUDA cores, `[tile][depth + pad]` on tensor
    /// cores (see [`Unit::padding`]).
    fn a_shape(self, tile: i64, depth: i64) -> [i64; 2] {
        let pad = self.padding().0;
        match self {
            Unit::Simt => [depth, tile + pad],
            Unit::Tf32 => [tile, depth + pad],
        }
    }
}

/// How a gemm is divided: the block's tile of C (`tile`×`tile`), what
/// multiplies, and depth splits.
#[derive(Debug, Clone, Copy)]
struct Blocking {
    tile: i64,
    unit: Unit,
    /// Depth of one staging step.
    depth: i64,
    /// Staging buffers: steps in flight (being staged or multiplied).
    stages: i64,
    splits: i64,
    /// Plain f32 factors are staged by asynchronous copies (sm_80 on).
    asynchronous: bool,
    /// The C type of element coordinates and offsets (see [`index_type`]).
    index: &'static str,
}

/// Below this many elements in every buffer and side, coordinates and
/// offsets are 32-bit: a GPU divides 64-bit integers in software, and an
/// implicit-GEMM window's offset divides per staged element.
const INT32_SAFE: i64 = 1 << 30;

/// `int` when every buffer of `k` and every extent of `g` stays below
/// [`INT32_SAFE`] elements (so no offset of an element inside them
/// overflows), else `int64_t`.
fn index_type(k: &Kernel, g: &Gemm) -> &'static str {
    let buffers_fit = k.buffers.iter().all(|b| {
        let n = b
            .shape
            .iter()
            .try_fold(1i64, |n, &d| n.checked_mul(d as i64));
        n.is_some_and(|n| n < INT32_SAFE)
    });
    let sides_fit = [g.batch.max(1) * g.m, g.n, g.k]
        .iter()
        .all(|&e| e < INT32_SAFE);
    if buffers_fit && sides_fit {
        "int"
    } else {
        "int64_t"
    }
}

impl Blocking {
    /// 128×128 tiles (twice the multiply-adds per shared load of 64×64)
    /// when both sides of C are that large, else 64×64; the deepest
    /// pipeline of [`PIPELINES`] whose staging lets two blocks share a
    /// multiprocessor (each block's barriers then overlap the other's
    /// work; `GpuDesc::shared_bytes_optin` bounds a block, the
    /// multiprocessor has about twice that); then the splits that fill the
    /// multiprocessors (see [`Blocking::splits_for`]).
    fn of(k: &Kernel, g: &Gemm, gpu: &GpuDesc) -> Blocking {
        let unit = if gpu.tf32_products() {
            Unit::Tf32
        } else {
            Unit::Simt
        };
        let asynchronous = gpu.compute_capability >= 80;
        let tile = if g.m >= 128 && g.n >= 128 { 128 } else { 64 };
        let budget = gpu.shared_bytes_optin.max(gpu.shared_bytes_per_block) / 2;
        let (depth, stages) = PIPELINES
            .into_iter()
            // Without asynchronous copies a third buffer only waits.
            .filter(|&(_, stages)| asynchronous || stages == 2)
            .find(|&(depth, stages)| staging_bytes(tile, depth, stages, unit) <= budget)
            .unwrap_or((16, 2));
        let mut b = Blocking {
            tile,
            unit,
            depth,
            stages,
            splits: 1,
            asynchronous,
            index: index_type(k, g),
        };
        b.splits = b.splits_for(g, gpu.sm_count);
        b
    }

    /// Each CUDA-core thread's sub-tile side (16×16 threads).
    fn micro(&self) -> i64 {
        self.tile / 16
    }

    /// Each warp's tile in 16×8 fragments, rows × columns (the 8 warps
    /// as 2 × 4 over the block's tile).
    fn fragments(&self) -> (i64, i64) {
        (self.tile / 2 / 16, self.tile / 4 / 8)
    }

    /// Depth splits of `g` on `sms` multiprocessors: 1 while its tiles
    /// fill the GPU twice over; otherwise enough to do so, each split at
    /// least [`MIN_SPLIT_STEPS`] staging steps deep, the partials bounded.
    fn splits_for(&self, g: &Gemm, sms: usize) -> i64 {
        let tile_count = g.batch.max(1) * self.tiles(g.m) * self.tiles(g.n);
        let wanted = (2 * sms as i64 + tile_count - 1) / tile_count;
        let by_depth = g.k / (self.depth * MIN_SPLIT_STEPS);
        let by_memory = MAX_PARTIALS / (g.batch.max(1) * g.m * g.n).max(1);
        wanted.min(by_depth).min(by_memory).max(1)
    }

    fn tiles(&self, n: i64) -> i64 {
        (n.max(1) + self.tile - 1) / self.tile
    }

    /// The staging buffers in dynamic shared memory (`stages` steps, each
    /// A's rows and B's columns `depth` deep), and their bytes.
    fn shared(&self) -> (String, usize) {
        let pb = self.unit.padding().1;
        let (tile, depth, stages) = (self.tile, self.depth, self.stages);
        let [ar, ac] = self.unit.a_shape(tile, depth);
        let text = format!(
            "  extern __shared__ __align__(16) float kiln_smem[];\n  float (*kiln_as)[{ar}][{ac}] = (float (*)[{ar}][{ac}])kiln_smem;\n  float (*kiln_bs)[{depth}][{tile} + {pb}] = (float (*)[{depth}][{tile} + {pb}])(kiln_smem + {stages} * {ar} * {ac});\n"
        );
        (text, staging_bytes(tile, depth, stages, self.unit))
    }

    /// Each thread's place in the block, and its accumulators.
    fn thread_setup(&self) -> (String, String) {
        match self.unit {
            Unit::Simt => {
                let micro = self.micro();
                (
                    "  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;\n".into(),
                    format!("    float kiln_acc[{micro}][{micro}] = {{{{0.0f}}}};\n"),
                )
            }
            Unit::Tf32 => {
                let (fm, fn_) = self.fragments();
                let (wm, wn) = (self.tile / 2, self.tile / 4);
                (
                    format!("  const int kiln_g = threadIdx.x % 32 / 4, kiln_t = threadIdx.x % 4;\n  const int wm = threadIdx.x / 128 * {wm}, wn = threadIdx.x / 32 % 4 * {wn};\n"),
                    format!("    float kiln_acc[{fm}][{fn_}][4] = {{{{{{0.0f}}}}}};\n"),
                )
            }
        }
    }

    /// The multiply-adds of one staged step (see [`Unit`]).
    fn step(&self) -> String {
        match self.unit {
            Unit::Simt => simt_step(self.micro(), self.depth),
            Unit::Tf32 => tf32_step(self.fragments(), self.depth),
        }
    }

    /// The elements of C a thread holds: loops over them, then each one's
    /// row and column in the tile and its accumulator.
    fn elements(&self) -> Elements {
        match self.unit {
            Unit::Simt => {
                let micro = self.micro();
                Elements {
                    loops: format!("for (int i = 0; i < {micro}; ++i)\n      for (int j = 0; j < {micro}; ++j)"),
                    row: "ty + 16 * i",
                    col: "tx + 16 * j",
                    acc: "kiln_acc[i][j]",
                }
            }
            Unit::Tf32 => {
                let (fm, fn_) = self.fragments();
                Elements {
                    loops: format!("for (int i = 0; i < {fm}; ++i)\n      for (int j = 0; j < {fn_}; ++j)\n      for (int q = 0; q < 4; ++q)"),
                    row: "wm + 16 * i + kiln_g + 8 * (q >> 1)",
                    col: "wn + 8 * j + 2 * kiln_t + (q & 1)",
                    acc: "kiln_acc[i][j][q]",
                }
            }
        }
    }
}

/// The elements of C one thread holds (see [`Blocking::elements`]).
struct Elements {
    loops: String,
    row: &'static str,
    col: &'static str,
    acc: &'static str,
}

/// Bytes of shared memory the staging buffers of a `tile`-wide gemm
/// take: `stages` steps of A's rows and B's columns, `depth` deep,
/// padded, f32.
fn staging_bytes(tile: i64, depth: i64, stages: i64, unit: Unit) -> usize {
    let [ar, ac] = unit.a_shape(tile, depth);
    let b = depth * (tile + unit.padding().1);
    (stages * (ar * ac + b)) as usize * std::mem::size_of::<f32>()
}

/// The kernel `function` computing `g` and its launch, for `gpu`.
pub(super) fn gemm_function(
    k: &Kernel,
    g: &Gemm,
    function: &str,
    params: &str,
    gpu: &GpuDesc,
) -> Result<LaunchFunction> {
    let a = Factor::of(k, &g.a, [g.batch, g.m, g.k])?;
    let b = Factor::of(k, &g.b, [g.batch, g.k, g.n])?;
    let store = store(k, g)?;
    let bl = Blocking::of(k, g, gpu);
    let batch = g.batch.max(1);
    let grid = [
        bl.tiles(g.n).min(MAX_GRID) as u32,
        bl.tiles(g.m).min(MAX_GRID) as u32,
        (batch * bl.splits).min(MAX_GRID) as u32,
    ];
    let finish = if bl.splits == 1 {
        finish_direct(g, &bl, &store)
    } else {
        finish_split(g, &bl, &store, function)
    };
    let (globals, last_flag) = if bl.splits == 1 {
        (String::new(), "")
    } else {
        (
            format!(
                "__device__ float {function}_part[{}];\n__device__ unsigned int {function}_count[{}];\n",
                bl.splits * batch * g.m * g.n,
                batch * bl.tiles(g.m) * bl.tiles(g.n)
            ),
            "  __shared__ int kiln_last;\n",
        )
    };
    let main = main_loop(g, &bl, &a, &b);
    let (setup, accumulators) = bl.thread_setup();
    let (staging, shared_bytes) = bl.shared();
    let shared = staging + last_flag;
    let body = format!(
        r#"{setup}  for (int64_t kiln_z = blockIdx.z; kiln_z < {zs}; kiln_z += gridDim.z)
  for (int64_t m0 = (int64_t)blockIdx.y * {tile}; m0 < {m}; m0 += (int64_t)gridDim.y * {tile})
  for (int64_t n0 = (int64_t)blockIdx.x * {tile}; n0 < {n}; n0 += (int64_t)gridDim.x * {tile}) {{
{accumulators}{main}{finish}
  }}
"#,
        zs = batch * bl.splits,
        tile = bl.tile,
        m = g.m,
        n = g.n,
    );
    let frame = Frame {
        function,
        params,
        threads: Some(THREADS),
        // The staging was sized for two blocks per multiprocessor
        // (`Blocking::of`); registers must allow them too.
        min_blocks: 2,
        globals: &globals,
        shared: &shared,
    };
    Ok(LaunchFunction {
        text: frame.wrap(&body),
        grid,
        block: [THREADS, 1, 1],
        shared_bytes: shared_bytes as u32,
    })
}

/// The depth loop of one tile (this block's split of it), software
/// pipelined over `stages` buffers: steps are staged `stages - 1` ahead of
/// the one multiplied (the asynchronous copies land while the tensor or
/// CUDA cores work). Each step first awaits its own copies (every group
/// but the newest `stages - 2`), then one barrier publishes them and
/// frees the buffer multiplied last, which the step `stages - 1` ahead is
/// staged into. Every iteration commits one group, empty past the end, so
/// the count stays exact.
fn main_loop(g: &Gemm, bl: &Blocking, a: &Factor, b: &Factor) -> String {
    let (tile, splits, depth, stages) = (bl.tile, bl.splits, bl.depth, bl.stages);
    let pb = bl.unit.padding().1;
    let a_row = bl.unit.a_shape(tile, depth)[1];
    // Depth per split, whole staging steps.
    let chunk = ((g.k + splits - 1) / splits + depth - 1) / depth * depth;
    let stage = staging(g, bl, a, b);
    let (commit, wait, drain) = if bl.asynchronous {
        (
            "kiln_cp_commit();".to_string(),
            format!("kiln_cp_wait<{}>();", stages - 2),
            "kiln_cp_wait<0>();",
        )
    } else {
        (String::new(), String::new(), "")
    };
    let step = bl.step();
    let total = g.k;
    format!(
        r#"    const int64_t bz = kiln_z / {splits}, kiln_split = kiln_z % {splits};
    const int64_t kiln_k_begin = kiln_split * {chunk};
    const int64_t kiln_k_end = kiln_k_begin + {chunk} < {total} ? kiln_k_begin + {chunk} : {total};
    for (int kiln_buf = 0; kiln_buf < {stages} - 1; ++kiln_buf) {{
      const int64_t kiln_k = kiln_k_begin + kiln_buf * {depth};
      if (kiln_k < kiln_k_end) {{
{stage}      }}
      {commit}
    }}
    int kiln_cur = 0;
    for (int64_t k0 = kiln_k_begin; k0 < kiln_k_end; k0 += {depth}) {{
      {wait}
      __syncthreads();
      {{ const int64_t kiln_k = k0 + ({stages} - 1) * {depth};
        const int kiln_buf = (kiln_cur + {stages} - 1) % {stages};
        if (kiln_k < kiln_k_end) {{
{stage}        }}
        {commit} }}
      float (*kiln_a)[{a_row}] = kiln_as[kiln_cur];
      float (*kiln_b)[{tile} + {pb}] = kiln_bs[kiln_cur];
{step}      kiln_cur = (kiln_cur + 1) % {stages};
    }}
    {drain}
    __syncthreads();
"#
    )
}

/// The statements staging the step of depth `kiln_k..kiln_k + depth` into
/// buffer `kiln_buf`: A's rows and B's columns of the tile, element by
/// element, or 16 bytes at a time where the factor is consecutive along
/// the staged buffer's rows (A on tensor cores, B) and copies are
/// asynchronous.
fn staging(g: &Gemm, bl: &Blocking, a: &Factor, b: &Factor) -> String {
    let (tile, depth, m, n, ix) = (bl.tile, bl.depth, g.m, g.n, bl.index);
    let a_dst = match bl.unit {
        Unit::Simt => "kiln_as[kiln_buf][kk][rr]",
        Unit::Tf32 => "kiln_as[kiln_buf][rr][kk]",
    };
    let a_vector = bl.asynchronous && bl.unit == Unit::Tf32;
    let a = StagingLoop::of(
        a,
        Staged {
            dst: a_dst,
            place: ("kk", depth, "rr"),
            count: format!("r < {m} ? kiln_k_end - c : 0"),
            inside: format!("r < {m} && c < kiln_k_end"),
        },
        a_vector,
        bl,
    );
    let b = StagingLoop::of(
        b,
        Staged {
            dst: "kiln_bs[kiln_buf][kb][cc]",
            place: ("cc", tile, "kb"),
            count: format!("r < kiln_k_end ? {n} - c : 0"),
            inside: format!("r < kiln_k_end && c < {n}"),
        },
        bl.asynchronous,
        bl,
    );
    a.print("r = m0 + rr, c = kiln_k + kk", ix) + &b.print("r = kiln_k + kb, c = n0 + cc", ix)
}

/// A loop of the block's threads staging one factor's step: `count`
/// copies, each thread's `t` placed in the buffer by `place`.
struct StagingLoop {
    count: i64,
    place: String,
    copy: String,
}

/// Where one factor's step is staged: `dst` indexed by `place` (the
/// position along the staged rows, consecutive in memory, below its
/// extent, and the row), with the elements inside a vector of four
/// (`count`) and whether one element is inside (`inside`).
struct Staged<'a> {
    dst: &'a str,
    place: (&'a str, i64, &'a str),
    count: String,
    inside: String,
}

impl StagingLoop {
    /// The loop staging factor `f` at `s`: 16-byte copies when `vector`
    /// allows and the factor has them, else element by element.
    fn of(f: &Factor, s: Staged, vector: bool, bl: &Blocking) -> StagingLoop {
        let (along, extent, row) = s.place;
        let count = bl.tile * bl.depth;
        match f.stage_vector(s.dst, &s.count) {
            Some(copy) if vector => StagingLoop {
                count: count / 4,
                place: format!(
                    "const int {along} = 4 * (t % {q}), {row} = t / {q};",
                    q = extent / 4
                ),
                copy,
            },
            _ => StagingLoop {
                count,
                place: format!("const int {along} = t % {extent}, {row} = t / {extent};"),
                copy: f.stage(s.dst, &s.inside, bl.asynchronous),
            },
        }
    }

    /// The loop, with the copied element's `(b, r, c)` given by `coords`.
    fn print(&self, coords: &str, ix: &str) -> String {
        let StagingLoop { count, place, copy } = self;
        format!(
            r#"      for (int t = threadIdx.x; t < {count}; t += {THREADS}) {{
        {place}
        const {ix} b = bz, {coords}; (void)b;
        {copy}
      }}
"#
        )
    }
}

/// Each thread stores its elements through the epilogue.
fn finish_direct(g: &Gemm, bl: &Blocking, store: &str) -> String {
    let (m, n, ix) = (g.m, g.n, bl.index);
    let Elements {
        loops,
        row,
        col,
        acc,
    } = bl.elements();
    format!(
        r#"    {loops} {{
        const {ix} b = bz, r = m0 + {row}, c = n0 + {col}; (void)b;
        if (r < {m} && c < {n}) {{ const float acc = {acc}; {store} }}
      }}"#
    )
}

/// Each thread stores its partial elements; the tile's last block adds
/// the partials in split order and stores through the epilogue.
fn finish_split(g: &Gemm, bl: &Blocking, store: &str, function: &str) -> String {
    let (tile, splits, m, n, ix) = (bl.tile, bl.splits, g.m, g.n, bl.index);
    let plane = g.batch.max(1) * m * n;
    let (tm, tn) = (bl.tiles(m), bl.tiles(n));
    let Elements {
        loops,
        row,
        col,
        acc,
    } = bl.elements();
    format!(
        r#"    {loops} {{
        const int64_t r = m0 + {row}, c = n0 + {col};
        if (r < {m} && c < {n}) {function}_part[kiln_split * {plane} + (bz * {m} + r) * {n} + c] = {acc};
      }}
    __threadfence();
    __syncthreads();
    const int64_t kiln_tile = (bz * {tm} + m0 / {tile}) * {tn} + n0 / {tile};
    if (threadIdx.x == 0) kiln_last = atomicAdd(&{function}_count[kiln_tile], 1u) == {splits} - 1;
    __syncthreads();
    if (kiln_last) {{
      {loops} {{
          const {ix} b = bz, r = m0 + {row}, c = n0 + {col}; (void)b;
          if (r < {m} && c < {n}) {{
            float acc = 0.0f;
            for (int s = 0; s < {splits}; ++s) acc += ((volatile float*){function}_part)[s * {plane} + (bz * {m} + r) * {n} + c];
            {store}
          }}
        }}
      if (threadIdx.x == 0) {function}_count[kiln_tile] = 0;
    }}
    __syncthreads();"#
    )
}

/// The statement storing the product `acc` at `(b, r, c)`.
fn store(k: &Kernel, g: &Gemm) -> Result<String> {
    let extents = [g.batch, g.m, g.n];
    let value = match &g.epilogue {
        Some(e) => epilogue(with_gemm_ranges(Printer::for_gpu(k), extents), e)?,
        None => "acc".to_string(),
    };
    let p = with_gemm_ranges(Printer::for_gpu(k), extents);
    let out = &k.buffers[g.c.buf];
    if out.dtype != DType::F32 {
        bail!(
            "{}: a gemm storing {} (the product is f32)",
            k.name,
            out.dtype
        );
    }
    Ok(format!("{}[{}] = {value};", out.name, p.idx(&g.c.offset)?))
}

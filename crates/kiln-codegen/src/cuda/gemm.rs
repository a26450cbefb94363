//! The CUDA matrix-product template: a [`Gemm`] statement as one tiled
//! kernel with shared-memory staging.
//!
//! Needs: a gemm whose factors and epilogue compute f32 (the C dialect's
//! rule too). Guarantees: `C[b, r, c] = epilogue(Σ_k A[b, r, k]·B[b, k, c])`
//! for every element: each block computes 64×64 tiles of C, or 128×128
//! when both sides of C are that large (grid-stride over tiles and
//! batches, so any grid is correct), staging a tile's rows of A and
//! columns of B 16 deep in shared memory per step; each of its 256 threads
//! accumulates 4×4 (8×8) elements in registers, rows `ty + 16i` and
//! columns `tx + 16j` (neighbouring threads read neighbouring shared words
//! and store neighbouring elements of C; A's staging rows are padded by
//! one word so its transposed stores spread over the banks). Operands are read through
//! their offset expressions (strides, implicit-GEMM windows with their
//! guards, computed prologues), so every gemm the loop IR describes runs;
//! elements outside the matrix read as zero and are never stored.
//!
//! When the tiles are too few to occupy the GPU (a convolution late in a
//! network at batch 1: few channels × few pixels, long reductions), the
//! depth is split over `splits` blocks per tile (split-K): each stores its
//! partial tile, and the last block of the tile to finish (an atomic
//! counter) adds the partials in split order — deterministic — and applies
//! the epilogue. Partials and counters are the module's own global memory,
//! so the kernel stays one launch with no workspace.

use super::Frame;
use crate::c::gemm_kernel::{epilogue, printer};
use kiln_ir::{bail, DType, Result};
use kiln_loop::{Gemm, GemmInput, Kernel, Val};
use kiln_target::GpuDesc;

/// Threads per block: a 16×16 grid, each thread a `micro`×`micro`
/// sub-tile of the block's tile.
pub const THREADS: u32 = 256;
/// Depth per staging step.
const DEPTH: i64 = 16;
/// Largest grid dimension a launch may use in y and z (and that x uses).
const MAX_GRID: i64 = 65535;
/// Most partial-tile elements a split gemm keeps (16 MiB of f32).
const MAX_PARTIALS: i64 = 1 << 22;
/// Fewest depth steps one split takes.
const MIN_SPLIT_STEPS: i64 = 4;

/// How a gemm is divided: the block's tile of C (`tile`×`tile`), each
/// thread's sub-tile (`micro`×`micro`), and depth splits.
#[derive(Debug, Clone, Copy)]
struct Blocking {
    tile: i64,
    micro: i64,
    splits: i64,
}

impl Blocking {
    /// 128×128 tiles (8×8 per thread: twice the multiply-adds per shared
    /// load) when both sides of C are that large and their staging fits
    /// the GPU's shared memory per block, else 64×64 (4×4); then the
    /// splits that fill its multiprocessors (see [`Blocking::splits_for`]).
    fn of(g: &Gemm, gpu: &GpuDesc) -> Blocking {
        let large_fits = staging_bytes(128) <= gpu.shared_bytes_per_block;
        let (tile, micro) = if g.m >= 128 && g.n >= 128 && large_fits {
            (128, 8)
        } else {
            (64, 4)
        };
        let mut b = Blocking {
            tile,
            micro,
            splits: 1,
        };
        b.splits = b.splits_for(g, gpu.sm_count);
        b
    }

    /// Depth splits of `g` on `sms` multiprocessors: 1 while its tiles
    /// fill the GPU twice over; otherwise enough to do so, each split at
    /// least [`MIN_SPLIT_STEPS`] staging steps deep, the partials bounded.
    fn splits_for(&self, g: &Gemm, sms: usize) -> i64 {
        let tile_count = g.batch.max(1) * self.tiles(g.m) * self.tiles(g.n);
        let wanted = (2 * sms as i64 + tile_count - 1) / tile_count;
        let by_depth = g.k / (DEPTH * MIN_SPLIT_STEPS);
        let by_memory = MAX_PARTIALS / (g.batch.max(1) * g.m * g.n).max(1);
        wanted.min(by_depth).min(by_memory).max(1)
    }

    fn tiles(&self, n: i64) -> i64 {
        (n.max(1) + self.tile - 1) / self.tile
    }
}

/// Bytes of shared memory staging a `tile`-wide step takes: A's rows
/// (padded by one word) and B's columns, `DEPTH` deep, in f32.
fn staging_bytes(tile: i64) -> usize {
    (DEPTH * (2 * tile + 1)) as usize * std::mem::size_of::<f32>()
}

/// The kernel `function` computing `g` and its grid, for `gpu`.
pub fn gemm_function(
    k: &Kernel,
    g: &Gemm,
    function: &str,
    params: &str,
    gpu: &GpuDesc,
) -> Result<(String, [u32; 3])> {
    let a = factor(k, &g.a, [g.batch, g.m, g.k])?;
    let b = factor(k, &g.b, [g.batch, g.k, g.n])?;
    let store = store(k, g)?;
    let bl = Blocking::of(g, gpu);
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
    let (tile, micro) = (bl.tile, bl.micro);
    let shared = format!(
        "  __shared__ float kiln_as[{DEPTH}][{tile} + 1];\n  __shared__ float kiln_bs[{DEPTH}][{tile}];\n{last_flag}"
    );
    let body = format!(
        r#"  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int64_t kiln_z = blockIdx.z; kiln_z < {zs}; kiln_z += gridDim.z)
  for (int64_t m0 = (int64_t)blockIdx.y * {tile}; m0 < {m}; m0 += (int64_t)gridDim.y * {tile})
  for (int64_t n0 = (int64_t)blockIdx.x * {tile}; n0 < {n}; n0 += (int64_t)gridDim.x * {tile}) {{
    float kiln_acc[{micro}][{micro}] = {{{{0.0f}}}};
{main}{finish}
  }}
"#,
        zs = batch * bl.splits,
        m = g.m,
        n = g.n,
    );
    let frame = Frame {
        function,
        params,
        threads: Some(THREADS),
        globals: &globals,
        shared: &shared,
    };
    let text = frame.wrap(&body);
    Ok((text, grid))
}

/// The depth loop of one tile (this block's split of it): stage A and B
/// in shared memory, then multiply-add each thread's sub-tile.
fn main_loop(g: &Gemm, bl: &Blocking, a: &str, b: &str) -> String {
    let (tile, micro, splits) = (bl.tile, bl.micro, bl.splits);
    let (m, n, depth) = (g.m, g.n, g.k);
    // Depth per split, whole staging steps.
    let chunk = ((depth + splits - 1) / splits + DEPTH - 1) / DEPTH * DEPTH;
    format!(
        r#"    const int64_t bz = kiln_z / {splits}, kiln_split = kiln_z % {splits};
    const int64_t kiln_k_end = kiln_split * {chunk} + {chunk} < {depth} ? kiln_split * {chunk} + {chunk} : {depth};
    for (int64_t k0 = kiln_split * {chunk}; k0 < kiln_k_end; k0 += {DEPTH}) {{
      for (int t = threadIdx.x; t < {tile} * {DEPTH}; t += {THREADS}) {{
        {{ const int kk = t % {DEPTH}, rr = t / {DEPTH};
          const int64_t b = bz, r = m0 + rr, c = k0 + kk; (void)b;
          kiln_as[kk][rr] = (r < {m} && c < kiln_k_end) ? (float)({a}) : 0.0f; }}
        {{ const int cc = t % {tile}, kb = t / {tile};
          const int64_t b = bz, r = k0 + kb, c = n0 + cc; (void)b;
          kiln_bs[kb][cc] = (r < kiln_k_end && c < {n}) ? (float)({b}) : 0.0f; }}
      }}
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < {DEPTH}; ++kk) {{
        float av[{micro}], bv[{micro}];
#pragma unroll
        for (int i = 0; i < {micro}; ++i) {{ av[i] = kiln_as[kk][ty + 16 * i]; bv[i] = kiln_bs[kk][tx + 16 * i]; }}
#pragma unroll
        for (int i = 0; i < {micro}; ++i)
#pragma unroll
          for (int j = 0; j < {micro}; ++j) kiln_acc[i][j] = fmaf(av[i], bv[j], kiln_acc[i][j]);
      }}
      __syncthreads();
    }}
"#
    )
}

/// Each thread stores its sub-tile through the epilogue.
fn finish_direct(g: &Gemm, bl: &Blocking, store: &str) -> String {
    let (micro, m, n) = (bl.micro, g.m, g.n);
    format!(
        r#"    for (int i = 0; i < {micro}; ++i)
      for (int j = 0; j < {micro}; ++j) {{
        const int64_t b = bz, r = m0 + ty + 16 * i, c = n0 + tx + 16 * j; (void)b;
        if (r < {m} && c < {n}) {{ const float acc = kiln_acc[i][j]; {store} }}
      }}"#
    )
}

/// Each thread stores its partial sub-tile; the tile's last block adds
/// the partials in split order and stores through the epilogue.
fn finish_split(g: &Gemm, bl: &Blocking, store: &str, function: &str) -> String {
    let (tile, micro, splits, m, n) = (bl.tile, bl.micro, bl.splits, g.m, g.n);
    let plane = g.batch.max(1) * m * n;
    let (tm, tn) = (bl.tiles(m), bl.tiles(n));
    format!(
        r#"    for (int i = 0; i < {micro}; ++i)
      for (int j = 0; j < {micro}; ++j) {{
        const int64_t r = m0 + ty + 16 * i, c = n0 + tx + 16 * j;
        if (r < {m} && c < {n}) {function}_part[kiln_split * {plane} + (bz * {m} + r) * {n} + c] = kiln_acc[i][j];
      }}
    __threadfence();
    __syncthreads();
    const int64_t kiln_tile = (bz * {tm} + m0 / {tile}) * {tn} + n0 / {tile};
    if (threadIdx.x == 0) kiln_last = atomicAdd(&{function}_count[kiln_tile], 1u) == {splits} - 1;
    __syncthreads();
    if (kiln_last) {{
      for (int i = 0; i < {micro}; ++i)
        for (int j = 0; j < {micro}; ++j) {{
          const int64_t b = bz, r = m0 + ty + 16 * i, c = n0 + tx + 16 * j; (void)b;
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

/// A factor's element at `(b, r, c)` below `extents` as a CUDA expression.
fn factor(k: &Kernel, f: &GemmInput, extents: [i64; 3]) -> Result<String> {
    let value = match f {
        GemmInput::Read(o) => Val::Load {
            buf: o.buf,
            offset: o.offset.clone(),
            guard: o.guard.clone(),
        },
        GemmInput::Computed(v) => v.clone(),
    };
    let mut p = printer(k, extents);
    p.conditional_reads = true;
    let (text, dtype) = p.val(&value)?;
    if dtype != DType::F32 {
        bail!("{}: a gemm factor of {dtype} (the product is f32)", k.name);
    }
    Ok(text)
}

/// The statement storing the product `acc` at `(b, r, c)`.
fn store(k: &Kernel, g: &Gemm) -> Result<String> {
    let value = match &g.epilogue {
        Some(e) => epilogue(k, g, e)?,
        None => "acc".to_string(),
    };
    let mut p = printer(k, [g.batch, g.m, g.n]);
    p.conditional_reads = true;
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

//! The CUDA matrix-product template: a [`Gemm`] statement as one tiled
//! kernel with shared-memory staging.
//!
//! Needs: a gemm whose factors and epilogue compute f32 (the C dialect's
//! rule too). Guarantees: `C[b, r, c] = epilogue(Σ_k A[b, r, k]·B[b, k, c])`
//! for every element: each block computes 64×64 tiles of C (grid-stride
//! over tiles and batches, so any grid is correct), staging 64×16 of A and
//! 16×64 of B in shared memory per step; each of its 256 threads
//! accumulates a 4×4 sub-tile in registers. Operands are read through
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

use crate::c::gemm_kernel::{epilogue, printer};
use kiln_ir::{bail, DType, Result};
use kiln_loop::{Gemm, GemmInput, Kernel, Val};

/// Threads per block.
pub const THREADS: u32 = 256;
/// Tile of C per block (rows and columns) and depth per staging step.
const TILE: i64 = 64;
const DEPTH: i64 = 16;
/// Largest grid dimension a launch may use in y and z (and that x uses).
const MAX_GRID: i64 = 65535;
/// Most partial-tile elements a split gemm keeps (16 MiB of f32).
const MAX_PARTIALS: i64 = 1 << 22;
/// Fewest depth steps one split takes.
const MIN_SPLIT_STEPS: i64 = 4;

/// The kernel `function` computing `g` and its grid, for a GPU of `sms`
/// multiprocessors.
pub fn gemm_function(
    k: &Kernel,
    g: &Gemm,
    function: &str,
    params: &str,
    sms: usize,
) -> Result<(String, [u32; 3])> {
    let a = factor(k, &g.a, [g.batch, g.m, g.k])?;
    let b = factor(k, &g.b, [g.batch, g.k, g.n])?;
    let store = store(k, g)?;
    let (m, n, depth, batch) = (g.m, g.n, g.k, g.batch.max(1));
    let splits = splits(g, sms);
    // Depth per split, whole staging steps.
    let chunk = ((depth + splits - 1) / splits + DEPTH - 1) / DEPTH * DEPTH;
    let grid = [
        tiles(n).min(MAX_GRID) as u32,
        tiles(m).min(MAX_GRID) as u32,
        (batch * splits).min(MAX_GRID) as u32,
    ];
    let finish = if splits == 1 {
        format!(
            r#"    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {{
        const int64_t b = bz, r = m0 + ty * 4 + i, c = n0 + tx * 4 + j; (void)b;
        if (r < {m} && c < {n}) {{ const float acc = kiln_acc[i][j]; {store} }}
      }}"#
        )
    } else {
        let plane = batch * m * n;
        format!(
            r#"    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {{
        const int64_t r = m0 + ty * 4 + i, c = n0 + tx * 4 + j;
        if (r < {m} && c < {n}) {function}_part[kiln_split * {plane} + (bz * {m} + r) * {n} + c] = kiln_acc[i][j];
      }}
    __threadfence();
    __syncthreads();
    const int64_t kiln_tile = (bz * {tm} + m0 / {TILE}) * {tn} + n0 / {TILE};
    if (threadIdx.x == 0) kiln_last = atomicAdd(&{function}_count[kiln_tile], 1u) == {splits} - 1;
    __syncthreads();
    if (kiln_last) {{
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {{
          const int64_t b = bz, r = m0 + ty * 4 + i, c = n0 + tx * 4 + j; (void)b;
          if (r < {m} && c < {n}) {{
            float acc = 0.0f;
            for (int s = 0; s < {splits}; ++s) acc += ((volatile float*){function}_part)[s * {plane} + (bz * {m} + r) * {n} + c];
            {store}
          }}
        }}
      if (threadIdx.x == 0) {function}_count[kiln_tile] = 0;
    }}
    __syncthreads();"#,
            tm = tiles(m),
            tn = tiles(n),
        )
    };
    let last_flag = if splits == 1 {
        ""
    } else {
        "  __shared__ int kiln_last;\n"
    };
    let globals = if splits == 1 {
        String::new()
    } else {
        format!(
            "__device__ float {function}_part[{}];\n__device__ unsigned int {function}_count[{}];\n",
            splits * batch * m * n,
            batch * tiles(m) * tiles(n)
        )
    };
    let text = format!(
        r#"{globals}extern "C" __global__ void __launch_bounds__({THREADS}) {function}({params}) {{
  __shared__ float kiln_as[{DEPTH}][{TILE}];
  __shared__ float kiln_bs[{DEPTH}][{TILE}];
{last_flag}  int err = 0;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int64_t kiln_z = blockIdx.z; kiln_z < {batch} * {splits}; kiln_z += gridDim.z)
  for (int64_t m0 = (int64_t)blockIdx.y * {TILE}; m0 < {m}; m0 += (int64_t)gridDim.y * {TILE})
  for (int64_t n0 = (int64_t)blockIdx.x * {TILE}; n0 < {n}; n0 += (int64_t)gridDim.x * {TILE}) {{
    const int64_t bz = kiln_z / {splits}, kiln_split = kiln_z % {splits};
    const int64_t kiln_k_end = kiln_split * {chunk} + {chunk} < {depth} ? kiln_split * {chunk} + {chunk} : {depth};
    float kiln_acc[4][4] = {{{{0.0f}}}};
    for (int64_t k0 = kiln_split * {chunk}; k0 < kiln_k_end; k0 += {DEPTH}) {{
      for (int t = threadIdx.x; t < {TILE} * {DEPTH}; t += {THREADS}) {{
        {{ const int kk = t % {DEPTH}, rr = t / {DEPTH};
          const int64_t b = bz, r = m0 + rr, c = k0 + kk; (void)b;
          kiln_as[kk][rr] = (r < {m} && c < kiln_k_end) ? (float)({a}) : 0.0f; }}
        {{ const int cc = t % {TILE}, kb = t / {TILE};
          const int64_t b = bz, r = k0 + kb, c = n0 + cc; (void)b;
          kiln_bs[kb][cc] = (r < kiln_k_end && c < {n}) ? (float)({b}) : 0.0f; }}
      }}
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < {DEPTH}; ++kk) {{
        float av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {{ av[i] = kiln_as[kk][ty * 4 + i]; bv[i] = kiln_bs[kk][tx * 4 + i]; }}
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) kiln_acc[i][j] = fmaf(av[i], bv[j], kiln_acc[i][j]);
      }}
      __syncthreads();
    }}
{finish}
  }}
  if (err) *kiln_err = 1;
}}
"#
    );
    Ok((text, grid))
}

/// Depth splits of `g` on `sms` multiprocessors: 1 while its tiles fill
/// the GPU twice over; otherwise enough to do so, each split at least
/// [`MIN_SPLIT_STEPS`] staging steps deep, the partials bounded.
fn splits(g: &Gemm, sms: usize) -> i64 {
    let tile_count = g.batch.max(1) * tiles(g.m) * tiles(g.n);
    let wanted = (2 * sms as i64 + tile_count - 1) / tile_count;
    let by_depth = g.k / (DEPTH * MIN_SPLIT_STEPS);
    let by_memory = MAX_PARTIALS / (g.batch.max(1) * g.m * g.n).max(1);
    wanted.min(by_depth).min(by_memory).max(1)
}

fn tiles(n: i64) -> i64 {
    (n.max(1) + TILE - 1) / TILE
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
    let (text, dtype) = printer(k, extents).val(&value)?;
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
    let p = printer(k, [g.batch, g.m, g.n]);
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

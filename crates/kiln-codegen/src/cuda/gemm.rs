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

/// The kernel `function` computing `g` and its grid.
pub fn gemm_function(
    k: &Kernel,
    g: &Gemm,
    function: &str,
    params: &str,
) -> Result<(String, [u32; 3])> {
    let a = factor(k, &g.a, [g.batch, g.m, g.k])?;
    let b = factor(k, &g.b, [g.batch, g.k, g.n])?;
    let store = store(k, g)?;
    let (m, n, depth, batch) = (g.m, g.n, g.k, g.batch);
    let grid = [
        tiles(n).min(MAX_GRID) as u32,
        tiles(m).min(MAX_GRID) as u32,
        batch.clamp(1, MAX_GRID) as u32,
    ];
    let text = format!(
        r#"extern "C" __global__ void __launch_bounds__({THREADS}) {function}({params}) {{
  __shared__ float kiln_as[{DEPTH}][{TILE}];
  __shared__ float kiln_bs[{DEPTH}][{TILE}];
  int err = 0;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int64_t bz = blockIdx.z; bz < {batch}; bz += gridDim.z)
  for (int64_t m0 = (int64_t)blockIdx.y * {TILE}; m0 < {m}; m0 += (int64_t)gridDim.y * {TILE})
  for (int64_t n0 = (int64_t)blockIdx.x * {TILE}; n0 < {n}; n0 += (int64_t)gridDim.x * {TILE}) {{
    float kiln_acc[4][4] = {{{{0.0f}}}};
    for (int64_t k0 = 0; k0 < {depth}; k0 += {DEPTH}) {{
      for (int t = threadIdx.x; t < {TILE} * {DEPTH}; t += {THREADS}) {{
        {{ const int kk = t % {DEPTH}, rr = t / {DEPTH};
          const int64_t b = bz, r = m0 + rr, c = k0 + kk; (void)b;
          kiln_as[kk][rr] = (r < {m} && c < {depth}) ? (float)({a}) : 0.0f; }}
        {{ const int cc = t % {TILE}, kb = t / {TILE};
          const int64_t b = bz, r = k0 + kb, c = n0 + cc; (void)b;
          kiln_bs[kb][cc] = (r < {depth} && c < {n}) ? (float)({b}) : 0.0f; }}
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
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {{
        const int64_t b = bz, r = m0 + ty * 4 + i, c = n0 + tx * 4 + j; (void)b;
        if (r < {m} && c < {n}) {{ const float acc = kiln_acc[i][j]; {store} }}
      }}
  }}
  if (err) *kiln_err = 1;
}}
"#
    );
    Ok((text, grid))
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

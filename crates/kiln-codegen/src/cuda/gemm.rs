//! The CUDA matrix-product template: a [`Gemm`] statement as one tiled
//! kernel with shared-memory staging.
//!
//! Needs: a gemm whose factors and epilogue compute f32 (the C dialect's
//! rule too). Guarantees: `C[b, r, c] = epilogue(Σ_k A[b, r, k]·B[b, k, c])`
//! for every element: each block computes 64×64 tiles of C, or 128×128
//! when both sides of C are that large (grid-stride over tiles and
//! batches, so any grid is correct), staging a tile's rows of A and
//! columns of B 16 deep in shared memory per step. Operands are read
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

use super::Frame;
use crate::c::gemm_kernel::{epilogue, printer};
use kiln_ir::{bail, DType, Result};
use kiln_loop::{Gemm, GemmInput, Kernel, Val};
use kiln_target::GpuDesc;

/// Threads per block: 256 (as 16×16 threads each computing a
/// `micro`×`micro` sub-tile, or 8 warps of tensor-core fragments).
pub const THREADS: u32 = 256;
/// Depth per staging step.
const DEPTH: i64 = 16;
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
    /// A's column across threads (one word spreads A's transposed stores
    /// over the banks); a fragment load reads 4 depths × 8 rows, which a
    /// row of `tile + 8` words puts in 32 different banks.
    fn padding(self) -> (i64, i64) {
        match self {
            Unit::Simt => (1, 0),
            Unit::Tf32 => (8, 8),
        }
    }
}

/// How a gemm is divided: the block's tile of C (`tile`×`tile`), what
/// multiplies, and depth splits.
#[derive(Debug, Clone, Copy)]
struct Blocking {
    tile: i64,
    unit: Unit,
    splits: i64,
}

impl Blocking {
    /// 128×128 tiles (twice the multiply-adds per shared load of 64×64)
    /// when both sides of C are that large and their staging fits the
    /// GPU's shared memory per block, else 64×64; then the splits that
    /// fill its multiprocessors (see [`Blocking::splits_for`]).
    fn of(g: &Gemm, gpu: &GpuDesc) -> Blocking {
        let unit = if gpu.tf32_products() {
            Unit::Tf32
        } else {
            Unit::Simt
        };
        let large_fits = staging_bytes(128, unit) <= gpu.shared_bytes_per_block;
        let tile = if g.m >= 128 && g.n >= 128 && large_fits {
            128
        } else {
            64
        };
        let mut b = Blocking {
            tile,
            unit,
            splits: 1,
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
        let by_depth = g.k / (DEPTH * MIN_SPLIT_STEPS);
        let by_memory = MAX_PARTIALS / (g.batch.max(1) * g.m * g.n).max(1);
        wanted.min(by_depth).min(by_memory).max(1)
    }

    fn tiles(&self, n: i64) -> i64 {
        (n.max(1) + self.tile - 1) / self.tile
    }

    /// The shared staging arrays (A's rows and B's columns, `DEPTH` deep).
    fn shared(&self) -> String {
        let (pa, pb) = self.unit.padding();
        let (tile, word) = (self.tile, self.word());
        format!(
            "  __shared__ {word} kiln_as[{DEPTH}][{tile} + {pa}];\n  __shared__ {word} kiln_bs[{DEPTH}][{tile} + {pb}];\n"
        )
    }

    /// The staged element type: f32, or TF32 bits.
    fn word(&self) -> &'static str {
        match self.unit {
            Unit::Simt => "float",
            Unit::Tf32 => "uint32_t",
        }
    }

    /// A staged element: the factor `value` where `inside`, else zero.
    fn staged(&self, inside: &str, value: &str) -> String {
        match self.unit {
            Unit::Simt => format!("({inside}) ? (float)({value}) : 0.0f"),
            Unit::Tf32 => format!("({inside}) ? kiln_tf32((float)({value})) : 0u"),
        }
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
            Unit::Simt => simt_step(self.micro()),
            Unit::Tf32 => tf32_step(self.fragments()),
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

/// Bytes of shared memory staging a `tile`-wide step takes: A's rows
/// and B's columns, `DEPTH` deep, padded, in 32-bit words.
fn staging_bytes(tile: i64, unit: Unit) -> usize {
    let (pa, pb) = unit.padding();
    (DEPTH * (2 * tile + pa + pb)) as usize * std::mem::size_of::<f32>()
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
    let (setup, accumulators) = bl.thread_setup();
    let shared = bl.shared() + last_flag;
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
        globals: &globals,
        shared: &shared,
    };
    let text = frame.wrap(&body);
    Ok((text, grid))
}

/// The depth loop of one tile (this block's split of it): stage A and B
/// in shared memory, then multiply-add each thread's part.
fn main_loop(g: &Gemm, bl: &Blocking, a: &str, b: &str) -> String {
    let (tile, splits) = (bl.tile, bl.splits);
    let (m, n, depth) = (g.m, g.n, g.k);
    // Depth per split, whole staging steps.
    let chunk = ((depth + splits - 1) / splits + DEPTH - 1) / DEPTH * DEPTH;
    let a = bl.staged(&format!("r < {m} && c < kiln_k_end"), a);
    let b = bl.staged(&format!("r < kiln_k_end && c < {n}"), b);
    let step = bl.step();
    format!(
        r#"    const int64_t bz = kiln_z / {splits}, kiln_split = kiln_z % {splits};
    const int64_t kiln_k_end = kiln_split * {chunk} + {chunk} < {depth} ? kiln_split * {chunk} + {chunk} : {depth};
    for (int64_t k0 = kiln_split * {chunk}; k0 < kiln_k_end; k0 += {DEPTH}) {{
      for (int t = threadIdx.x; t < {tile} * {DEPTH}; t += {THREADS}) {{
        {{ const int kk = t % {DEPTH}, rr = t / {DEPTH};
          const int64_t b = bz, r = m0 + rr, c = k0 + kk; (void)b;
          kiln_as[kk][rr] = {a}; }}
        {{ const int cc = t % {tile}, kb = t / {tile};
          const int64_t b = bz, r = k0 + kb, c = n0 + cc; (void)b;
          kiln_bs[kb][cc] = {b}; }}
      }}
      __syncthreads();
{step}      __syncthreads();
    }}
"#
    )
}

/// One staged step on CUDA cores: each thread's `micro`×`micro` sub-tile,
/// rows `ty + 16i` and columns `tx + 16j`.
fn simt_step(micro: i64) -> String {
    format!(
        r#"#pragma unroll
      for (int kk = 0; kk < {DEPTH}; ++kk) {{
        float av[{micro}], bv[{micro}];
#pragma unroll
        for (int i = 0; i < {micro}; ++i) {{ av[i] = kiln_as[kk][ty + 16 * i]; bv[i] = kiln_bs[kk][tx + 16 * i]; }}
#pragma unroll
        for (int i = 0; i < {micro}; ++i)
#pragma unroll
          for (int j = 0; j < {micro}; ++j) kiln_acc[i][j] = fmaf(av[i], bv[j], kiln_acc[i][j]);
      }}
"#
    )
}

/// One staged step on tensor cores: per 8 deep, each warp loads its A
/// fragments (16 rows: `a0` row g depth t, `a1` row g+8, `a2`/`a3` depth
/// t+4) and B fragments (8 columns: `b0` depth t column g, `b1` depth t+4)
/// and multiply-adds every pair (PTX ISA, `mma.m16n8k8` for `.tf32`).
fn tf32_step((fm, fn_): (i64, i64)) -> String {
    format!(
        r#"#pragma unroll
      for (int ks = 0; ks < {DEPTH}; ks += 8) {{
        uint32_t af[{fm}][4], bf[{fn_}][2];
#pragma unroll
        for (int i = 0; i < {fm}; ++i) {{
          const int rr = wm + 16 * i + kiln_g;
          af[i][0] = kiln_as[ks + kiln_t][rr]; af[i][1] = kiln_as[ks + kiln_t][rr + 8];
          af[i][2] = kiln_as[ks + kiln_t + 4][rr]; af[i][3] = kiln_as[ks + kiln_t + 4][rr + 8];
        }}
#pragma unroll
        for (int j = 0; j < {fn_}; ++j) {{
          const int cc = wn + 8 * j + kiln_g;
          bf[j][0] = kiln_bs[ks + kiln_t][cc]; bf[j][1] = kiln_bs[ks + kiln_t + 4][cc];
        }}
#pragma unroll
        for (int i = 0; i < {fm}; ++i)
#pragma unroll
          for (int j = 0; j < {fn_}; ++j) kiln_mma_tf32(kiln_acc[i][j], af[i], bf[j]);
      }}
"#
    )
}

/// Each thread stores its elements through the epilogue.
fn finish_direct(g: &Gemm, bl: &Blocking, store: &str) -> String {
    let (m, n) = (g.m, g.n);
    let Elements {
        loops,
        row,
        col,
        acc,
    } = bl.elements();
    format!(
        r#"    {loops} {{
        const int64_t b = bz, r = m0 + {row}, c = n0 + {col}; (void)b;
        if (r < {m} && c < {n}) {{ const float acc = {acc}; {store} }}
      }}"#
    )
}

/// Each thread stores its partial elements; the tile's last block adds
/// the partials in split order and stores through the epilogue.
fn finish_split(g: &Gemm, bl: &Blocking, store: &str, function: &str) -> String {
    let (tile, splits, m, n) = (bl.tile, bl.splits, g.m, g.n);
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
          const int64_t b = bz, r = m0 + {row}, c = n0 + {col}; (void)b;
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

//! The CUDA printer for loop IR kernels.
//!
//! Needs: a kernel lowered for a GPU target (see `kiln_loop::gpu_map`) whose
//! element types the C dialect has, and the GPU description.
//! Guarantees: CUDA C (compiled by NVRTC, no headers) holding one
//! `extern "C" __global__` function per launch of the kernel's
//! [`GpuMapping`], each taking the kernel's buffers in order (inputs
//! `const T*`) then `int* kiln_err`, and the launch configurations to run
//! them in order on one stream. Values are printed by the C printer (one
//! definition of every scalar rule for both dialects); threads take the
//! mapped loop's iterations grid-stride, so any grid size is correct. A
//! data-dependent index out of range sets `*kiln_err` (and reads element 0,
//! never outside the buffer).

mod gemm;
pub mod prelude;
mod rows;

use crate::c::Printer;
use crate::scalar_c::storage_type;
use kiln_ir::{bail, Result};
use kiln_loop::gpu_map::{map_kernel, GpuMapping, Launch};
use kiln_loop::{Kernel, LoopKind, Scope, Stmt};
use kiln_target::GpuDesc;

/// How to launch one generated function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchConfig {
    pub function: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Every block must be resident at once (blocks wait for each other).
    pub cooperative: bool,
    /// Bytes of dynamic shared memory each block takes.
    pub shared_bytes: u32,
}

/// A kernel's CUDA source and its launches, in order.
#[derive(Debug, Clone)]
pub struct CudaSource {
    pub cuda: String,
    pub launches: Vec<LaunchConfig>,
    pub mapping: GpuMapping,
}

/// Prints `k` for the GPU `gpu` (see the module doc).
pub fn kernel_cuda(k: &Kernel, gpu: &GpuDesc) -> Result<CudaSource> {
    let k = all_serial(k);
    let mapping = map_kernel(&k, gpu);
    let params = parameters(&k)?;
    let mut cuda = String::new();
    let mut launches = Vec::new();
    for (j, launch) in mapping.0.iter().enumerate() {
        let function = format!("{}_l{j}", k.name);
        let f = launch_function(&k, launch, &function, &params, gpu)?;
        cuda.push_str(&f.text);
        launches.push(LaunchConfig {
            function,
            grid: f.grid,
            block: f.block,
            cooperative: matches!(launch, Launch::SplitRows { .. }),
            shared_bytes: f.shared_bytes,
        });
    }
    Ok(CudaSource {
        cuda,
        launches,
        mapping,
    })
}

/// One generated function and how to launch it.
struct LaunchFunction {
    text: String,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
}

impl LaunchFunction {
    /// A function with static shared memory only.
    fn plain(text: String, grid: [u32; 3], block: [u32; 3]) -> LaunchFunction {
        LaunchFunction {
            text,
            grid,
            block,
            shared_bytes: 0,
        }
    }
}

/// The CUDA of one launch of `k` as `function`, with its configuration.
fn launch_function(
    k: &Kernel,
    launch: &Launch,
    function: &str,
    params: &str,
    gpu: &GpuDesc,
) -> Result<LaunchFunction> {
    // Grid-stride launches need no more blocks than a few waves.
    let most = (gpu.sm_count * gpu.blocks_per_sm * 4) as i64;
    Ok(match launch {
        Launch::Threads { stmt, var, extent } => {
            let text = threads_function(k, function, params, *stmt, var, *extent, gpu)?;
            let grid = [gpu.grid_for(*extent), 1, 1];
            LaunchFunction::plain(text, grid, [gpu.block_threads as u32, 1, 1])
        }
        Launch::Rows {
            stmt,
            extent,
            threads,
            ..
        } => {
            let text = rows::rows_function(k, function, params, *stmt, *threads)?;
            let grid = [(*extent).clamp(1, most) as u32, 1, 1];
            LaunchFunction::plain(text, grid, [*threads, 1, 1])
        }
        Launch::Columns {
            stmt,
            extent,
            groups,
            splits,
            ..
        } => {
            let text = rows::columns_function(k, function, params, *stmt, (*groups, *splits))?;
            let blocks = (extent + 31) / 32;
            if *splits > 1 && blocks > most {
                bail!(
                    "{}: {blocks} blocks of split columns exceed one wave",
                    k.name
                );
            }
            let grid = [blocks.clamp(1, most) as u32, *splits, 1];
            LaunchFunction::plain(text, grid, [groups * 32, 1, 1])
        }
        Launch::AllReduce {
            from,
            blocks,
            threads,
            ..
        } => {
            let text = rows::all_reduce_function(k, function, params, *from, *blocks, *threads)?;
            LaunchFunction::plain(text, [*blocks, 1, 1], [*threads, 1, 1])
        }
        Launch::Block { from, threads, .. } => {
            let text = rows::block_function(k, function, params, *from, *threads)?;
            LaunchFunction::plain(text, [1, 1, 1], [*threads, 1, 1])
        }
        Launch::SplitRows {
            stmt,
            rows,
            blocks_per_row,
            threads,
        } => {
            let rows = rows.as_ref().map(|(v, e)| (v.as_str(), *e));
            let shape = (*stmt, rows, *blocks_per_row, *threads);
            let text = rows::split_rows_function(k, function, params, shape)?;
            let blocks = rows.map_or(1, |r| r.1) as u32 * blocks_per_row;
            LaunchFunction::plain(text, [blocks, 1, 1], [*threads, 1, 1])
        }
        Launch::Single { from, to } => {
            let text = single_function(k, function, params, *from..*to)?;
            LaunchFunction::plain(text, [1, 1, 1], [1, 1, 1])
        }
        Launch::Gemm { stmt } => {
            let Stmt::Gemm(g) = &k.body[*stmt] else {
                bail!("{}: statement {stmt} is not a gemm", k.name);
            };
            gemm::gemm_function(k, g, function, params, gpu)?
        }
    })
}

/// The frame of every generated function: module-scope `globals` before
/// it, then `extern "C" __global__` (bounded to `threads` per block when
/// given, and to registers that let `min_blocks` blocks share a
/// multiprocessor when above 1) over the kernel's `params`, its `shared` declarations, the
/// thread's error flag, `body`, and the flag published to `kiln_err`.
pub(crate) struct Frame<'a> {
    pub function: &'a str,
    pub params: &'a str,
    pub threads: Option<u32>,
    pub min_blocks: u32,
    pub globals: &'a str,
    pub shared: &'a str,
}

impl Frame<'_> {
    pub(crate) fn wrap(&self, body: &str) -> String {
        let bounds = self
            .threads
            .map(|t| match self.min_blocks {
                0 | 1 => format!("__launch_bounds__({t}) "),
                b => format!("__launch_bounds__({t}, {b}) "),
            })
            .unwrap_or_default();
        format!(
            "{globals}extern \"C\" __global__ void {bounds}{function}({params}) {{\n{shared}  int err = 0;\n{body}  if (err) *kiln_err = 1;\n}}\n",
            globals = self.globals,
            function = self.function,
            params = self.params,
            shared = self.shared,
        )
    }
}

/// `k` with every loop serial: OpenMP and vector marks are the CPU
/// schedule's; inside a thread loops run in order (unrolling stays).
fn all_serial(k: &Kernel) -> Kernel {
    fn strip(body: &[Stmt]) -> Vec<Stmt> {
        body.iter()
            .map(|s| match s {
                Stmt::Loop(l) => {
                    let mut l = l.clone();
                    if l.kind != LoopKind::Unrolled {
                        l.kind = LoopKind::Serial;
                    }
                    l.body = strip(&l.body);
                    Stmt::Loop(l)
                }
                other => other.clone(),
            })
            .collect()
    }
    Kernel {
        body: strip(&k.body),
        ..k.clone()
    }
}

/// The parameter list every launch of `k` takes.
fn parameters(k: &Kernel) -> Result<String> {
    let mut parts = Vec::new();
    for b in k.buffers.iter().filter(|b| b.scope == Scope::Param) {
        let ty = storage_type(b.dtype)?;
        let konst = if b.output { "" } else { "const " };
        parts.push(format!("{konst}{ty}* __restrict__ {}", b.name));
    }
    parts.push("int* __restrict__ kiln_err".into());
    Ok(parts.join(", "))
}

/// One thread per iteration of the loop `k.body[stmt]` over `var`.
fn threads_function(
    k: &Kernel,
    function: &str,
    params: &str,
    stmt: usize,
    var: &str,
    extent: i64,
    gpu: &GpuDesc,
) -> Result<String> {
    let Stmt::Loop(l) = &k.body[stmt] else {
        bail!("{}: statement {stmt} is not a loop", k.name);
    };
    let mut p = Printer::for_gpu(k);
    p.ranges.insert(var.to_string(), (0, extent.max(1) - 1));
    for s in &l.body {
        p.stmt(s, 2)?;
    }
    let frame = Frame {
        function,
        params,
        threads: Some(gpu.block_threads as u32),
        min_blocks: 1,
        globals: "",
        shared: "",
    };
    Ok(frame.wrap(&format!(
        "  for (int64_t {var} = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; {var} < {extent}; {var} += (int64_t)gridDim.x * blockDim.x) {{\n{}  }}\n",
        p.out
    )))
}

/// Statements `range` of `k` run by one thread.
fn single_function(
    k: &Kernel,
    function: &str,
    params: &str,
    range: std::ops::Range<usize>,
) -> Result<String> {
    let mut p = Printer::for_gpu(k);
    for s in &k.body[range] {
        p.stmt(s, 1)?;
    }
    let frame = Frame {
        function,
        params,
        threads: None,
        min_blocks: 1,
        globals: "",
        shared: "",
    };
    Ok(frame.wrap(&p.out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_target::GpuPreset;

    /// `out0[i0] = Σ_r0 in0[read]` over `rows` outputs and `len` terms.
    fn row_sums(rows: i64, len: i64, read: &str) -> String {
        format!(
            "kernel k(in0: f32[{rows},{len}], out out0: f32[{rows}]) {{
  for i0 in 0..{rows} {{
    let acc: f32 = 0.0:f32
    for r0 in 0..{len} {{
      acc = sum(acc, in0[{read}])
    }}
    out0[i0] = acc
  }}
}}"
        )
    }

    fn cuda_of(text: &str) -> CudaSource {
        let k = kiln_loop::parse_kernel(text).expect("kernel");
        let gpu = GpuPreset::Sm90.desc().gpu.expect("a GPU");
        kernel_cuda(&k, &gpu).expect("CUDA")
    }

    #[test]
    fn an_elementwise_kernel_is_one_grid_stride_launch() {
        let s = cuda_of(
            "kernel k(in0: f32[1000], out out0: f32[1000]) {
  vectorized for i0 in 0..1000 {
    out0[i0] = Relu(in0[i0])
  }
}",
        );
        assert_eq!(s.launches.len(), 1);
        assert_eq!(s.launches[0].grid, [4, 1, 1]);
        assert!(s.cuda.contains("extern \"C\" __global__"), "{}", s.cuda);
        assert!(
            s.cuda.contains("i0 < 1000; i0 += (int64_t)gridDim.x"),
            "{}",
            s.cuda
        );
        assert!(!s.cuda.contains("KILN_OMP"), "{}", s.cuda);
    }

    #[test]
    fn a_carried_reduction_becomes_a_second_single_thread_launch() {
        let s = cuda_of(
            "kernel k(in0: f32[8,40], out out0: f32[40]) {
  for i1 in 0..40 {
    out0[i1] = 0.0:f32
  }
  parallel for r0 in 0..8 {
    for i1 in 0..40 {
      out0[i1] = Add(out0[i1], in0[40*r0 + i1])
    }
  }
}",
        );
        let functions: Vec<&str> = s.launches.iter().map(|l| l.function.as_str()).collect();
        assert_eq!(functions, ["k_l0", "k_l1"]);
        assert_eq!(s.launches[1].grid, [1, 1, 1]);
    }

    #[test]
    fn a_row_reduction_is_a_block_per_row_combined_by_shuffles() {
        let s = cuda_of(&row_sums(8, 4000, "4000*i0 + r0"));
        assert_eq!(s.mapping.to_string(), "rows(#0, i0, 8, 256 threads)");
        assert_eq!(s.launches[0].grid, [8, 1, 1]);
        assert!(s.cuda.contains("kiln_shfl_down(acc, kiln_s)"), "{}", s.cuda);
        assert!(
            s.cuda.contains("if (threadIdx.x == 0) {\n      out0[(i0)]"),
            "{}",
            s.cuda
        );
        assert!(!s.launches[0].cooperative);
    }

    #[test]
    fn few_long_rows_are_a_cooperative_launch_with_row_barriers() {
        let s = cuda_of(
            "kernel k(in0: f32[2,1048576], out out0: f32[2,1048576]) {
  for o0 in 0..2 {
    let m: f32 = -inf:f32
    for r0 in 0..1048576 {
      m = max(m, in0[1048576*o0 + r0])
    }
    for i1 in 0..1048576 {
      out0[1048576*o0 + i1] = Sub(in0[1048576*o0 + i1], m)
    }
  }
}",
        );
        assert_eq!(s.launches[0].grid, [132, 1, 1]);
        assert!(s.launches[0].cooperative);
        assert!(
            s.cuda.contains("kiln_row_barrier(&k_l0_count[o0]"),
            "{}",
            s.cuda
        );
        assert!(
            s.cuda.contains("__device__ float k_l0_m[132];"),
            "{}",
            s.cuda
        );
    }

    #[test]
    fn an_outer_axis_reduction_is_columns_combined_in_shared_memory() {
        let s = cuda_of(&row_sums(8192, 1024, "8192*r0 + i0"));
        assert_eq!(s.launches[0].grid, [256, 1, 1]);
        assert!(
            s.cuda.contains("__shared__ float kiln_col_acc[8][33];"),
            "{}",
            s.cuda
        );
        assert!(
            s.cuda
                .contains("kiln_t = kiln_g; kiln_t < 1024; kiln_t += 8"),
            "{}",
            s.cuda
        );
        assert!(!s.cuda.contains("atomicAdd"), "{}", s.cuda);
    }

    #[test]
    fn few_columns_split_their_reductions_over_blocks_combined_by_the_last() {
        // 1024 outputs are 32 blocks of columns for 132 multiprocessors.
        let s = cuda_of(&row_sums(1024, 1024, "1024*r0 + i0"));
        assert_eq!(s.launches[0].grid, [32, 8, 1]);
        for wanted in [
            "kiln_t = (int64_t)blockIdx.y * 8 + kiln_g; kiln_t < 1024; kiln_t += 64",
            "__device__ float k_l0_acc[8192];",
            "k_l0_acc[(int64_t)blockIdx.y * 1024 + kiln_base + kiln_lane] = acc;",
            "atomicAdd(&k_l0_count[blockIdx.x], 1u) == gridDim.y - 1",
            "if (!kiln_last) { if (err) *kiln_err = 1; return; }",
            "kiln_o = kiln_p[(int64_t)kiln_h * 1024];",
        ] {
            assert!(s.cuda.contains(wanted), "{wanted}\n{}", s.cuda);
        }
    }

    #[test]
    fn a_sum_to_a_scalar_is_one_launch_finished_by_the_last_block() {
        let s = cuda_of(
            "kernel k(in0: f32[8388608], out out0: f32[]) {
  let acc: f32 = 0.0:f32
  for r0 in 0..8388608 {
    acc = sum(acc, in0[r0])
  }
  out0[0] = acc
}",
        );
        assert_eq!(s.launches.len(), 1);
        assert_eq!(s.launches[0].grid, [528, 1, 1]);
        assert!(
            s.cuda.contains("__device__ float k_l0_acc[528];"),
            "{}",
            s.cuda
        );
        assert!(
            s.cuda
                .contains("atomicAdd(&k_l0_count, 1u) == gridDim.x - 1"),
            "{}",
            s.cuda
        );
        // The last block's first warp combines the 528 partials.
        assert!(
            s.cuda.contains(
                "for (unsigned int kiln_b = threadIdx.x + 32; kiln_b < kiln_n; kiln_b += 32)"
            ),
            "{}",
            s.cuda
        );
    }
}

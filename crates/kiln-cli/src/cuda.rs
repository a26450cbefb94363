//! `--backend cuda` for `kiln run` and `kiln bench`.

use crate::bench::{median, BenchOptions};
use crate::profile::{node_profile, print_node_profile};
use kiln_cpu::jit::{op_label, NodeTime};
use kiln_cuda::{CudaModel, CudaOptions};
use kiln_exec::Step;
use kiln_ir::{Graph, Result, Tensor};
use std::time::{Duration, Instant};

/// Compiles `g` for the GPU of `opts`.
pub fn compile(g: &Graph, opts: &CudaOptions) -> Result<CudaModel> {
    let m = CudaModel::compile(g, opts)?;
    println!("{}", compile_line(&m));
    Ok(m)
}

/// One line on how the model was compiled for the GPU.
pub fn compile_line(m: &CudaModel) -> String {
    let s = m.summary();
    let how = if s.cached {
        "module loaded from cache"
    } else {
        "compiled by NVRTC"
    };
    format!(
        "cuda: {} — {} kernels, {} launches, {} nodes on the interpreter, {} KiB of CUDA, {how}, {:.2} s",
        s.device,
        s.kernels,
        s.launches,
        s.interpreted.len(),
        s.source_bytes / 1024,
        s.seconds
    )
}

/// `kiln bench --backend cuda`: device time of the kernels (events, inputs
/// already on the device) and wall time of whole runs (copies included).
pub fn bench(
    g: &Graph,
    label: &str,
    inputs: &[Tensor],
    opts: &BenchOptions,
    cuda: &CudaOptions,
) -> Result<()> {
    if !opts.json {
        println!("model: {label}");
    }
    let t = Instant::now();
    let m = compile(g, cuda)?;
    let compile_s = t.elapsed().as_secs_f64();
    m.time_device(inputs, opts.warmup.max(1))?;
    let mut device: Vec<f64> = m
        .time_device(inputs, opts.runs.max(1))?
        .into_iter()
        .map(f64::from)
        .collect();
    let mut wall = Vec::with_capacity(opts.runs);
    for _ in 0..opts.runs.max(1) {
        let t = Instant::now();
        m.run(inputs)?;
        wall.push(t.elapsed().as_secs_f64() * 1e3);
    }
    if opts.profile {
        print_node_profile(&node_profile(|| node_times(&m, inputs), &|_| None)?);
    }
    let min = device.iter().cloned().fold(f64::INFINITY, f64::min);
    let (device_ms, wall_ms) = (median(&mut device), median(&mut wall));
    if opts.json {
        let j = serde_json::json!({
            "model": label,
            "backend": "cuda",
            "tf32": cuda.tf32,
            "device": m.summary().device,
            "median_ms": device_ms,
            "min_ms": min,
            "wall_median_ms": wall_ms,
            "runs": opts.runs,
            "compile_s": compile_s,
            "kernels": m.summary().kernels,
            "launches": m.summary().launches,
            "interpreted": m.summary().interpreted.len(),
        });
        println!("{j}");
    } else {
        println!(
            "device median: {device_ms:.4} ms   min: {min:.4} ms   whole run (copies included) median: {wall_ms:.3} ms   ({} runs)",
            opts.runs
        );
    }
    Ok(())
}

/// Each node's device time in one run ([`CudaModel::time_steps`]).
fn node_times(m: &CudaModel, inputs: &[Tensor]) -> Result<Vec<NodeTime>> {
    let ms = m.time_steps(inputs)?;
    Ok(m.graph()
        .nodes
        .iter()
        .zip(&m.plan().steps)
        .zip(ms)
        .map(|((n, step), ms)| NodeTime {
            node: n.name.clone(),
            op: op_label(n),
            compiled: !matches!(step, Step::Interp { .. }),
            time: Duration::from_secs_f64(f64::from(ms) / 1e3),
        })
        .collect())
}

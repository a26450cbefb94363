//! `--backend dsa:PRESET` (or `dsa:PATH.toml`) for `kiln run` and `kiln
//! bench`: DSA C run by the functional emulator, with its DMA counts.

use crate::bench::{median, time_runs, BenchOptions};
use kiln_dsa_emu::{DmaCounts, DsaModel, DsaOptions};
use kiln_fuse::PlannerKind;
use kiln_ir::{Graph, Result, Tensor};
use std::time::Instant;

/// Checks a `--backend` value: `cpu`, `cuda`, `reference`, or a DSA target
/// `kiln_dsa::parse_target` reads (the error lists the presets).
pub fn parse_backend(value: &str) -> std::result::Result<String, String> {
    match value {
        "cpu" | "cuda" | "reference" => Ok(value.to_string()),
        v if v.starts_with("dsa:") => kiln_dsa::parse_target(v)
            .map(|_| v.to_string())
            .map_err(|e| e.to_string()),
        v => Err(format!(
            "unknown backend '{v}' (cpu, cuda, reference, or dsa:NAME with a preset — {} — or dsa:PATH.toml)",
            kiln_dsa::DsaDesc::preset_names().join(", ")
        )),
    }
}

/// Compiles `g` for the DSA `target` (`dsa:…`) and prints how (unless
/// `quiet`).
pub fn compile(g: &Graph, target: &str, fusion: PlannerKind, quiet: bool) -> Result<DsaModel> {
    let desc = kiln_dsa::parse_target(target)?;
    let opts = DsaOptions {
        fusion,
        ..DsaOptions::default()
    };
    let m = DsaModel::compile(g, &desc, &opts)?;
    if !quiet {
        print_compile(&m);
    }
    Ok(m)
}

/// What compiling for the DSA did: kernels, interpreted nodes and why.
fn print_compile(m: &DsaModel) {
    let (r, desc) = (&m.model.report, &m.desc);
    let how = match &r.compile {
        Some(c) if c.cached => "loaded from cache".to_string(),
        Some(c) => format!("compiled in {:.2} s", c.seconds),
        None => "nothing to compile".to_string(),
    };
    println!(
        "dsa: {} ({} clusters x {} cores, LB {} B per core) — {} kernels, {} nodes compiled, {} on the interpreter, {how}",
        desc.name,
        desc.clusters,
        desc.cores_per_cluster,
        desc.local_buffer.bytes,
        r.kernels,
        r.compiled_nodes,
        r.interpreted.len()
    );
    for (node, why) in &r.interpreted {
        println!("  interpreted {node}: {why}");
    }
}

/// Runs `m` once, printing the DMA counts of the run.
pub fn run(m: &DsaModel, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let t = Instant::now();
    let (outs, counts) = m.run(inputs)?;
    println!(
        "run (emulated): {:.1} ms\n{counts}",
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(outs)
}

/// `kiln bench --backend dsa:…`: wall time of emulated runs and the DMA
/// counts of one run.
pub fn bench(
    g: &Graph,
    label: &str,
    inputs: &[Tensor],
    opts: &BenchOptions,
    target: &str,
) -> Result<()> {
    if !opts.json {
        println!("model: {label}");
    }
    let m = compile(g, target, opts.cpu.fusion, opts.json)?;
    let (_, counts) = m.run(inputs)?;
    let mut ms = time_runs(opts, &|| m.run(inputs).map(|(o, _)| o))?;
    let wall = median(&mut ms);
    if opts.json {
        println!("{}", json(label, target, wall, opts.runs, &counts));
    } else {
        println!("emulated run: median {wall:.2} ms over {} runs (host time, not the DSA's)\nDMA per inference:\n{counts}", opts.runs);
    }
    Ok(())
}

fn json(label: &str, target: &str, wall: f64, runs: usize, c: &DmaCounts) -> serde_json::Value {
    let kind = |t: kiln_dsa_emu::Transfers| serde_json::json!({"calls": t.calls, "transfers": t.runs, "bytes": t.bytes});
    serde_json::json!({
        "model": label,
        "backend": target,
        "wall_median_ms": wall,
        "runs": runs,
        "dma": {
            "ddr_to_lb": kind(c.ddr_to_lb),
            "lb_to_ddr": kind(c.lb_to_ddr),
            "ddr_to_gb": kind(c.ddr_to_gb),
            "gb_to_lb": kind(c.gb_to_lb),
            "lb_to_gb": kind(c.lb_to_gb),
            "kernel_calls": c.kernel_calls,
            "barriers": c.barriers,
        },
    })
}

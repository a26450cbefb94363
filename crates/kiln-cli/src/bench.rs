//! `kiln bench` and `kiln peak`.

use crate::profile::{node_profile, print_node_profile, NodeProfile};
use crate::roofline::{self, Machine};
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_fuse::PlannerKind;
use kiln_ir::{Graph, Result, Tensor};
use std::time::Instant;

pub struct BenchOptions {
    pub runs: usize,
    pub warmup: usize,
    pub cold: bool,
    pub profile: bool,
    pub json: bool,
    /// A second fusion planner to alternate with, inference by inference.
    pub versus: Option<PlannerKind>,
    pub cpu: CpuOptions,
    /// Time the reference interpreter instead of the CPU backend.
    pub reference: bool,
}

/// One line on how the model was compiled, then a line per node left to
/// the interpreter saying why.
pub fn compile_line(m: &CompiledModel) -> String {
    let r = &m.report;
    let how = match &r.compile {
        Some(c) if c.cached => format!("loaded from cache in {:.3} s", c.seconds),
        Some(c) => format!("compiled in {:.2} s ({} pieces)", c.seconds, c.pieces),
        None => "nothing to compile".into(),
    };
    format!(
        "backend: cpu   fusion: {} ({} ms to plan)   kernels: {}   interpreted nodes: {}   prepacked weights: {} ({:.1} MB{}; {:.1} MB kept unpacked)   {how}   arena: {} bytes (lower bound {}, intermediates {})   workspace: {} bytes",
        r.fusion.plan.planner,
        (r.fusion.seconds * 1e3).round(),
        r.kernels,
        r.interpreted.len(),
        r.prepacked_weights,
        r.packed_bytes as f64 / 1e6,
        if r.packed_from_cache {
            ", mapped from the cache"
        } else {
            ""
        },
        r.weight_bytes as f64 / 1e6,
        r.arena_bytes,
        r.arena_bound,
        r.intermediate_bytes,
        r.workspace_bytes
    ) + &r
        .interpreted
        .iter()
        .map(|(node, why)| format!("\n  interpreted {node}: {why}"))
        .collect::<String>()
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Times `run` `warmup + runs` times; milliseconds of the timed runs.
pub(crate) fn time_runs(
    opts: &BenchOptions,
    run: &dyn Fn() -> Result<Vec<Tensor>>,
) -> Result<Vec<f64>> {
    for _ in 0..opts.warmup {
        run()?;
    }
    let mut ms = Vec::with_capacity(opts.runs);
    for _ in 0..opts.runs.max(1) {
        let t = Instant::now();
        run()?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(ms)
}

pub fn bench(g: &Graph, label: &str, inputs: &[Tensor], opts: &BenchOptions) -> Result<()> {
    if opts.reference && opts.versus.is_some() {
        kiln_ir::bail!(
            "--versus compares two fusion plans on the cpu backend, not the reference interpreter"
        );
    }
    if opts.reference {
        let mut ms = time_runs(opts, &|| kiln_interp::run(g, inputs))?;
        let min = ms.iter().cloned().fold(f64::INFINITY, f64::min);
        return report(opts, label, median(&mut ms), min, ms.len(), None);
    }
    let mut cpu = opts.cpu.clone();
    let scratch;
    if opts.cold {
        scratch = std::env::temp_dir().join(format!("kiln-cold-{}", std::process::id()));
        cpu.compiler.cache_dir = scratch.clone();
    }
    let t = Instant::now();
    let m = crate::progress::while_working("compiling", || CompiledModel::compile(g, &cpu))?;
    let compile_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    CompiledModel::compile(g, &cpu)?;
    let cached_s = t.elapsed().as_secs_f64();
    if opts.cold {
        let _ = std::fs::remove_dir_all(&cpu.compiler.cache_dir);
    }
    if !opts.json {
        println!("model: {label}");
        println!("{}", compile_line(&m));
    }
    if let Some(other) = opts.versus {
        let rival = CompiledModel::compile(
            g,
            &CpuOptions {
                fusion: other,
                ..cpu.clone()
            },
        )?;
        if !opts.json {
            println!("{}", compile_line(&rival));
        }
        return versus(opts, label, (&m, &rival), inputs);
    }
    let mut ms = time_runs(opts, &|| m.run(inputs))?;
    let min = ms.iter().cloned().fold(f64::INFINITY, f64::min);
    let med = median(&mut ms);
    let profile = if opts.profile {
        cpu_profile(&m, inputs, cpu.threads)?
    } else {
        Vec::new()
    };
    if !opts.json && opts.profile {
        print_node_profile(&profile);
    }
    let extra = Extra {
        compile_s,
        cached_s,
        cached_at_start: m.report.compile.is_some_and(|c| c.cached),
        arena_bytes: m.report.arena_bytes,
        arena_bound: m.report.arena_bound,
        workspace_bytes: m.report.workspace_bytes,
        intermediate_bytes: m.report.intermediate_bytes,
        kernels: m.report.kernels,
        fusion: m.report.fusion.plan.planner.clone(),
        interpreted: m.report.interpreted.len(),
        threads: cpu.threads,
        profile,
    };
    report(opts, label, med, min, ms.len(), Some(extra))
}

/// Runs `a` and `b` alternately (warm-up, then `opts.runs` pairs, the order flipping each pair)
/// and reports both medians and the median per-pair ratio `a / b`: the two see the same machine
/// state, which a comparison of separate runs cannot promise on a noisy machine.
fn versus(
    opts: &BenchOptions,
    label: &str,
    (a, b): (&CompiledModel, &CompiledModel),
    inputs: &[Tensor],
) -> Result<()> {
    for _ in 0..opts.warmup {
        a.run(inputs)?;
        b.run(inputs)?;
    }
    let timed = |m: &CompiledModel| -> Result<f64> {
        let t = Instant::now();
        m.run(inputs)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for pair in 0..opts.runs.max(1) {
        let (x, y) = if pair % 2 == 0 {
            let x = timed(a)?;
            (x, timed(b)?)
        } else {
            let y = timed(b)?;
            (timed(a)?, y)
        };
        ta.push(x);
        tb.push(y);
    }
    let faster = ta.iter().zip(&tb).filter(|(x, y)| x < y).count();
    let mut ratios: Vec<f64> = ta.iter().zip(&tb).map(|(x, y)| x / y).collect();
    let (ratio, pairs) = (median(&mut ratios), ta.len());
    let (name_a, name_b) = (&a.report.fusion.plan.planner, &b.report.fusion.plan.planner);
    let (med_a, med_b) = (median(&mut ta), median(&mut tb));
    if opts.json {
        let j = serde_json::json!({
            "model": label,
            "pairs": pairs,
            "fusion": name_a,
            "median_ms": med_a,
            "versus": name_b,
            "versus_median_ms": med_b,
            "ratio_median": ratio,
            "faster_pairs": faster,
        });
        println!("{j}");
    } else {
        println!(
            "pairs: {pairs}   {name_a} median: {med_a:.3} ms   {name_b} median: {med_b:.3} ms"
        );
        println!(
            "{name_a}/{name_b} per pair: median {ratio:.3}   {name_a} faster in {faster} of {pairs} pairs"
        );
    }
    Ok(())
}

struct Extra {
    compile_s: f64,
    cached_s: f64,
    cached_at_start: bool,
    arena_bytes: usize,
    /// The most bytes live at one step: no arena can be smaller.
    arena_bound: usize,
    workspace_bytes: usize,
    intermediate_bytes: usize,
    kernels: usize,
    /// The fusion planner.
    fusion: String,
    interpreted: usize,
    threads: usize,
    /// Per node, with `--profile`.
    profile: Vec<NodeProfile>,
}

fn report(
    opts: &BenchOptions,
    label: &str,
    median_ms: f64,
    min_ms: f64,
    runs: usize,
    extra: Option<Extra>,
) -> Result<()> {
    if opts.json {
        let mut j = serde_json::json!({
            "model": label,
            "backend": if opts.reference { "reference" } else { "cpu" },
            "median_ms": median_ms,
            "min_ms": min_ms,
            "runs": runs,
        });
        if let Some(e) = extra {
            j["compile_s"] = e.compile_s.into();
            j["compile_cached_s"] = e.cached_s.into();
            j["cached_at_start"] = e.cached_at_start.into();
            j["arena_bytes"] = e.arena_bytes.into();
            j["arena_bound_bytes"] = e.arena_bound.into();
            j["workspace_bytes"] = e.workspace_bytes.into();
            j["intermediate_bytes"] = e.intermediate_bytes.into();
            j["kernels"] = e.kernels.into();
            j["fusion"] = e.fusion.clone().into();
            j["interpreted_nodes"] = e.interpreted.into();
            j["threads"] = e.threads.into();
            if opts.profile {
                j["profile"] = e.profile.iter().map(NodeProfile::json).collect();
            }
        }
        println!("{j}");
    } else {
        if let Some(e) = extra {
            println!(
                "compile: {:.2} s{}, cached: {:.3} s   threads: {}",
                e.compile_s,
                if e.cached_at_start {
                    " (cache hit)"
                } else {
                    ""
                },
                e.cached_s,
                e.threads
            );
        }
        println!("runs: {runs}   median: {median_ms:.3} ms   min: {min_ms:.3} ms");
    }
    Ok(())
}

/// The CPU backend's time per node and its roofline bound on this machine
/// with the model's threads.
fn cpu_profile(m: &CompiledModel, inputs: &[Tensor], threads: usize) -> Result<Vec<NodeProfile>> {
    let machine = Machine::measure(threads)?.machine;
    let g = m.graph();
    let bound = |i: usize| {
        g.nodes
            .get(i)
            .and_then(|n| roofline::bound_ms(g, n, &machine))
    };
    node_profile(|| Ok(m.run_profiled(inputs)?.1), &bound)
}

/// Measures the fp32 FMA peak with `threads` threads.
pub fn peak(threads: usize, json: bool) -> Result<()> {
    let measured = Machine::measure(threads)?;
    let (one, all, gbps) = (
        measured.gflops_1thread,
        measured.machine.gflops,
        measured.machine.gbps,
    );
    if json {
        println!(
            "{}",
            serde_json::json!({"gflops": all, "threads": threads, "gflops_1thread": one,
                "triad_gbps": gbps, "cpu": kiln_runtime::cpu::cpu_model_name()})
        );
    } else {
        println!("cpu: {}", kiln_runtime::cpu::cpu_model_name());
        println!(
            "fp32 FMA peak: {one:.1} GFLOP/s on 1 thread, {all:.1} GFLOP/s on {threads} threads"
        );
        println!("memory bandwidth (STREAM triad, f32): {gbps:.1} GB/s on {threads} threads");
    }
    Ok(())
}

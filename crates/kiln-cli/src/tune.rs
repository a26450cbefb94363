//! `kiln tune`: measures gemm choices (register tile, orientation, K
//! block: `kiln_codegen::gemm::candidates`) for every distinct matrix
//! product and convolution kernel of a model on this machine, and files
//! the fastest in the tuning cache (`kiln_cpu::tuning`), which later
//! compiles read without measuring (APOLLO's auto-tuning, issue 19).
//!
//! Each round compiles the model once with one candidate for every kernel
//! (the fusion plan fixed, so node numbers stay), checks the outputs
//! against the reference interpreter, and times each kernel in place with
//! the model's own data. A round whose outputs differ is dropped whole,
//! so no tuning is kept without having given the interpreter's results.
//! Round 0 is the untuned default: a kernel keeps the default unless a
//! candidate measured faster.

use crate::progress;
use kiln_codegen::gemm::{self, Tuning};
use kiln_cpu::program::Naming;
use kiln_cpu::tuning::{kernel_key, GemmTunings};
use kiln_cpu::{CompiledModel, CpuOptions, CpuProgram};
use kiln_ir::{Error, Graph, Result, Tensor};
use kiln_loop::Stmt;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct TuneOptions {
    pub cpu: CpuOptions,
    /// No round starts after this much time.
    pub budget: Duration,
    /// Profiled runs per round (each kernel's median counts).
    pub runs: usize,
}

/// One distinct gemm kernel: its key and the nodes computing it.
struct Distinct {
    key: String,
    nodes: Vec<usize>,
    op: String,
}

pub fn tune(g: &Graph, inputs: &[Tensor], opts: &TuneOptions) -> Result<()> {
    let start = Instant::now();
    let untuned = CpuOptions {
        tunings: Arc::new(GemmTunings::default()),
        ..opts.cpu.clone()
    };
    let naming = Naming {
        prefix: "kiln".into(),
        threads: untuned.threads,
    };
    let program = CpuProgram::build(g, &untuned, &naming)?;
    let kernels = distinct_gemms(&program, &untuned);
    if kernels.is_empty() {
        println!("nothing to tune: the model has no matrix product or convolution kernel");
        return Ok(());
    }
    let want = kiln_interp::run(g, inputs)?;
    let candidates: Vec<Tuning> = std::iter::once(Tuning::default())
        .chain(gemm::candidates(untuned.target.vector_bytes))
        .collect();
    println!(
        "tuning {} distinct gemm kernels ({} nodes) over {} candidates, budget {} s",
        kernels.len(),
        kernels.iter().map(|k| k.nodes.len()).sum::<usize>(),
        candidates.len(),
        opts.budget.as_secs()
    );
    let plan = program.fusion.plan;
    let mut times: Vec<Vec<Option<Duration>>> = Vec::new();
    let bar = progress::counter(candidates.len() as u64, "candidates");
    for (r, candidate) in candidates.iter().enumerate() {
        if r > 0 && start.elapsed() > opts.budget {
            println!("budget spent after {r} of {} candidates", candidates.len());
            break;
        }
        bar.set_message(candidate.to_text());
        let table = round_table(&kernels, candidate);
        let tuned = CpuOptions {
            tunings: Arc::new(table),
            ..untuned.clone()
        };
        times.push(
            match measure(g, plan.clone(), &tuned, inputs, &want, &kernels, opts.runs) {
                Ok(t) => t,
                Err(e) => {
                    bar.println(format!("candidate '{}' dropped: {e}", candidate.to_text()));
                    vec![None; kernels.len()]
                }
            },
        );
        bar.inc(1);
    }
    bar.finish_and_clear();
    report_and_save(&kernels, &candidates, &times, &untuned)
}

/// The gemm kernels of `program`, one per key, with their nodes.
fn distinct_gemms(program: &CpuProgram, opts: &CpuOptions) -> Vec<Distinct> {
    let mut by_key: BTreeMap<String, Distinct> = BTreeMap::new();
    for (node, k) in program.kernels.iter().enumerate() {
        let Some(k) = k else { continue };
        if !matches!(k.kernel.body.as_slice(), [Stmt::Gemm(_)]) {
            continue;
        }
        let key = kernel_key(&k.c, &k.kernel.name, &opts.target);
        by_key
            .entry(key.clone())
            .or_insert_with(|| Distinct {
                key,
                nodes: Vec::new(),
                op: kiln_cpu::jit::op_label(&program.graph.nodes[node]),
            })
            .nodes
            .push(node);
    }
    by_key.into_values().collect()
}

/// Every kernel's key mapped to `candidate` (round 0's default tuning
/// prints the untuned code).
fn round_table(kernels: &[Distinct], candidate: &Tuning) -> GemmTunings {
    let mut table = GemmTunings::default();
    for k in kernels {
        table.insert(k.key.clone(), candidate.clone());
    }
    table
}

/// Compiles with `opts`, checks the outputs against `want`, and returns
/// each kernel's time: the sum over its nodes of their median over `runs`.
fn measure(
    g: &Graph,
    plan: kiln_fuse::Plan,
    opts: &CpuOptions,
    inputs: &[Tensor],
    want: &[Tensor],
    kernels: &[Distinct],
    runs: usize,
) -> Result<Vec<Option<Duration>>> {
    let model = CompiledModel::compile_with_plan(g, plan, opts)?;
    check_outputs(&model.run(inputs)?, want)?;
    let mut per_node: Vec<Vec<Duration>> = Vec::new();
    for _ in 0..runs.max(1) {
        let (_, times) = model.run_profiled(inputs)?;
        per_node.resize(times.len(), Vec::new());
        for (acc, t) in per_node.iter_mut().zip(times) {
            acc.push(t.time);
        }
    }
    let median = |node: usize| -> Duration {
        let mut v = per_node.get(node).cloned().unwrap_or_default();
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    };
    Ok(kernels
        .iter()
        .map(|k| Some(k.nodes.iter().map(|&n| median(n)).sum()))
        .collect())
}

/// Every output within `1e-4 + 1e-3 * max|want|` of the interpreter's (NaN
/// where it has NaN).
fn check_outputs(got: &[Tensor], want: &[Tensor]) -> Result<()> {
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        let (x, y) = (a.data.to_f64_vec()?, b.data.to_f64_vec()?);
        let scale = y.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let bound = 1e-4 + 1e-3 * scale;
        let close = |(p, q): (&f64, &f64)| (p.is_nan() && q.is_nan()) || (p - q).abs() <= bound;
        let worst = x
            .iter()
            .zip(&y)
            .fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
        if x.len() != y.len() || !x.iter().zip(&y).all(close) {
            return Err(Error::new(format!(
                "output {k} differs from the interpreter's by {worst:e} (scale {scale:e})"
            )));
        }
    }
    Ok(())
}

/// A candidate replaces the default only when it measured at least 3%
/// faster: closer than that is within the noise of a profiled run.
const MIN_GAIN: f64 = 0.97;

/// Prints each kernel's default and best time and files the best choices.
fn report_and_save(
    kernels: &[Distinct],
    candidates: &[Tuning],
    times: &[Vec<Option<Duration>>],
    opts: &CpuOptions,
) -> Result<()> {
    let mut filed = GemmTunings::load(&opts.compiler.cache_dir, &opts.target);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (mut before, mut after) = (0.0, 0.0);
    println!(
        "{:>10} {:>10} {:>7}  nodes  op / choice",
        "default ms", "tuned ms", "ratio"
    );
    for (i, k) in kernels.iter().enumerate() {
        let Some(default) = times.first().and_then(|t| t[i]) else {
            continue;
        };
        let (best, time) = (0..times.len())
            .filter_map(|r| times[r][i].map(|t| (r, t)))
            .min_by_key(|&(_, t)| t)
            .filter(|&(_, t)| t.as_secs_f64() < MIN_GAIN * default.as_secs_f64())
            .unwrap_or((0, default));
        before += ms(default);
        after += ms(time);
        println!(
            "{:>10.3} {:>10.3} {:>7.2}  {:>5}  {} / {}",
            ms(default),
            ms(time),
            ms(time) / ms(default).max(1e-9),
            k.nodes.len(),
            k.op,
            candidates[best].to_text()
        );
        filed.insert(k.key.clone(), candidates[best].clone());
    }
    let path = filed.save(&opts.compiler.cache_dir, &opts.target)?;
    println!(
        "gemm kernels: {before:.3} ms untuned, {after:.3} ms tuned ({:.2}x); {} tunings filed in {}",
        before / after.max(1e-9),
        filed.len(),
        path.display()
    );
    Ok(())
}

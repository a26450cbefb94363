//! The differential fuzzer's check and minimiser: a graph runs on the
//! reference interpreter as generated, and on the CPU backend after the
//! default graph passes under each requested fusion planner; any
//! difference is a finding.
//!
//! Comparison: the same number of outputs, each with the same dtype and
//! shape; floats within `1e-4 + 1e-3·|want|` (NaN equals NaN, an infinity
//! equals the same infinity, NaN payloads and the sign of NaN are not
//! compared: C and Rust may produce different ones and ONNX does not
//! specify them); integers and bools exactly. Deliberate semantic choices
//! that are not findings: the generator never divides integers (C leaves
//! division by zero undefined and kiln's C defines it as 0), and f16 nodes
//! run on the interpreter in the CPU backend, so they are compared with
//! themselves.
//!
//! A case the interpreter rejects (an error, e.g. an op it has no kernel
//! for at that dtype) is skipped, not a finding. A pass, compile or run
//! error of the CPU backend, or a panic anywhere after the interpreter
//! succeeded, is a finding.

use crate::random_graph;
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_fuse::PlannerKind;
use kiln_ir::{Graph, Initializer, Tensor, ValueId};
use kiln_passes::Pass;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What one case gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every planner matched the interpreter.
    Agree,
    /// The interpreter rejected the case (the reason).
    Skipped(String),
    /// The graph passes failed or panicked.
    PassError(String),
    /// Outputs differ under `planner`.
    Mismatch {
        planner: PlannerKind,
        detail: String,
    },
    /// Compiling or running under `planner` failed or panicked.
    CpuError { planner: PlannerKind, error: String },
}

impl Outcome {
    /// Whether this is a bug to report (not agreement, not a skip).
    pub fn is_finding(&self) -> bool {
        !matches!(self, Outcome::Agree | Outcome::Skipped(_))
    }

    /// The kind of finding and planner, without the details: what
    /// minimisation must preserve.
    pub fn signature(&self) -> String {
        match self {
            Outcome::Agree => "agree".into(),
            Outcome::Skipped(_) => "skipped".into(),
            Outcome::PassError(_) => "pass error".into(),
            Outcome::Mismatch { planner, .. } => format!("mismatch under {planner}"),
            Outcome::CpuError { planner, .. } => format!("cpu error under {planner}"),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Outcome::Agree => write!(f, "agree"),
            Outcome::Skipped(r) => write!(f, "skipped: {r}"),
            Outcome::PassError(e) => write!(f, "graph passes failed: {e}"),
            Outcome::Mismatch { planner, detail } => {
                write!(f, "mismatch under {planner}: {detail}")
            }
            Outcome::CpuError { planner, error } => {
                write!(f, "cpu backend failed under {planner}: {error}")
            }
        }
    }
}

/// How a case runs on the CPU backend.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    pub planners: Vec<PlannerKind>,
    pub threads: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            planners: PlannerKind::ALL.to_vec(),
            threads: 1,
        }
    }
}

/// Runs `g` on the interpreter and on the CPU backend under each planner
/// of `opts` and compares (module documentation).
pub fn check(g: &Graph, inputs: &[Tensor], opts: &CheckOptions) -> Outcome {
    let want = match guarded(|| kiln_interp::run(g, inputs)) {
        Ok(w) => w,
        Err(e) => return Outcome::Skipped(e),
    };
    let mut optimized = g.clone();
    if let Err(e) = guarded(|| kiln_passes::optimize(&mut optimized, &Default::default())) {
        return Outcome::PassError(e);
    }
    for &planner in &opts.planners {
        let cpu = CpuOptions {
            threads: opts.threads,
            fusion: planner,
            ..Default::default()
        };
        let got = guarded(|| CompiledModel::compile(&optimized, &cpu)?.run(inputs));
        match got {
            Err(error) => return Outcome::CpuError { planner, error },
            Ok(got) => {
                if let Err(detail) = compare(&got, &want) {
                    return Outcome::Mismatch { planner, detail };
                }
            }
        }
    }
    Outcome::Agree
}

/// `f`'s result, with its error or panic as text.
fn guarded<T>(f: impl FnOnce() -> kiln_ir::Result<T>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(format!("panic: {msg}"))
        }
    }
}

/// Compares the CPU backend's outputs with the interpreter's.
pub fn compare(got: &[Tensor], want: &[Tensor]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs, want {}", got.len(), want.len()));
    }
    for (k, (a, b)) in got.iter().zip(want).enumerate() {
        if a.dtype() != b.dtype() || a.shape != b.shape {
            return Err(format!(
                "output {k} is {}{:?}, want {}{:?}",
                a.dtype(),
                a.shape,
                b.dtype(),
                b.shape
            ));
        }
        let (x, y) = match (a.data.to_f64_vec(), b.data.to_f64_vec()) {
            (Ok(x), Ok(y)) => (x, y),
            _ if a == b => continue,
            _ => return Err(format!("output {k} differs (non-numeric)")),
        };
        let tolerance = Tolerance::of(a.dtype());
        for (i, (&p, &q)) in x.iter().zip(&y).enumerate() {
            if !tolerance.close(p, q) {
                return Err(format!(
                    "output {k} element {i}: cpu {p} vs interpreter {q}"
                ));
            }
        }
    }
    Ok(())
}

/// How far a backend's value may be from the interpreter's: integers and bools exactly;
/// floats within 1e-4 + 1e-3·|q|, widened for f16 and bf16 to four steps of the type
/// (the graph passes open compound ops, which rounds their intermediate results in the
/// type where the interpreter's direct kernel rounds once).
struct Tolerance {
    exact: bool,
    absolute: f64,
    relative: f64,
}

impl Tolerance {
    fn of(dtype: kiln_ir::DType) -> Tolerance {
        let epsilon = match dtype {
            kiln_ir::DType::F16 => f64::powi(2.0, -10),
            kiln_ir::DType::BF16 => f64::powi(2.0, -7),
            _ => 0.0,
        };
        Tolerance {
            exact: !dtype.is_float(),
            absolute: f64::max(1e-4, epsilon),
            relative: f64::max(1e-3, 4.0 * epsilon),
        }
    }

    fn close(&self, p: f64, q: f64) -> bool {
        if self.exact || p.is_infinite() || q.is_infinite() {
            return p == q;
        }
        if p.is_nan() || q.is_nan() {
            return p.is_nan() && q.is_nan();
        }
        (p - q).abs() <= self.absolute + self.relative * q.abs()
    }
}

/// Greedy delta debugging: repeatedly removes one graph output or one node
/// (its output becomes a new graph input of the same type, or its uses
/// read an earlier value of the same type), then unused nodes and
/// initializers, keeping each smaller graph on which `still_fails` holds,
/// until no single removal does. `g` must fail.
pub fn minimize(g: &Graph, still_fails: impl Fn(&Graph) -> bool) -> Graph {
    let mut best = g.clone();
    loop {
        let smaller = candidates(&best).into_iter().find(|c| still_fails(c));
        match smaller {
            Some(c) => best = c,
            None => return best,
        }
    }
}

/// Every graph one step smaller than `g`, smallest first.
fn candidates(g: &Graph) -> Vec<Graph> {
    let mut out = Vec::new();
    if g.outputs.len() > 1 {
        for k in 0..g.outputs.len() {
            let mut c = g.clone();
            c.outputs.remove(k);
            out.extend(cleaned(c));
        }
    }
    for n in (0..g.nodes.len()).rev() {
        out.extend(bypass(g, n).and_then(cleaned));
        out.extend(cut(g, n).and_then(cleaned));
    }
    for (&id, init) in &g.initializers {
        if let Some(c) = simplify_init(g, id, init) {
            out.push(c);
        }
    }
    out
}

/// Node `n` removed, its output read as a new graph input.
fn cut(g: &Graph, n: usize) -> Option<Graph> {
    let node = &g.nodes[n];
    if node.outputs.len() != 1 {
        return None;
    }
    let o = node.outputs[0]?;
    let mut c = g.clone();
    c.nodes.remove(n);
    c.inputs.push(o);
    Some(c)
}

/// Node `n` removed, its output's uses reading its first input of the
/// same type instead.
fn bypass(g: &Graph, n: usize) -> Option<Graph> {
    let node = &g.nodes[n];
    let o = node.outputs.first().copied().flatten()?;
    let same = node
        .inputs
        .iter()
        .flatten()
        .copied()
        .find(|&i| g.ty(i) == g.ty(o))?;
    let mut c = g.clone();
    c.nodes.remove(n);
    replace_uses(&mut c, o, same);
    if c.outputs.contains(&same) && (c.inputs.contains(&same) || c.initializers.contains_key(&same))
    {
        return None;
    }
    Some(c)
}

fn replace_uses(g: &mut Graph, from: ValueId, to: ValueId) {
    for node in &mut g.nodes {
        for i in node.inputs.iter_mut().flatten() {
            if *i == from {
                *i = to;
            }
        }
    }
    for o in &mut g.outputs {
        if *o == from {
            *o = to;
        }
    }
    g.outputs.dedup();
}

/// A non-zero initializer replaced by zeros of its type (smaller text,
/// and often the same failure).
fn simplify_init(g: &Graph, id: ValueId, init: &Initializer) -> Option<Graph> {
    let t = init.to_tensor().ok()?;
    if t.len() < 2 || !t.dtype().is_float() {
        return None;
    }
    let zeros = Tensor::zeros(t.dtype(), t.shape.clone());
    if zeros == t {
        return None;
    }
    let mut c = g.clone();
    c.initializers.insert(id, Initializer::Tensor(zeros));
    Some(c)
}

/// `c` without dead nodes, initializers and values, and without graph
/// inputs nothing reads; `None` if it is no longer a valid graph with
/// outputs.
fn cleaned(mut c: Graph) -> Option<Graph> {
    let uses = c.use_counts();
    c.inputs.retain(|v| uses[v.index()] > 0);
    kiln_passes::passes::dce::Dce.run(&mut c).ok()?;
    let uses = c.use_counts();
    c.inputs.retain(|v| uses[v.index()] > 0);
    kiln_passes::passes::dce::Dce.run(&mut c).ok()?;
    if c.outputs.is_empty() || c.nodes.is_empty() {
        return None;
    }
    kiln_ir::verify::verify(&c).ok()?;
    Some(c)
}

/// Runs case `seed` of the generator: the graph, its inputs and what the
/// check gave.
pub fn run_seed(
    seed: u64,
    gen: &random_graph::GenOptions,
    opts: &CheckOptions,
) -> (Graph, Vec<Tensor>, Outcome) {
    let g = random_graph::generate(seed, gen);
    let inputs = random_graph::inputs(&g, seed);
    let outcome = check(&g, &inputs, opts);
    (g, inputs, outcome)
}

/// The header of a reproducer of case `seed` (what [`replay`] reads back),
/// ending with `finding`'s text as comment lines.
pub fn header(seed: u64, opts: &CheckOptions, finding: &str) -> String {
    let planners: Vec<&str> = opts.planners.iter().map(|p| p.name()).collect();
    let mut text = format!(
        "# differential fuzzer case {seed} (inputs: kiln_conformance::random_graph::inputs(g, {seed}))\n# planners: {}, threads {}\n",
        planners.join(","),
        opts.threads
    );
    for line in finding.lines() {
        text.push_str(&format!("# {line}\n"));
    }
    text
}

/// The minimised reproducer of a finding of case `seed`, as text with a
/// comment header (seed, planners, the finding): what
/// `fuzz/regressions/differential/<seed>.kiln` holds and [`replay`]
/// reads. Minimises in this process, so a finding that crashes the
/// process needs the campaign's subprocesses instead.
pub fn reproducer(g: &Graph, seed: u64, opts: &CheckOptions, outcome: &Outcome) -> String {
    let want = outcome.signature();
    let small = minimize(g, |c| {
        let ins = random_graph::inputs(c, seed);
        check(c, &ins, opts).signature() == want
    });
    let ins = random_graph::inputs(&small, seed);
    let found = check(&small, &ins, opts);
    header(seed, opts, &found.to_string()) + &kiln_ir::text::print(&small)
}

/// The seed in a reproducer's header.
pub fn header_seed(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("# differential fuzzer case "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|s| s.parse::<u64>().ok())
}

/// Replays a reproducer's text: parses it, types it, takes the seed from
/// its header and checks it.
pub fn replay(text: &str, opts: &CheckOptions) -> kiln_ir::Result<Outcome> {
    let seed = header_seed(text)
        .ok_or_else(|| kiln_ir::Error::new("no '# differential fuzzer case SEED' header"))?;
    let mut g = kiln_ir::text::parse(text)?;
    kiln_ops::infer::infer_graph(&mut g, &|_| None)?;
    kiln_ir::verify::verify(&g)?;
    let ins = random_graph::inputs(&g, seed);
    Ok(check(&g, &ins, opts))
}

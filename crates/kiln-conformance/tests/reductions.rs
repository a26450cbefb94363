//! Random reductions on the CPU backend against the reference interpreter
//! (issue 20): random shapes (sometimes with one long axis, so the parallel,
//! chunked and vectorized schedules run), random reduced axes or all of them,
//! keepdims or not, every reduce op on every element type it takes (f64, f32,
//! f16, bf16, i64, i32; bool for min/max), on 1 to 4 threads. Integer and
//! bool results must be exact, floats within the differential tolerance
//! (`differential::compare`). `$KILN_REDUCTION_CASES` sets the number of
//! cases (default 48).

use kiln_conformance::differential::{self, CheckOptions, Outcome};
use kiln_conformance::random_graph;
use kiln_fuse::PlannerKind;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// One random reduction.
#[derive(Debug, Clone)]
struct Case {
    op: &'static str,
    dtype: &'static str,
    shape: Vec<usize>,
    /// Reduced axes; empty reduces all of them (no axes input).
    axes: Vec<usize>,
    keepdims: bool,
    threads: usize,
}

const FLOATS: &[&str] = &["f64", "f32", "f16", "bf16"];
const NUMBERS: &[&str] = &["f64", "f32", "f16", "bf16", "i64", "i32"];
const ORDERED: &[&str] = &["f64", "f32", "f16", "bf16", "i64", "i32", "bool"];

/// Each reduce op with the element types it is tried on.
fn ops() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        ("ReduceSum", NUMBERS),
        ("ReduceProd", NUMBERS),
        ("ReduceMin", ORDERED),
        ("ReduceMax", ORDERED),
        ("ReduceMean", FLOATS),
        ("ReduceL1", NUMBERS),
        ("ReduceL2", FLOATS),
        ("ReduceSumSquare", NUMBERS),
        ("ReduceLogSumExp", FLOATS),
    ]
}

/// A shape of rank 1–4 with small axes, one of them long in a third of the cases.
fn shape() -> impl Strategy<Value = Vec<usize>> {
    (
        prop::collection::vec(1usize..7, 1..5),
        any::<prop::sample::Index>(),
        0usize..3,
        500usize..5000,
    )
        .prop_map(|(mut s, at, long, n)| {
            if long == 0 {
                let i = at.index(s.len());
                s[i] = n;
            }
            s
        })
}

fn case() -> impl Strategy<Value = Case> {
    let ops = ops();
    (
        0..ops.len(),
        any::<prop::sample::Index>(),
        shape(),
        any::<u8>(),
        any::<bool>(),
        1usize..5,
    )
        .prop_map(move |(o, t, shape, mask, keepdims, threads)| {
            let (op, types) = ops[o];
            let axes = (0..shape.len()).filter(|a| mask & (1 << a) != 0).collect();
            Case {
                op,
                dtype: types[t.index(types.len())],
                shape,
                axes,
                keepdims,
                threads,
            }
        })
}

fn dims(s: &[usize]) -> String {
    s.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The case as graph text (opset 20: bool min/max).
fn graph_text(c: &Case) -> String {
    let reduced = |a: usize| c.axes.is_empty() || c.axes.contains(&a);
    let out: Vec<usize> = (0..c.shape.len())
        .filter(|&a| c.keepdims || !reduced(a))
        .map(|a| if reduced(a) { 1 } else { c.shape[a] })
        .collect();
    let (init, args) = if c.axes.is_empty() {
        (String::new(), "%x".to_string())
    } else {
        let a = dims(&c.axes).replace(',', ", ");
        (
            format!("  init %axes: i64[{}] = [{a}]\n", c.axes.len()),
            "%x, %axes".into(),
        )
    };
    format!(
        "graph \"g\" opsets [\"\"=20] {{\n  input %x: {t}[{}]\n{init}  node \"r\" %y: {t}[{}] = {}({args}) {{keepdims={}}}\n  output %y\n}}\n",
        dims(&c.shape),
        dims(&out),
        c.op,
        c.keepdims as i64,
        t = c.dtype,
    )
}

fn check(c: &Case) -> Result<(), TestCaseError> {
    let text = graph_text(c);
    let g = kiln_ir::text::parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
    let inputs = random_graph::inputs(&g, c.shape.iter().sum::<usize>() as u64);
    let opts = CheckOptions {
        planners: vec![PlannerKind::Apollo],
        threads: c.threads,
    };
    match differential::check(&g, &inputs, &opts) {
        Outcome::Agree => Ok(()),
        // The interpreter rejects it: not a case for the backend.
        Outcome::Skipped(why) => {
            eprintln!("skip: {why}");
            Err(TestCaseError::reject(why))
        }
        finding => Err(TestCaseError::fail(format!("{finding}\n{text}"))),
    }
}

#[test]
fn random_reductions_agree_with_the_interpreter() {
    let cases = std::env::var("KILN_REDUCTION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let config = Config {
        cases,
        max_global_rejects: cases * 2,
        // A failure prints its case (graph text and all); nothing to keep on disk.
        failure_persistence: None,
        ..Config::default()
    };
    let result = TestRunner::new(config).run(&case(), |c| check(&c));
    if let Err(e) = result {
        panic!("{e}");
    }
}

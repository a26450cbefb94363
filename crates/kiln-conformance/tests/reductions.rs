//! Random reductions on the CPU backend against the reference interpreter
//! (issue 20): random shapes (sometimes with one long axis, so the parallel,
//! chunked and vectorized schedules run), random reduced axes or all of them,
//! keepdims or not, every reduce op on every element type it takes (f64, f32,
//! f16, bf16, i64, i32; bool for min/max), on 1 to 4 threads. Integer and
//! bool results must be exact, floats within the differential tolerance
//! (`differential::compare`). ArgMax and ArgMin likewise, over a random axis
//! with random `keepdims` and `select_last_index`, on inputs drawn from a few
//! values so ties are common (and for floats, sometimes NaN and infinities),
//! alone or fused between an Abs and a Cast; their indices must be exact.
//! `$KILN_REDUCTION_CASES` sets the number of cases of each (default 48).

use kiln_conformance::differential::{self, CheckOptions, Outcome};
use kiln_conformance::random_graph;
use kiln_fuse::PlannerKind;
use kiln_ir::{DType, Data, Graph, Tensor};
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
    agrees(&text, c.threads, &|g| {
        random_graph::inputs(g, c.shape.iter().sum::<usize>() as u64)
    })
}

/// Whether the graph `text` computes on the CPU backend (apollo, `threads`
/// threads) what the interpreter computes, on the inputs `inputs` makes.
fn agrees(
    text: &str,
    threads: usize,
    inputs: &dyn Fn(&Graph) -> Vec<Tensor>,
) -> Result<(), TestCaseError> {
    let g = kiln_ir::text::parse(text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
    let opts = CheckOptions {
        planners: vec![PlannerKind::Apollo],
        threads,
    };
    match differential::check(&g, &inputs(&g), &opts) {
        Outcome::Agree => Ok(()),
        // The interpreter rejects it: not a case for the backend.
        Outcome::Skipped(why) => {
            eprintln!("skip: {why}");
            Err(TestCaseError::reject(why))
        }
        finding => Err(TestCaseError::fail(format!("{finding}\n{text}"))),
    }
}

/// One random ArgMax or ArgMin.
#[derive(Debug, Clone)]
struct ArgCase {
    op: &'static str,
    dtype: &'static str,
    shape: Vec<usize>,
    axis: usize,
    keepdims: bool,
    last: bool,
    /// Float inputs include NaN and infinities.
    specials: bool,
    /// An Abs before the node and a Cast to f32 after it, fused with it.
    fused: bool,
    threads: usize,
    seed: u64,
}

const ARG_TYPES: &[&str] = &["f64", "f32", "f16", "bf16", "i64", "i32", "u8"];

fn arg_case() -> impl Strategy<Value = ArgCase> {
    (
        (any::<bool>(), any::<prop::sample::Index>(), shape()),
        any::<prop::sample::Index>(),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        1usize..5,
        any::<u64>(),
    )
        .prop_map(
            |((max, t, shape), axis, (keepdims, last, specials, fused), threads, seed)| ArgCase {
                op: if max { "ArgMax" } else { "ArgMin" },
                dtype: ARG_TYPES[t.index(ARG_TYPES.len())],
                axis: axis.index(shape.len()),
                shape,
                keepdims,
                last,
                specials,
                fused,
                threads,
                seed,
            },
        )
}

/// The case as graph text (opset 13).
fn arg_graph_text(c: &ArgCase) -> String {
    let out: Vec<usize> = (0..c.shape.len())
        .filter(|&a| c.keepdims || a != c.axis)
        .map(|a| if a == c.axis { 1 } else { c.shape[a] })
        .collect();
    let (x, t) = (dims(&c.shape), c.dtype);
    let attrs = format!(
        "{{axis={}, keepdims={}, select_last_index={}}}",
        c.axis, c.keepdims as i64, c.last as i64
    );
    let body = if c.fused {
        format!(
            "  node \"a\" %a: {t}[{x}] = Abs(%x)\n  node \"r\" %r: i64[{o}] = {op}(%a) {attrs}\n  node \"c\" %y: f32[{o}] = Cast(%r) {{to=1}}\n",
            o = dims(&out),
            op = c.op
        )
    } else {
        format!(
            "  node \"r\" %y: i64[{}] = {}(%x) {attrs}\n",
            dims(&out),
            c.op
        )
    };
    format!("graph \"g\" opsets [\"\"=13] {{\n  input %x: {t}[{x}]\n{body}  output %y\n}}\n")
}

/// The input of `g`: values drawn from a few, so many are equal; for floats
/// with `specials`, NaN and infinities among them.
fn tied_input(g: &Graph, c: &ArgCase) -> Vec<Tensor> {
    const PLAIN: &[f64] = &[-2.0, -1.0, 0.0, 1.0, 3.0];
    const SPECIAL: &[f64] = &[-2.0, 0.0, 1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    let ty = g.ty(g.inputs[0]);
    let dtype: DType = ty.dtype;
    let values = if c.specials && dtype.is_float() {
        SPECIAL
    } else {
        PLAIN
    };
    let n: usize = c.shape.iter().product();
    let mut state = c.seed | 1;
    let v: Vec<f64> = (0..n)
        .map(|_| {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let x = values[(state % values.len() as u64) as usize];
            if dtype == DType::U8 {
                x.abs()
            } else {
                x
            }
        })
        .collect();
    let data = Data::from_f64(dtype, &v).expect("numeric input");
    vec![Tensor::new(c.shape.clone(), data).expect("input of its shape")]
}

fn check_arg(c: &ArgCase) -> Result<(), TestCaseError> {
    agrees(&arg_graph_text(c), c.threads, &|g| tied_input(g, c))
}

fn cases() -> u32 {
    std::env::var("KILN_REDUCTION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

fn run<C: std::fmt::Debug>(
    strategy: impl Strategy<Value = C>,
    check: impl Fn(&C) -> Result<(), TestCaseError>,
) {
    let cases = cases();
    let config = Config {
        cases,
        max_global_rejects: cases * 2,
        // A failure prints its case (graph text and all); nothing to keep on disk.
        failure_persistence: None,
        ..Config::default()
    };
    let result = TestRunner::new(config).run(&strategy, |c| check(&c));
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn random_reductions_agree_with_the_interpreter() {
    run(case(), check);
}

#[test]
fn random_arg_reductions_agree_with_the_interpreter() {
    run(arg_case(), check_arg);
}

//! Reductions to scalars long enough to run on several threads (a
//! parallel loop with a combine: per-thread partials of floats combined in
//! thread order, of integers atomically): equal to the reference
//! interpreter on 1 to 4 threads, and the same bits on every run with a
//! given thread count. Sum, max and min of f32, a sum and a max of i32
//! (exact) and the max of a row holding a NaN.

mod common;

use common::{assert_close, inputs, load};
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_ir::{DType, Data, Result, Tensor};

const GRAPH: &str = r#"graph "g" opsets [""=18] {
  input %x: f32[300007]
  input %k: i32[300007]
  node "sum" %s: f32[] = ReduceSum(%x) {keepdims=0}
  node "max" %m: f32[] = ReduceMax(%x) {keepdims=0}
  node "min" %n: f32[] = ReduceMin(%x) {keepdims=0}
  node "isum" %t: i32[] = ReduceSum(%k) {keepdims=0}
  node "imax" %u: i32[] = ReduceMax(%k) {keepdims=0}
  output %s, %m, %n, %t, %u
}"#;

fn run(g: &kiln_ir::Graph, ins: &[Tensor], threads: usize) -> Result<Vec<Tensor>> {
    let opts = CpuOptions {
        threads,
        ..Default::default()
    };
    let model = CompiledModel::compile(g, &opts)?;
    assert!(
        model.report.interpreted.is_empty(),
        "{:?}",
        model.report.interpreted
    );
    let first = model.run(ins)?;
    for _ in 0..3 {
        assert_eq!(
            bits(&model.run(ins)?)?,
            bits(&first)?,
            "results changed between runs on {threads} threads"
        );
    }
    Ok(first)
}

/// Every output element's bits (NaN equal to itself).
fn bits(ts: &[Tensor]) -> Result<Vec<Vec<u64>>> {
    ts.iter()
        .map(|t| Ok(t.data.to_f64_vec()?.iter().map(|v| v.to_bits()).collect()))
        .collect()
}

#[test]
fn long_scalar_reductions_match_the_interpreter_on_any_thread_count() -> Result<()> {
    let g = load(GRAPH)?;
    let ins = inputs(&g)?;
    let want = kiln_interp::run(&g, &ins)?;
    for threads in 1..=4 {
        let got = run(&g, &ins, threads)?;
        assert_close(&got, &want, &format!("{threads} threads"))?;
        assert_eq!(got[3], want[3], "the integer sum is exact");
        assert_eq!(got[4], want[4], "the integer max is exact");
    }
    Ok(())
}

#[test]
fn a_nan_anywhere_reaches_the_parallel_max() -> Result<()> {
    let g = load(GRAPH)?;
    let mut ins = inputs(&g)?;
    let mut x = ins[0].data.to_f64_vec()?;
    x[123_456] = f64::NAN;
    ins[0] = Tensor::new(vec![300007], Data::from_f64(DType::F32, &x)?)?;
    let got = run(&g, &ins, 2)?;
    let max = got[1].data.get_f64(0);
    assert!(max.is_nan(), "max {max}");
    Ok(())
}

//! Arg-reductions in vector lanes: along the rows of a y-reduce (the
//! reduced axis outside the kept innermost one) across a strip of rows
//! (`kiln_loop` `rows_across`), each row's steps still in index order; along
//! the innermost axis (x-reduce) as the extreme's reduction, then its first
//! (last) index (`kiln_loop` `arg_passes`). On values drawn from a few
//! integers (ties everywhere) with NaNs, ArgMax and ArgMin with the first
//! and the last index of a tie, keepdims or not, equal to the reference
//! interpreter, and the schedules are those forms (a form that fell back to
//! the serial step would still pass).

mod common;

use common::load;
use kiln_cpu::program::Naming;
use kiln_cpu::{CompiledModel, CpuOptions, CpuProgram};
use kiln_ir::{DType, Data, Result, Tensor};

/// ArgMax/ArgMin over axis 1 of f32[6,300,150] (and ArgMin over axis 0 of the same),
/// both tie rules, and over axis 2 (the last), both tie rules.
fn graph() -> &'static str {
    r#"graph "g" opsets [""=18] {
  input %x: f32[6,300,150]
  node "amax" %a: i64[6,1,150] = ArgMax(%x) {axis=1, keepdims=1}
  node "amin_last" %b: i64[6,150] = ArgMin(%x) {axis=1, keepdims=0, select_last_index=1}
  node "amax_last" %c: i64[6,1,150] = ArgMax(%x) {axis=1, keepdims=1, select_last_index=1}
  node "amin0" %d: i64[300,150] = ArgMin(%x) {axis=0, keepdims=0}
  node "amax2" %e: i64[6,300] = ArgMax(%x) {axis=2, keepdims=0}
  node "amin2_last" %f: i64[6,300,1] = ArgMin(%x) {axis=2, keepdims=1, select_last_index=1}
  output %a, %b, %c, %d, %e, %f
}"#
}

#[test]
fn arg_reductions_in_vector_lanes_match_the_interpreter() -> Result<()> {
    let g = load(graph())?;
    let n = 6 * 300 * 150;
    let values: Vec<f64> = (0..n)
        .map(|i| match (i * 7919) % 1013 {
            0 => f64::NAN,
            v => (v % 5) as f64,
        })
        .collect();
    let x = Tensor::new(vec![6, 300, 150], Data::from_f64(DType::F32, &values)?)?;
    let want = kiln_interp::run(&g, std::slice::from_ref(&x))?;
    let opts = CpuOptions {
        threads: 2,
        ..Default::default()
    };
    let naming = Naming {
        prefix: "t".into(),
        threads: 2,
    };
    let program = CpuProgram::build(&g, &opts, &naming)?;
    let schedules: Vec<String> = program
        .kernels
        .iter()
        .flatten()
        .flat_map(|k| k.schedule.0.iter().map(|d| d.to_string()))
        .collect();
    let schedules = schedules.join("\n");
    assert!(
        schedules.matches("rows_across(").count() == 4
            && schedules.matches("arg_two_passes(").count() == 2,
        "every arg-reduction across rows or in two passes:\n{schedules}"
    );
    let got = CompiledModel::compile(&g, &opts)?.run(&[x])?;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.data.to_f64_vec()?, w.data.to_f64_vec()?, "output {i}");
    }
    Ok(())
}

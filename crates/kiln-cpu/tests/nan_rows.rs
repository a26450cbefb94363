//! Vectorized max/min row reductions keep propagating NaN: a Softmax-like
//! row program (max, subtract, exp, sum, divide) and a row minimum, on rows
//! where one element is NaN, against the reference interpreter (which
//! propagates NaN as ONNX asks).

mod common;

use common::{assert_close, load};
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_ir::{Data, Result, Tensor};

const GRAPH: &str = r#"graph "g" opsets [""=17] {
  input %x: f32[4,37]
  init %axis: i64[1] = [1]
  node "max" %m: f32[4,1] = ReduceMax(%x, %axis) {keepdims=1}
  node "sub" %d: f32[4,37] = Sub(%x, %m)
  node "exp" %e: f32[4,37] = Exp(%d)
  node "sum" %s: f32[4,1] = ReduceSum(%e, %axis) {keepdims=1}
  node "div" %y: f32[4,37] = Div(%e, %s)
  node "min" %n: f32[4,1] = ReduceMin(%x, %axis) {keepdims=1}
  node "shift" %z: f32[4,37] = Sub(%x, %n)
  output %y, %z
}"#;

#[test]
fn max_and_min_rows_propagate_nan_like_the_interpreter() -> Result<()> {
    let g = load(GRAPH)?;
    // Rows 1 and 3 hold a NaN (element 5: the vector body; element 35:
    // the remainder).
    let values: Vec<f64> = (0..4 * 37)
        .map(|i| match i {
            42 | 146 => f64::NAN,
            _ => ((i * 7919) % 101) as f64 / 10.0 - 5.0,
        })
        .collect();
    let x = Tensor::new(vec![4, 37], Data::from_f64(kiln_ir::DType::F32, &values)?)?;
    let want = kiln_interp::run(&g, std::slice::from_ref(&x))?;
    let model = CompiledModel::compile(
        &g,
        &CpuOptions {
            threads: 2,
            ..Default::default()
        },
    )?;
    let got = model.run(&[x])?;
    assert_close(&got, &want, "nan rows")?;
    let y = got[0].data.to_f64_vec()?;
    assert!(y[37..74].iter().all(|v| v.is_nan()), "row 1 is NaN");
    assert!(
        y[..37].iter().all(|v| v.is_finite()),
        "row 0 is finite: {:?}",
        &y[..37]
    );
    Ok(())
}

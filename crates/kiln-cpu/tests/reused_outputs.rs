//! Outputs kernels write in place are reused by the next run once the
//! caller drops them, and never while the caller holds them: a kept output
//! keeps its values through later runs, and every run matches the
//! reference interpreter.

mod common;

use common::{assert_close, load};
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_ir::{DType, Data, Result, Tensor};

const GRAPH: &str = r#"graph "g" opsets [""=17] {
  input %x: f32[3,50]
  node "sm" %y: f32[3,50] = Softmax(%x) {axis=1}
  node "neg" %z: f32[3,50] = Neg(%x)
  output %y, %z
}"#;

fn input(seed: usize) -> Result<Tensor> {
    let values: Vec<f64> = (0..150)
        .map(|i| ((i * 7919 + seed * 104729) % 211) as f64 / 20.0 - 5.0)
        .collect();
    Tensor::new(vec![3, 50], Data::from_f64(DType::F32, &values)?)
}

fn address(t: &Tensor) -> *const f32 {
    match &t.data {
        Data::F32(v) => v.as_ptr(),
        _ => std::ptr::null(),
    }
}

#[test]
fn dropped_outputs_are_reused_and_kept_ones_keep_their_values() -> Result<()> {
    let g = load(GRAPH)?;
    let model = CompiledModel::compile(&g, &CpuOptions::default())?;
    let check = |seed: usize| -> Result<Vec<Tensor>> {
        let x = input(seed)?;
        let want = kiln_interp::run(&g, std::slice::from_ref(&x))?;
        let got = model.run(&[x])?;
        assert_close(&got, &want, &format!("run {seed}"))?;
        Ok(got)
    };
    let first = check(1)?;
    let first_values = first[1].data.to_f64_vec()?;
    // Held by the caller: the next run must write elsewhere.
    let second = check(2)?;
    assert_ne!(address(&first[1]), address(&second[1]));
    assert_eq!(
        first[1].data.to_f64_vec()?,
        first_values,
        "a kept output changed"
    );
    // Dropped by the caller: the next run writes into the same storage.
    let reused_at = address(&second[1]);
    drop(second);
    let third = check(3)?;
    assert_eq!(
        address(&third[1]),
        reused_at,
        "a dropped output was not reused"
    );
    Ok(())
}

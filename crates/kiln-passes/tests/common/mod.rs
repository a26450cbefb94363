//! Helpers shared by the pass tests: loading a graph from text, random
//! inputs, and comparing interpreter outputs.
#![allow(dead_code)] // each test crate uses a part

use kiln_ir::{bail, DType, Data, Graph, Result, Tensor};

/// Parses the textual IR, infers types and verifies.
pub fn load(src: &str) -> Result<Graph> {
    let mut g = kiln_ir::text::parse(src)?;
    kiln_ops::infer::infer_graph(&mut g, &|_| None)?;
    kiln_ir::verify::verify(&g)?;
    Ok(g)
}

/// Deterministic pseudo-random inputs for `g`: floats in [-1, 1), integers
/// in {0, 1}, booleans.
pub fn random_inputs(g: &Graph, seed: u64) -> Result<Vec<Tensor>> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as f64 / (1u64 << 31) as f64
    };
    g.inputs
        .iter()
        .map(|&id| {
            let ty = g.ty(id);
            let Some(shape) = ty.shape.clone() else {
                bail!("input '{}' has no static shape", g.name(id))
            };
            let n: usize = shape.iter().product();
            let vals: Vec<f64> = (0..n)
                .map(|_| {
                    let r = next();
                    if ty.dtype.is_float() {
                        2.0 * r - 1.0
                    } else {
                        (r * 2.0).floor()
                    }
                })
                .collect();
            let data = match ty.dtype {
                DType::Str => bail!("string inputs are not generated"),
                d => Data::from_f64(d, &vals)?,
            };
            Tensor::new(shape, data)
        })
        .collect()
}

/// Checks that `got` matches `want` elementwise within a relative
/// tolerance (passes may reassociate floating-point arithmetic).
pub fn assert_close(want: &[Tensor], got: &[Tensor], what: &str) {
    assert_eq!(want.len(), got.len(), "{what}: number of outputs");
    for (k, (w, g)) in want.iter().zip(got).enumerate() {
        assert_eq!(w.shape, g.shape, "{what}: output {k} shape");
        assert_eq!(w.dtype(), g.dtype(), "{what}: output {k} dtype");
        let (wv, gv) = match (w.data.to_f64_vec(), g.data.to_f64_vec()) {
            (Ok(a), Ok(b)) => (a, b),
            _ => {
                assert_eq!(w, g, "{what}: output {k}");
                continue;
            }
        };
        for (i, (a, b)) in wv.iter().zip(&gv).enumerate() {
            let same =
                a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-4 * (1.0 + a.abs());
            assert!(
                same,
                "{what}: output {k} element {i}: {a} before, {b} after"
            );
        }
    }
}

//! Dividing by a row's value as multiplying by its reciprocal: a row
//! program's output loop that divides every element by the same reduced
//! value (Softmax's `exp(x - max) / sum`) computes `1 / sum` once before
//! the loop and multiplies by it: a vector division costs several times a
//! multiplication on x86 and Arm cores (BENCHMARKS.md, session 19, has a
//! Softmax before and after).
//!
//! Needs: a row body as the rows form builds it (`fused/rows.rs`), locals
//! declared by `let` statements at its top level before the loops that
//! read them.
//! Guarantees: in each top-level loop, every float (f32/f64) `Div(X, v)`
//! whose divisor is a local `v` declared before that loop becomes
//! `Mul(X, v_inv)`, with `let v_inv = Reciprocal(v)` (same type) declared
//! right before the first such loop. Each quotient may then differ from
//! the division by one rounding (the reciprocal's): at most 1.5 ulp of the
//! result, within every tolerance the ONNX tests use. Divisions by
//! anything else (constants, values of the loop) are unchanged.

use crate::ir::{Stmt, Val};
use kiln_ir::DType;
use kiln_ops::te::Scalar;
use std::collections::BTreeMap;

/// Rewrites `body` (see the module doc).
pub fn multiply_by_reciprocals(body: &mut Vec<Stmt>) {
    let mut declared: BTreeMap<String, DType> = BTreeMap::new();
    let mut inverted: BTreeMap<String, String> = BTreeMap::new();
    let mut k = 0;
    while k < body.len() {
        match &body[k] {
            Stmt::Let { name, dtype, .. } => {
                declared.insert(name.clone(), *dtype);
            }
            Stmt::Loop(_) => {
                let mut divisors = Vec::new();
                body[k].map_values(&mut |v, _| {
                    float_local_divisors(v, &declared, &mut divisors);
                    v.clone()
                });
                for divisor in divisors {
                    if inverted.contains_key(&divisor) {
                        continue;
                    }
                    let inverse = format!("{divisor}_inv");
                    body.insert(k, reciprocal_of(&divisor, &inverse, declared[&divisor]));
                    inverted.insert(divisor, inverse);
                    k += 1;
                }
                body[k] = body[k].map_values(&mut |v, _| multiplied(v, &inverted));
            }
            _ => {}
        }
        k += 1;
    }
}

/// `let inverse: dtype = Reciprocal(divisor)`.
fn reciprocal_of(divisor: &str, inverse: &str, dtype: DType) -> Stmt {
    Stmt::Let {
        name: inverse.to_string(),
        dtype,
        value: Val::Call(
            Scalar::new("Reciprocal"),
            vec![Val::Local(divisor.to_string())],
        ),
    }
}

/// Appends to `out` the float locals of `declared` that `v` divides by.
fn float_local_divisors(v: &Val, declared: &BTreeMap<String, DType>, out: &mut Vec<String>) {
    let Val::Call(op, args) = v else { return };
    if let (true, [_, Val::Local(name)]) = (op.op == "Div", args.as_slice()) {
        let float = matches!(declared.get(name), Some(DType::F32 | DType::F64));
        if float && !out.contains(name) {
            out.push(name.clone());
        }
    }
    for a in args {
        float_local_divisors(a, declared, out);
    }
}

/// `v` with each `Div(X, d)` whose `d` has an inverse `i` in `inverted`
/// as `Mul(X, i)`.
fn multiplied(v: &Val, inverted: &BTreeMap<String, String>) -> Val {
    let Val::Call(op, args) = v else {
        return v.clone();
    };
    let args: Vec<Val> = args.iter().map(|a| multiplied(a, inverted)).collect();
    if let (true, [x, Val::Local(d)]) = (op.op == "Div", args.as_slice()) {
        if let Some(inverse) = inverted.get(d) {
            return Val::Call(
                Scalar::new("Mul"),
                vec![x.clone(), Val::Local(inverse.clone())],
            );
        }
    }
    Val::Call(op.clone(), args)
}

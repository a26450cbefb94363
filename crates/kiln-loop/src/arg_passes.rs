//! `arg_two_passes(var)`: an arg-reduction along one loop as two reductions
//! that run in vector lanes, where its step runs element by element (its
//! ties go to one index, so the step keeps the loop's order).
//!
//! Needs: loop `var` (constant extent `n`) whose body is one arg-reduction
//! step indexed by `var` itself, its extreme and index locals declared
//! before it (the index from 0, as `lower.rs` `reduce_over` declares it),
//! the extreme of type `dtype` (f32, f64 or an integer type).
//! Guarantees: the same extreme and index. First the extreme: the
//! combiner's reduction of the values (float max/min propagate NaN). Then
//! the index: the smallest (`select_last_index`: the largest) position
//! whose value equals the extreme, or is NaN when the extreme is NaN —
//! exactly where the step's rule would stop (`kiln_ops::te::ArgIndex`: a
//! strictly greater (smaller) value or a first NaN moves the index; with
//! `last`, an equal one or any NaN). That index reduces into a local of its
//! own from `n` (`-1`), a sentinel the extreme always beats, and is then
//! added to the step's index local (still 0).

use crate::ir::{ArgStep, Idx, Loop, Stmt, Val};
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_ops::te::{Combiner, Scalar};

/// Loop `l` as the two passes (see the module doc); `dtype` is the step's extreme's type.
pub(crate) fn arg_two_passes(l: &Loop, dtype: DType) -> Result<Vec<Stmt>> {
    let [Stmt::ArgUpdate(step)] = l.body.as_slice() else {
        bail!(
            "schedule: arg_two_passes({}): the loop's body is not one arg-reduction step",
            l.var
        );
    };
    let n = l.extent.max();
    if step.index != Idx::var(&l.var) || dtype.is_half_float() {
        bail!(
            "schedule: arg_two_passes({}): the step is not indexed by the loop or keeps a half-float extreme",
            l.var
        );
    }
    let value = Val::cast(dtype, step.value.clone());
    let extreme = Stmt::Update {
        name: step.best.clone(),
        combiner: step.combiner,
        value: value.clone(),
    };
    let at = format!("{}_at", step.name);
    let sentinel = if step.last { -1 } else { n };
    let position = Val::Call(
        Scalar::new("Where"),
        vec![
            reaches(step, value, dtype),
            Val::Index(Idx::var(&l.var)),
            index_const(sentinel),
        ],
    );
    let index = Stmt::Update {
        name: at.clone(),
        combiner: if step.last {
            Combiner::Max
        } else {
            Combiner::Min
        },
        value: position,
    };
    let pass = |s: Stmt| {
        Stmt::Loop(Loop {
            body: vec![s],
            ..l.clone()
        })
    };
    Ok(vec![
        Stmt::Let {
            name: at.clone(),
            dtype: DType::I64,
            value: index_const(sentinel),
        },
        pass(extreme),
        pass(index),
        Stmt::Update {
            name: step.name.clone(),
            combiner: Combiner::Sum,
            value: Val::Local(at),
        },
    ])
}

/// Whether `value` is where the step would leave its index once the extreme is known:
/// equal to it, or (floats) NaN when the extreme is NaN.
fn reaches(step: &ArgStep, value: Val, dtype: DType) -> Val {
    let best = Val::Local(step.best.clone());
    let call = |op: &str, args: Vec<Val>| Val::Call(Scalar::new(op), args);
    let equal = call("Equal", vec![value.clone(), best.clone()]);
    if !dtype.is_float() {
        return equal;
    }
    let both_nan = call(
        "And",
        vec![call("IsNaN", vec![value]), call("IsNaN", vec![best])],
    );
    call("Or", vec![equal, both_nan])
}

fn index_const(v: i64) -> Val {
    Val::Const(Tensor::scalar(v))
}

//! Partial sums: a loop's contributions to wider sums accumulated in a
//! narrower local first (the `partial_sums(var, dtype)` directive).
//!
//! Needs: loop `var` whose body updates, by `sum`, locals declared outside
//! it (a reduction loop inside `let acc: f64`).
//! Guarantees: `for var { acc = sum(acc, v) }` becomes
//! `let acc_p: dtype = 0; for var { acc_p = sum(acc_p, v) }; acc = sum(acc, acc_p)`
//! for every such local; other updates are untouched. The values are the
//! same; only the type the loop's own sum is kept in changes. Why: f32
//! values summed into an f64 accumulator convert every element (half-width
//! vectors); summed in f32 over a bounded block (the schedule splits the
//! loop first, so a vector lane adds at most a few dozen values) and then
//! added once to the f64 total, they keep f32's full vector width at an
//! error far below the conformance tolerance.

use crate::ir::{reduced_locals, renamed_updates, Loop, Stmt, Val};
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_ops::te::Combiner;

/// Loop `l` with its sums into outer locals kept in partials of `dtype`
/// (see the module doc).
pub(crate) fn partial_sums(l: &Loop, dtype: DType) -> Result<Vec<Stmt>> {
    let sums: Vec<String> = reduced_locals(&l.body)
        .into_iter()
        .filter(|(_, c)| *c == Combiner::Sum)
        .map(|(n, _)| n)
        .collect();
    if sums.is_empty() {
        bail!("schedule: loop '{}' updates no outer sum", l.var);
    }
    let partial = |n: &str| format!("{n}_p");
    let zero = Tensor::new(vec![], kiln_ir::Data::from_f64(dtype, &[0.0])?)?;
    let mut out: Vec<Stmt> = sums
        .iter()
        .map(|n| Stmt::Let {
            name: partial(n),
            dtype,
            value: Val::Const(zero.clone()),
        })
        .collect();
    let body = l
        .body
        .iter()
        .map(|s| {
            renamed_updates(s, &|n, c| {
                (c == Combiner::Sum && sums.iter().any(|m| m == n)).then(|| partial(n))
            })
        })
        .collect();
    out.push(Stmt::Loop(Loop { body, ..l.clone() }));
    out.extend(sums.iter().map(|n| Stmt::Update {
        name: n.clone(),
        combiner: Combiner::Sum,
        value: Val::Local(partial(n)),
    }));
    Ok(out)
}

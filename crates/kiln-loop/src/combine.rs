//! Parallel reductions with an explicit combine (PANAMERA §4–5: a reduced
//! dimension split across parallel workers, their partial results combined
//! in the same kernel).
//!
//! Needs: a loop the schedule runs in parallel, and the type of every
//! local declared in the kernel.
//! Guarantees: when the loop's body updates locals declared outside it (a
//! reduction split across the loop's iterations), each such local `acc`
//! gets an iteration-private partial: the body starts with `let acc_w = e`
//! (`e` the combiner's identity), its updates of `acc` update `acc_w`, and
//! it ends with `combine MODE acc = comb(acc, acc_w)` ([`Stmt::Combine`]).
//! MODE is `atomic` for integer and bool locals (every order gives the
//! same result) and `ordered` for floats (a fixed order: deterministic for
//! a given number of workers). The loop computes what it computed
//! serially, up to the reassociation of float combiners. A loop that
//! updates no outer local is only marked parallel. Arg-reductions (whose
//! steps must run in index order) are refused.

use crate::ir::{reduced_locals, renamed_updates, Combine, CombineMode, Loop, LoopKind, Stmt, Val};
use crate::lower::identity;
use kiln_ir::{bail, DType, Result};

/// `l` as a parallel loop (see the module doc); `local_type(name)` is the
/// type of a local the kernel declares.
pub fn parallel(l: &Loop, local_type: &dyn Fn(&str) -> Option<DType>) -> Result<Loop> {
    if crate::ir::carries_arg_reduction(&l.body) {
        bail!(
            "schedule: parallel loop '{}' would reorder the steps of an arg-reduction",
            l.var
        );
    }
    let mut body = l.body.clone();
    let mut partials = Vec::new();
    let mut combines = Vec::new();
    for (name, combiner) in reduced_locals(&l.body) {
        let Some(dtype) = local_type(&name) else {
            bail!(
                "schedule: parallel loop '{}' reduces undeclared local '{name}'",
                l.var
            );
        };
        let partial = format!("{name}_w");
        body = body
            .iter()
            .map(|s| renamed_updates(s, &|n, _| (n == name).then(|| partial.clone())))
            .collect();
        partials.push(Stmt::Let {
            name: partial.clone(),
            dtype,
            value: Val::Const(identity(dtype, combiner)?),
        });
        combines.push(Stmt::Combine(Box::new(Combine {
            name,
            combiner,
            value: Val::Local(partial),
            mode: mode_for(dtype),
        })));
    }
    Ok(Loop {
        kind: LoopKind::Parallel,
        body: partials.into_iter().chain(body).chain(combines).collect(),
        ..l.clone()
    })
}

/// Atomic where the order of the combine cannot change the result.
fn mode_for(dtype: DType) -> CombineMode {
    if dtype.is_float() {
        CombineMode::Ordered
    } else {
        CombineMode::Atomic
    }
}

/// The combines at the top level of a parallel loop's body.
pub fn combines(body: &[Stmt]) -> Vec<&Combine> {
    body.iter()
        .filter_map(|s| match s {
            Stmt::Combine(c) => Some(&**c),
            _ => None,
        })
        .collect()
}

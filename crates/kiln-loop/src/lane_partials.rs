//! Lane partials: a vectorized loop's sums kept in several independent
//! vector accumulators (the `lane_partials(var, lanes)` directive).
//!
//! Needs: loop `var` of a constant extent, its body straight-line
//! (`let`, stores, updates: no loops, no arg-reductions), every update a
//! `sum` into a local declared outside the loop, whose type `local_type`
//! knows.
//! Guarantees: `for var in 0..E { …; acc = sum(acc, v) }` becomes
//!
//! ```text
//! alloc acc_l: T[lanes]
//! for varl in 0..lanes { acc_l[varl] = 0 }
//! for varb in 0..E/lanes { for varl in 0..lanes { …; acc_l[varl] = acc_l[varl] + v } }
//! for var in 0..E%lanes { …; acc = sum(acc, v) }        (shifted past the blocks)
//! for varl in 0..lanes { acc = sum(acc, acc_l[varl]) }
//! ```
//!
//! with `varl` and the remainder loop of `var`'s kind, `varb` serial. The
//! values are the same sums in another association (as a vectorized loop's
//! reduction clause already reassociates them). Why: a vectorized sum keeps
//! one vector accumulator, so a loop that only loads and adds waits on the
//! adder's latency at every vector; `lanes` consecutive elements in a local
//! array of constant size give the compiler that many lanes of independent
//! accumulators, which it keeps in registers (BENCHMARKS.md, session 21).

use crate::ir::{reduced_locals, Buffer, Extent, Idx, Loop, LoopKind, Scope, Stmt, Val};
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_ops::te::Combiner;

/// Loop `l` with its sums into outer locals kept in `lanes` partials each (see the module
/// doc); new local buffers are appended to `buffers`.
pub(crate) fn lane_partials(
    l: &Loop,
    lanes: i64,
    buffers: &mut Vec<Buffer>,
    local_type: &dyn Fn(&str) -> Option<DType>,
) -> Result<Vec<Stmt>> {
    let Extent::Const(extent) = l.extent else {
        bail!(
            "schedule: loop '{}' has a tail bound: no lane partials",
            l.var
        );
    };
    if lanes < 1 || extent < lanes {
        bail!(
            "schedule: loop '{}' of {extent} iterations cannot keep {lanes} lane partials",
            l.var
        );
    }
    check_straight_sums(l)?;
    let (block, lane) = (format!("{}b", l.var), format!("{}l", l.var));
    let at = Idx::var(&lane);
    let mut partials = Vec::new();
    for (name, _) in reduced_locals(&l.body) {
        let Some(dtype) = local_type(&name) else {
            bail!(
                "schedule: loop '{}' sums into undeclared local '{name}'",
                l.var
            );
        };
        let buffer = kiln_ir::unique_name(&format!("{name}_l"), &|n| {
            buffers.iter().any(|b| b.name == n)
        });
        partials.push((name, dtype, buffers.len()));
        buffers.push(Buffer {
            name: buffer,
            dtype,
            shape: vec![lanes as usize],
            output: false,
            scope: Scope::Local,
        });
    }
    let lane_loop = |body: Vec<Stmt>| Loop {
        var: lane.clone(),
        extent: Extent::Const(lanes),
        kind: l.kind,
        body,
    };
    let mut out: Vec<Stmt> = partials.iter().map(|&(_, _, b)| Stmt::Alloc(b)).collect();
    let mut zeros = Vec::new();
    for &(_, dtype, buf) in &partials {
        zeros.push(Stmt::store(buf, at.clone(), Val::Const(zero(dtype)?)));
    }
    out.push(Stmt::Loop(lane_loop(zeros)));
    let element = Idx::var(&block).scale(lanes).plus(&at);
    let blocked = l
        .body
        .iter()
        .map(|s| lane_update(&s.substitute(&l.var, &element), &partials, &at))
        .collect();
    out.push(Stmt::Loop(Loop {
        var: block,
        extent: Extent::Const(extent / lanes),
        kind: LoopKind::Serial,
        body: vec![Stmt::Loop(lane_loop(blocked))],
    }));
    let done = extent - extent % lanes;
    if done < extent {
        let shifted = Idx::var(&l.var).plus(&Idx::constant(done));
        out.push(Stmt::Loop(Loop {
            extent: Extent::Const(extent - done),
            body: l
                .body
                .iter()
                .map(|s| s.substitute(&l.var, &shifted))
                .collect(),
            ..l.clone()
        }));
    }
    let folds = partials
        .iter()
        .map(|(name, _, buf)| Stmt::Update {
            name: name.clone(),
            combiner: Combiner::Sum,
            value: load(*buf, &at),
        })
        .collect();
    out.push(Stmt::Loop(lane_loop(folds)));
    Ok(out)
}

/// Fails unless `l`'s body is straight-line sums ([`straight_sums`]).
fn check_straight_sums(l: &Loop) -> Result<()> {
    if !straight_sums(l) {
        bail!(
            "schedule: loop '{}' is not straight-line sums into outer locals: no lane partials",
            l.var
        );
    }
    Ok(())
}

/// Whether `l`'s body is straight-line (`let`, stores, updates) and updates outer locals,
/// only by `sum`: what lane partials need.
pub(crate) fn straight_sums(l: &Loop) -> bool {
    let straight = l.body.iter().all(|s| match s {
        Stmt::Let { .. } | Stmt::Store { .. } => true,
        Stmt::Update { combiner, .. } => *combiner == Combiner::Sum,
        _ => false,
    });
    straight && !reduced_locals(&l.body).is_empty()
}

/// `s` with an update of a local in `partials` turned into a read-modify-write of that
/// local's partial at lane `at` (the value cast to the partial's type, which the local
/// widened implicitly).
fn lane_update(s: &Stmt, partials: &[(String, DType, usize)], at: &Idx) -> Stmt {
    let Stmt::Update { name, value, .. } = s else {
        return s.clone();
    };
    let Some(&(_, dtype, buf)) = partials.iter().find(|(n, _, _)| n == name) else {
        return s.clone();
    };
    let sum = Val::Call(
        Combiner::Sum.scalar(),
        vec![load(buf, at), Val::cast(dtype, value.clone())],
    );
    Stmt::store(buf, at.clone(), sum)
}

fn load(buf: usize, at: &Idx) -> Val {
    Val::Load {
        buf,
        offset: at.clone(),
        guard: Vec::new(),
    }
}

/// A zero of `dtype` as a scalar constant.
fn zero(dtype: DType) -> Result<Tensor> {
    Tensor::new(vec![], kiln_ir::Data::from_f64(dtype, &[0.0])?)
}

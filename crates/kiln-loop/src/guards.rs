//! Dropping bounds checks that the loop ranges prove.
//!
//! Needs: a loop nest whose loops start at 0 (all kiln loops do).
//! Guarantees: every guard `0 <= idx < extent` of a load (and every
//! `inbounds`) whose index range, from the enclosing loops' ranges, lies
//! inside `[0, extent)` is removed, and an `inbounds` with a bound whose
//! range lies wholly outside becomes the constant false, and a `Where`
//! so decided becomes the branch it takes; nothing else changes. Guards are added by lowering wherever an index may leave its
//! buffer somewhere in the iteration space; after a loop is partitioned
//! (`peel`) the interior part no longer needs them, and each part of a
//! concatenation selects one input.

use crate::ir::{Guard, Stmt, Val};
use std::collections::HashMap;

pub fn simplify_guards(body: &[Stmt]) -> Vec<Stmt> {
    body.iter()
        .map(|s| {
            s.map_values(&mut |v, loops| {
                let ranges: HashMap<String, (i64, i64)> = loops
                    .iter()
                    .map(|l| (l.var.clone(), (0, l.extent.max().max(1) - 1)))
                    .collect();
                val(v, &ranges)
            })
        })
        .collect()
}

fn val(v: &Val, ranges: &HashMap<String, (i64, i64)>) -> Val {
    match v {
        Val::Load { buf, offset, guard } => Val::Load {
            buf: *buf,
            offset: offset.clone(),
            guard: needed(guard, ranges),
        },
        Val::InBounds(g) if never(g, ranges) => Val::Const(kiln_ir::Tensor::scalar(false)),
        Val::InBounds(g) => Val::InBounds(needed(g, ranges)),
        Val::Call(s, args) => {
            let args: Vec<Val> = args.iter().map(|a| val(a, ranges)).collect();
            decided_select(s, &args).unwrap_or_else(|| Val::Call(s.clone(), args))
        }
        _ => v.clone(),
    }
}

/// A `Where` whose condition the ranges decided: the branch it takes.
fn decided_select(s: &kiln_ops::te::Scalar, args: &[Val]) -> Option<Val> {
    match (s.op.as_str(), args) {
        ("Where", [Val::InBounds(g), taken, _]) if g.is_empty() => Some(taken.clone()),
        ("Where", [Val::Const(c), _, taken]) if c.data.get_f64(0) == 0.0 => Some(taken.clone()),
        _ => None,
    }
}

/// Whether some bound of `g` fails everywhere in the ranges.
fn never(g: &Guard, ranges: &HashMap<String, (i64, i64)>) -> bool {
    let unknown = (i64::MIN / 4, i64::MAX / 4);
    g.iter().any(|(idx, extent)| {
        let (lo, hi) = idx.range(&|v| ranges.get(v).copied().unwrap_or(unknown));
        hi < 0 || lo >= *extent
    })
}

/// The bounds of `g` that the ranges do not prove.
fn needed(g: &Guard, ranges: &HashMap<String, (i64, i64)>) -> Guard {
    let unknown = (i64::MIN / 4, i64::MAX / 4);
    g.iter()
        .filter(|(idx, extent)| {
            let (lo, hi) = idx.range(&|v| ranges.get(v).copied().unwrap_or(unknown));
            lo < 0 || hi >= *extent
        })
        .cloned()
        .collect()
}

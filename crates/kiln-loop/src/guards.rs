//! Dropping bounds checks that the loop ranges prove.
//!
//! Needs: a loop nest whose loops start at 0 (all kiln loops do).
//! Guarantees: every guard `0 <= idx < extent` of a load (and every
//! `inbounds`) whose index range, from the enclosing loops' ranges, lies
//! inside `[0, extent)` is removed; nothing else changes. Guards are
//! added by lowering wherever an index may leave its buffer somewhere in
//! the iteration space; after a loop is partitioned (`peel`) the interior
//! part no longer needs them.

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
        Val::InBounds(g) => Val::InBounds(needed(g, ranges)),
        Val::Call(s, args) => Val::Call(s.clone(), args.iter().map(|a| val(a, ranges)).collect()),
        _ => v.clone(),
    }
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

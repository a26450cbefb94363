//! Dropping bounds checks that the loop ranges prove.
//!
//! Needs: a loop nest whose loops start at 0 (all kiln loops do).
//! Guarantees: every guard `0 <= idx < extent` of a load (and every
//! `inbounds`) whose index range, from the enclosing loops' ranges, lies
//! inside `[0, extent)` is removed; nothing else changes. Guards are
//! added by lowering wherever an index may leave its buffer somewhere in
//! the iteration space; after a loop is partitioned (`peel`) the interior
//! part no longer needs them.

use crate::ir::{Guard, Loop, Stmt, Val};
use std::collections::HashMap;

pub fn simplify_guards(body: &[Stmt]) -> Vec<Stmt> {
    let mut ranges = HashMap::new();
    body.iter().map(|s| stmt(s, &mut ranges)).collect()
}

fn stmt(s: &Stmt, ranges: &mut HashMap<String, (i64, i64)>) -> Stmt {
    match s {
        Stmt::Loop(l) => {
            let previous = ranges.insert(l.var.clone(), (0, l.extent.max().max(1) - 1));
            let body = l.body.iter().map(|s| stmt(s, ranges)).collect();
            match previous {
                Some(p) => ranges.insert(l.var.clone(), p),
                None => ranges.remove(&l.var),
            };
            Stmt::Loop(Loop { body, ..l.clone() })
        }
        Stmt::Store { buf, offset, value } => Stmt::Store {
            buf: *buf,
            offset: offset.clone(),
            value: val(value, ranges),
        },
        Stmt::Let { name, dtype, value } => Stmt::Let {
            name: name.clone(),
            dtype: *dtype,
            value: val(value, ranges),
        },
        Stmt::Update {
            name,
            combiner,
            value,
        } => Stmt::Update {
            name: name.clone(),
            combiner: *combiner,
            value: val(value, ranges),
        },
        Stmt::Gemm(g) => Stmt::Gemm(g.clone()),
    }
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

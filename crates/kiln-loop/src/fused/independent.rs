//! PANAMERA §5.3 (handling multiple reductions): independent reductions over
//! the same loops computed in one nest, so their common input is read once
//! (Table 2 sub-graph 8: two add-mul-sum branches of one tensor).
//!
//! Needs: the scheduled nests of a group's outputs, in order (`nests` in
//! `fused.rs`), each either a reduction nest — output loops around
//! `let acc; reduction loops; store` — or anything else.
//! Guarantees: two consecutive reduction nests whose loops have the same
//! variables, extents and kinds all the way down, that store different
//! buffers and read nothing the other stores, become one nest: each loop
//! once, both accumulators declared, both updates in the innermost
//! reduction loop, both stores after it. The order of every reduction is
//! unchanged (each accumulator sees its own values in the same order), so
//! results are identical. Anything else is left as it is.

use crate::ir::{for_each_load, Loop, Stmt};

/// `body` with every pair of consecutive independent reduction nests over
/// the same loops merged (see the module doc).
pub(super) fn fuse_independent_reductions(body: Vec<Stmt>) -> Vec<Stmt> {
    let mut out: Vec<Stmt> = Vec::with_capacity(body.len());
    for s in body {
        let merged = match (out.last(), &s) {
            (Some(Stmt::Loop(a)), Stmt::Loop(b)) if independent(a, b) => merge_nests(a, b),
            _ => None,
        };
        match merged {
            Some(m) => {
                out.pop();
                out.push(Stmt::Loop(m));
            }
            None => out.push(s),
        }
    }
    out
}

/// Output loops `a` and `b` merged when both are reduction nests over the
/// same loops (down to the reduction's innermost loop).
fn merge_nests(a: &Loop, b: &Loop) -> Option<Loop> {
    if !same_header(a, b) {
        return None;
    }
    let body = match (a.body.as_slice(), b.body.as_slice()) {
        ([Stmt::Loop(ia)], [Stmt::Loop(ib)]) => vec![Stmt::Loop(merge_nests(ia, ib)?)],
        (
            [let_a @ Stmt::Let { .. }, Stmt::Loop(ra), store_a @ Stmt::Store { .. }],
            [let_b @ Stmt::Let { .. }, Stmt::Loop(rb), store_b @ Stmt::Store { .. }],
        ) => vec![
            let_a.clone(),
            let_b.clone(),
            Stmt::Loop(merge_reductions(ra, rb)?),
            store_a.clone(),
            store_b.clone(),
        ],
        _ => return None,
    };
    Some(Loop { body, ..a.clone() })
}

/// Reduction loops `a` and `b` over the same loops, their innermost bodies
/// (straight-line updates) joined.
fn merge_reductions(a: &Loop, b: &Loop) -> Option<Loop> {
    if !same_header(a, b) {
        return None;
    }
    let body = match (a.body.as_slice(), b.body.as_slice()) {
        ([Stmt::Loop(ia)], [Stmt::Loop(ib)]) => vec![Stmt::Loop(merge_reductions(ia, ib)?)],
        (ba, bb) if straight(ba) && straight(bb) => ba.iter().chain(bb).cloned().collect(),
        _ => return None,
    };
    Some(Loop { body, ..a.clone() })
}

fn same_header(a: &Loop, b: &Loop) -> bool {
    a.var == b.var && a.extent == b.extent && a.kind == b.kind
}

fn straight(body: &[Stmt]) -> bool {
    body.iter()
        .all(|s| matches!(s, Stmt::Update { .. } | Stmt::Let { .. }))
}

/// Whether nests `a` and `b` store different buffers and neither reads what
/// the other stores.
fn independent(a: &Loop, b: &Loop) -> bool {
    let (stores_a, stores_b) = (stored(a), stored(b));
    let reads = |l: &Loop, written: &[usize]| {
        let mut hit = false;
        for_each_load(&l.body, &mut |buf, _, _| hit |= written.contains(&buf));
        hit
    };
    !stores_a.iter().any(|s| stores_b.contains(s)) && !reads(a, &stores_b) && !reads(b, &stores_a)
}

/// The buffers the nest `l` stores.
fn stored(l: &Loop) -> Vec<usize> {
    let mut out = Vec::new();
    for s in &l.body {
        match s {
            Stmt::Store { buf, .. } => out.push(*buf),
            Stmt::Loop(inner) => out.extend(stored(inner)),
            _ => {}
        }
    }
    out
}

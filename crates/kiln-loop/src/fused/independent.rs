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
//! once, both accumulators (and partial sums) declared, both updates in the
//! innermost reduction loop, both combines and stores after it. The order of every reduction is
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
        (ba, bb) => {
            let (lets_a, ra, after_a) = reduction_parts(ba)?;
            let (lets_b, rb, after_b) = reduction_parts(bb)?;
            let mut body: Vec<Stmt> = lets_a.iter().chain(lets_b).cloned().collect();
            body.push(Stmt::Loop(merge_reductions(ra, rb)?));
            body.extend(after_a.iter().chain(after_b).cloned());
            body
        }
    };
    Some(Loop { body, ..a.clone() })
}

/// A reduction's body split around its one reduction loop: the accumulators
/// declared before it, the loop, and the combines and stores after it.
fn reduction_parts(body: &[Stmt]) -> Option<(&[Stmt], &Loop, &[Stmt])> {
    let at = body.iter().position(|s| matches!(s, Stmt::Loop(_)))?;
    let Stmt::Loop(l) = &body[at] else {
        return None;
    };
    let (before, after) = (&body[..at], &body[at + 1..]);
    let lets = before.iter().all(|s| matches!(s, Stmt::Let { .. }));
    let ends = after
        .iter()
        .all(|s| matches!(s, Stmt::Update { .. } | Stmt::Store { .. }));
    (lets && ends && !after.is_empty()).then_some((before, l, after))
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

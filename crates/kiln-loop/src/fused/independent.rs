//! PANAMERA §5.3 (handling multiple reductions): independent reductions over
//! the same loops computed in one nest, so their common input is read once
//! (Table 2 sub-graph 8: two add-mul-sum branches of one tensor).
//!
//! Needs: the scheduled nests of a group's outputs, in order (`nests` in
//! `fused.rs`), each either a reduction nest (one that updates an
//! accumulator somewhere) or anything else.
//! Guarantees: two consecutive reduction nests with the same loop structure
//! — at every level the same loops (variables, extents, kinds) in the same
//! order, whatever straight-line statements sit between them — that store
//! different buffers, declare different locals and read nothing the other
//! stores, become one nest: each loop once, and at every level the first
//! nest's statements before each loop, then the second's, then the merged
//! loop; the first nest's trailing statements, then the second's. So lane
//! partials (an init loop, the blocked loop, the lanes' sum) merge loop by
//! loop. The order of every reduction is unchanged (each accumulator sees
//! its own values in the same order), so results are identical. Anything
//! else (a matmul, a parallel loop's combine) is left as it is.

use crate::ir::{for_each_load, stored_buffers, Loop, Stmt};

/// `body` with every pair of consecutive independent reduction nests over
/// the same loops merged (see the module doc).
pub(super) fn fuse_independent_reductions(body: Vec<Stmt>) -> Vec<Stmt> {
    let mut out: Vec<Stmt> = Vec::with_capacity(body.len());
    for s in body {
        let merged = match (out.last(), &s) {
            (Some(Stmt::Loop(a)), Stmt::Loop(b)) if independent(a, b) => merge_loops(a, b),
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

/// Loops `a` and `b` as one when their headers and the structure of their
/// bodies match.
fn merge_loops(a: &Loop, b: &Loop) -> Option<Loop> {
    if !(a.var == b.var && a.extent == b.extent && a.kind == b.kind) {
        return None;
    }
    let body = merge_bodies(&a.body, &b.body)?;
    Some(Loop { body, ..a.clone() })
}

/// Bodies `a` and `b` interleaved segment by segment: before each of their
/// loops (which must pair up), `a`'s statements then `b`'s, then the loops
/// merged; at the end `a`'s trailing statements then `b`'s.
fn merge_bodies(a: &[Stmt], b: &[Stmt]) -> Option<Vec<Stmt>> {
    let (segs_a, tail_a) = segments(a)?;
    let (segs_b, tail_b) = segments(b)?;
    if segs_a.len() != segs_b.len() {
        return None;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    for ((before_a, la), (before_b, lb)) in segs_a.into_iter().zip(segs_b) {
        out.extend(before_a.iter().chain(before_b).cloned());
        out.push(Stmt::Loop(merge_loops(la, lb)?));
    }
    out.extend(tail_a.iter().chain(tail_b).cloned());
    Some(out)
}

/// A body split at its loops: the straight-line statements before each
/// loop with the loop, and the statements after the last. None when the
/// body holds a statement that must keep its place (a matmul, a parallel
/// loop's combine).
type Segments<'a> = (Vec<(&'a [Stmt], &'a Loop)>, &'a [Stmt]);

fn segments(body: &[Stmt]) -> Option<Segments<'_>> {
    let mut segs = Vec::new();
    let mut start = 0;
    for (i, s) in body.iter().enumerate() {
        match s {
            Stmt::Loop(l) => {
                segs.push((&body[start..i], l));
                start = i + 1;
            }
            Stmt::Gemm(_) | Stmt::Combine(_) => return None,
            _ => {}
        }
    }
    Some((segs, &body[start..]))
}

/// Whether nests `a` and `b` are reductions that store different buffers,
/// name different locals, and neither reads what the other stores.
fn independent(a: &Loop, b: &Loop) -> bool {
    let (stores_a, stores_b) = (stored_buffers(&a.body), stored_buffers(&b.body));
    let reads = |l: &Loop, written: &[usize]| {
        let mut hit = false;
        for_each_load(&l.body, &mut |buf, _, _| hit |= written.contains(&buf));
        hit
    };
    let (locals_a, locals_b) = (locals(&a.body), locals(&b.body));
    reduces(&a.body)
        && reduces(&b.body)
        && !locals_a.iter().any(|n| locals_b.contains(n))
        && !stores_a.iter().any(|s| stores_b.contains(s))
        && !reads(a, &stores_b)
        && !reads(b, &stores_a)
}

/// Whether `body` updates an accumulator somewhere (a reduction nest).
fn reduces(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Update { .. } | Stmt::ArgUpdate(_) => true,
        Stmt::Loop(inner) => reduces(&inner.body),
        _ => false,
    })
}

/// The locals `body` declares or updates.
fn locals(body: &[Stmt]) -> Vec<&str> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Let { name, .. } | Stmt::Update { name, .. } => out.push(name.as_str()),
            Stmt::ArgUpdate(step) => out.extend([step.name.as_str(), step.best.as_str()]),
            Stmt::Loop(inner) => out.extend(locals(&inner.body)),
            _ => {}
        }
    }
    out
}

//! When jamming keeps a loop's reads of what it stores: the two shapes of body
//! whose points cannot see each other's stores in another order.
//!
//! Needs: the loop to be jammed. Guarantees: [`points_disjoint`] and
//! [`accumulates_in_place`] answer true only where every element a point
//! reads after some point stored it is read in the same order jammed as
//! in sequence.

use crate::ir::{for_each_load, for_each_store, loop_ranges, stored_buffers, Idx, Loop, Stmt};
use std::collections::HashMap;

/// Whether the points of `l` touch disjoint elements of every buffer the body stores:
/// each access's index is `c*var + rest` with one nonzero `c` per buffer and every
/// `rest` (over the loops inside `l`) within one run of `|c|` elements (a row program's
/// rows).
pub(super) fn points_disjoint(l: &Loop) -> bool {
    let ranges = loop_ranges(&l.body);
    let range = |v: &str| ranges.get(v).copied();
    let mut spans: HashMap<usize, Option<(i64, i64, i64)>> = HashMap::new();
    let stored = stored_buffers(&l.body);
    let mut visit = |buf: usize, idx: &Idx| {
        if !stored.contains(&buf) {
            return;
        }
        let span = split_at_var(idx, &l.var).and_then(|(c, rest)| {
            let (lo, hi) = bounded_range(&rest, &range)?;
            Some((c, lo, hi))
        });
        let merged = match (spans.get(&buf), span) {
            (None, Some(s)) => Some(s),
            (Some(Some((c0, lo0, hi0))), Some((c, lo, hi))) if *c0 == c => {
                Some((c, lo.min(*lo0), hi.max(*hi0)))
            }
            _ => None,
        };
        spans.insert(buf, merged);
    };
    for_each_store(&l.body, &mut |buf, idx, _| visit(buf, idx));
    for_each_load(&l.body, &mut |buf, idx, _| visit(buf, idx));
    spans
        .values()
        .all(|s| s.is_some_and(|(c, lo, hi)| hi - lo < c.abs()))
}

/// Whether `l`'s body is one loop of straight-line statements that touches every buffer
/// it stores at one index, `c*v + k` of that loop's variable `v` (`k` not reading `l`'s
/// variable): each element
/// then takes one update per point in one iteration of the inner loop, points in order
/// jammed or not (a y-reduce adding the rows its thread streams into the output).
pub(super) fn accumulates_in_place(l: &Loop) -> bool {
    let [Stmt::Loop(inner)] = l.body.as_slice() else {
        return false;
    };
    if inner.body.iter().any(|s| matches!(s, Stmt::Loop(_))) {
        return false;
    }
    let stored = stored_buffers(&inner.body);
    let mut index: HashMap<usize, Idx> = HashMap::new();
    let mut same = true;
    let mut visit = |buf: usize, idx: &Idx| {
        if stored.contains(&buf) {
            same &= index.entry(buf).or_insert_with(|| idx.clone()) == idx;
        }
    };
    for_each_store(&inner.body, &mut |buf, idx, _| visit(buf, idx));
    for_each_load(&inner.body, &mut |buf, idx, _| visit(buf, idx));
    same && index
        .values()
        .all(|idx| walks_one_var(idx, &inner.var, &l.var))
}

/// `idx` as `c*var + rest` with `c != 0` and `rest` not reading `var`.
fn split_at_var(idx: &Idx, var: &str) -> Option<(i64, Idx)> {
    let c = idx.coefficient(var)?;
    let rest = idx.clone().plus(&Idx::var(var).scale(-c));
    (c != 0 && !rest.uses(var)).then_some((c, rest))
}

/// `idx`'s range when each variable it reads has one in `range`.
fn bounded_range(idx: &Idx, range: &dyn Fn(&str) -> Option<(i64, i64)>) -> Option<(i64, i64)> {
    let mut vars = Vec::new();
    idx.vars(&mut vars);
    if vars.iter().any(|v| range(v).is_none()) {
        return None;
    }
    Some(idx.range(&|v| range(v).unwrap_or((0, 0))))
}

/// Whether `idx` is `c*var + rest` with `c != 0` and `rest` reading neither `var` nor
/// `jammed` (only loops around both, fixed while they run).
fn walks_one_var(idx: &Idx, var: &str, jammed: &str) -> bool {
    split_at_var(idx, var).is_some_and(|(_, rest)| !rest.uses(jammed))
}

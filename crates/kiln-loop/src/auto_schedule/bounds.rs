//! Bounds checks seen from the loops: where a padded window's checks all
//! hold (its interior) and where a concatenation's checks change answer.
//!
//! Needs: a loop nest whose guarded reads carry their checks as
//! `0 <= idx < n` (`Val::Load` guards, `Val::InBounds`).
//! Guarantees: the points it returns are inside the loop's range and are
//! where `peel` may cut so each part decides every check on the variable
//! the same way (`guards.rs` then drops them).

use crate::ir::{for_each_value, Atom, Idx, Stmt, Val};

/// The points inside `0..extent` where a bounds check of `var` alone
/// (`0 <= var + c < n`) changes its answer: a concatenation along `var`
/// selects each input on one part between them, and peeled there every
/// part reads one input with no select (`guards.rs`).
pub(super) fn guard_cuts(body: &[Stmt], var: &str, extent: i64) -> Vec<i64> {
    let mut guards = Vec::new();
    guards_in(body, &mut guards);
    let mut cuts: Vec<i64> = guards
        .iter()
        .filter(|(idx, _)| matches!(idx.terms.as_slice(), [(Atom::Var(v), 1)] if v == var))
        .flat_map(|(idx, bound)| [-idx.constant, bound - idx.constant])
        .filter(|&p| 0 < p && p < extent)
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// The part `[lo, hi)` of loop `var` (of `extent` iterations) where every
/// bounds check on `var` in `body` holds whatever the other loops' values:
/// the interior of a padded window, which `peel` separates so it runs
/// without checks. `None` when there is no such check or no interior.
pub(crate) fn interior(body: &[Stmt], var: &str, extent: i64) -> Option<(i64, i64)> {
    let mut ranges = std::collections::HashMap::new();
    loop_ranges(body, &mut ranges);
    let mut guards = Vec::new();
    guards_in(body, &mut guards);
    let (mut lo, mut hi) = (0i64, extent);
    let mut any = false;
    for (idx, bound) in guards.iter().filter(|(i, _)| i.uses(var)) {
        let a = idx
            .terms
            .iter()
            .find(|(t, _)| matches!(t, Atom::Var(x) if x == var))
            .map(|t| t.1)?;
        let mut rest = idx.clone();
        rest.terms
            .retain(|(t, _)| !matches!(t, Atom::Var(x) if x == var));
        if a <= 0 || rest.uses(var) {
            return None;
        }
        let unknown = (i64::MIN / 4, i64::MAX / 4);
        let (rmin, rmax) = rest.range(&|v| ranges.get(v).copied().unwrap_or(unknown));
        lo = lo.max((-rmin + a - 1).div_euclid(a));
        hi = hi.min((bound - 1 - rmax).div_euclid(a) + 1);
        any = true;
    }
    (any && lo < hi && (lo, hi) != (0, extent)).then_some((lo, hi))
}

fn loop_ranges(body: &[Stmt], out: &mut std::collections::HashMap<String, (i64, i64)>) {
    for s in body {
        if let Stmt::Loop(l) = s {
            out.insert(l.var.clone(), (0, l.extent.max().max(1) - 1));
            loop_ranges(&l.body, out);
        }
    }
}

fn guards_in(body: &[Stmt], out: &mut Vec<(Idx, i64)>) {
    fn val(v: &Val, out: &mut Vec<(Idx, i64)>) {
        match v {
            Val::Load { guard, .. } | Val::InBounds(guard) => out.extend(guard.iter().cloned()),
            Val::Call(_, args) => args.iter().for_each(|a| val(a, out)),
            _ => {}
        }
    }
    for_each_value(body, &mut |v| val(v, out));
}

//! Whether the iterations of a loop touch disjoint elements of every
//! output, so threads may run them at the same time.
//!
//! Needs: a loop of a kernel; variables of enclosing loops are fixed (one
//! value per thread or block). Guarantees: `true` only when, for every
//! output buffer, each access in the loop (stores, and loads of outputs)
//! has the offset `c·v + fixed + rest`, with the same stride `c ≥ 1` and
//! the same `fixed` part (terms of enclosing variables only) for all
//! accesses of that buffer, where `rest` (terms of variables inside the
//! loop) spans fewer than `c` elements over all of them: iteration `v`
//! then touches only `[c·v + fixed + lo, c·v + fixed + hi]`, `hi − lo < c`.
//! Updates of a local declared outside the loop (a carried reduction), a
//! gemm, or a data-dependent store offset make it `false`.

use crate::ir::{Atom, Idx, Kernel, Loop, Scope, Stmt, Val};
use std::collections::{HashMap, HashSet};

/// Ranges of the variables of loops inside the analysed loop.
type Ranges = HashMap<String, (i64, i64)>;

/// One access of an output buffer.
struct Access {
    buf: usize,
    offset: Idx,
    ranges: Ranges,
}

/// Whether the iterations of `l` are independent (see the module doc).
pub fn independent(k: &Kernel, l: &Loop) -> bool {
    let mut accesses = Vec::new();
    let mut declared = HashSet::new();
    if !collect(k, &l.body, &mut Ranges::new(), &mut declared, &mut accesses) {
        return false;
    }
    let mut per_buffer: HashMap<usize, (i64, Idx, i64, i64)> = HashMap::new();
    for a in &accesses {
        let Some((c, fixed, lo, hi)) = split(a, &l.var) else {
            return false;
        };
        let e = per_buffer
            .entry(a.buf)
            .or_insert((c, fixed.clone(), lo, hi));
        if e.0 != c || e.1 != fixed {
            return false;
        }
        e.2 = e.2.min(lo);
        e.3 = e.3.max(hi);
    }
    per_buffer.values().all(|(c, _, lo, hi)| hi - lo < *c)
}

/// `a`'s offset as `c·var + fixed + rest`: the stride, the fixed part and
/// the range of `rest`; `None` when it has no such form.
fn split(a: &Access, var: &str) -> Option<(i64, Idx, i64, i64)> {
    let var_atom = Atom::Var(var.to_string());
    let mut c = 0;
    let mut fixed = Idx::constant(0);
    let mut rest = Idx::constant(a.offset.constant);
    for (t, k) in &a.offset.terms {
        let term = Idx {
            terms: vec![(t.clone(), *k)],
            constant: 0,
        };
        if *t == var_atom {
            c = *k;
        } else if term.uses(var) {
            return None;
        } else if inner_only(&term, &a.ranges) {
            rest = rest.plus(&term);
        } else if fixed_only(&term, &a.ranges) {
            fixed = fixed.plus(&term);
        } else {
            return None;
        }
    }
    if c < 1 {
        return None;
    }
    let (lo, hi) = rest.range(&|v| a.ranges.get(v).copied().unwrap_or((0, 0)));
    Some((c, fixed, lo, hi))
}

/// Whether every variable of `i` is one of the inner loops' (and it reads
/// no data).
fn inner_only(i: &Idx, ranges: &Ranges) -> bool {
    let mut vars = Vec::new();
    i.vars(&mut vars);
    !has_data(i) && vars.iter().all(|v| ranges.contains_key(v))
}

/// Whether no variable of `i` is one of the inner loops' (and it reads no
/// data).
fn fixed_only(i: &Idx, ranges: &Ranges) -> bool {
    let mut vars = Vec::new();
    i.vars(&mut vars);
    !has_data(i) && vars.iter().all(|v| !ranges.contains_key(v))
}

fn has_data(i: &Idx) -> bool {
    i.terms.iter().any(|(a, _)| match a {
        Atom::Data { .. } => true,
        Atom::Div(e, _) | Atom::Mod(e, _) => has_data(e),
        Atom::Var(_) => false,
    })
}

/// Records every access of an output buffer in `body`; false when the body
/// holds something iterations cannot run on their own.
fn collect(
    k: &Kernel,
    body: &[Stmt],
    ranges: &mut Ranges,
    declared: &mut HashSet<String>,
    out: &mut Vec<Access>,
) -> bool {
    let is_output = |b: usize| k.buffers[b].output && k.buffers[b].scope == Scope::Param;
    let loads = |v: &Val, ranges: &Ranges, out: &mut Vec<Access>| {
        v.for_each_load(&mut |buf, offset, _| {
            if is_output(buf) {
                out.push(Access {
                    buf,
                    offset: offset.clone(),
                    ranges: ranges.clone(),
                });
            }
        })
    };
    for s in body {
        match s {
            Stmt::Loop(inner) => {
                ranges.insert(inner.var.clone(), (0, inner.extent.max().max(1) - 1));
                let ok = collect(k, &inner.body, ranges, declared, out);
                ranges.remove(&inner.var);
                if !ok {
                    return false;
                }
            }
            Stmt::Store { buf, offset, value } => {
                loads(value, ranges, out);
                if has_data(offset) {
                    return false;
                }
                if is_output(*buf) {
                    out.push(Access {
                        buf: *buf,
                        offset: offset.clone(),
                        ranges: ranges.clone(),
                    });
                }
            }
            Stmt::Let { name, value, .. } => {
                declared.insert(name.clone());
                loads(value, ranges, out);
            }
            Stmt::Update { name, value, .. } => {
                if !declared.contains(name) {
                    return false;
                }
                loads(value, ranges, out);
            }
            Stmt::ArgUpdate(a) => {
                if !declared.contains(&a.name) || !declared.contains(&a.best) {
                    return false;
                }
                loads(&a.value, ranges, out);
            }
            Stmt::Alloc(_) => {}
            Stmt::Gemm(_) | Stmt::Combine(_) => return false,
        }
    }
    true
}

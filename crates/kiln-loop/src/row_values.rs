//! Computing a row's reduced values once: in a stitched row program
//! (APOLLO memory stitching, `fused.rs`'s rows form) an output that reads
//! the value a reduction summed at its own position (Softmax's
//! `exp(x - max)`, read again for `exp(x - max) / sum`) takes it from
//! memory instead of computing it a second time.
//!
//! Needs: a row body as the rows form builds it, before the row loops are
//! wrapped around it: per reduction `let acc; for r in 0..E { acc =
//! comb(acc, X(r)) }; let v = acc`, then per output `for j in 0..E {
//! out[o(j)] = F }` (the type of the reduced values is `v`'s), and each
//! output buffer's element type.
//! Guarantees: where an output loop of the same extent `E` has `X(j)` as a
//! subterm of `F`, `X` computes something (it is not a plain load) and the
//! output's element type is the reduced value's, the reduction loop becomes
//! `let x = X(r); out[o(r)] = x; acc = comb(acc, x)` and `F` reads
//! `out[o(j)]` in place of `X(j)`. The output loop then overwrites every
//! element it was given, so the kernel computes the same values, bit for
//! bit, with `X` evaluated once per element. A later reduction of extent
//! `E` whose value contains `X(r')` reads `out[o(r')]` there too (masked
//! Softmax: the sum's exp reads the masked logits the max loop stored, and
//! then stores the exp for the division). Anything else is unchanged.

use crate::ir::{Extent, Idx, Stmt, Val};
use kiln_ir::DType;

/// Rewrites `body` (see the module doc); `output_type(buf)` is the
/// element type of output buffer `buf`.
pub fn store_reduced_values(body: &mut [Stmt], output_type: &dyn Fn(usize) -> DType) {
    for r in 0..body.len() {
        let Some((var, extent, acc, value)) = reduction_loop(&body[r]) else {
            continue;
        };
        if matches!(value, Val::Load { .. }) {
            continue;
        }
        let Some(dtype) = reduced_type(&body[r + 1..], &acc) else {
            continue;
        };
        for o in r + 1..body.len() {
            let Some((j, buf, offset, f)) = output_loop(&body[o], extent) else {
                continue;
            };
            if output_type(buf) != dtype {
                continue;
            }
            let at_j = value.substitute(&var, &Idx::var(&j));
            let stored = Val::Load {
                buf,
                offset: offset.clone(),
                guard: Vec::new(),
            };
            let Some(rewritten) = replace(&f, &at_j, &stored) else {
                continue;
            };
            if still_read_after(&body[r + 1..], o - r - 1, (&var, &value), (buf, &f, &at_j)) {
                // `buf` holds a value an earlier reduction stored there,
                // which the output or a later reduction still reads:
                // storing this one in its place would clobber it.
                continue;
            }
            set_store_value(&mut body[o], rewritten);
            let local = format!("{acc}_x");
            read_stored_in_later_reductions(
                &mut body[r + 1..],
                (&var, &value),
                extent,
                (buf, &j, &offset),
            );
            set_reduction_body(
                &mut body[r],
                vec![
                    Stmt::Let {
                        name: local.clone(),
                        dtype,
                        value,
                    },
                    Stmt::Store {
                        buf,
                        offset: offset.substitute(&j, &Idx::var(&var)),
                        value: Val::Local(local.clone()),
                    },
                ],
                Val::Local(local),
            );
            break;
        }
    }
}

/// Whether anything after the reduction still reads `buf` other than as
/// the value about to be stored there: the output loop (at `output` in
/// `after`) apart from its `at_j` terms, or a later reduction of the same
/// `(var, value)` family apart from that value's terms.
fn still_read_after(
    after: &[Stmt],
    output: usize,
    (var, value): (&str, &Val),
    (buf, f, at_j): (usize, &Val, &Val),
) -> bool {
    let marker = Val::Local(String::new());
    let rest_of_f = replace(f, at_j, &marker).unwrap_or_else(|| f.clone());
    if rest_of_f.reads(buf) {
        return true;
    }
    after.iter().enumerate().any(|(k, s)| {
        if k == output {
            return false;
        }
        let Some((var_k, _, _, value_k)) = reduction_loop(s) else {
            return false;
        };
        let at_k = value.substitute(var, &Idx::var(&var_k));
        let rest = replace(&value_k, &at_k, &marker).unwrap_or(value_k);
        rest.reads(buf)
    })
}

/// The type of the local the reduction into `acc` is rounded to
/// (`let v: T = acc`, the node's type: that of the values it combines).
fn reduced_type(after: &[Stmt], acc: &str) -> Option<DType> {
    after.iter().find_map(|s| match s {
        Stmt::Let {
            dtype,
            value: Val::Local(name),
            ..
        } if name == acc => Some(*dtype),
        _ => None,
    })
}

/// `for var in 0..E { acc = comb(acc, value) }`: (var, E, acc, value).
fn reduction_loop(s: &Stmt) -> Option<(String, i64, String, Val)> {
    let Stmt::Loop(l) = s else { return None };
    let (Extent::Const(e), [Stmt::Update { name, value, .. }]) = (&l.extent, l.body.as_slice())
    else {
        return None;
    };
    Some((l.var.clone(), *e, name.clone(), value.clone()))
}

/// `for j in 0..extent { out[offset] = f }`: (j, out, offset, f).
fn output_loop(s: &Stmt, extent: i64) -> Option<(String, usize, Idx, Val)> {
    let Stmt::Loop(l) = s else { return None };
    let (Extent::Const(e), [Stmt::Store { buf, offset, value }]) = (&l.extent, l.body.as_slice())
    else {
        return None;
    };
    (*e == extent).then(|| (l.var.clone(), *buf, offset.clone(), value.clone()))
}

/// `v` with every occurrence of `from` among its values replaced by
/// `to`; `None` when `from` does not occur.
fn replace(v: &Val, from: &Val, to: &Val) -> Option<Val> {
    if v == from {
        return Some(to.clone());
    }
    let Val::Call(op, args) = v else { return None };
    let replaced: Vec<Option<Val>> = args.iter().map(|a| replace(a, from, to)).collect();
    if replaced.iter().all(Option::is_none) {
        return None;
    }
    let args = replaced
        .into_iter()
        .zip(args)
        .map(|(r, a)| r.unwrap_or_else(|| a.clone()))
        .collect();
    Some(Val::Call(op.clone(), args))
}

/// A later reduction of the same extent that combines a term containing
/// `value` (the one just stored into `buf` at `offset(j)`, `var` its loop
/// variable) reads it from `buf` instead: the stored row is complete before
/// that loop starts, and its own store (if it gets one) writes each element
/// after reading it. Masked Softmax's `exp(where(m, x * s, -inf) - max)` then
/// reads the masked values the max loop stored, and in turn stores its exp
/// for the output loop.
fn read_stored_in_later_reductions(
    later: &mut [Stmt],
    (var, value): (&str, &Val),
    extent: i64,
    (buf, j, offset): (usize, &str, &Idx),
) {
    for s in later {
        let Some((var_k, extent_k, _, value_k)) = reduction_loop(s) else {
            continue;
        };
        if extent_k != extent {
            continue;
        }
        let stored = Val::Load {
            buf,
            offset: offset.substitute(j, &Idx::var(&var_k)),
            guard: Vec::new(),
        };
        let at_k = value.substitute(var, &Idx::var(&var_k));
        if let Some(rewritten) = replace(&value_k, &at_k, &stored) {
            set_update_value(s, rewritten);
        }
    }
}

/// A reduction loop `for r { acc = comb(acc, v) }` combines `new` instead of `v`.
fn set_update_value(s: &mut Stmt, new: Val) {
    if let Stmt::Loop(l) = s {
        if let [Stmt::Update { value, .. }] = l.body.as_mut_slice() {
            *value = new;
        }
    }
}

fn set_store_value(s: &mut Stmt, new: Val) {
    if let Stmt::Loop(l) = s {
        if let [Stmt::Store { value, .. }] = l.body.as_mut_slice() {
            *value = new;
        }
    }
}

/// The reduction loop's body becomes `before`, then its update combining
/// `new` instead.
fn set_reduction_body(s: &mut Stmt, before: Vec<Stmt>, new: Val) {
    if let Stmt::Loop(l) = s {
        if let [Stmt::Update { name, combiner, .. }] = l.body.as_slice() {
            let update = Stmt::Update {
                name: name.clone(),
                combiner: *combiner,
                value: new,
            };
            l.body = before.into_iter().chain([update]).collect();
        }
    }
}

//! A loop body as a block's cooperative program (PANAMERA §4.2: the
//! parallel dimension bound to blocks, the reduced one to threads).
//!
//! Needs: the body of a loop whose iterations are independent (one block
//! runs one iteration). Guarantees: the body split into [`RowPart`]s that
//! the block's threads can run together — every thread computes each
//! `let` (so each holds the same values); a reduction nest's coalesced
//! iterations are spread over the threads, each updating its own copy of
//! the reduced locals, which the block then combines (every thread gets the
//! result); a loop of independent iterations (outputs) is spread over the
//! threads; a lone store is done once. `None` when a part fits none of
//! these (a local buffer, a reduction nest whose stores could collide).
//! The CPU's schedule uses the same proof to run a reduction to scalars
//! in parallel chunks (`auto_schedule::scalar_reductions`).

use super::independence::independent;
use crate::ir::{carries_arg_reduction, reduced_locals, Extent, Kernel, Loop, Stmt};
use kiln_ops::te::Combiner;
use std::collections::HashSet;

/// One part of a row program.
#[derive(Debug, Clone, PartialEq)]
pub enum RowPart<'a> {
    /// Computed by every thread.
    Local(&'a Stmt),
    /// A reduction: the perfect nest `loops` (outermost first) whose
    /// coalesced iterations the threads share, its innermost body, and the
    /// locals it reduces (declared before it), combined across the block
    /// afterwards.
    Reduce {
        loops: Vec<&'a Loop>,
        body: &'a [Stmt],
        reduced: Vec<(String, Combiner)>,
    },
    /// A loop of independent iterations shared by the threads.
    Spread(&'a Loop),
    /// A statement done by one thread.
    Once(&'a Stmt),
}

/// `body` as row parts (see the module doc), or `None`.
pub fn row_parts<'a>(k: &Kernel, body: &'a [Stmt]) -> Option<Vec<RowPart<'a>>> {
    let mut declared: HashSet<String> = HashSet::new();
    let mut parts = Vec::new();
    for s in body {
        parts.push(match s {
            Stmt::Let { name, .. } => {
                declared.insert(name.clone());
                RowPart::Local(s)
            }
            // An arg-reduction's steps run in order: its threads cannot share it.
            Stmt::Loop(l) if carries_arg_reduction(&l.body) => return None,
            Stmt::Loop(l) => {
                let reduced = reduced_locals(&l.body);
                if !matches!(l.extent, Extent::Const(_)) {
                    return None;
                }
                if reduced.is_empty() {
                    if !independent(k, l) || has_alloc(&l.body) {
                        return None;
                    }
                    RowPart::Spread(l)
                } else {
                    if reduced.iter().any(|(n, _)| !declared.contains(n)) {
                        return None;
                    }
                    reduction(k, l, reduced)?
                }
            }
            Stmt::Store { .. } => RowPart::Once(s),
            Stmt::Update { .. }
            | Stmt::ArgUpdate(_)
            | Stmt::Alloc(_)
            | Stmt::Gemm(_)
            | Stmt::Combine(_) => return None,
        });
    }
    Some(parts)
}

/// Whether any part is a reduction.
pub fn reduces(parts: &[RowPart]) -> bool {
    parts.iter().any(|p| matches!(p, RowPart::Reduce { .. }))
}

/// The reduction nest rooted at `l`: its perfect nest of loops, each
/// level's iterations independent apart from the reduced locals (so
/// stores inside never collide once coalesced).
fn reduction<'a>(k: &Kernel, l: &'a Loop, reduced: Vec<(String, Combiner)>) -> Option<RowPart<'a>> {
    let mut loops = vec![l];
    let mut body = l.body.as_slice();
    while let [Stmt::Loop(inner)] = body {
        if !matches!(inner.extent, Extent::Const(_)) {
            break;
        }
        loops.push(inner);
        body = inner.body.as_slice();
    }
    if has_alloc(body) {
        return None;
    }
    let names: HashSet<&str> = reduced.iter().map(|(n, _)| n.as_str()).collect();
    for level in &loops {
        let without = strip_updates(level, &names);
        if !independent(k, &without) {
            return None;
        }
    }
    Some(RowPart::Reduce {
        loops,
        body,
        reduced,
    })
}

/// `l` without the updates of `names` (for the independence check: those
/// are combined across threads, not stored).
fn strip_updates(l: &Loop, names: &HashSet<&str>) -> Loop {
    fn strip(body: &[Stmt], names: &HashSet<&str>) -> Vec<Stmt> {
        body.iter()
            .filter(|s| !matches!(s, Stmt::Update { name, .. } if names.contains(name.as_str())))
            .map(|s| match s {
                Stmt::Loop(l) => Stmt::Loop(Loop {
                    body: strip(&l.body, names),
                    ..l.clone()
                }),
                other => other.clone(),
            })
            .collect()
    }
    Loop {
        body: strip(&l.body, names),
        ..l.clone()
    }
}

fn has_alloc(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Alloc(_) => true,
        Stmt::Loop(l) => has_alloc(&l.body),
        _ => false,
    })
}

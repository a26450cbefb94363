//! Schedules as data, and the one applier that carries them out.
//!
//! Needs: a kernel from [`crate::lower`] (or an earlier schedule) and a list
//! of [`Directive`]s naming its loops by variable.
//! Guarantees: the rewritten kernel computes the same values: `split`
//! replaces `v` by `v_o·f + v_i` with a tail loop bound (`min(f, E − f·v_o)`)
//! so any extent splits by any factor; `fuse` coalesces two perfectly
//! nested loops into one of the product extent, replacing them by
//! `v floordiv E_inner` and `v mod E_inner` (and folding the pair back to
//! `v` where offsets allow, which is what makes coalesced contiguous loops
//! read plain `buf[v]`); `reorder` interchanges two perfectly nested loops
//! (legal: loops of an expression's index space are independent, and a
//! reduction's loops only reorder among themselves; a split's inner loop
//! stays inside its outer loop, whose variable its tail bound reads); `parallel`,
//! `vectorize` and `unroll` mark how a loop runs; `distribute` splits a
//! loop over its statements (`distribute.rs`); `cache_read` copies what
//! a loop reads of a buffer into local buffers (`cache.rs`). A directive naming a
//! loop that is not there, or an illegal rewrite, is an error.

use crate::ir::{Atom, Buffer, Extent, Idx, Kernel, Loop, LoopKind, Scope, Stmt, Val};
use crate::lane_partials::partial_type;
use kiln_ir::{bail, DType, Result};
use kiln_ops::te::Combiner;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Directive {
    Split {
        var: String,
        factor: i64,
    },
    Fuse {
        outer: String,
        inner: String,
    },
    Reorder {
        outer: String,
        inner: String,
    },
    Parallel(String),
    Vectorize(String),
    Unroll(String),
    /// Moves the reduction loops inside loop `var` outside it, so `var`
    /// becomes the innermost loop and the partial results accumulate in
    /// the output buffer (initialised first): the "y-reduce" form that
    /// vectorizes window reductions along the output row.
    AccumulateOutward(String),
    /// Partitions loop `var` at the increasing points `at`: `[0, at[0])`,
    /// `[at[0], at[1])`, …, `[at[last], extent)` (each a loop from 0 with
    /// `var` shifted; empty parts dropped), so bounds checks that decide
    /// the same on a whole part can go (see `guards.rs`): an interior
    /// without the padding's checks, or each input's range of a
    /// concatenation.
    Peel {
        var: String,
        at: Vec<i64>,
    },
    /// At the start of loop `at`'s body, copies what it reads of parameter
    /// `buf` into local buffers and reads those instead (`cache.rs`).
    CacheRead {
        buf: String,
        at: String,
    },
    /// Unroll-and-jam: loop `var` advances `factor` points at a time and
    /// the loop directly inside it computes them in one body (`jam.rs`).
    Jam {
        var: String,
        factor: i64,
    },
    /// One copy of loop `var` per statement of its body (`distribute.rs`).
    Distribute(String),
    /// Loop `var`'s sums into outer locals kept in partials of `dtype`,
    /// added to them after the loop (`partial_sums.rs`).
    PartialSums {
        var: String,
        dtype: kiln_ir::DType,
    },
    /// Vectorized loop `var`'s sums into outer locals kept in `lanes`
    /// independent partials each, folded into them after the loop
    /// (`lane_partials.rs`).
    LanePartials {
        var: String,
        lanes: i64,
    },
    /// Row loop `var`'s body (a row program) runs each statement across
    /// the loop's rows, innermost (`rows_across.rs`).
    RowsAcross(String),
    /// Loop `var`'s arg-reduction step as the extreme's reduction, then the
    /// first (last) index where it occurs (`arg_passes.rs`).
    ArgTwoPasses(String),
}

/// A schedule: directives applied in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule(pub Vec<Directive>);

impl std::fmt::Display for Directive {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Directive::Split { var, factor } => write!(f, "split({var}, {factor})"),
            Directive::Fuse { outer, inner } => write!(f, "fuse({outer}, {inner})"),
            Directive::Reorder { outer, inner } => write!(f, "reorder({outer}, {inner})"),
            Directive::Parallel(v) => write!(f, "parallel({v})"),
            Directive::Vectorize(v) => write!(f, "vectorize({v})"),
            Directive::Unroll(v) => write!(f, "unroll({v})"),
            Directive::AccumulateOutward(v) => write!(f, "accumulate_outward({v})"),
            Directive::Peel { var, at } => {
                let at: Vec<String> = at.iter().map(i64::to_string).collect();
                write!(f, "peel({var}, {})", at.join(", "))
            }
            Directive::CacheRead { buf, at } => write!(f, "cache_read({buf}, {at})"),
            Directive::Jam { var, factor } => write!(f, "jam({var}, {factor})"),
            Directive::PartialSums { var, dtype } => write!(f, "partial_sums({var}, {dtype})"),
            Directive::LanePartials { var, lanes } => write!(f, "lane_partials({var}, {lanes})"),
            Directive::Distribute(v) => write!(f, "distribute({v})"),
            Directive::RowsAcross(v) => write!(f, "rows_across({v})"),
            Directive::ArgTwoPasses(v) => write!(f, "arg_two_passes({v})"),
        }
    }
}

/// Names of the loops `split` and `fuse` create.
pub fn split_names(var: &str) -> (String, String) {
    (format!("{var}o"), format!("{var}i"))
}

pub fn fused_name(outer: &str, inner: &str) -> String {
    format!("{outer}{inner}")
}

/// Applies `schedule` to `k`.
pub fn apply(k: &Kernel, schedule: &Schedule) -> Result<Kernel> {
    let mut k = k.clone();
    for d in &schedule.0 {
        match d {
            Directive::CacheRead { buf, at } => k = crate::cache::cache_read(&k, buf, at)?,
            _ => k.body = apply_one(&k.body, &mut k.buffers, d)?,
        }
    }
    if schedule
        .0
        .iter()
        .any(|d| matches!(d, Directive::Peel { .. }))
    {
        k.body = crate::guards::simplify_guards(&k.body);
    }
    Ok(k)
}

fn apply_one(body: &[Stmt], buffers: &mut Vec<Buffer>, d: &Directive) -> Result<Vec<Stmt>> {
    let target = match d {
        Directive::Split { var, .. }
        | Directive::Parallel(var)
        | Directive::Vectorize(var)
        | Directive::Unroll(var)
        | Directive::AccumulateOutward(var)
        | Directive::Distribute(var)
        | Directive::RowsAcross(var)
        | Directive::ArgTwoPasses(var)
        | Directive::Peel { var, .. }
        | Directive::Jam { var, .. }
        | Directive::PartialSums { var, .. }
        | Directive::LanePartials { var, .. }
        | Directive::CacheRead { at: var, .. }
        | Directive::Fuse { outer: var, .. }
        | Directive::Reorder { outer: var, .. } => var,
    };
    // The types of the kernel's locals, which a parallel loop's partials
    // take (`combine.rs`).
    let locals = crate::ir::declared_locals(body);
    let local_type = |name: &str| locals.iter().find(|(n, _)| *n == name).map(|&(_, t)| t);
    let mut found = false;
    let out = rewrite(body, target, &mut |l| {
        found = true;
        rewrite_loop(l, buffers, d, &local_type)
    })?;
    if !found {
        bail!("schedule: no loop '{target}' for {d}");
    }
    Ok(out)
}

/// Rebuilds `body`, replacing the loop over `var` by what `f` makes of it.
pub(crate) fn rewrite(
    body: &[Stmt],
    var: &str,
    f: &mut dyn FnMut(&Loop) -> Result<Vec<Stmt>>,
) -> Result<Vec<Stmt>> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Loop(l) if l.var == var => out.extend(f(l)?),
            Stmt::Loop(l) => out.push(Stmt::Loop(Loop {
                body: rewrite(&l.body, var, f)?,
                ..l.clone()
            })),
            other => out.push(other.clone()),
        }
    }
    Ok(out)
}

/// `arg_passes.rs` on loop `l`, its step's extreme's type from `local_type`.
fn arg_two_passes(l: &Loop, local_type: &dyn Fn(&str) -> Option<DType>) -> Result<Vec<Stmt>> {
    let best = match l.body.as_slice() {
        [Stmt::ArgUpdate(step)] => local_type(&step.best),
        _ => None,
    };
    let Some(dtype) = best else {
        bail!(
            "schedule: arg_two_passes({}): no arg-reduction step on a declared extreme",
            l.var
        );
    };
    crate::arg_passes::arg_two_passes(l, dtype)
}

/// The only statement of `l`'s body when it is a loop over `inner`.
fn perfectly_nested<'a>(l: &'a Loop, inner: &str) -> Result<&'a Loop> {
    match l.body.as_slice() {
        [Stmt::Loop(i)] if i.var == inner => Ok(i),
        _ => bail!(
            "schedule: loop '{inner}' is not the only statement of loop '{}'",
            l.var
        ),
    }
}

fn rewrite_loop(
    l: &Loop,
    buffers: &mut Vec<Buffer>,
    d: &Directive,
    local_type: &dyn Fn(&str) -> Option<DType>,
) -> Result<Vec<Stmt>> {
    match d {
        Directive::AccumulateOutward(_) => return accumulate_outward(l, buffers),
        Directive::Peel { at, .. } => return peel(l, at),
        Directive::Distribute(_) => return crate::distribute::distribute(l),
        Directive::RowsAcross(_) => return crate::rows_across::rows_across(l, buffers),
        Directive::ArgTwoPasses(_) => return arg_two_passes(l, local_type),
        Directive::Jam { factor, .. } => return crate::jam::jam(l, *factor),
        Directive::PartialSums { dtype, .. } => {
            return crate::partial_sums::partial_sums(l, *dtype)
        }
        Directive::LanePartials { lanes, .. } => {
            return crate::lane_partials::lane_partials(l, *lanes, buffers, local_type)
        }
        _ => {}
    }
    rewrite_one(l, d, local_type).map(|s| vec![s])
}

fn rewrite_one(
    l: &Loop,
    d: &Directive,
    local_type: &dyn Fn(&str) -> Option<DType>,
) -> Result<Stmt> {
    let mark = |kind| Ok(Stmt::Loop(Loop { kind, ..l.clone() }));
    match d {
        Directive::Parallel(_) => Ok(Stmt::Loop(crate::combine::parallel(l, local_type)?)),
        Directive::Vectorize(_) => mark(LoopKind::Vectorized),
        Directive::Unroll(_) => mark(LoopKind::Unrolled),
        Directive::Split { var, factor } => split(l, var, *factor),
        Directive::Fuse { inner, .. } => fuse(l, perfectly_nested(l, inner)?),
        Directive::AccumulateOutward(_)
        | Directive::RowsAcross(_)
        | Directive::ArgTwoPasses(_)
        | Directive::Peel { .. }
        | Directive::Distribute(_)
        | Directive::Jam { .. }
        | Directive::PartialSums { .. }
        | Directive::LanePartials { .. } => {
            bail!("schedule: {d} rewrites into several statements")
        }
        Directive::CacheRead { .. } => bail!("schedule: {d} rewrites the kernel's buffers"),
        Directive::Reorder { inner, .. } => {
            let i = perfectly_nested(l, inner)?;
            // A tail bound names its split's outer loop, which must stay outside it.
            if matches!(&i.extent, Extent::Tail { outer, .. } if *outer == l.var) {
                bail!("schedule: cannot reorder the loops of a split");
            }
            Ok(Stmt::Loop(Loop {
                body: vec![Stmt::Loop(Loop {
                    body: i.body.clone(),
                    ..l.clone()
                })],
                ..i.clone()
            }))
        }
    }
}

fn split(l: &Loop, var: &str, factor: i64) -> Result<Stmt> {
    let Extent::Const(total) = l.extent else {
        bail!("schedule: loop '{var}' has a tail bound and cannot be split again");
    };
    if factor < 1 {
        bail!("schedule: split factor must be at least 1, got {factor}");
    }
    let (outer, inner) = split_names(var);
    let with = Idx::var(&outer).scale(factor).plus(&Idx::var(&inner));
    let body: Vec<Stmt> = l.body.iter().map(|s| s.substitute(var, &with)).collect();
    let inner_extent = if total % factor == 0 || total < factor {
        // One outer iteration holds the whole loop: its tail bound is `total`.
        Extent::Const(factor.min(total))
    } else {
        Extent::Tail {
            total,
            outer: outer.clone(),
            factor,
        }
    };
    Ok(Stmt::Loop(Loop {
        var: outer,
        extent: Extent::Const((total + factor - 1) / factor),
        kind: l.kind,
        body: vec![Stmt::Loop(Loop {
            var: inner,
            extent: inner_extent,
            kind: LoopKind::Serial,
            body,
        })],
    }))
}

fn fuse(outer: &Loop, inner: &Loop) -> Result<Stmt> {
    let (Extent::Const(eo), Extent::Const(ei)) = (&outer.extent, &inner.extent) else {
        bail!(
            "schedule: cannot fuse '{}' and '{}': a bound is not constant",
            outer.var,
            inner.var
        );
    };
    if let Some(tail) = [outer, inner]
        .iter()
        .find(|l| bounds_tail_of(&inner.body, &l.var))
    {
        bail!(
            "schedule: cannot fuse '{}' and '{}': a loop inside has a tail bound over '{}'",
            outer.var,
            inner.var,
            tail.var
        );
    }
    let name = fused_name(&outer.var, &inner.var);
    let v = Idx::var(&name);
    let body: Vec<Stmt> = inner
        .body
        .iter()
        .map(|s| {
            s.substitute(&outer.var, &v.clone().floordiv(*ei))
                .substitute(&inner.var, &v.clone().modulo(*ei))
        })
        .collect();
    Ok(Stmt::Loop(Loop {
        var: name,
        extent: Extent::Const(eo * ei),
        kind: outer.kind,
        body,
    }))
}

/// Whether a loop in `body` has a tail bound over `var` (a tail names its
/// outer loop, which a fused loop no longer has).
fn bounds_tail_of(body: &[Stmt], var: &str) -> bool {
    body.iter().any(|s| match s {
        Stmt::Loop(l) => {
            matches!(&l.extent, Extent::Tail { outer, .. } if outer == var)
                || bounds_tail_of(&l.body, var)
        }
        _ => false,
    })
}

/// `for v { let acc = init; for r.. { acc = acc ⊕ x }; out[o] = acc }`
/// becomes `for v { out[o] = init }; for r.. { for v { out[o] = out[o] ⊕ x } }`.
/// Legal because each `v` iteration owns its output element and the
/// reduction order per element is unchanged; the accumulation happens in
/// the output's type. An f16 or bf16 output of a wider accumulator would
/// round every step to 16 bits: the rows then accumulate in a local buffer
/// of the accumulator's type, one element per `v` (`acc[v]`), stored to the
/// output after the reduction (`for v { out[o] = acc[v] }`). An f16 or bf16
/// max or min accumulates in an f32 local buffer the same way: exact (the
/// extreme is one of the values), without converting the output's 16-bit
/// elements to float and back at every step. So does an f16 or bf16 sum or
/// product the expression widens to f64: in f32, as an f32 output's sum
/// accumulates in the f32 output itself, 13 bits finer than the f16 result
/// it is rounded to once (f64 elements halve the vectors and add a
/// conversion per step: BENCHMARKS.md, session 20).
fn accumulate_outward(l: &Loop, buffers: &mut Vec<Buffer>) -> Result<Vec<Stmt>> {
    let [Stmt::Let {
        name,
        value: init,
        dtype,
    }, Stmt::Loop(red), Stmt::Store {
        buf,
        offset,
        value: Val::Local(stored),
    }] = l.body.as_slice()
    else {
        bail!(
            "schedule: loop '{}' is not `let; reduction loops; store`",
            l.var
        )
    };
    if stored != name {
        bail!(
            "schedule: loop '{}' stores another value than its reduction",
            l.var
        );
    }
    let out_dtype = buffers[*buf].dtype;
    let partial = update_combiner(red, name).map_or(*dtype, |c| partial_type(*dtype, c));
    let dtype = match partial {
        DType::F64 if out_dtype.is_half_float() => DType::F32,
        d => d,
    };
    if dtype == out_dtype || !out_dtype.is_half_float() {
        return Ok(vec![
            row_loop(l, Stmt::store(*buf, offset.clone(), init.clone())),
            sink(red, name, l, (*buf, offset), None)?,
        ]);
    }
    let acc = buffers.len();
    buffers.push(Buffer {
        name: kiln_ir::unique_name(&format!("{}_acc", l.var), &|n| {
            buffers.iter().any(|b| b.name == n)
        }),
        dtype,
        shape: vec![l.extent.max() as usize],
        output: false,
        scope: Scope::Local,
    });
    let at = Idx::var(&l.var);
    let read_acc = Val::Load {
        buf: acc,
        offset: at.clone(),
        guard: Vec::new(),
    };
    Ok(vec![
        Stmt::Alloc(acc),
        row_loop(l, Stmt::store(acc, at.clone(), init.clone())),
        sink(red, name, l, (acc, &at), Some(dtype))?,
        row_loop(l, Stmt::store(*buf, offset.clone(), read_acc)),
    ])
}

/// The combiner of the updates of local `acc` in reduction nest `red`.
fn update_combiner(red: &Loop, acc: &str) -> Option<Combiner> {
    red.body.iter().find_map(|s| match s {
        Stmt::Loop(r) => update_combiner(r, acc),
        Stmt::Update { name, combiner, .. } if name == acc => Some(*combiner),
        _ => None,
    })
}

/// A copy of loop `l` around the single statement `s`.
fn row_loop(l: &Loop, s: Stmt) -> Stmt {
    Stmt::Loop(Loop {
        body: vec![s],
        ..l.clone()
    })
}

/// Reduction nest `red` with its update of `acc` turned into a read-modify-write of
/// `buf[offset]`, wrapped in a serial copy of loop `l` at the innermost level; the
/// updates cast to `widen` first when it is given (the value may be of a narrower type,
/// which the local `acc` widened implicitly).
fn sink(
    red: &Loop,
    acc: &str,
    l: &Loop,
    (buf, offset): (usize, &Idx),
    widen: Option<kiln_ir::DType>,
) -> Result<Stmt> {
    let body = red
        .body
        .iter()
        .map(|s| match s {
            Stmt::Loop(r) => sink(r, acc, l, (buf, offset), widen),
            Stmt::Update {
                name,
                combiner,
                value,
            } if name == acc => {
                let current = Val::Load {
                    buf,
                    offset: offset.clone(),
                    guard: Vec::new(),
                };
                let value = match widen {
                    Some(d) => Val::cast(d, value.clone()),
                    None => value.clone(),
                };
                let combined = Val::Call(combiner.scalar(), vec![current, value]);
                Ok(Stmt::Loop(Loop {
                    body: vec![Stmt::store(buf, offset.clone(), combined)],
                    kind: LoopKind::Serial,
                    ..l.clone()
                }))
            }
            _ => bail!("schedule: unexpected statement in a reduction nest"),
        })
        .collect::<Result<_>>()?;
    Ok(Stmt::Loop(Loop {
        body,
        ..red.clone()
    }))
}

/// `for v < E { body }` becomes the loops over `[0, lo)`, `[lo, hi)` and
/// `[hi, E)`, each counting from 0 with `v` replaced by `v + start`; empty
/// parts are left out, and a parallel part of one iteration runs serially.
fn peel(l: &Loop, at: &[i64]) -> Result<Vec<Stmt>> {
    let Extent::Const(total) = l.extent else {
        bail!(
            "schedule: loop '{}' has a tail bound and cannot be peeled",
            l.var
        );
    };
    let mut bounds = vec![0];
    bounds.extend_from_slice(at);
    bounds.push(total);
    if bounds.windows(2).any(|w| w[0] > w[1]) {
        bail!(
            "schedule: peel({}, {at:?}) outside 0..{total} or out of order",
            l.var
        );
    }
    Ok(bounds
        .windows(2)
        .map(|w| (w[0], w[1]))
        .filter(|(a, b)| b > a)
        .map(|(a, b)| {
            // One iteration gains nothing from a parallel loop's fork.
            let kind = match (l.kind, b - a) {
                (LoopKind::Parallel, 1) => LoopKind::Serial,
                (kind, _) => kind,
            };
            Stmt::Loop(Loop {
                kind,
                ..l.part(a, b - a)
            })
        })
        .collect())
}

/// True when an index anywhere in `body` divides or takes a remainder of
/// an expression over `var` (what fusing into `var` may leave behind).
pub fn has_div_mod_of(body: &[Stmt], var: &str) -> bool {
    fn idx(i: &Idx, var: &str) -> bool {
        i.terms.iter().any(|(a, _)| match a {
            Atom::Var(_) => false,
            Atom::Div(e, _) | Atom::Mod(e, _) => e.uses(var) || idx(e, var),
            Atom::Data { value, .. } => val(value, var),
        })
    }
    fn val(v: &Val, var: &str) -> bool {
        match v {
            Val::Load { offset, guard, .. } => {
                idx(offset, var) || guard.iter().any(|(g, _)| idx(g, var))
            }
            Val::InBounds(g) => g.iter().any(|(g, _)| idx(g, var)),
            Val::Index(i) => idx(i, var),
            Val::Call(_, args) => args.iter().any(|a| val(a, var)),
            Val::Const(_) | Val::Local(_) => false,
        }
    }
    body.iter().any(|s| match s {
        Stmt::Loop(l) => has_div_mod_of(&l.body, var),
        Stmt::Store { offset, value, .. } => idx(offset, var) || val(value, var),
        Stmt::Let { value, .. } | Stmt::Update { value, .. } => val(value, var),
        Stmt::ArgUpdate(a) => idx(&a.index, var) || val(&a.value, var),
        Stmt::Combine(c) => val(&c.value, var),
        Stmt::Gemm(_) | Stmt::Alloc(_) => false,
    })
}

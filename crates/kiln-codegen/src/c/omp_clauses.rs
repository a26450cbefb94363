//! The OpenMP clauses of a loop: `reduction` for the locals a vectorized
//! loop updates, and array-section reductions for a parallel loop whose
//! stores combine into the same elements.

use crate::scalar_c::half_codec;
use kiln_ir::{bail, DType, Result};
use kiln_loop::{Idx, Kernel, LoopKind, Stmt, Val};
use kiln_ops::te::Combiner;
use std::collections::HashMap;

/// For a vectorized loop that updates locals declared outside it: the
/// OpenMP clause that lets those updates run in lanes (partial results
/// combined at the end), and the float max/min locals among them. Those
/// combine their lanes with OpenMP's own `max`/`min`, which may drop a
/// NaN: each step ORs whether the value it combines is NaN into the
/// local's flag ([`nan_flag`], `reduction(|:…)`, [`flagged_extreme_step`]),
/// and the printer makes the local NaN after the loop when the flag is set. (kiln's NaN-propagating
/// `declare reduction`s combined lanes one call at a time: a quarter of a
/// Softmax over rows of 384, BENCHMARKS.md session 15.) `local_type` gives
/// each local's type; a combiner without a clause is an error rather than
/// a wrong vector loop.
pub(super) fn reduction_clause(
    l: &kiln_loop::Loop,
    local_type: &dyn Fn(&str) -> Option<DType>,
) -> Result<(String, Vec<String>)> {
    let mut clauses = String::new();
    let mut flagged = Vec::new();
    if l.kind != LoopKind::Vectorized {
        return Ok((clauses, flagged));
    }
    for (name, c) in kiln_loop::ir::reduced_locals(&l.body) {
        let dtype = local_type(&name);
        let float_extreme =
            matches!(c, Combiner::Max | Combiner::Min) && dtype.is_some_and(|d| d.is_float());
        let op = match c {
            Combiner::Max if float_extreme => Some("max"),
            Combiner::Min if float_extreme => Some("min"),
            _ => omp_reduction(c, dtype),
        };
        let Some(op) = op else {
            bail!(
                "loop '{}' is vectorized over a {c:?} reduction of '{name}' ({dtype:?}) that has no vector form",
                l.var
            )
        };
        clauses.push_str(&format!(" reduction({op}:{name})"));
        if float_extreme {
            clauses.push_str(&format!(" reduction(|:{})", nan_flag(&name)));
            flagged.push(name);
        }
    }
    Ok((clauses, flagged))
}

/// The flag a vectorized loop sets when float max/min local `name` became NaN.
pub(super) fn nan_flag(name: &str) -> String {
    format!("kiln_nan_{name}")
}

/// The C type of a NaN flag for a local of `dtype`: an integer as wide as the local's C
/// type, so the flag's lanes match the value's and the vector loop needs no packing of
/// compare results into bytes (which cost a Softmax's max loop more than the max itself;
/// issue 20).
pub(super) fn nan_flag_type(dtype: Option<DType>) -> &'static str {
    match dtype {
        Some(DType::F64) => "int64_t",
        _ => "int32_t",
    }
}

/// One step of a float max/min local `name` of C type `ty` by value `v` inside a vectorized
/// loop that tracks its NaN in a flag: a plain compare-and-select (one vector max/min
/// instruction) that keeps the lane's value when `v` is NaN, and the flag set from `v`
/// itself, so the NaN test is off the lane's dependency chain.
pub(super) fn flagged_extreme_step(name: &str, c: Combiner, ty: &str, v: &str) -> String {
    let beats = if c == Combiner::Max { ">" } else { "<" };
    let flag = nan_flag(name);
    format!(
        "{{ {ty} kiln_v = {v}; {name} = kiln_v {beats} {name} ? kiln_v : {name}; {flag} |= kiln_v != kiln_v; }}"
    )
}

/// The OpenMP reduction identifier combining partial results of `dtype` by `c`. Float
/// max/min use kiln's NaN-propagating `declare reduction`s (`kiln_rmaxf`, ...): array
/// sections only, as vector loops combine them with a NaN flag ([`reduction_clause`]).
fn omp_reduction(c: Combiner, dtype: Option<DType>) -> Option<&'static str> {
    Some(match (c, dtype) {
        // A bf16 sum rounds every step in order (as the interpreter sums it), which lanes
        // would reorder.
        (Combiner::Sum | Combiner::Prod, Some(DType::BF16)) => return None,
        (Combiner::Sum, _) => "+",
        (Combiner::Prod, _) => "*",
        (Combiner::And, _) => "&&",
        (Combiner::Or, _) => "||",
        (Combiner::Max, Some(DType::F32)) => "kiln_rmaxf",
        (Combiner::Min, Some(DType::F32)) => "kiln_rminf",
        (Combiner::Max, Some(DType::F64)) => "kiln_rmax",
        (Combiner::Min, Some(DType::F64)) => "kiln_rmin",
        (Combiner::Max, Some(d)) if !d.is_float() => "max",
        (Combiner::Min, Some(d)) if !d.is_float() => "min",
        _ => return None,
    })
}

/// For a parallel loop whose iterations combine into the same elements of a buffer (a
/// reduction split across threads: `buf[off] = combine(buf[off], v)` with `off` independent
/// of the loop): OpenMP array-section reductions, so each thread accumulates into a private
/// copy of the elements it combines into, merged into `buf` at the end. Any other store at an
/// offset independent of the loop would race, and is an error.
pub(super) fn array_reduction_clause(k: &Kernel, l: &kiln_loop::Loop) -> Result<String> {
    if l.kind != LoopKind::Parallel {
        return Ok(String::new());
    }
    let mut inner = HashMap::new();
    let mut stores = Vec::new();
    let mut private = Vec::new();
    collect_stores(&l.body, &mut inner, &mut stores, &mut private);
    // Per buffer: the combiner and the element range combined into.
    let mut sections: Vec<(usize, Combiner, i64, i64)> = Vec::new();
    let shared =
        |(buf, offset, _): &(usize, &Idx, &Val)| !offset.uses(&l.var) && !private.contains(buf);
    for (buf, offset, value) in stores.into_iter().filter(shared) {
        let name = &k.buffers[buf].name;
        let race = || -> Result<String> {
            bail!(
                "parallel loop '{}' stores to {name} at an offset that does not depend on it, and not as a reduction",
                l.var
            )
        };
        let Some(combiner) = combined_into(value, buf, offset) else {
            return race();
        };
        let mut vars = Vec::new();
        offset.vars(&mut vars);
        if vars.iter().any(|v| !inner.contains_key(v)) {
            return race();
        }
        let (lo, hi) = offset.range(&|v| inner[v]);
        match sections.iter_mut().find(|s| s.0 == buf) {
            Some(s) if s.1 == combiner => (s.2, s.3) = (s.2.min(lo), s.3.max(hi)),
            Some(_) => return race(),
            None => sections.push((buf, combiner, lo, hi)),
        }
    }
    let mut clauses = String::new();
    for (buf, combiner, lo, hi) in sections {
        let b = &k.buffers[buf];
        // 16-bit floats are stored as bits, which OpenMP would combine as integers.
        let op = match half_codec(b.dtype) {
            Some(_) => None,
            None => omp_reduction(combiner, Some(b.dtype)),
        };
        let Some(op) = op else {
            bail!(
                "parallel loop '{}' combines into {} by {combiner:?}, which has no OpenMP reduction on {}",
                l.var,
                b.name,
                b.dtype
            );
        };
        clauses.push_str(&format!(
            " reduction({op}:{}[{lo}:{}])",
            b.name,
            hi - lo + 1
        ));
    }
    Ok(clauses)
}

/// The stores in `body`, the value range of each loop around them (inside `body`), and the
/// local buffers `body` declares (each iteration's own).
fn collect_stores<'a>(
    body: &'a [Stmt],
    loops: &mut HashMap<String, (i64, i64)>,
    out: &mut Vec<(usize, &'a Idx, &'a Val)>,
    private: &mut Vec<usize>,
) {
    for s in body {
        match s {
            Stmt::Loop(l) => {
                loops.insert(l.var.clone(), (0, l.extent.max().max(1) - 1));
                collect_stores(&l.body, loops, out, private);
            }
            Stmt::Store { buf, offset, value } => out.push((*buf, offset, value)),
            Stmt::Alloc(buf) => private.push(*buf),
            Stmt::Let { .. }
            | Stmt::Update { .. }
            | Stmt::ArgUpdate(_)
            | Stmt::Gemm(_)
            | Stmt::Combine(_) => {}
        }
    }
}

/// The combiner when `value` is `combine(buf[offset], v)`.
fn combined_into(value: &Val, buf: usize, offset: &Idx) -> Option<Combiner> {
    let Val::Call(scalar, args) = value else {
        return None;
    };
    let [Val::Load {
        buf: read,
        offset: at,
        guard,
    }, _] = args.as_slice()
    else {
        return None;
    };
    if *read != buf || at != offset || !guard.is_empty() {
        return None;
    }
    Combiner::ALL.into_iter().find(|c| c.scalar() == *scalar)
}

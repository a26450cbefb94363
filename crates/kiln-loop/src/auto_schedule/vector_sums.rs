//! Vectorized sums of the default schedule: a sum of f32 values into f64
//! accumulators in blocks summed in f32 lanes first (`partial_sums`), and
//! straight-line float reductions in several vector accumulators
//! (`lane_partials`).
//!
//! Needs: a kernel from [`crate::lower`] (coalesced by the caller) and
//! the target description (its f32 lanes and `sum_accumulators`).
//! Guarantees: directives only (data); the values the kernel computes do
//! not change beyond the reassociation a vectorized reduction already
//! makes, each f32 partial summing at most [`LANE_PARTIAL_TERMS`] values
//! per lane.

use crate::ir::{find_loop, for_each_load, Extent, Kernel, Loop, Stmt};
use crate::lane_partials::straight_reductions;
use crate::schedule::{split_names, Directive};
use kiln_ir::DType;
use kiln_ops::te::Combiner;
use kiln_target::TargetDesc;

/// Values a vector lane adds in f32 before its partial joins an f64 sum
/// ([`vector_sum`]): the error of a 64-term f32 sum stays below 1e-5 relative.
pub const LANE_PARTIAL_TERMS: usize = 64;

/// The directives that vectorize reduction loop `r` of `k`: when it sums
/// f32 values into f64 accumulators (an f32 output's widened sum, PANAMERA's
/// x-reduce), it runs in blocks of [`LANE_PARTIAL_TERMS`] values per lane
/// of the target, each summed in f32 lanes and added to the f64 total once
/// (`partial_sums.rs`), instead of converting every element to f64 (half
/// the vector width).
/// `extent` is `r`'s (`None`: unknown, plain vectorization).
pub(super) fn vector_sum(
    k: &Kernel,
    r: &str,
    extent: Option<i64>,
    target: &TargetDesc,
) -> Vec<Directive> {
    if let Some(extent) = extent.filter(|_| f32_sums(k)) {
        return vector_partial_sums(k, r, extent, target);
    }
    let mut out = vec![Directive::Vectorize(r.to_string())];
    if let (Some(l), Some(extent)) = (find_loop(&k.body, r), extent) {
        out.extend(lane_partials(k, l, r, extent, target));
    }
    out
}

/// The directives that vectorize loop `r` of `k` (of `extent` iterations) summing f32
/// values into f64 locals: each block of at most [`partial_block`] iterations summed in f32
/// lanes, then once into the f64 locals (the loop split first when it is longer than a
/// block, into equal blocks when they divide it). A block of constant length whose body
/// only loads, computes and sums keeps its sums in several vector accumulators
/// (`lane_partials.rs`).
pub(crate) fn vector_partial_sums(
    k: &Kernel,
    r: &str,
    extent: i64,
    target: &TargetDesc,
) -> Vec<Directive> {
    let block = partial_block(target);
    let blocks = ((extent + block - 1) / block).max(1);
    let factor = if extent % blocks == 0 {
        extent / blocks
    } else {
        block
    };
    let mut out = Vec::new();
    let var = if blocks > 1 {
        out.push(Directive::Split {
            var: r.to_string(),
            factor,
        });
        split_names(r).1
    } else {
        r.to_string()
    };
    out.push(Directive::PartialSums {
        var: var.clone(),
        dtype: DType::F32,
    });
    out.push(Directive::Vectorize(var.clone()));
    // Every block as long as the first (an empty loop has none).
    let first = factor.min(extent);
    let constant = first > 0 && extent % first == 0;
    out.extend(
        find_loop(&k.body, r)
            .filter(|_| constant)
            .and_then(|l| lane_partials(k, l, &var, first, target)),
    );
    out
}

/// `lane_partials` for vectorized loop `var`, made from loop `l` of kernel `k` (split or
/// not: the same body) and of `extent` iterations in every instance, when its float
/// reductions are straight-line and it is long enough for the partials to pay (two
/// vectors of [`TargetDesc::sum_accumulators`]).
pub(super) fn lane_partials(
    k: &Kernel,
    l: &Loop,
    var: &str,
    extent: i64,
    target: &TargetDesc,
) -> Option<Directive> {
    let lanes = (target.f32_lanes() * target.sum_accumulators()) as i64;
    let locals = crate::ir::declared_locals(&k.body);
    let local_type = |name: &str| locals.iter().find(|(n, _)| *n == name).map(|&(_, t)| t);
    let constant = matches!(l.extent, Extent::Const(_));
    (constant && extent >= 2 * lanes && straight_reductions(l, &local_type)).then(|| {
        Directive::LanePartials {
            var: var.to_string(),
            lanes,
        }
    })
}

/// Values summed in f32 lanes before joining an f64 sum: [`LANE_PARTIAL_TERMS`]
/// per lane of the target.
pub(crate) fn partial_block(target: &TargetDesc) -> i64 {
    (target.f32_lanes() * LANE_PARTIAL_TERMS) as i64
}

/// Whether `k` sums f32 values into f64 accumulators: it reads and writes only values
/// computed in f32 ([`f32_in_and_out`]), and all its locals are f64 sums.
fn f32_sums(k: &Kernel) -> bool {
    f32_in_and_out(k) && sums_into_f64(&k.body)
}

/// Whether loop `var` of `k` adds to an outer f64 sum values that read no f64 local of `k`
/// (so they are f32 values when `k` reads only f32 buffers).
pub(crate) fn sums_f32_values(k: &Kernel, var: &str) -> bool {
    let Some(l) = find_loop(&k.body, var) else {
        return false;
    };
    let f64_locals: Vec<&str> = crate::ir::declared_locals(&k.body)
        .into_iter()
        .filter(|(_, d)| *d == DType::F64)
        .map(|(n, _)| n)
        .collect();
    let sums = crate::ir::reduced_locals(&l.body)
        .iter()
        .any(|(n, c)| *c == Combiner::Sum && f64_locals.contains(&n.as_str()));
    let mut read = Vec::new();
    crate::gpu_map::locals_read(&l.body, &mut read);
    sums && !read.iter().any(|n| f64_locals.contains(&n.as_str()))
}

/// Whether `k` reads and writes only values computed in f32: f32 buffers, or f16 and bf16
/// ones (computed in float, each value exact in f32).
pub(crate) fn f32_in_and_out(k: &Kernel) -> bool {
    let computed_in_f32 = |d: DType| matches!(d, DType::F32 | DType::F16 | DType::BF16);
    let mut read_types = Vec::new();
    for_each_load(&k.body, &mut |b, _, _| read_types.push(k.buffers[b].dtype));
    read_types.iter().all(|d| computed_in_f32(*d))
        && k.buffers
            .iter()
            .all(|b| !b.output || computed_in_f32(b.dtype))
}

/// Whether every local `body` declares is f64 and some is updated by a sum.
fn sums_into_f64(body: &[Stmt]) -> bool {
    let lets = crate::ir::declared_locals(body);
    let sums = update_combiners(body).iter().any(|c| *c == Combiner::Sum);
    sums && !lets.is_empty() && lets.iter().all(|(_, d)| *d == DType::F64)
}

/// The combiner of every update in `body`, inside loops too.
fn update_combiners(body: &[Stmt]) -> Vec<Combiner> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Update { combiner, .. } => out.push(*combiner),
            Stmt::Loop(l) => out.extend(update_combiners(&l.body)),
            _ => {}
        }
    }
    out
}

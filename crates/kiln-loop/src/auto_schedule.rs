//! The default schedule of a lowered kernel, chosen by rule.
//!
//! Needs: a kernel straight from [`crate::lower`] (output loops `i0, i1, …`
//! perfectly nested, outermost first), and the target description the
//! schedule is for.
//! Guarantees: a [`Schedule`] (data; [`crate::schedule::apply`] carries it
//! out) that
//! 1. coalesces output loops from the innermost outwards while every
//!    offset stays free of `floordiv`/`mod` of the coalesced variable (the
//!    contiguous part of the iteration space becomes one loop);
//! 2. runs a transpose (a load reading consecutively along another output
//!    loop than the one the stores walk) as a cache-blocked copy
//!    (`transpose.rs`, which states what it needs and guarantees); else
//!    splits a single remaining loop longer than [`CHUNK`] into chunks;
//!    a matrix-vector product whose reduction is at least as long as its
//!    output splits the reduction across threads instead (the output
//!    combined from per-thread copies: OpenMP array reductions) when a
//!    copy of the output fits the share of the target's L2 that
//!    [`split_reduction_max_output`] allows;
//! 3. runs the outermost loop in parallel when the kernel does enough
//!    work ([`PARALLEL_MIN_WORK`] element-steps) to pay for waking threads;
//! 4. vectorizes the innermost output loop when its body is plain stores,
//!    or else the innermost loop of an x-reduce (a reduction reading
//!    consecutive elements; a sum of f32 values into f64 accumulators in
//!    blocks summed in f32 lanes first, `vector_sum`);
//!    for a reduction whose loads walk that loop's variable with stride 1
//!    or 2 (windows, small matmuls), first moves the reduction loops
//!    outside it (`accumulate_outward`) so it vectorizes too, and peels
//!    off the padded borders of that loop so its interior runs without
//!    bounds checks.
//!
//! A kernel without output loops (reductions to scalars) instead has each
//! long reduction nest coalesced, its chunks run in parallel and
//! vectorized within a chunk, an f32 sum's chunk summed in f32 lanes first
//! (`scalar_reductions`; the C printer combines the threads' partials in
//! order).
//!
//! Reductions that must run in their order — an f16/bf16 accumulator
//! rounding every step, an arg-reduction (ties go to the first or last
//! index) — keep their loops serial: only output loops run in parallel.
//!
//! On a GPU target only step 1 applies, to every output loop whatever
//! the offsets (one coalesced loop is what blocks and threads divide).
//! On a scratchpad target (DSA) none does: the plain nest is tiled for
//! its local buffers by `kiln_dsa::tiling`.
//!
//! The chunk sizes and the work threshold are constants of the algorithm,
//! the same for every target (see each); what depends on the machine is
//! read from the [`TargetDesc`].

use crate::canonical::{
    coalesce_inward, output_nest, reduced_loops, x_reduced_loops, y_reducible, Coalescing,
};
use crate::gpu_map::rows::RowPart;
use crate::ir::{
    find_loop, for_each_load, has_arg_reduction, Atom, Extent, Kernel, Loop, Stmt, Val,
};
use crate::lane_partials::straight_reductions;
use crate::schedule::{split_names, Directive, Schedule};
use kiln_ir::DType;
use kiln_ops::te::Combiner;
use kiln_target::TargetDesc;

mod transpose;

/// Elements per parallel chunk of a fully coalesced loop. The granularity
/// of the work split, not a cache size (each element streams through once
/// whatever the chunk), and a multiple of every target's f32 lanes, so it
/// stays one constant.
pub const CHUNK: i64 = 4096;

/// Output elements per parallel chunk of a matrix-vector product: like
/// [`CHUNK`], a work-split granularity (the chunk's outputs, 256 bytes,
/// stay cached on any target) and a multiple of every target's lanes.
pub const ROW_CHUNK: i64 = 64;

/// Output elements per parallel chunk of a y-reduce with one output loop: the column strip
/// one thread accumulates over every row. Its accumulators fill half the target's vector
/// registers, so each row step reads that many consecutive vectors (a strip of a few cache
/// lines a row apart streams slower, BENCHMARKS.md issue 20); at least [`ROW_CHUNK`], and
/// no wider than leaves every core a strip.
pub(crate) fn column_strip(extent: i64, target: &TargetDesc) -> i64 {
    let lanes = target.f32_lanes() as i64;
    let in_registers = lanes * target.vector_registers() as i64 / 2;
    let per_core = extent / target.cores.max(1) as i64 / lanes * lanes;
    in_registers.min(per_core).max(ROW_CHUNK)
}

/// Work (loop iterations, reductions included) below which a kernel runs on
/// one thread. It weighs the OpenMP runtime's cost of waking threads, which
/// the target description does not carry, so it stays one constant.
pub const PARALLEL_MIN_WORK: i64 = 1 << 15;

/// Largest output of a matrix-vector product whose reduction is split
/// across threads: each thread keeps a private f32 copy of the output,
/// updated for every row of the matrix it streams, sized to a sixteenth of
/// one core's L2 (64 KiB, 16384 elements, on the 1 MiB of the reference
/// machine and the CPU presets, where it was chosen).
pub fn split_reduction_max_output(target: &TargetDesc) -> i64 {
    (target.l2_per_core() / 16 / std::mem::size_of::<f32>()) as i64
}

/// Iterations of every loop in `body`, counting nested loops fully.
pub(crate) fn work(body: &[Stmt]) -> i64 {
    body.iter()
        .map(|s| match s {
            Stmt::Loop(l) => l.extent.max() * work(&l.body).max(1),
            _ => 1,
        })
        .sum()
}

/// The default schedule of `k` for `target` (see the module doc).
pub fn default_schedule(k: &Kernel, target: &TargetDesc) -> Schedule {
    let mut schedule = Schedule::default();
    if target.is_scratchpad() {
        // A scratchpad target tiles the plain nest for its local buffers
        // itself (`kiln_dsa::tiling`).
        return schedule;
    }
    let mut current = k.clone();
    let vars: Vec<String> = output_nest(&k.body).iter().map(|l| l.var.clone()).collect();
    // In-order half-float sums round every step; an arg-reduction's ties go to the
    // first or last index: neither runs in vector lanes or thread chunks.
    let in_order = accumulates_in_half_float(&k.body) || has_arg_reduction(&k.body);
    if vars.is_empty() {
        return if target.is_gpu() || in_order {
            schedule
        } else {
            scalar_reductions(k, target)
        };
    }
    // A GPU coalesces every output loop whatever the offsets (threads take
    // the one loop); a CPU only while the elements stay consecutive.
    coalesce_inward(&mut current, &mut schedule, &vars, Coalescing::of(target));
    if target.is_gpu() {
        // Blocks and threads are assigned later (`gpu_map.rs`) over the
        // one coalesced loop; chunks and vector lanes are CPU notions.
        return schedule;
    }
    let nest: Vec<(String, i64, bool)> = output_nest(&current.body)
        .iter()
        .map(|l| {
            let plain = l.body.iter().all(|s| matches!(s, Stmt::Store { .. }));
            (l.var.clone(), l.extent.max(), plain)
        })
        .collect();
    let total = work(&current.body);
    let Some((innermost, extent, plain)) = nest.last().cloned() else {
        return schedule;
    };
    if let Some(blocked) = transpose::blocked_transpose(&current, target) {
        schedule.0.extend(blocked.0);
        return schedule;
    }
    let parallel = total >= PARALLEL_MIN_WORK;
    // An f16/bf16 output accumulates outward in a local row of its accumulator's type
    // (`schedule.rs`), which threads cannot share as they share the output's copies.
    let half_output = k
        .buffers
        .iter()
        .any(|b| b.output && b.dtype.is_half_float());
    let outward = !in_order;
    if nest.len() == 1 && extent > CHUNK && plain {
        let (o, i) = split_names(&innermost);
        schedule.0.push(Directive::Split {
            var: innermost,
            factor: CHUNK,
        });
        if parallel {
            schedule.0.push(Directive::Parallel(o));
        }
        schedule.0.push(Directive::Vectorize(i));
        return schedule;
    }
    if outward && nest.len() == 1 {
        coalesce_reductions(&mut current, &mut schedule);
    }
    let last_loop = output_nest(&current.body).last().map(|l| (*l).clone());
    let along = outward && last_loop.as_ref().is_some_and(y_reducible);
    let split_reduction = last_loop
        .as_ref()
        .filter(|_| !half_output)
        .and_then(|l| reduction_to_split(l, extent, target));
    if let (1, true, true, Some(reduction)) = (nest.len(), parallel, along, split_reduction) {
        // A matrix-vector product reading a matrix wider than its output: the reduction is
        // split across threads, each accumulating the whole output row in a private copy
        // (combined at the end), so each thread streams a contiguous block of the matrix
        // instead of narrow column strips a row apart.
        schedule
            .0
            .push(Directive::AccumulateOutward(innermost.clone()));
        schedule.0.push(Directive::Parallel(reduction));
        schedule.0.push(Directive::Vectorize(innermost));
        return schedule;
    }
    if nest.len() == 1 && parallel && along && extent >= 2 * ROW_CHUNK {
        // A reduction with one output loop (matrix-vector product): chunks
        // of the row in parallel, each accumulated in the y-reduce form.
        let (o, i) = split_names(&innermost);
        schedule.0.push(Directive::Split {
            var: innermost,
            factor: column_strip(extent, target),
        });
        schedule.0.push(Directive::Parallel(o));
        schedule.0.push(Directive::AccumulateOutward(i.clone()));
        schedule.0.push(Directive::Vectorize(i));
        return schedule;
    }
    if parallel && nest[0].1 > 1 {
        schedule.0.push(Directive::Parallel(nest[0].0.clone()));
    }
    let last = output_nest(&current.body).last().map(|l| (*l).clone());
    let y_reduce = along && (nest.len() > 1 || !parallel) && extent >= 8;
    if y_reduce {
        schedule
            .0
            .push(Directive::AccumulateOutward(innermost.clone()));
        schedule.0.push(Directive::Vectorize(innermost.clone()));
        if let Some((lo, hi)) = interior(&current.body, &innermost, extent) {
            schedule.0.push(Directive::Peel {
                var: innermost,
                at: vec![lo, hi],
            });
        }
    } else if plain && (nest.len() > 1 || !parallel) {
        let at = guard_cuts(&current.body, &innermost, extent);
        if !at.is_empty() {
            schedule.0.push(Directive::Peel {
                var: innermost.clone(),
                at,
            });
        }
        schedule.0.push(Directive::Vectorize(innermost));
    } else if let Some(nest) = last
        .as_ref()
        .filter(|_| !in_order)
        .and_then(x_reduced_loops)
    {
        // An x-reduce: each output's reduction reads consecutive elements,
        // so its innermost loop — coalesced with the loops around it while
        // the elements stay consecutive (PANAMERA §3.1's coalescing) — runs
        // in vector lanes (partials combined by the loop's reduction clause).
        let r = coalesce_inward(&mut current, &mut schedule, &nest, Coalescing::Consecutive);
        let extent = find_loop(&current.body, &r).map(|l| l.extent.max());
        schedule.0.extend(vector_sum(&current, &r, extent, target));
    }
    schedule
}

/// Coalesces the reduced loops nested in `current`'s one output loop while
/// the offsets stay affine: a global pool over a channels-last image sums
/// over (height, width) for each channel, and as one loop of pixels it is
/// long enough to split across threads (`reduction_to_split`).
fn coalesce_reductions(current: &mut Kernel, schedule: &mut Schedule) {
    let reduced = output_nest(&current.body)
        .last()
        .and_then(|l| reduced_loops(l))
        .unwrap_or_default();
    if reduced.len() > 1 {
        coalesce_inward(current, schedule, &reduced, Coalescing::Consecutive);
    }
}

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
fn vector_sum(k: &Kernel, r: &str, extent: Option<i64>, target: &TargetDesc) -> Vec<Directive> {
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
fn lane_partials(
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

/// Whether `body` accumulates in f16 or bf16 (in-order bf16 sums, `Reduction::accumulator_type`): each
/// step rounds, in order, as the interpreter sums, so its reductions run in their order
/// (not in vector lanes or thread chunks).
fn accumulates_in_half_float(body: &[Stmt]) -> bool {
    fn visit<'a>(body: &'a [Stmt], half: &mut Vec<&'a str>) -> bool {
        body.iter().any(|s| match s {
            Stmt::Let { name, dtype, .. } if dtype.is_half_float() => {
                half.push(name);
                false
            }
            Stmt::Update { name, combiner, .. } => {
                matches!(combiner, Combiner::Sum | Combiner::Prod) && half.contains(&name.as_str())
            }
            Stmt::Loop(l) => visit(&l.body, half),
            _ => false,
        })
    }
    visit(body, &mut Vec::new())
}

/// The schedule of a kernel without output loops (reductions to scalars,
/// or a row program over one row: Softmax of a vector): each top-level
/// reduction nest doing at least [`PARALLEL_MIN_WORK`] iterations is
/// coalesced, split into [`CHUNK`]s run in parallel, and vectorized within
/// a chunk (the C printer combines the threads' partial results in thread
/// order: deterministic for a given thread count); each such output loop
/// too ([`chunked_loop`]).
fn scalar_reductions(k: &Kernel, target: &TargetDesc) -> Schedule {
    let mut schedule = Schedule::default();
    // Only row programs: their reduction nests are proved to store nothing
    // two iterations share (`gpu_map::rows`), so chunks may run at once.
    let Some(parts) = crate::gpu_map::rows::row_parts(k, &k.body) else {
        return schedule;
    };
    let mut current = k.clone();
    for part in &parts {
        if let RowPart::Spread(l) = part {
            schedule.0.extend(chunked_loop(l));
            continue;
        }
        let RowPart::Reduce { loops, body, .. } = part else {
            continue;
        };
        let total: i64 = loops.iter().map(|l| l.extent.max()).product();
        if total * work(body).max(1) < PARALLEL_MIN_WORK {
            continue;
        }
        let vars: Vec<String> = loops.iter().map(|l| l.var.clone()).collect();
        let var = coalesce_inward(&mut current, &mut schedule, &vars, Coalescing::Full);
        let (o, i) = split_names(&var);
        schedule.0.push(Directive::Split {
            var: var.clone(),
            factor: CHUNK,
        });
        schedule.0.push(Directive::Parallel(o));
        if body.iter().all(|s| !matches!(s, Stmt::Loop(_))) {
            if f32_in_and_out(k) && sums_f32_values(k, &vars[0]) {
                // A chunk's f32 values summed in f32 lanes, then once into the
                // f64 partial of its thread (CHUNK / lanes values per lane: 256
                // on AVX-512, at most 1024 on 4-lane targets).
                schedule.0.push(Directive::PartialSums {
                    var: i.clone(),
                    dtype: DType::F32,
                });
            }
            schedule.0.push(Directive::Vectorize(i.clone()));
            let chunk = find_loop(&current.body, &var).filter(|_| total % CHUNK == 0);
            schedule
                .0
                .extend(chunk.and_then(|l| lane_partials(&current, l, &i, CHUNK, target)));
        }
    }
    schedule
}

/// A loop of independent iterations (an output of a row program) in
/// parallel chunks, vectorized within a chunk when it only stores; nothing
/// when it does too little work to pay for threads.
fn chunked_loop(l: &Loop) -> Vec<Directive> {
    if l.extent.max() * work(&l.body).max(1) < PARALLEL_MIN_WORK {
        return Vec::new();
    }
    let (o, i) = split_names(&l.var);
    let mut d = vec![
        Directive::Split {
            var: l.var.clone(),
            factor: CHUNK,
        },
        Directive::Parallel(o),
    ];
    if l.body.iter().all(|s| matches!(s, Stmt::Store { .. })) {
        d.push(Directive::Vectorize(i));
    }
    d
}

/// The outer reduction loop of output loop `l` (of `extent` iterations) when it is worth
/// splitting across threads: at least as long as the output, which stays small enough for
/// each thread to keep a private copy of it ([`split_reduction_max_output`]).
fn reduction_to_split(l: &Loop, extent: i64, target: &TargetDesc) -> Option<String> {
    let [Stmt::Let { .. }, Stmt::Loop(reduction), Stmt::Store { .. }] = l.body.as_slice() else {
        return None;
    };
    let long = reduction.extent.max() >= extent.max(2 * ROW_CHUNK);
    (long && extent <= split_reduction_max_output(target)).then(|| reduction.var.clone())
}

/// The points inside `0..extent` where a bounds check of `var` alone
/// (`0 <= var + c < n`) changes its answer: a concatenation along `var`
/// selects each input on one part between them, and peeled there every
/// part reads one input with no select (`guards.rs`).
fn guard_cuts(body: &[Stmt], var: &str, extent: i64) -> Vec<i64> {
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

fn guards_in(body: &[Stmt], out: &mut Vec<(crate::ir::Idx, i64)>) {
    fn val(v: &Val, out: &mut Vec<(crate::ir::Idx, i64)>) {
        match v {
            Val::Load { guard, .. } | Val::InBounds(guard) => out.extend(guard.iter().cloned()),
            Val::Call(_, args) => args.iter().for_each(|a| val(a, out)),
            _ => {}
        }
    }
    for s in body {
        match s {
            Stmt::Loop(l) => guards_in(&l.body, out),
            Stmt::Store { value, .. } | Stmt::Let { value, .. } | Stmt::Update { value, .. } => {
                val(value, out)
            }
            Stmt::ArgUpdate(a) => val(&a.value, out),
            Stmt::Combine(c) => val(&c.value, out),
            Stmt::Gemm(_) | Stmt::Alloc(_) => {}
        }
    }
}

/// Whether some load in `body` walks memory with stride 1 or 2 along
/// `var` (so making `var` the innermost loop reads contiguous rows).
pub(crate) fn reads_along(body: &[Stmt], var: &str) -> bool {
    load_strides(body, var).iter().any(|c| c.abs() <= 2)
}

/// The element stride along `var` of every load in `body` that uses it.
pub(crate) fn load_strides(body: &[Stmt], var: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for_each_load(body, &mut |_, offset, _| {
        out.extend(
            offset
                .terms
                .iter()
                .filter(|(a, _)| matches!(a, Atom::Var(x) if x == var))
                .map(|(_, c)| *c),
        )
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_kernel;
    use kiln_target::{CpuPreset, MemLevel};

    /// y = x · W with 16384 outputs and a reduction as long, as lowered.
    fn matrix_vector() -> Kernel {
        parse_kernel(
            "kernel k(in0: f32[16384], in1: f32[16384,16384], out out0: f32[16384]) {
  for i0 in 0..16384 {
    let acc: f32 = 0.0:f32
    for r0 in 0..16384 {
      acc = sum(acc, Mul(in0[r0], in1[16384*r0 + i0]))
    }
    out0[i0] = acc
  }
}",
        )
        .unwrap()
    }

    /// A private copy of the 64 KiB output is the sixteenth of the presets'
    /// 1 MiB of L2 per core the rule allows: the reduction is split across
    /// threads. With 512 KiB of L2 it is not, and the output is chunked.
    #[test]
    fn splitting_a_reduction_follows_the_targets_l2() {
        let v4 = CpuPreset::X86_64V4.desc(2);
        assert_eq!(split_reduction_max_output(&v4), 16384);
        let split = default_schedule(&matrix_vector(), &v4);
        assert!(
            split.0.contains(&Directive::Parallel("r0".into())),
            "{split:?}"
        );
        let mut small = v4.clone();
        small.caches = vec![MemLevel {
            name: "L2".into(),
            bytes: 512 << 10,
            per_core: true,
        }];
        let chunked = default_schedule(&matrix_vector(), &small);
        // Column strips of 16 AVX-512 vectors: half the 32 registers.
        let row_chunks = Directive::Split {
            var: "i0".into(),
            factor: 256,
        };
        assert!(chunked.0.contains(&row_chunks), "{chunked:?}");
    }

    /// A y-reduce strip keeps every core busy and never drops below [`ROW_CHUNK`].
    #[test]
    fn column_strips_fill_half_the_vector_registers() {
        let v4 = CpuPreset::X86_64V4.desc(2);
        assert_eq!(column_strip(4096, &v4), 256);
        assert_eq!(column_strip(384, &v4), 192);
        assert_eq!(column_strip(128, &v4), ROW_CHUNK);
        assert_eq!(column_strip(4096, &CpuPreset::X86_64V3.desc(2)), ROW_CHUNK);
    }

    #[test]
    fn empty_rows_of_f32_sums_schedule_without_blocks() {
        let k = parse_kernel(
            "kernel k(in0: f32[4,0], out out0: f32[4]) {
  for i0 in 0..4 {
    let acc: f64 = 0.0:f64
    for r0 in 0..0 {
      acc = sum(acc, in0[r0])
    }
    out0[i0] = acc
  }
}",
        )
        .unwrap();
        let s = default_schedule(&k, &CpuPreset::X86_64V4.desc(2));
        let text: Vec<String> = s.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(text, ["partial_sums(r0, f32)", "vectorize(r0)"]);
        crate::schedule::apply(&k, &s).unwrap();
    }

    #[test]
    fn a_long_reduction_to_a_scalar_is_chunked_over_threads() {
        let k = parse_kernel(
            "kernel k(in0: f32[64,8192], out out0: f32[]) {
  let acc: f32 = 0.0:f32
  for r0 in 0..64 {
    for r1 in 0..8192 {
      acc = sum(acc, in0[8192*r0 + r1])
    }
  }
  out0[0] = acc
}",
        )
        .unwrap();
        let v4 = CpuPreset::X86_64V4.desc(2);
        let s = default_schedule(&k, &v4);
        let text: Vec<String> = s.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            text,
            [
                "fuse(r0, r1)",
                "split(r0r1, 4096)",
                "parallel(r0r1o)",
                "vectorize(r0r1i)",
                "lane_partials(r0r1i, 64)"
            ]
        );
        // Short ones stay on one thread; a GPU gets nothing here.
        let short = parse_kernel(
            "kernel k(in0: f32[100], out out0: f32[]) {
  let acc: f32 = 0.0:f32
  for r0 in 0..100 {
    acc = sum(acc, in0[r0])
  }
  out0[0] = acc
}",
        )
        .unwrap();
        assert!(default_schedule(&short, &v4).0.is_empty());
        let gpu = kiln_target::GpuPreset::Sm90.desc();
        assert!(default_schedule(&k, &gpu).0.is_empty());
    }

    #[test]
    fn contiguous_reduced_loops_coalesce_before_vectorizing() {
        // PANAMERA Figure 4: h, x and y reduced around the parallel w. x
        // and y are consecutive in memory and coalesce into one vector
        // loop of 50; h is not (w lies between) and stays outside.
        let k = parse_kernel(
            "kernel k(in0: f32[40,20,10,5], out out0: f32[20]) {
  for i0 in 0..20 {
    let acc: f32 = 0.0:f32
    for r0 in 0..40 {
      for r1 in 0..10 {
        for r2 in 0..5 {
          acc = sum(acc, in0[1000*r0 + 50*i0 + 5*r1 + r2])
        }
      }
    }
    out0[i0] = acc
  }
}",
        )
        .unwrap();
        let s = default_schedule(&k, &CpuPreset::X86_64V4.desc(2));
        let text: Vec<String> = s.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(text, ["fuse(r1, r2)", "parallel(i0)", "vectorize(r1r2)"]);
    }

    #[test]
    fn a_reduction_without_reduced_loops_is_not_a_y_reduce() {
        // A 1x1 depthwise convolution (VGG's adaptive average pool over a
        // 7x7 image): its one-step reduction has no loop left to move out.
        let k = parse_kernel(
            "kernel k(in0: f32[1,7,7,512], in1: f32[1,1,1,512], out out0: f32[1,7,7,512]) {
  for i1 in 0..7 {
    for i2 in 0..7 {
      for i3 in 0..512 {
        let acc: f64 = 0.0:f64
        acc = sum(acc, Mul(in0[3584*i1 + 512*i2 + i3], in1[i3]))
        out0[3584*i1 + 512*i2 + i3] = acc
      }
    }
  }
}",
        )
        .unwrap();
        let s = default_schedule(&k, &CpuPreset::X86_64V4.desc(2));
        crate::schedule::apply(&k, &s).unwrap();
        assert!(!s
            .0
            .iter()
            .any(|d| matches!(d, Directive::AccumulateOutward(_))));
    }

    #[test]
    fn channels_last_global_pool_splits_its_pixels_across_threads() {
        // A global average pool's sum over a channels-last image: the
        // (height, width) loops coalesce into one loop of pixels, which
        // is split across threads with the channels in vector lanes.
        let k = parse_kernel(
            "kernel k(in0: f32[1,56,56,48], out out0: f32[1,1,1,48]) {
  for i3 in 0..48 {
    let acc: f32 = 0.0:f32
    for r0 in 0..56 {
      for r1 in 0..56 {
        acc = sum(acc, in0[2688*r0 + 48*r1 + i3])
      }
    }
    out0[i3] = acc
  }
}",
        )
        .unwrap();
        let s = default_schedule(&k, &CpuPreset::X86_64V4.desc(2));
        let text: Vec<String> = s.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            text,
            [
                "fuse(r0, r1)",
                "accumulate_outward(i3)",
                "parallel(r0r1)",
                "vectorize(i3)"
            ]
        );
    }
}

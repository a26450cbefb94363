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
//!    a matrix-vector product (a y-reduce with one output loop) whose
//!    reduction has at least 2 [`ROW_CHUNK`] rows splits the reduction
//!    across threads instead (the output combined from per-thread copies:
//!    OpenMP array reductions), so each thread streams contiguous rows,
//!    when a copy of the output fits the share of the target's L2 that
//!    [`split_reduction_max_output`] allows and no input is f16/bf16;
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
//! An arg-reduction still takes vector lanes two ways that keep its order:
//! along the rows of a y-reduce, a strip of rows steps at once
//! (`fused::rows::strips_across_rows`, `rows_across.rs`); along its own
//! contiguous loop, it becomes the extreme's reduction and a first-index
//! reduction (`arg_passes.rs`).
//!
//! On a GPU target only step 1 applies, to every output loop whatever
//! the offsets (one coalesced loop is what blocks and threads divide).
//! On a scratchpad target (DSA) none does: the plain nest is tiled for
//! its local buffers by `kiln_dsa::tiling`.
//!
//! Its parts, one job each: `vector_sums.rs` (the vectorized sums of step
//! 4: f32 partial sums and lane partials), `scalar.rs` (kernels without
//! output loops), `bounds.rs` (where bounds checks hold, for peeling),
//! `transpose.rs` (step 2's blocked copy).
//!
//! The chunk sizes and the work threshold are constants of the algorithm,
//! the same for every target (see each); what depends on the machine is
//! read from the [`TargetDesc`].

use crate::canonical::{
    coalesce_inward, output_nest, reduced_loops, x_reduced_loops, y_reducible, Coalescing,
};
use crate::ir::{
    accumulates_in_half_float, find_loop, for_each_load, reduces_in_order, Atom, Kernel, Loop, Stmt,
};
use crate::schedule::{split_names, Directive, Schedule};
use kiln_target::TargetDesc;

mod bounds;
mod scalar;
mod transpose;
mod vector_sums;

pub(crate) use bounds::interior;
use bounds::{checks_on, guard_cuts};
use scalar::scalar_reductions;
use vector_sums::vector_sum;
pub use vector_sums::LANE_PARTIAL_TERMS;
pub(crate) use vector_sums::{f32_in_and_out, sums_f32_values, vector_partial_sums};

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
/// updated for every row of the matrix it streams, sized to an eighth of
/// one core's L2 (128 KiB, 32768 elements, on the 1 MiB of the CPU
/// presets; BENCHMARKS.md, session 23, for the y-reduces it serves).
pub fn split_reduction_max_output(target: &TargetDesc) -> i64 {
    (target.l2_per_core() / 8 / std::mem::size_of::<f32>()) as i64
}

/// Whether `k` reads an f16 or bf16 buffer: the printer widens such an input a row at a
/// time into a temporary (`c/half_blocks.rs`), as large as the row.
fn reads_half_floats(k: &Kernel) -> bool {
    k.buffers
        .iter()
        .any(|b| !b.output && b.dtype.is_half_float())
}

/// Rows a split y-reduce adds into its output copy per pass over it (jammed, `jam.rs`):
/// one load and one store of the copy per that many row loads instead of per one. Over
/// f32[1280, 21128] the sum ran 1.5-1.7x faster with 8 (BENCHMARKS.md, session 32).
const ROWS_PER_PASS: i64 = 8;

/// The jam that adds [`ROWS_PER_PASS`] rows of reduced loop `var` per pass after
/// `schedule`, unless a bounds check depends on `var` ([`checks_on`]).
fn rows_per_pass(k: &Kernel, schedule: &Schedule, var: &str) -> Option<Directive> {
    if checks_on(&k.body, var) {
        return None;
    }
    crate::jam::jammed_after(k, schedule, var, ROWS_PER_PASS)
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
    let mut schedule = nest_schedule(k, target);
    let across_rows = schedule
        .0
        .iter()
        .any(|d| matches!(d, Directive::RowsAcross(_)));
    if !target.is_gpu() && !target.is_scratchpad() && !across_rows {
        // An arg-reduction along its own contiguous loop (x-reduce): the extreme, then its
        // first (last) index, each a vector reduction (`arg_passes.rs`).
        for var in contiguous_arg_loops(k) {
            schedule.0.push(Directive::ArgTwoPasses(var.clone()));
            schedule.0.push(Directive::Vectorize(var));
        }
    }
    schedule
}

/// The loops of `k` whose body is one arg-reduction step indexed by the loop, reading
/// consecutive elements along it, on an extreme that is not a half float.
fn contiguous_arg_loops(k: &Kernel) -> Vec<String> {
    let locals = crate::ir::declared_locals(&k.body);
    let mut out = Vec::new();
    let mut visit = |l: &Loop| {
        let [Stmt::ArgUpdate(step)] = l.body.as_slice() else {
            return;
        };
        let half = locals
            .iter()
            .any(|(n, d)| *n == step.best && d.is_half_float());
        let mut contiguous = true;
        step.value
            .for_each_load(&mut |_, offset, _| contiguous &= offset.unit_stride_aligned(&l.var, 1));
        let constant = matches!(l.extent, crate::ir::Extent::Const(_));
        if step.index == crate::ir::Idx::var(&l.var) && !half && contiguous && constant {
            out.push(l.var.clone());
        }
    };
    crate::ir::for_each_loop(&k.body, &mut visit);
    out
}

/// [`default_schedule`] but for arg-reductions along their own loop.
fn nest_schedule(k: &Kernel, target: &TargetDesc) -> Schedule {
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
    let in_order = reduces_in_order(&k.body);
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
    if in_order && !accumulates_in_half_float(&current.body) {
        // Arg-reductions along the rows of a y-reduce: a strip of rows takes each step at
        // once in vector lanes, each row's steps still in index order.
        let rows: Vec<String> = output_nest(&current.body)
            .iter()
            .map(|l| l.var.clone())
            .collect();
        if let Some(across) = crate::fused::rows::strips_across_rows(&current, &rows, target) {
            schedule.0.extend(across.0);
            return schedule;
        }
    }
    let Some(nest) = OutputNest::of(&current, in_order) else {
        return schedule;
    };
    if let Some(blocked) = transpose::blocked_transpose(&current, target) {
        schedule.0.extend(blocked.0);
        return schedule;
    }
    if !one_loop_schedule(&mut current, &mut schedule, &nest, target) {
        innermost_schedule(&mut current, &mut schedule, &nest, target);
    }
    schedule
}

/// The CPU's view of a kernel's output nest once its loops are coalesced.
struct OutputNest {
    /// Each output loop, outermost first: its variable and extent.
    loops: Vec<(String, i64)>,
    /// The innermost output loop, its extent, and whether its body only stores.
    innermost: String,
    extent: i64,
    plain: bool,
    /// Enough work to run the nest on several threads.
    parallel: bool,
    /// Reductions that must run in order (no lanes, chunks or outward accumulation).
    in_order: bool,
}

impl OutputNest {
    fn of(current: &Kernel, in_order: bool) -> Option<OutputNest> {
        let nest = output_nest(&current.body);
        let last = nest.last()?;
        Some(OutputNest {
            loops: nest
                .iter()
                .map(|l| (l.var.clone(), l.extent.max()))
                .collect(),
            innermost: last.var.clone(),
            extent: last.extent.max(),
            plain: last.body.iter().all(|s| matches!(s, Stmt::Store { .. })),
            parallel: work(&current.body) >= PARALLEL_MIN_WORK,
            in_order,
        })
    }

    fn single(&self) -> bool {
        self.loops.len() == 1
    }
}

/// The innermost output loop of `current` as it stands, and whether it takes the y-reduce
/// form (its reductions accumulated into outward partial rows).
fn accumulates_outward(current: &Kernel, nest: &OutputNest) -> (Option<Loop>, bool) {
    let last = output_nest(&current.body).last().map(|l| (*l).clone());
    let along = !nest.in_order && last.as_ref().is_some_and(y_reducible);
    (last, along)
}

/// The forms of a nest with one output loop: a plain loop in chunks, a matrix-vector
/// product split across threads by its reduction or by column strips. Returns whether one
/// applied; coalesces the reduced loops in any case (the innermost forms see them so).
fn one_loop_schedule(
    current: &mut Kernel,
    schedule: &mut Schedule,
    nest: &OutputNest,
    target: &TargetDesc,
) -> bool {
    if !nest.single() {
        return false;
    }
    let innermost = nest.innermost.clone();
    if nest.extent > CHUNK && nest.plain {
        let (o, i) = split_names(&innermost);
        schedule.0.push(Directive::Split {
            var: innermost,
            factor: CHUNK,
        });
        if nest.parallel {
            schedule.0.push(Directive::Parallel(o));
        }
        schedule.0.push(Directive::Vectorize(i));
        return true;
    }
    if !nest.in_order {
        coalesce_reductions(current, schedule);
    }
    let (last, along) = accumulates_outward(current, nest);
    if !(nest.parallel && along) {
        return false;
    }
    // A split reduction widens each f16/bf16 input row whole (`c/half_blocks.rs`) into a
    // temporary as large as the output, column strips a strip at a time; split, such
    // y-reduces ran up to twice as slow (BENCHMARKS.md, session 23).
    let split = last
        .as_ref()
        .filter(|_| !reads_half_floats(current))
        .and_then(|l| reduction_to_split(l, nest.extent, target));
    if let Some(reduction) = split {
        // A matrix-vector product (a y-reduce with one output loop): the reduction is
        // split across threads, each accumulating the whole output row in a private copy
        // (combined at the end), so each thread streams a contiguous block of the matrix
        // instead of narrow column strips a row apart.
        let split = Schedule(vec![
            Directive::AccumulateOutward(innermost.clone()),
            Directive::Parallel(reduction.clone()),
            Directive::Vectorize(innermost),
        ]);
        let jam = rows_per_pass(current, &split, &reduction);
        schedule.0.extend(split.0.into_iter().chain(jam));
        return true;
    }
    if nest.extent >= 2 * ROW_CHUNK {
        // A reduction with one output loop (matrix-vector product): chunks
        // of the row in parallel, each accumulated in the y-reduce form.
        let (o, i) = split_names(&innermost);
        schedule.0.push(Directive::Split {
            var: innermost,
            factor: column_strip(nest.extent, target),
        });
        schedule.0.push(Directive::Parallel(o));
        schedule.0.push(Directive::AccumulateOutward(i.clone()));
        schedule.0.push(Directive::Vectorize(i));
        return true;
    }
    false
}

/// The outermost output loop on threads, then the innermost one's form: a y-reduce in
/// vector lanes, a plain loop vectorized between its guards' cuts, or an x-reduce whose
/// reduced loops run in vector lanes.
fn innermost_schedule(
    current: &mut Kernel,
    schedule: &mut Schedule,
    nest: &OutputNest,
    target: &TargetDesc,
) {
    // Directives from here on are not yet applied to `current`.
    let first_new = schedule.0.len();
    let (outermost, outer_extent) = &nest.loops[0];
    if nest.parallel && *outer_extent > 1 {
        schedule.0.push(Directive::Parallel(outermost.clone()));
    }
    let (last, along) = accumulates_outward(current, nest);
    let (innermost, extent) = (nest.innermost.clone(), nest.extent);
    let several = !nest.single() || !nest.parallel;
    if along && several && extent >= 8 {
        schedule
            .0
            .push(Directive::AccumulateOutward(innermost.clone()));
        schedule.0.push(Directive::Vectorize(innermost.clone()));
        if let Some((lo, hi)) = interior(&current.body, &innermost, extent) {
            schedule.0.push(Directive::Peel {
                var: innermost,
                at: vec![lo, hi],
            });
        } else if let Some(reduced) = last
            .as_ref()
            .filter(|_| !reads_half_floats(current))
            .and_then(reduced_loops)
            .and_then(|r| r.last().cloned())
        {
            // Rows of the reduced loop added into the output row eight per pass (f16 and
            // bf16 inputs are widened a row at a time, `c/half_blocks.rs`: not these).
            let new = Schedule(schedule.0[first_new..].to_vec());
            schedule.0.extend(rows_per_pass(current, &new, &reduced));
        }
    } else if nest.plain && several {
        let at = guard_cuts(&current.body, &innermost, extent);
        if !at.is_empty() {
            schedule.0.push(Directive::Peel {
                var: innermost.clone(),
                at,
            });
        }
        schedule.0.push(Directive::Vectorize(innermost));
    } else if let Some(reduced) = last
        .as_ref()
        .filter(|_| !nest.in_order)
        .and_then(x_reduced_loops)
    {
        // An x-reduce: each output's reduction reads consecutive elements,
        // so its innermost loop — coalesced with the loops around it while
        // the elements stay consecutive (PANAMERA §3.1's coalescing) — runs
        // in vector lanes (partials combined by the loop's reduction clause).
        let r = coalesce_inward(current, schedule, &reduced, Coalescing::Consecutive);
        let extent = find_loop(&current.body, &r).map(|l| l.extent.max());
        schedule.0.extend(vector_sum(current, &r, extent, target));
    }
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

/// The outer reduction loop of output loop `l` (of `extent` iterations) when it is worth
/// splitting across threads: at least 2 [`ROW_CHUNK`] rows (so each thread's rows outweigh
/// combining the copies), with an output small enough for each thread to keep a private
/// copy of it ([`split_reduction_max_output`]). Column strips a row apart instead read a
/// few cache lines per page and streamed at half the bandwidth (BENCHMARKS.md, session 23).
fn reduction_to_split(l: &Loop, extent: i64, target: &TargetDesc) -> Option<String> {
    let [Stmt::Let { .. }, Stmt::Loop(reduction), Stmt::Store { .. }] = l.body.as_slice() else {
        return None;
    };
    let long = reduction.extent.max() >= 2 * ROW_CHUNK;
    (long && extent <= split_reduction_max_output(target)).then(|| reduction.var.clone())
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

    /// A private copy of the 64 KiB output fits the eighth of the presets'
    /// 1 MiB of L2 per core the rule allows: the reduction is split across
    /// threads. With 256 KiB of L2 it does not, and the output is chunked.
    #[test]
    fn splitting_a_reduction_follows_the_targets_l2() {
        let v4 = CpuPreset::X86_64V4.desc(2);
        assert_eq!(split_reduction_max_output(&v4), 32768);
        let split = default_schedule(&matrix_vector(), &v4);
        assert!(
            split.0.contains(&Directive::Parallel("r0".into())),
            "{split:?}"
        );
        let mut small = v4.clone();
        small.caches = vec![MemLevel {
            name: "L2".into(),
            bytes: 256 << 10,
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

    /// PANAMERA sub-graph 4's y-reduce (1280 rows of 21128): fewer rows than
    /// outputs, still split across threads, each streaming its own rows, also
    /// into an f16 output (sub-graph 2); 64 rows and f16 inputs are not
    /// (column strips).
    #[test]
    fn a_y_reduce_over_many_rows_splits_them_across_threads() {
        let v4 = CpuPreset::X86_64V4.desc(2);
        let text = |rows: i64| {
            format!(
                "kernel k(in0: f32[{rows},21128], out out0: f32[21128]) {{
  for i0 in 0..21128 {{
    let acc: f32 = 0.0:f32
    for r0 in 0..{rows} {{
      acc = sum(acc, in0[21128*r0 + i0])
    }}
    out0[i0] = acc
  }}
}}"
            )
        };
        let schedule = |text: &str| default_schedule(&crate::parse_kernel(text).unwrap(), &v4);
        let split = Directive::Parallel("r0".into());
        for kernel in [text(1280), text(1280).replace("out0: f32", "out0: f16")] {
            assert!(
                schedule(&kernel).0.contains(&split),
                "{:?}",
                schedule(&kernel)
            );
        }
        // Too few rows; an f16 input widened a whole row at a time.
        for kernel in [text(64), text(1280).replace("in0: f32", "in0: f16")] {
            assert!(
                !schedule(&kernel).0.contains(&split),
                "{:?}",
                schedule(&kernel)
            );
        }
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
        // is split across threads with the channels in vector lanes, eight
        // pixels added per pass over the channels.
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
                "vectorize(i3)",
                "jam(r0r1, 8)"
            ]
        );
    }
}

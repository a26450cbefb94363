//! Mapping a kernel onto a GPU's blocks and threads (PANAMERA §4.2 for
//! reductions).
//!
//! Needs: a kernel lowered for a GPU target (output loops coalesced by
//! `default_schedule`; loop kinds are CPU marks and are ignored here) and
//! the GPU's description.
//! Guarantees: a [`GpuMapping`] (data) that splits the body into launches
//! run in order on one stream, each one of
//! - **threads** — a top-level loop whose iterations are independent
//!   (`independence.rs`), one thread per iteration (grid-stride);
//! - **rows** — the same, one block per iteration, when its body is a row
//!   program (`rows.rs`) with a reduction and either the reduction reads
//!   memory along its innermost loop (x-reduce: a thread per row would read
//!   rows apart, uncoalesced) or there are fewer rows than multiprocessors:
//!   the reduced loops go to the block's threads, combined through warp
//!   shuffles and shared memory;
//! - **columns** — the same loop when its reduction reads across rows
//!   (y-reduce): lanes of a warp take neighbouring iterations (coalesced),
//!   the warps of a block split each iteration's reduction, combined in
//!   shared memory in order; when the blocks of 32 columns are fewer than
//!   multiprocessors, several blocks split each reduction too, combined in
//!   block order by the last to finish (PANAMERA §5.1's one kernel, as in
//!   the all-reduce form);
//! - **all-reduce** — a body of top-level locals (reductions to scalars)
//!   that is a row program whose reductions read no earlier reduction:
//!   `blocks` blocks share the reduced iterations, each block's partial
//!   result is stored, and the last block to finish (an atomic counter)
//!   combines the partials in block order — deterministic for a given grid
//!   — and runs the rest of the program (PANAMERA §5.1's one kernel, with
//!   an ordered combine in place of atomic updates so every combiner and
//!   type works);
//! - **block** — a row program of top-level locals whose reductions
//!   depend on each other (Softmax or LayerNorm over one row): one block;
//! - **split rows** — rows (or such a top-level program) too long and too
//!   few for one block each: several blocks per row, all resident at once
//!   (a cooperative launch), meeting at a barrier of the row's blocks
//!   after each part; partial results combined in block order by every
//!   block of the row;
//! - **gemm** — the kernel's matrix product (the tiled template);
//! - **single** — statements with no provable parallelism, one thread:
//!   slow, never wrong.
//!
//! Reductions whose steps must run in order (`ir::reduces_in_order`:
//! arg-reductions, half-float sums) are never split over a block's threads:
//! their loops are **threads** launches (one output per thread), and a
//! tail of them is **single**.
//!
//! Statements before a kernel's first top-level local are mapped one by
//! one.

mod independence;
pub mod rows;
mod text;

use crate::auto_schedule::load_strides;
use crate::ir::{reduces_in_order, Extent, Kernel, Loop, Stmt};
pub use independence::independent;
use kiln_target::GpuDesc;
use rows::{reduces, row_parts, RowPart};

/// How one launch runs its statements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// Statement `stmt` is a loop over `var` in `0..extent` whose
    /// iterations are spread over threads (grid-stride).
    Threads {
        stmt: usize,
        var: String,
        extent: i64,
    },
    /// Statement `stmt` is a loop over `var` in `0..extent`, one block of
    /// `threads` threads per iteration running its body as a row program.
    Rows {
        stmt: usize,
        var: String,
        extent: i64,
        threads: u32,
    },
    /// Statement `stmt` is a loop over `var` in `0..extent` whose
    /// iterations (outputs) are a warp's lanes, `groups` warps of a block
    /// sharing each output's reduction (a reduction over an outer axis:
    /// neighbouring lanes read neighbouring elements), combined in shared
    /// memory in group order. With `splits` above 1, that many blocks
    /// share each 32 outputs' reductions: each stores its partial results,
    /// and the last of them to finish (an atomic counter) combines them in
    /// block order and runs the rest of the iteration.
    Columns {
        stmt: usize,
        var: String,
        extent: i64,
        groups: u32,
        splits: u32,
    },
    /// Statements `from..to` are a row program of reductions to scalars
    /// run by `blocks` blocks of `threads` threads.
    AllReduce {
        from: usize,
        to: usize,
        blocks: u32,
        threads: u32,
    },
    /// Statements `from..to` are a row program run by one block of
    /// `threads` threads (its reductions depend on each other).
    Block {
        from: usize,
        to: usize,
        threads: u32,
    },
    /// A row program over rows too long for one block: `blocks_per_row`
    /// blocks of `threads` threads share each row, meeting at a barrier of
    /// the row's blocks after each part (every block resident at once: a
    /// cooperative launch of at most one block per multiprocessor).
    /// `rows`: statement `stmt`, a loop over `var` in `0..extent`, one row
    /// per iteration; or `None`: statements `stmt..` as one row.
    SplitRows {
        stmt: usize,
        rows: Option<(String, i64)>,
        blocks_per_row: u32,
        threads: u32,
    },
    /// Statement `stmt` is the kernel's gemm.
    Gemm { stmt: usize },
    /// Statements `from..to` run by one thread.
    Single { from: usize, to: usize },
}

/// A kernel's launches, in order. Its text form (`text.rs`), e.g.
/// `threads(#0, i0, 64); rows(#1, o0, 8, 32 threads)`, parses back with
/// `str::parse`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuMapping(pub Vec<Launch>);

/// The launches of `k` on `gpu` (see the module doc).
pub fn map_kernel(k: &Kernel, gpu: &GpuDesc) -> GpuMapping {
    let n = k.body.len();
    let first_local = k
        .body
        .iter()
        .position(|s| matches!(s, Stmt::Let { .. } | Stmt::Update { .. } | Stmt::Alloc(_)))
        .unwrap_or(n);
    let mut launches: Vec<Launch> = k.body[..first_local]
        .iter()
        .enumerate()
        .map(|(i, s)| statement_launch(k, i, s, gpu))
        .collect();
    if first_local < n {
        let single = Launch::Single {
            from: first_local,
            to: n,
        };
        let tail = if reduces_in_order(&k.body[first_local..]) {
            single
        } else {
            all_reduce(k, first_local, gpu)
                .or_else(|| one_block(k, first_local, gpu))
                .unwrap_or(single)
        };
        launches.push(tail);
    }
    GpuMapping(launches)
}

/// The launch of top-level statement `i`.
fn statement_launch(k: &Kernel, i: usize, s: &Stmt, gpu: &GpuDesc) -> Launch {
    match s {
        Stmt::Gemm(_) => Launch::Gemm { stmt: i },
        Stmt::Loop(l) if matches!(l.extent, Extent::Const(_)) && independent(k, l) => {
            loop_launch(k, i, l, gpu)
        }
        _ => Launch::Single { from: i, to: i + 1 },
    }
}

/// The launch of top-level loop `l` (statement `i`), whose iterations are
/// independent: rows of a reduction go to blocks when the reduction reads
/// along its innermost loop or the rows are fewer than multiprocessors
/// (and rows few and long to several blocks each); a reduction over an
/// outer axis to columns; anything else one thread per iteration.
fn loop_launch(k: &Kernel, i: usize, l: &Loop, gpu: &GpuDesc) -> Launch {
    let extent = l.extent.max();
    let threads_launch = Launch::Threads {
        stmt: i,
        var: l.var.clone(),
        extent,
    };
    if reduces_in_order(&l.body) {
        return threads_launch;
    }
    let Some(parts) = row_parts(k, &l.body).filter(|p| reduces(p)) else {
        return threads_launch;
    };
    let longest = longest_part(&parts);
    let warp = gpu.warp_size as i64;
    if longest < warp {
        return threads_launch;
    }
    let along = parts.iter().any(|p| match p {
        RowPart::Reduce { loops, body, .. } => loops
            .last()
            .is_some_and(|inner| load_strides(body, &inner.var).contains(&1)),
        _ => false,
    });
    // Fewer rows than multiprocessors: one thread each leaves the GPU idle
    // whatever the access pattern.
    if along || extent < gpu.sm_count as i64 {
        let threads = block_size(longest, gpu);
        return match blocks_per_row(longest, extent, threads, gpu) {
            Some(blocks_per_row) => Launch::SplitRows {
                stmt: i,
                rows: Some((l.var.clone(), extent)),
                blocks_per_row,
                threads,
            },
            None => Launch::Rows {
                stmt: i,
                var: l.var.clone(),
                extent,
                threads,
            },
        };
    }
    if longest >= 2 * warp {
        let groups = (gpu.block_threads / gpu.warp_size).max(1) as u32;
        return Launch::Columns {
            stmt: i,
            var: l.var.clone(),
            extent,
            groups,
            splits: column_splits(&parts, (extent + warp - 1) / warp, longest, groups, gpu),
        };
    }
    threads_launch
}

/// Blocks sharing each 32 columns' reductions when the `blocks` blocks of
/// columns leave most multiprocessors idle (a y-reduce to few outputs):
/// enough for every warp to take [`ITEMS_PER_THREAD`] reduced iterations or
/// more, two blocks per multiprocessor at most. 1 when the reductions read
/// each other's results (only the last block has them).
fn column_splits(parts: &[RowPart], blocks: i64, longest: i64, groups: u32, gpu: &GpuDesc) -> u32 {
    if blocks >= gpu.sm_count as i64 || !reductions_independent(parts) {
        return 1;
    }
    let per_block = groups as i64 * ITEMS_PER_THREAD;
    let wanted = (longest + per_block - 1) / per_block;
    let most = 2 * gpu.sm_count as i64 / blocks.max(1);
    wanted.min(most).max(1) as u32
}

/// Blocks per row when `rows` rows whose longest part has `longest`
/// iterations leave most multiprocessors idle with one block each: enough
/// blocks for every thread to take [`ITEMS_PER_THREAD`] iterations or
/// more, all rows' blocks at most one per multiprocessor. `None` for one.
fn blocks_per_row(longest: i64, rows: i64, threads: u32, gpu: &GpuDesc) -> Option<u32> {
    let per_block = threads as i64 * ITEMS_PER_THREAD;
    let wanted = (longest + per_block - 1) / per_block;
    let most = gpu.sm_count as i64 / rows.max(1);
    let n = wanted.min(most);
    (n >= 2).then_some(n as u32)
}

/// The all-reduce launch of statements `from..` of `k`, when they are a
/// row program whose reductions read no earlier reduction's result.
fn all_reduce(k: &Kernel, from: usize, gpu: &GpuDesc) -> Option<Launch> {
    let parts = row_parts(k, &k.body[from..])?;
    if !reduces(&parts) || !reductions_independent(&parts) {
        return None;
    }
    let longest = longest_part(&parts);
    let threads = block_size(longest, gpu);
    let per_block = threads as i64 * ITEMS_PER_THREAD;
    // Half the blocks a multiprocessor may hold: loads in flight to hide
    // memory latency, few partials for the last block (its first warp
    // combines them).
    let most = (gpu.sm_count * (gpu.blocks_per_sm / 2).max(1)) as i64;
    let blocks = ((longest + per_block - 1) / per_block).clamp(1, most);
    Some(Launch::AllReduce {
        from,
        to: k.body.len(),
        blocks: blocks as u32,
        threads,
    })
}

/// Statements `from..` of `k` as a row program for one block, when they
/// are one.
fn one_block(k: &Kernel, from: usize, gpu: &GpuDesc) -> Option<Launch> {
    let parts = row_parts(k, &k.body[from..])?;
    let longest = longest_part(&parts);
    let threads = block_size(longest, gpu);
    Some(match blocks_per_row(longest, 1, threads, gpu) {
        Some(blocks_per_row) => Launch::SplitRows {
            stmt: from,
            rows: None,
            blocks_per_row,
            threads,
        },
        None => Launch::Block {
            from,
            to: k.body.len(),
            threads,
        },
    })
}

/// Elements each thread of an all-reduce combines before the block does
/// (PANAMERA's Part 1: fewer blocks, fewer partials to combine).
pub const ITEMS_PER_THREAD: i64 = 16;

/// Whether `parts` split into what every block can run and a tail: before
/// the last reduction only locals and reductions that read no combined
/// value (a reduced local, or a local computed from one: those exist only
/// after every block is done), then anything (the last block runs it).
fn reductions_independent(parts: &[RowPart]) -> bool {
    let Some(last) = parts
        .iter()
        .rposition(|p| matches!(p, RowPart::Reduce { .. }))
    else {
        return false;
    };
    let mut combined: Vec<String> = Vec::new();
    for p in &parts[..=last] {
        let mut read = Vec::new();
        match p {
            RowPart::Reduce { loops, .. } => {
                for l in loops {
                    locals_read(&l.body, &mut read);
                }
            }
            RowPart::Local(s) => locals_read(std::slice::from_ref(*s), &mut read),
            RowPart::Spread(_) | RowPart::Once(_) => return false,
        }
        if read.iter().any(|v| combined.contains(v)) {
            return false;
        }
        if let RowPart::Reduce { reduced, .. } = p {
            combined.extend(reduced.iter().map(|(n, _)| n.clone()));
        }
    }
    true
}

/// Locals read by the values of `body`.
pub(crate) fn locals_read(body: &[Stmt], out: &mut Vec<String>) {
    for s in body {
        match s {
            Stmt::Loop(l) => locals_read(&l.body, out),
            Stmt::Store { value, .. } | Stmt::Let { value, .. } | Stmt::Update { value, .. } => {
                value_locals(value, out)
            }
            Stmt::ArgUpdate(a) => value_locals(&a.value, out),
            _ => {}
        }
    }
}

fn value_locals(v: &crate::ir::Val, out: &mut Vec<String>) {
    match v {
        crate::ir::Val::Local(n) => out.push(n.clone()),
        crate::ir::Val::Call(_, args) => args.iter().for_each(|a| value_locals(a, out)),
        _ => {}
    }
}

/// The most iterations one part of a row program spreads over threads.
fn longest_part(parts: &[RowPart]) -> i64 {
    parts
        .iter()
        .map(|p| match p {
            RowPart::Reduce { loops, .. } => loops.iter().map(|l| l.extent.max()).product(),
            RowPart::Spread(l) => l.extent.max(),
            _ => 1,
        })
        .max()
        .unwrap_or(1)
}

/// Threads of a block sharing `n` iterations: a power of two, at least a
/// warp, at most the target's block size (and what a block may have),
/// about four iterations each.
fn block_size(n: i64, gpu: &GpuDesc) -> u32 {
    let want = ((n + 3) / 4).max(1) as u64;
    let most = gpu
        .block_threads
        .min(gpu.max_threads_per_block)
        .max(gpu.warp_size);
    want.next_power_of_two()
        .clamp(gpu.warp_size as u64, most as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sum of `in0: f32[n]` to a scalar, stored as `store` (of `acc`).
    fn scalar_sum(n: i64, store: &str) -> String {
        format!(
            "kernel k(in0: f32[{n}], out out0: f32[]) {{
  let acc: f32 = 0.0:f32
  for r0 in 0..{n} {{
    acc = sum(acc, in0[r0])
  }}
  out0[0] = {store}
}}"
        )
    }

    /// Rows of `in0: f32[rows,len]`: `x` reduced over the row from `init`
    /// with `combine`, then `out0 = op(in0, x)` along the row.
    fn row_program(rows: i64, len: i64, init: &str, combine: &str, op: &str) -> String {
        format!(
            "kernel k(in0: f32[{rows},{len}], out out0: f32[{rows},{len}]) {{
  for o0 in 0..{rows} {{
    let x: f32 = {init}
    for r0 in 0..{len} {{
      x = {combine}(x, in0[{len}*o0 + r0])
    }}
    for i1 in 0..{len} {{
      out0[{len}*o0 + i1] = {op}(in0[{len}*o0 + i1], x)
    }}
  }}
}}"
        )
    }

    fn mapping(text: &str) -> String {
        let gpu = kiln_target::GpuPreset::Sm90.desc().gpu.expect("a GPU");
        map_kernel(&crate::parse_kernel(text).expect("kernel"), &gpu).to_string()
    }

    #[test]
    fn an_elementwise_loop_is_one_thread_per_element() {
        let k = "kernel k(in0: f32[64], out out0: f32[64]) {
  for i0 in 0..64 {
    out0[i0] = Relu(in0[i0])
  }
}";
        assert_eq!(mapping(k), "threads(#0, i0, 64)");
    }

    #[test]
    fn in_order_reductions_are_one_thread_per_output() {
        // Long rows read along the row would be blocks (x-reduce), but an
        // arg-reduction's ties and a bf16 sum's rounding need their order.
        let arg = "kernel k(in0: f32[64,512], out out0: i64[64]) {
  for o0 in 0..64 {
    let best: f32 = -inf:f32
    let acc: i64 = 0:i64
    for r0 in 0..512 {
      acc = argmax(best, in0[512*o0 + r0], r0)
    }
    out0[o0] = acc
  }
}";
        assert_eq!(mapping(arg), "threads(#0, o0, 64)");
        let bf16 = row_program(64, 512, "0.0:f32", "sum", "Div").replace("x: f32", "x: bf16");
        assert_eq!(mapping(&bf16), "threads(#0, o0, 64)");
        let f32_rows = row_program(64, 512, "0.0:f32", "sum", "Div");
        assert_ne!(mapping(&f32_rows), "threads(#0, o0, 64)");
        let scalar = "kernel k(in0: f32[4096], out out0: i64[]) {
  let best: f32 = -inf:f32
  let acc: i64 = 0:i64
  for r0 in 0..4096 {
    acc = argmax(best, in0[r0], r0)
  }
  out0[0] = acc
}";
        assert_eq!(mapping(scalar), "single(#0..#4)");
    }

    #[test]
    fn rows_with_inner_loops_are_one_block_per_row() {
        let k = row_program(8, 40, "0.0:f32", "sum", "Div");
        assert_eq!(mapping(&k), "rows(#0, o0, 8, 32 threads)");
    }

    #[test]
    fn a_reduction_carried_across_the_loop_runs_on_one_thread() {
        let k = "kernel k(in0: f32[8,40], out out0: f32[40]) {
  for i1 in 0..40 {
    out0[i1] = 0.0:f32
  }
  for r0 in 0..8 {
    for i1 in 0..40 {
      out0[i1] = Add(out0[i1], in0[40*r0 + i1])
    }
  }
}";
        assert_eq!(mapping(k), "threads(#0, i1, 40); single(#1..#2)");
    }

    #[test]
    fn overlapping_rows_are_not_independent() {
        // Row o0 writes 41 elements with a stride of 40: neighbours overlap.
        let k = "kernel k(in0: f32[8,41], out out0: f32[400]) {
  for o0 in 0..8 {
    for i1 in 0..41 {
      out0[40*o0 + i1] = in0[41*o0 + i1]
    }
  }
}";
        assert_eq!(mapping(k), "single(#0..#1)");
    }

    #[test]
    fn a_top_level_local_makes_one_launch() {
        let k = scalar_sum(40, "acc");
        assert_eq!(mapping(&k), "all_reduce(#0..#3, 1 blocks, 32 threads)");
    }

    #[test]
    fn a_long_sum_to_a_scalar_spreads_over_blocks() {
        let k = scalar_sum(8388608, "Div(acc, 8388608.0:f32)");
        assert_eq!(mapping(&k), "all_reduce(#0..#3, 528 blocks, 256 threads)");
    }

    #[test]
    fn a_reduction_reading_an_earlier_scalar_reduction_runs_on_one_block() {
        let k = "kernel k(in0: f32[4096], out out0: f32[]) {
  let mean: f32 = 0.0:f32
  for r0 in 0..4096 {
    mean = sum(mean, in0[r0])
  }
  let var: f32 = 0.0:f32
  for r0 in 0..4096 {
    var = sum(var, Mul(Sub(in0[r0], mean), Sub(in0[r0], mean)))
  }
  out0[0] = var
}";
        assert_eq!(mapping(k), "block(#0..#5, 256 threads)");
        let long = k.replace("4096", "1048576");
        assert_eq!(mapping(&long), "split_rows(#0.., 132 blocks, 256 threads)");
    }

    #[test]
    fn a_reduction_over_the_outer_axis_is_columns() {
        // y-reduce: consecutive outputs read consecutive elements; warps
        // share each output's 1280 rows.
        let k = "kernel k(in0: f32[1280,21128], out out0: f32[21128]) {
  for i0 in 0..21128 {
    let acc: f32 = 0.0:f32
    for r0 in 0..1280 {
      acc = sum(acc, in0[21128*r0 + i0])
    }
    out0[i0] = acc
  }
}";
        assert_eq!(mapping(k), "columns(#0, i0, 21128, 8 groups)");
        // 768 outputs are 24 blocks of columns for 132 multiprocessors:
        // 11 blocks share each one's 8192 rows (264 blocks in all).
        let few = k.replace("21128", "768").replace("1280", "8192");
        assert_eq!(mapping(&few), "columns(#0, i0, 768, 8 groups, 11 splits)");
        // Short reductions are not split below 16 rows per warp.
        let short = k.replace("21128", "768").replace("1280", "256");
        assert_eq!(mapping(&short), "columns(#0, i0, 768, 8 groups, 2 splits)");
    }

    #[test]
    fn few_long_rows_split_over_blocks() {
        let k = row_program(8, 1048576, "-inf:f32", "max", "Sub");
        assert_eq!(
            mapping(&k),
            "split_rows(#0, o0, 8, 16 blocks per row, 256 threads)"
        );
    }

    #[test]
    fn layer_norm_rows_are_blocks_with_dependent_reductions() {
        let k = "kernel k(in0: f32[64,768], out out0: f32[64,768]) {
  for o0 in 0..64 {
    let mean: f32 = 0.0:f32
    for r0 in 0..768 {
      mean = sum(mean, in0[768*o0 + r0])
    }
    let var: f32 = 0.0:f32
    for r0 in 0..768 {
      var = sum(var, Mul(Sub(in0[768*o0 + r0], mean), Sub(in0[768*o0 + r0], mean)))
    }
    for i1 in 0..768 {
      out0[768*o0 + i1] = Div(Sub(in0[768*o0 + i1], mean), var)
    }
  }
}";
        assert_eq!(mapping(k), "rows(#0, o0, 64, 256 threads)");
    }
}

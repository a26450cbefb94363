//! The default schedule of a kernel without output loops (reductions to
//! scalars, or a row program over one row).
//!
//! Needs: a kernel from [`crate::lower`] whose top-level statements are a
//! row program (`gpu_map::rows` proves its reduction nests store nothing
//! two iterations share).
//! Guarantees: directives only (data): each long reduction nest coalesced,
//! chunked over threads (the C printer combines the partials in thread
//! order) and vectorized within a chunk; each long output loop chunked.

use super::vector_sums::{f32_in_and_out, lane_partials, sums_f32_values};
use super::{work, CHUNK, PARALLEL_MIN_WORK};
use crate::canonical::{coalesce_inward, Coalescing};
use crate::gpu_map::rows::RowPart;
use crate::ir::{find_loop, Kernel, Loop, Stmt};
use crate::schedule::{split_names, Directive, Schedule};
use kiln_ir::DType;
use kiln_target::TargetDesc;

/// The schedule of a kernel without output loops (reductions to scalars,
/// or a row program over one row: Softmax of a vector): each top-level
/// reduction nest doing at least [`PARALLEL_MIN_WORK`] iterations is
/// coalesced, split into [`CHUNK`]s run in parallel, and vectorized within
/// a chunk (the C printer combines the threads' partial results in thread
/// order: deterministic for a given thread count); each such output loop
/// too ([`chunked_loop`]).
pub(super) fn scalar_reductions(k: &Kernel, target: &TargetDesc) -> Schedule {
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

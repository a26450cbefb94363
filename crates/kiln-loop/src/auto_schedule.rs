//! The default schedule of a lowered kernel, chosen by rule.
//!
//! Needs: a kernel straight from [`crate::lower`] (output loops `i0, i1, …`
//! perfectly nested, outermost first).
//! Guarantees: a [`Schedule`] (data; [`crate::schedule::apply`] carries it
//! out) that
//! 1. coalesces output loops from the innermost outwards while every
//!    offset stays free of `floordiv`/`mod` of the coalesced variable (the
//!    contiguous part of the iteration space becomes one loop);
//! 2. splits a single remaining loop longer than [`CHUNK`] into chunks;
//! 3. runs the outermost loop in parallel when the kernel does enough
//!    work ([`PARALLEL_MIN_WORK`] element-steps) to pay for waking threads;
//! 4. vectorizes the innermost output loop when its body is plain stores;
//!    for a reduction whose loads walk that loop's variable with stride 1
//!    or 2 (windows, small matmuls), first moves the reduction loops
//!    outside it (`accumulate_outward`) so it vectorizes too.

use crate::ir::{Atom, Kernel, Loop, Stmt, Val};
use crate::schedule::{apply, fused_name, has_div_mod_of, split_names, Directive, Schedule};

/// Elements per parallel chunk of a fully coalesced loop.
pub const CHUNK: i64 = 4096;

/// Output elements per parallel chunk of a matrix-vector product.
pub const ROW_CHUNK: i64 = 64;

/// Work (loop iterations, reductions included) below which a kernel runs on
/// one thread.
pub const PARALLEL_MIN_WORK: i64 = 1 << 15;

/// The perfect nest of output loops at the top of `body`, outermost first.
fn output_nest(body: &[Stmt]) -> Vec<&Loop> {
    let mut nest = Vec::new();
    let mut cur = body;
    while let [Stmt::Loop(l)] = cur {
        if !l.var.starts_with('i') {
            break;
        }
        nest.push(l);
        cur = &l.body;
    }
    nest
}

/// Iterations of every loop in `body`, counting nested loops fully.
fn work(body: &[Stmt]) -> i64 {
    body.iter()
        .map(|s| match s {
            Stmt::Loop(l) => l.extent.max() * work(&l.body).max(1),
            _ => 1,
        })
        .sum()
}

pub fn default_schedule(k: &Kernel) -> Schedule {
    let mut schedule = Schedule::default();
    let mut current = k.clone();
    let vars: Vec<String> = output_nest(&k.body).iter().map(|l| l.var.clone()).collect();
    let Some(mut inner) = vars.last().cloned() else {
        return schedule;
    };
    let mut outer_index = vars.len() - 1;
    while outer_index > 0 {
        let outer = &vars[outer_index - 1];
        let d = Directive::Fuse {
            outer: outer.clone(),
            inner: inner.clone(),
        };
        let Ok(fused) = apply(&current, &Schedule(vec![d.clone()])) else {
            break;
        };
        let name = fused_name(outer, &inner);
        if has_div_mod_of(&fused.body, &name) {
            break;
        }
        schedule.0.push(d);
        current = fused;
        inner = name;
        outer_index -= 1;
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
    let parallel = total >= PARALLEL_MIN_WORK;
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
    let last_loop = output_nest(&current.body).last().map(|l| (*l).clone());
    let along = last_loop
        .as_ref()
        .is_some_and(|l| !plain && reads_along(&l.body, &innermost));
    if nest.len() == 1 && parallel && along && extent >= 2 * ROW_CHUNK {
        // A reduction with one output loop (matrix-vector product): chunks
        // of the row in parallel, each accumulated in the y-reduce form.
        let (o, i) = split_names(&innermost);
        schedule.0.push(Directive::Split {
            var: innermost,
            factor: ROW_CHUNK,
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
    let y_reduce = last.as_ref().is_some_and(|l| {
        !plain && (nest.len() > 1 || !parallel) && extent >= 8 && reads_along(&l.body, &innermost)
    });
    if y_reduce {
        schedule
            .0
            .push(Directive::AccumulateOutward(innermost.clone()));
        schedule.0.push(Directive::Vectorize(innermost));
    } else if plain && (nest.len() > 1 || !parallel) {
        schedule.0.push(Directive::Vectorize(innermost));
    }
    schedule
}

/// Whether some load in `body` walks memory with stride 1 or 2 along
/// `var` (so making `var` the innermost loop reads contiguous rows).
fn reads_along(body: &[Stmt], var: &str) -> bool {
    fn val(v: &Val, var: &str) -> bool {
        match v {
            Val::Load { offset, .. } => offset
                .terms
                .iter()
                .any(|(a, c)| matches!(a, Atom::Var(x) if x == var) && c.abs() <= 2),
            Val::Call(_, args) => args.iter().any(|a| val(a, var)),
            _ => false,
        }
    }
    body.iter().any(|s| match s {
        Stmt::Loop(l) => reads_along(&l.body, var),
        Stmt::Update { value, .. } | Stmt::Store { value, .. } | Stmt::Let { value, .. } => {
            val(value, var)
        }
        Stmt::Gemm(_) => false,
    })
}

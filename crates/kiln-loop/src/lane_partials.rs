//! Lane partials: a vectorized loop's reductions kept in several
//! independent vector accumulators (the `lane_partials(var, lanes)`
//! directive).
//!
//! Needs: loop `var` of a constant extent, its body straight-line
//! (`let`, stores, updates: no loops, no arg-reductions), every update a
//! sum, product, max or min into a float local declared outside the loop
//! (whose type `local_type` knows) that the body does not read.
//! Guarantees: `for var in 0..E { …; acc = op(acc, v) }` becomes
//!
//! ```text
//! alloc acc_l: T[lanes]
//! for varl in 0..lanes { acc_l[varl] = identity }
//! for varb in 0..E/lanes { for varl in 0..lanes { …; acc_l[varl] = Op(acc_l[varl], v) } }
//! for var in 0..E%lanes { …; acc = op(acc, v) }        (shifted past the blocks)
//! for varl in 0..lanes { acc = op(acc, acc_l[varl]) }
//! ```
//!
//! with `varl` and the remainder loop of `var`'s kind, `varb` serial; `T`
//! is the local's type, f32 for an f16 or bf16 max or min (exact: the
//! extreme is one of the values). The values are the same reductions in
//! another association (as a vectorized loop's reduction clause already
//! reassociates them; max and min keep NaN through the op's own rule).
//! Why: a vectorized reduction keeps one vector accumulator, so a loop
//! that only loads and adds waits on the adder's latency at every vector;
//! `lanes` consecutive elements in a local array of constant size give the
//! compiler that many lanes of independent accumulators, which it keeps in
//! registers, and an f16 loop's conversions then come a register at a time
//! (BENCHMARKS.md, session 21).

use crate::ir::{reduced_locals, Buffer, Extent, Idx, Loop, LoopKind, Scope, Stmt, Val};
use kiln_ir::{bail, DType, Result};
use kiln_ops::te::Combiner;

/// Loop `l` with its reductions into outer locals kept in `lanes` partials each (see the
/// module doc); new local buffers are appended to `buffers`.
pub(crate) fn lane_partials(
    l: &Loop,
    lanes: i64,
    buffers: &mut Vec<Buffer>,
    local_type: &dyn Fn(&str) -> Option<DType>,
) -> Result<Vec<Stmt>> {
    let Extent::Const(extent) = l.extent else {
        bail!(
            "schedule: loop '{}' has a tail bound: no lane partials",
            l.var
        );
    };
    if lanes < 1 || extent < lanes {
        bail!(
            "schedule: loop '{}' of {extent} iterations cannot keep {lanes} lane partials",
            l.var
        );
    }
    check_straight_reductions(l, local_type)?;
    let (block, lane) = (format!("{}b", l.var), format!("{}l", l.var));
    let at = Idx::var(&lane);
    let partials = partial_buffers(l, lanes, buffers, local_type)?;
    let lane_loop = |body: Vec<Stmt>| Loop {
        var: lane.clone(),
        extent: Extent::Const(lanes),
        kind: l.kind,
        body,
    };
    let mut out: Vec<Stmt> = partials.iter().map(|p| Stmt::Alloc(p.buf)).collect();
    let mut starts = Vec::new();
    for p in &partials {
        let identity = crate::lower::identity(p.dtype, p.combiner)?;
        starts.push(Stmt::store(p.buf, at.clone(), Val::Const(identity)));
    }
    out.push(Stmt::Loop(lane_loop(starts)));
    let element = Idx::var(&block).scale(lanes).plus(&at);
    let blocked = l
        .body
        .iter()
        .map(|s| lane_update(&s.substitute(&l.var, &element), &partials, &at))
        .collect();
    out.push(Stmt::Loop(Loop {
        var: block,
        extent: Extent::Const(extent / lanes),
        kind: LoopKind::Serial,
        body: vec![Stmt::Loop(lane_loop(blocked))],
    }));
    let done = extent - extent % lanes;
    if done < extent {
        out.push(Stmt::Loop(l.part(done, extent - done)));
    }
    let folds = partials
        .iter()
        .map(|p| Stmt::Update {
            name: p.name.clone(),
            combiner: p.combiner,
            value: load(p.buf, &at),
        })
        .collect();
    out.push(Stmt::Loop(lane_loop(folds)));
    Ok(out)
}

/// One local buffer of `lanes` partials for each outer local `l` reduces into, appended to
/// `buffers`.
fn partial_buffers(
    l: &Loop,
    lanes: i64,
    buffers: &mut Vec<Buffer>,
    local_type: &dyn Fn(&str) -> Option<DType>,
) -> Result<Vec<Partial>> {
    let mut partials = Vec::new();
    for (name, combiner) in reduced_locals(&l.body) {
        let Some(dtype) = local_type(&name).map(|d| partial_type(d, combiner)) else {
            bail!(
                "schedule: loop '{}' reduces into undeclared local '{name}'",
                l.var
            );
        };
        let buffer = kiln_ir::unique_name(&format!("{name}_l"), &|n| {
            buffers.iter().any(|b| b.name == n)
        });
        partials.push(Partial {
            name,
            combiner,
            dtype,
            buf: buffers.len(),
        });
        buffers.push(Buffer {
            name: buffer,
            dtype,
            shape: vec![lanes as usize],
            output: false,
            scope: Scope::Local,
        });
    }
    Ok(partials)
}

/// A local's partials: its name, combiner, and the local buffer of their type.
struct Partial {
    name: String,
    combiner: Combiner,
    dtype: DType,
    buf: usize,
}

/// The type of the partials of a local of `dtype` reduced by `combiner`: its own, f32 for
/// an f16 or bf16 max or min (exact: the extreme is one of the values; no conversion of
/// 16-bit values back and forth at every step). Lane partials and a y-reduce's row of
/// partials (`schedule.rs` `accumulate_outward`) both keep theirs in it.
pub(crate) fn partial_type(dtype: DType, combiner: Combiner) -> DType {
    let extreme = matches!(combiner, Combiner::Max | Combiner::Min);
    if extreme && dtype.is_half_float() {
        DType::F32
    } else {
        dtype
    }
}

/// Fails unless `l`'s body is straight-line reductions ([`straight_reductions`]).
fn check_straight_reductions(l: &Loop, local_type: &dyn Fn(&str) -> Option<DType>) -> Result<()> {
    if !straight_reductions(l, local_type) {
        bail!(
            "schedule: loop '{}' is not straight-line float reductions into outer locals \
             it does not read: no lane partials",
            l.var
        );
    }
    Ok(())
}

/// Whether `l`'s body is straight-line (`let`, stores, updates) and reduces into outer
/// locals, only float ones (of `local_type`), only by sum, product, max or min, and
/// without reading them: what lane partials need.
pub(crate) fn straight_reductions(l: &Loop, local_type: &dyn Fn(&str) -> Option<DType>) -> bool {
    let straight = l.body.iter().all(|s| match s {
        Stmt::Let { .. } | Stmt::Store { .. } => true,
        Stmt::Update { combiner, .. } => !matches!(combiner, Combiner::And | Combiner::Or),
        _ => false,
    });
    let reduced = reduced_locals(&l.body);
    let floats = reduced
        .iter()
        .all(|(n, _)| local_type(n).is_some_and(|d| d.is_float()));
    // A body that reads a local it reduces would read the outer local, not the lanes'.
    let mut read = Vec::new();
    crate::gpu_map::locals_read(&l.body, &mut read);
    let unread = reduced.iter().all(|(n, _)| !read.contains(n));
    straight && !reduced.is_empty() && floats && unread
}

/// `s` with an update of a local in `partials` turned into a read-modify-write of that
/// local's partial at lane `at` (the value cast to the partial's type, which the local
/// widened implicitly).
fn lane_update(s: &Stmt, partials: &[Partial], at: &Idx) -> Stmt {
    let Stmt::Update { name, value, .. } = s else {
        return s.clone();
    };
    let Some(p) = partials.iter().find(|p| p.name == *name) else {
        return s.clone();
    };
    let combined = Val::Call(
        p.combiner.scalar(),
        vec![load(p.buf, at), Val::cast(p.dtype, value.clone())],
    );
    Stmt::store(p.buf, at.clone(), combined)
}

fn load(buf: usize, at: &Idx) -> Val {
    Val::Load {
        buf,
        offset: at.clone(),
        guard: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use crate::schedule::{apply, Directive, Schedule};

    fn lanes(var: &str, lanes: i64) -> Schedule {
        Schedule(vec![
            Directive::Vectorize(var.into()),
            Directive::LanePartials {
                var: var.into(),
                lanes,
            },
        ])
    }

    #[test]
    fn a_row_sum_keeps_lane_partials_and_a_remainder() {
        let k = crate::parse_kernel(
            "kernel k(in0: f32[3,20], out out0: f32[3]) {
  for i0 in 0..3 {
    let acc: f32 = 0.0:f32
    for r0 in 0..20 {
      acc = sum(acc, in0[20*i0 + r0])
    }
    out0[i0] = acc
  }
}",
        )
        .unwrap();
        let got = apply(&k, &lanes("r0", 8)).unwrap().to_string();
        let want = "kernel k(in0: f32[3,20], out out0: f32[3]) {
  for i0 in 0..3 {
    let acc: f32 = 0.0:f32
    alloc acc_l: f32[8]
    vectorized for r0l in 0..8 {
      acc_l[r0l] = 0.0:f32
    }
    for r0b in 0..2 {
      vectorized for r0l in 0..8 {
        acc_l[r0l] = Add(acc_l[r0l], Cast{to=1}(in0[20*i0 + 8*r0b + r0l]))
      }
    }
    vectorized for r0 in 0..4 {
      acc = sum(acc, in0[20*i0 + r0 + 16])
    }
    vectorized for r0l in 0..8 {
      acc = sum(acc, acc_l[r0l])
    }
    out0[i0] = acc
  }
}";
        assert_eq!(got, want);
    }

    #[test]
    fn a_body_reading_its_own_reduction_is_refused() {
        let k = crate::parse_kernel(
            "kernel k(in0: f32[20], out out0: f32[20]) {
  let acc: f32 = -inf:f32
  for r0 in 0..20 {
    acc = max(acc, in0[r0])
    out0[r0] = acc
  }
}",
        )
        .unwrap();
        let err = apply(&k, &lanes("r0", 8)).unwrap_err().to_string();
        assert!(err.contains("no lane partials"), "{err}");
    }
}

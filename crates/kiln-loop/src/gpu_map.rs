//! Mapping a kernel onto a GPU's blocks and threads.
//!
//! Needs: a kernel lowered for a GPU target (output loops coalesced by
//! `default_schedule`; loop kinds are CPU marks and are ignored here).
//! Guarantees: a [`GpuMapping`] (data) that splits the body into launches
//! run in order on one stream, each one of
//! - **threads** — a top-level loop whose iterations touch disjoint
//!   elements of every output (proved from the offsets: each access of an
//!   output is `c·v + rest` with the same stride `c` per buffer and `rest`
//!   within `[0, c)` over the inner loops), one GPU thread per iteration;
//! - **gemm** — the kernel's matrix product (the tiled template);
//! - **single** — statements whose iterations are not provably
//!   independent (a reduction carried across the loop, a data-dependent
//!   store), run by one thread: slow, never wrong.
//!
//! A top-level local (`let`, `alloc`) lives across statements, so a kernel
//! with one is a single launch of one thread.

use crate::ir::{Extent, Idx, Kernel, Loop, Scope, Stmt, Val};
use std::collections::HashMap;
use std::fmt;

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
    /// Statement `stmt` is the kernel's gemm.
    Gemm { stmt: usize },
    /// Statements `from..to` run by one thread.
    Single { from: usize, to: usize },
}

/// A kernel's launches, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuMapping(pub Vec<Launch>);

impl fmt::Display for Launch {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Launch::Threads { stmt, var, extent } => {
                write!(f, "threads(#{stmt}, {var}, {extent})")
            }
            Launch::Gemm { stmt } => write!(f, "gemm(#{stmt})"),
            Launch::Single { from, to } => write!(f, "single(#{from}..#{to})"),
        }
    }
}

impl fmt::Display for GpuMapping {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|l| l.to_string()).collect();
        write!(f, "{}", parts.join("; "))
    }
}

/// The launches of `k` (see the module doc).
pub fn map_kernel(k: &Kernel) -> GpuMapping {
    let n = k.body.len();
    let has_top_local = k
        .body
        .iter()
        .any(|s| matches!(s, Stmt::Let { .. } | Stmt::Update { .. } | Stmt::Alloc(_)));
    if has_top_local {
        return GpuMapping(vec![Launch::Single { from: 0, to: n }]);
    }
    let launches = k
        .body
        .iter()
        .enumerate()
        .map(|(i, s)| match s {
            Stmt::Gemm(_) => Launch::Gemm { stmt: i },
            Stmt::Loop(l) if independent_iterations(k, l) => Launch::Threads {
                stmt: i,
                var: l.var.clone(),
                extent: l.extent.max(),
            },
            _ => Launch::Single { from: i, to: i + 1 },
        })
        .collect();
    GpuMapping(launches)
}

/// One access of an output buffer: its offset and the ranges of the loop
/// variables inside the mapped loop at that point.
struct Access {
    buf: usize,
    offset: Idx,
    ranges: HashMap<String, (i64, i64)>,
}

/// Whether the iterations of `l` (a top-level loop of `k`) touch disjoint
/// elements of every output buffer.
fn independent_iterations(k: &Kernel, l: &Loop) -> bool {
    if !matches!(l.extent, Extent::Const(_)) {
        return false;
    }
    let mut accesses = Vec::new();
    let mut ranges = HashMap::new();
    if !collect_accesses(k, &l.body, &mut ranges, &mut accesses) {
        return false;
    }
    let mut stride_of: HashMap<usize, i64> = HashMap::new();
    for a in &accesses {
        let Some(c) = stride_within(a, &l.var) else {
            return false;
        };
        if *stride_of.entry(a.buf).or_insert(c) != c {
            return false;
        }
    }
    true
}

/// The stride `c` of `a`'s offset in `var` when the rest of the offset
/// stays within `[0, c)`.
fn stride_within(a: &Access, var: &str) -> Option<i64> {
    let var_atom = crate::ir::Atom::Var(var.to_string());
    let c = a
        .offset
        .terms
        .iter()
        .find(|(t, _)| *t == var_atom)
        .map(|(_, c)| *c)?;
    let rest = Idx {
        terms: a
            .offset
            .terms
            .iter()
            .filter(|(t, _)| *t != var_atom)
            .cloned()
            .collect(),
        constant: a.offset.constant,
    };
    if c < 1 || rest.uses(var) {
        return None;
    }
    let unknown = (i64::MIN / 4, i64::MAX / 4);
    let (lo, hi) = rest.range(&|v| a.ranges.get(v).copied().unwrap_or(unknown));
    (lo >= 0 && hi < c).then_some(c)
}

/// Records every access of an output buffer in `body`; false when the body
/// holds something a thread cannot run on its own (a gemm).
fn collect_accesses(
    k: &Kernel,
    body: &[Stmt],
    ranges: &mut HashMap<String, (i64, i64)>,
    out: &mut Vec<Access>,
) -> bool {
    let is_output = |b: usize| k.buffers[b].output && k.buffers[b].scope == Scope::Param;
    let record_loads = |v: &Val, ranges: &HashMap<String, (i64, i64)>, out: &mut Vec<Access>| {
        v.for_each_load(&mut |buf, offset, _| {
            if is_output(buf) {
                out.push(Access {
                    buf,
                    offset: offset.clone(),
                    ranges: ranges.clone(),
                });
            }
        })
    };
    for s in body {
        match s {
            Stmt::Loop(inner) => {
                ranges.insert(inner.var.clone(), (0, inner.extent.max().max(1) - 1));
                let ok = collect_accesses(k, &inner.body, ranges, out);
                ranges.remove(&inner.var);
                if !ok {
                    return false;
                }
            }
            Stmt::Store { buf, offset, value } => {
                record_loads(value, ranges, out);
                offset_loads(offset, &mut |v| record_loads(v, ranges, out));
                if is_output(*buf) {
                    out.push(Access {
                        buf: *buf,
                        offset: offset.clone(),
                        ranges: ranges.clone(),
                    });
                }
            }
            Stmt::Let { value, .. } | Stmt::Update { value, .. } => {
                record_loads(value, ranges, out)
            }
            Stmt::Alloc(_) => {}
            Stmt::Gemm(_) => return false,
        }
    }
    true
}

/// Calls `f` on the values read inside `i`'s data-dependent atoms.
fn offset_loads(i: &Idx, f: &mut dyn FnMut(&Val)) {
    for (a, _) in &i.terms {
        match a {
            crate::ir::Atom::Data { value, .. } => f(value),
            crate::ir::Atom::Div(e, _) | crate::ir::Atom::Mod(e, _) => offset_loads(e, f),
            crate::ir::Atom::Var(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(text: &str) -> String {
        map_kernel(&crate::parse_kernel(text).expect("kernel")).to_string()
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
    fn rows_with_inner_loops_are_one_thread_per_row() {
        let k = "kernel k(in0: f32[8,40], out out0: f32[8,40]) {
  for o0 in 0..8 {
    let acc: f32 = 0.0:f32
    for r0 in 0..40 {
      acc = sum(acc, in0[40*o0 + r0])
    }
    for i1 in 0..40 {
      out0[40*o0 + i1] = Div(in0[40*o0 + i1], acc)
    }
  }
}";
        assert_eq!(mapping(k), "threads(#0, o0, 8)");
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
        let k = "kernel k(in0: f32[40], out out0: f32[]) {
  let acc: f32 = 0.0:f32
  for r0 in 0..40 {
    acc = sum(acc, in0[r0])
  }
  out0[0] = acc
}";
        assert_eq!(mapping(k), "single(#0..#3)");
    }
}

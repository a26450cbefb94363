//! Unroll-and-jam ([`Directive::Jam`](crate::schedule::Directive::Jam)):
//! the loop over `var` advances `factor` points at a time, and every loop
//! inside it computes those points in one body.
//!
//! Needs: loop `var` with a constant extent whose body holds no local
//! buffers, matmuls or combines, and no loop whose bounds depend on `var`;
//! a body that reads no buffer it stores, unless its points touch disjoint
//! elements of it (a row program's rows) or add into one element per inner
//! iteration in point order (a y-reduce streaming rows into its output):
//! `jam/order.rs`.
//! Guarantees: the same stores of the same values. For the first
//! `extent - extent % factor` points, each statement outside the body's
//! loops is repeated `factor` times in place and each loop is kept once
//! with its body jammed the same way: copy `j` has `var = factor*var + j`
//! and the body's locals renamed `NAME_jJ`. Each copy's statements keep
//! their order. The last `extent % factor` points, when there are at least
//! two, are one more iteration of them all jammed (a single point runs in
//! a loop over `var` as before, shifted), serial where the loop was
//! parallel. With fewer points than `factor` they are all jammed in one
//! iteration.
//!
//! Why: in a depthwise convolution vectorized along channels, every output
//! pixel reloads the window's weight vectors and its neighbours' input
//! vectors. Jammed, the copies' shared loads are the same expressions in
//! one loop body, which the C compiler reads once: a 3x3 depthwise
//! convolution over 144 channels at 56x56 ran 0.121 ms as one pixel per
//! iteration and 0.072 ms as six (hand-edited C of kiln's kernel, Zen 4).
//! A row program over short rows (a LayerNorm over 64 elements) waits at
//! each row on its reductions' latency (a vector's lanes summed one after
//! another, an exp's polynomial): jammed rows give the core independent
//! chains to overlap. And a y-reduce adding rows into its output row loads
//! and stores that row once per jammed group of rows instead of once per
//! row (BENCHMARKS.md, session 32).

use crate::ir::{ArgStep, Combine, Extent, Idx, Loop, LoopKind, Stmt, Val};
use crate::schedule::{Directive, Schedule};
use crate::Kernel;
use kiln_ir::{bail, Result};

mod order;

/// `Jam { var, factor }` as the last directive after `schedule`, when it would apply to
/// `k` (the loop exists and [`jam`] takes it): schedule rules ask before adding one, since a
/// schedule that fails leaves its kernel to the interpreter.
pub(crate) fn jammed_after(
    k: &Kernel,
    schedule: &Schedule,
    var: &str,
    factor: i64,
) -> Option<Directive> {
    let scheduled = crate::schedule::apply(k, schedule).ok()?;
    let l = crate::ir::find_loop(&scheduled.body, var)?;
    jam(l, factor).ok()?;
    Some(Directive::Jam {
        var: var.to_string(),
        factor,
    })
}

pub(crate) fn jam(l: &Loop, factor: i64) -> Result<Vec<Stmt>> {
    let Extent::Const(extent) = l.extent else {
        bail!(
            "schedule: loop '{}' has a tail bound and cannot be jammed",
            l.var
        );
    };
    if factor < 1 {
        bail!("schedule: jam factor must be at least 1, got {factor}");
    }
    if let Some(what) = unjammable(&l.body) {
        bail!(
            "schedule: loop '{}' holds {what} and cannot take jammed copies",
            l.var
        );
    }
    let factor = factor.min(extent);
    if factor <= 1 {
        return Ok(vec![Stmt::Loop(l.clone())]);
    }
    let jammed = extent / factor;
    let ordered = order::points_disjoint(l) || order::accumulates_in_place(l);
    if reads_what_it_stores(&l.body) && !ordered {
        bail!(
            "schedule: loop '{}' reads a buffer it stores to; its points cannot be jammed",
            l.var
        );
    }
    let mut locals = Vec::new();
    declared_locals(&l.body, &mut locals);
    let copies = Copies {
        var: &l.var,
        factor,
        locals,
    };
    let mut out = vec![Stmt::Loop(Loop {
        extent: Extent::Const(jammed),
        body: copies.jam(&l.body)?,
        ..l.clone()
    })];
    // The last points jammed too: a border or leftover column of a
    // depthwise convolution otherwise reloads the window's weights per
    // point (BENCHMARKS.md, session 26).
    // They are fewer than `factor` points: a parallel loop's last ones run
    // on the thread that reaches them, without a parallel region of their own.
    let rest = extent % factor;
    if rest > 0 {
        let last = Loop {
            kind: match l.kind {
                LoopKind::Parallel => LoopKind::Serial,
                kind => kind,
            },
            ..l.part(jammed * factor, rest)
        };
        out.extend(jam(&last, rest)?);
    }
    Ok(out)
}

/// The `factor` copies of a body, point `j` at `var = factor*var + j`.
struct Copies<'a> {
    var: &'a str,
    factor: i64,
    locals: Vec<String>,
}

impl Copies<'_> {
    /// `body` with its loops kept once and every other statement repeated
    /// per copy in place, so the copies' work interleaves down to the
    /// innermost statement (where their shared loads meet).
    fn jam(&self, body: &[Stmt]) -> Result<Vec<Stmt>> {
        let mut out = Vec::new();
        for s in body {
            match s {
                Stmt::Loop(l) => {
                    if matches!(&l.extent, Extent::Tail { outer, .. } if outer == self.var) {
                        bail!(
                            "schedule: loop '{}' has bounds depending on '{}' and cannot be jammed",
                            l.var,
                            self.var
                        );
                    }
                    out.push(Stmt::Loop(Loop {
                        body: self.jam(&l.body)?,
                        ..l.clone()
                    }));
                }
                _ => out.extend((0..self.factor).map(|j| self.copy(s, j))),
            }
        }
        Ok(out)
    }

    fn copy(&self, s: &Stmt, j: i64) -> Stmt {
        let point = Idx::var(self.var)
            .scale(self.factor)
            .plus(&Idx::constant(j));
        rename_locals(&s.substitute(self.var, &point), &self.locals, j)
    }
}

/// Whether `body` loads from a buffer it also stores to (a copy could
/// then read what another stored).
pub(crate) fn reads_what_it_stores(body: &[Stmt]) -> bool {
    let stored = crate::ir::stored_buffers(body);
    let mut reads = false;
    crate::ir::for_each_load(body, &mut |buf, _, _| reads |= stored.contains(&buf));
    reads
}

/// What in `body` a copy cannot repeat: a local buffer (the copies would
/// share it), a matmul or a parallel loop's combine.
fn unjammable(body: &[Stmt]) -> Option<&'static str> {
    body.iter().find_map(|s| match s {
        Stmt::Alloc(_) => Some("a local buffer"),
        Stmt::Gemm(_) => Some("a matmul"),
        Stmt::Combine(_) => Some("a combine"),
        Stmt::Loop(inner) => unjammable(&inner.body),
        _ => None,
    })
}

/// Names of the locals `body` declares, in its loops too (each copy
/// declares its own).
fn declared_locals(body: &[Stmt], out: &mut Vec<String>) {
    for s in body {
        match s {
            Stmt::Let { name, .. } => out.push(name.clone()),
            Stmt::Loop(inner) => declared_locals(&inner.body, out),
            _ => {}
        }
    }
}

/// `s` with each of `locals` renamed to its copy `j`'s name, declared,
/// updated and read.
fn rename_locals(s: &Stmt, locals: &[String], j: i64) -> Stmt {
    let renamed = |name: &String| {
        if locals.contains(name) {
            format!("{name}_j{j}")
        } else {
            name.clone()
        }
    };
    match s {
        Stmt::Loop(l) => Stmt::Loop(Loop {
            body: l.body.iter().map(|s| rename_locals(s, locals, j)).collect(),
            ..l.clone()
        }),
        Stmt::Store { buf, offset, value } => Stmt::Store {
            buf: *buf,
            offset: offset.clone(),
            value: rename_reads(value, &renamed),
        },
        Stmt::Let { name, dtype, value } => Stmt::Let {
            name: renamed(name),
            dtype: *dtype,
            value: rename_reads(value, &renamed),
        },
        Stmt::Update {
            name,
            combiner,
            value,
        } => Stmt::Update {
            name: renamed(name),
            combiner: *combiner,
            value: rename_reads(value, &renamed),
        },
        Stmt::ArgUpdate(a) => Stmt::ArgUpdate(Box::new(ArgStep {
            name: renamed(&a.name),
            best: renamed(&a.best),
            value: rename_reads(&a.value, &renamed),
            ..(**a).clone()
        })),
        Stmt::Combine(c) => Stmt::Combine(Box::new(Combine {
            name: renamed(&c.name),
            value: rename_reads(&c.value, &renamed),
            ..(**c).clone()
        })),
        Stmt::Gemm(_) | Stmt::Alloc(_) => s.clone(),
    }
}

fn rename_reads(v: &Val, renamed: &dyn Fn(&String) -> String) -> Val {
    v.map_leaves(&|leaf| match leaf {
        Val::Local(name) => Some(Val::Local(renamed(name))),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use crate::schedule::{apply, Directive, Schedule};
    use crate::{parse_kernel, Kernel};

    fn jammed(src: &str, var: &str, factor: i64) -> kiln_ir::Result<Kernel> {
        let k = parse_kernel(src)?;
        let d = Directive::Jam {
            var: var.into(),
            factor,
        };
        apply(&k, &Schedule(vec![d]))
    }

    const ROW_SUMS: &str = "kernel k(in0: f32[5,4], out out0: f32[5,4]) {
  for i0 in 0..5 {
    vectorized for i1 in 0..4 {
      let acc: f32 = 0.0:f32
      unrolled for r0 in 0..2 {
        acc = sum(acc, in0[4*i0 + 4*r0 + i1 if i0 + r0 < 5])
      }
      out0[4*i0 + i1] = acc
    }
  }
}
";

    #[test]
    fn copies_interleave_inside_the_loops_and_the_rest_runs_as_before() {
        let k = jammed(ROW_SUMS, "i0", 2).unwrap();
        let expected = "kernel k(in0: f32[5,4], out out0: f32[5,4]) {
  for i0 in 0..2 {
    vectorized for i1 in 0..4 {
      let acc_j0: f32 = 0.0:f32
      let acc_j1: f32 = 0.0:f32
      unrolled for r0 in 0..2 {
        acc_j0 = sum(acc_j0, in0[8*i0 + 4*r0 + i1 if 2*i0 + r0 < 5])
        acc_j1 = sum(acc_j1, in0[8*i0 + 4*r0 + i1 + 4 if 2*i0 + r0 + 1 < 5])
      }
      out0[8*i0 + i1] = acc_j0
      out0[8*i0 + i1 + 4] = acc_j1
    }
  }
  for i0 in 0..1 {
    vectorized for i1 in 0..4 {
      let acc: f32 = 0.0:f32
      unrolled for r0 in 0..2 {
        acc = sum(acc, in0[4*i0 + 4*r0 + i1 + 16 if i0 + r0 + 4 < 5])
      }
      out0[4*i0 + i1 + 16] = acc
    }
  }
}
";
        assert_eq!(k.to_string(), expected.trim_end());
    }

    #[test]
    fn the_last_points_are_jammed_in_one_more_iteration() {
        let k = jammed(ROW_SUMS, "i0", 3).unwrap();
        let expected = "kernel k(in0: f32[5,4], out out0: f32[5,4]) {
  for i0 in 0..1 {
    vectorized for i1 in 0..4 {
      let acc_j0: f32 = 0.0:f32
      let acc_j1: f32 = 0.0:f32
      let acc_j2: f32 = 0.0:f32
      unrolled for r0 in 0..2 {
        acc_j0 = sum(acc_j0, in0[12*i0 + 4*r0 + i1 if 3*i0 + r0 < 5])
        acc_j1 = sum(acc_j1, in0[12*i0 + 4*r0 + i1 + 4 if 3*i0 + r0 + 1 < 5])
        acc_j2 = sum(acc_j2, in0[12*i0 + 4*r0 + i1 + 8 if 3*i0 + r0 + 2 < 5])
      }
      out0[12*i0 + i1] = acc_j0
      out0[12*i0 + i1 + 4] = acc_j1
      out0[12*i0 + i1 + 8] = acc_j2
    }
  }
  for i0 in 0..1 {
    vectorized for i1 in 0..4 {
      let acc_j0: f32 = 0.0:f32
      let acc_j1: f32 = 0.0:f32
      unrolled for r0 in 0..2 {
        acc_j0 = sum(acc_j0, in0[8*i0 + 4*r0 + i1 + 12 if 2*i0 + r0 + 3 < 5])
        acc_j1 = sum(acc_j1, in0[8*i0 + 4*r0 + i1 + 16 if 2*i0 + r0 + 4 < 5])
      }
      out0[8*i0 + i1 + 12] = acc_j0
      out0[8*i0 + i1 + 16] = acc_j1
    }
  }
}
";
        assert_eq!(k.to_string(), expected.trim_end());
    }

    #[test]
    fn fewer_points_than_the_factor_are_jammed_in_one_iteration() {
        assert_eq!(
            jammed(ROW_SUMS, "i0", 8).unwrap(),
            jammed(ROW_SUMS, "i0", 5).unwrap()
        );
        let k = jammed(ROW_SUMS, "i0", 5).unwrap().to_string();
        assert!(
            k.contains("for i0 in 0..1 {") && k.contains("acc_j4"),
            "{k}"
        );
        assert!(!k.contains("acc_j5") && !k.contains("let acc:"), "{k}");
    }

    const SOFTMAX_ROWS: &str = "kernel k(in0: f32[3,4], out out0: f32[3,4]) {
  parallel for o0 in 0..3 {
    let m: f32 = -inf:f32
    vectorized for r0 in 0..4 {
      m = max(m, in0[4*o0 + r0])
    }
    let s: f32 = 0.0:f32
    vectorized for r1 in 0..4 {
      let e: f32 = Exp(Sub(in0[4*o0 + r1], m))
      out0[4*o0 + r1] = e
      s = sum(s, e)
    }
    let inv: f32 = Reciprocal(s)
    vectorized for j in 0..4 {
      out0[4*o0 + j] = Mul(out0[4*o0 + j], inv)
    }
  }
}";

    #[test]
    fn a_parallel_row_program_jams_loop_by_loop() {
        let k = jammed(SOFTMAX_ROWS, "o0", 2).unwrap();
        let expected = "kernel k(in0: f32[3,4], out out0: f32[3,4]) {
  parallel for o0 in 0..1 {
    let m_j0: f32 = -inf:f32
    let m_j1: f32 = -inf:f32
    vectorized for r0 in 0..4 {
      m_j0 = max(m_j0, in0[8*o0 + r0])
      m_j1 = max(m_j1, in0[8*o0 + r0 + 4])
    }
    let s_j0: f32 = 0.0:f32
    let s_j1: f32 = 0.0:f32
    vectorized for r1 in 0..4 {
      let e_j0: f32 = Exp(Sub(in0[8*o0 + r1], m_j0))
      let e_j1: f32 = Exp(Sub(in0[8*o0 + r1 + 4], m_j1))
      out0[8*o0 + r1] = e_j0
      out0[8*o0 + r1 + 4] = e_j1
      s_j0 = sum(s_j0, e_j0)
      s_j1 = sum(s_j1, e_j1)
    }
    let inv_j0: f32 = Reciprocal(s_j0)
    let inv_j1: f32 = Reciprocal(s_j1)
    vectorized for j in 0..4 {
      out0[8*o0 + j] = Mul(out0[8*o0 + j], inv_j0)
      out0[8*o0 + j + 4] = Mul(out0[8*o0 + j + 4], inv_j1)
    }
  }
  for o0 in 0..1 {
    let m: f32 = -inf:f32
    vectorized for r0 in 0..4 {
      m = max(m, in0[4*o0 + r0 + 8])
    }
    let s: f32 = 0.0:f32
    vectorized for r1 in 0..4 {
      let e: f32 = Exp(Sub(in0[4*o0 + r1 + 8], m))
      out0[4*o0 + r1 + 8] = e
      s = sum(s, e)
    }
    let inv: f32 = Reciprocal(s)
    vectorized for j in 0..4 {
      out0[4*o0 + j + 8] = Mul(out0[4*o0 + j + 8], inv)
    }
  }
}";
        assert_eq!(k.to_string(), expected);
        // A row reading the next row's first element sees it stored or not.
        let overlapping = SOFTMAX_ROWS.replace(
            "Mul(out0[4*o0 + j], inv)",
            "Mul(out0[4*o0 + j + 1 if 4*o0 + j < 11], inv)",
        );
        let e = jammed(&overlapping, "o0", 2).unwrap_err().to_string();
        assert!(e.contains("reads a buffer it stores to"), "{e}");
    }

    const ROWS_INTO_OUTPUT: &str = "kernel k(in0: f32[5,4], out out0: f32[4]) {
  for r0 in 0..5 {
    vectorized for i0 in 0..4 {
      out0[i0] = Add(out0[i0], in0[4*r0 + i0])
    }
  }
}";

    #[test]
    fn rows_added_into_one_output_row_jam_in_row_order() {
        let k = jammed(ROWS_INTO_OUTPUT, "r0", 2).unwrap();
        let expected = "kernel k(in0: f32[5,4], out out0: f32[4]) {
  for r0 in 0..2 {
    vectorized for i0 in 0..4 {
      out0[i0] = Add(out0[i0], in0[8*r0 + i0])
      out0[i0] = Add(out0[i0], in0[8*r0 + i0 + 4])
    }
  }
  for r0 in 0..1 {
    vectorized for i0 in 0..4 {
      out0[i0] = Add(out0[i0], in0[4*r0 + i0 + 16])
    }
  }
}";
        assert_eq!(k.to_string(), expected);
        // Every row into one element: jammed, the element's sums would come in another order.
        let one_element = ROWS_INTO_OUTPUT
            .replace("out0: f32[4]", "out0: f32[1]")
            .replace("out0[i0]", "out0[0]");
        let e = jammed(&one_element, "r0", 2).unwrap_err().to_string();
        assert!(e.contains("reads a buffer it stores to"), "{e}");
    }

    #[test]
    fn a_serial_body_that_reads_its_output_or_holds_a_buffer_is_refused() {
        let accumulating = ROW_SUMS.replace("in0[4*i0 + 4*r0 + i1", "out0[4*i0 + 4*r0 + i1");
        let e = jammed(&accumulating, "i0", 2).unwrap_err().to_string();
        assert!(e.contains("reads a buffer it stores to"), "{e}");
        let buffered = "kernel k(in0: f32[4,4], out out0: f32[4,4]) {
  alloc t: f32[4]
  for i0 in 0..4 {
    for i1 in 0..4 {
      alloc t2: f32[4]
      out0[4*i0 + i1] = in0[4*i0 + i1]
    }
  }
}";
        let e = jammed(buffered, "i0", 2).unwrap_err().to_string();
        assert!(e.contains("a local buffer"), "{e}");
    }
}

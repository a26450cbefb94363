//! `rows_across(var)`: a row program run across a strip of rows at once
//! ([`Directive::RowsAcross`](crate::schedule::Directive::RowsAcross)),
//! PANAMERA's y-reduce form (§3.1) for row programs whose reductions read
//! consecutive elements along the rows, not along the reduced axis
//! (Softmax or LayerNorm over an axis other than the last).
//!
//! Needs: loop `var` whose body is a row program (`let`s, reduction
//! loops, output loops, stores; no local buffers, gemms or arg-reduction
//! steps), each iteration one row, the rows independent; its locals f32 or
//! f64 (an f16 or bf16 local rounds at each update, which a store of the
//! update's value cast to its type would round twice).
//! Guarantees: the same stores of the same values. Each statement of the
//! body runs in a loop over `var` of the same extent, innermost: a
//! statement directly in a loop whose body has no loops goes, with its
//! siblings, into one such loop (its `let`s stay one per lane); elsewhere
//! each `let` becomes a local buffer with one element per row, which its
//! updates and reads use at `var`. Every reduction then runs over the rows
//! of the strip in vector lanes, reading consecutive elements, in the
//! order it ran per row.

use crate::ir::{Buffer, Idx, Loop, LoopKind, Scope, Stmt, Val};
use kiln_ir::{bail, Result};

/// Loop `l` as its body's statements each across `l`'s rows (see the module doc); new local
/// buffers are appended to `buffers`.
pub(crate) fn rows_across(l: &Loop, buffers: &mut Vec<Buffer>) -> Result<Vec<Stmt>> {
    let mut rows = RowArrays {
        rows: l,
        buffers,
        arrays: Vec::new(),
    };
    rows.block(&l.body)
}

/// The rewrite's state: the row loop and the locals made row arrays so far.
struct RowArrays<'a> {
    rows: &'a Loop,
    buffers: &'a mut Vec<Buffer>,
    /// (local name, its buffer).
    arrays: Vec<(String, usize)>,
}

impl RowArrays<'_> {
    /// Statements `body` across the rows.
    fn block(&mut self, body: &[Stmt]) -> Result<Vec<Stmt>> {
        if body.iter().all(|s| !matches!(s, Stmt::Loop(_))) {
            let lanes = body.iter().map(|s| self.lane(s)).collect::<Result<_>>()?;
            return Ok(vec![self.row_loop(lanes)]);
        }
        let mut out = Vec::new();
        for s in body {
            match s {
                Stmt::Loop(inner) => out.push(Stmt::Loop(Loop {
                    body: self.block(&inner.body)?,
                    ..inner.clone()
                })),
                Stmt::Let { name, dtype, value } => {
                    let buf = self.array(name, *dtype);
                    let at = Idx::var(&self.rows.var);
                    let value = self.value(value);
                    out.push(Stmt::Alloc(buf));
                    out.push(self.row_loop(vec![Stmt::store(buf, at, value)]));
                }
                other => {
                    let lane = self.lane(other)?;
                    out.push(self.row_loop(vec![lane]));
                }
            }
        }
        Ok(out)
    }

    /// Statement `s` (not a loop) as one row's step inside the loop over the rows.
    fn lane(&self, s: &Stmt) -> Result<Stmt> {
        Ok(match s {
            Stmt::Let { name, dtype, value } => Stmt::Let {
                name: name.clone(),
                dtype: *dtype,
                value: self.value(value),
            },
            Stmt::Store { buf, offset, value } => Stmt::store(*buf, offset.clone(), self.value(value)),
            Stmt::Update {
                name,
                combiner,
                value,
            } => match self.array_of(name) {
                Some(buf) => {
                    // As an update, the value joins in the local's type.
                    let value = Val::cast(self.buffers[buf].dtype, self.value(value));
                    let combined = Val::Call(combiner.scalar(), vec![self.element(buf), value]);
                    Stmt::store(buf, Idx::var(&self.rows.var), combined)
                }
                None => Stmt::Update {
                    name: name.clone(),
                    combiner: *combiner,
                    value: self.value(value),
                },
            },
            Stmt::Loop(_)
            | Stmt::Alloc(_)
            | Stmt::ArgUpdate(_)
            | Stmt::Gemm(_)
            | Stmt::Combine(_) => bail!(
                "schedule: rows_across({}): a row program holds only lets, updates, stores and loops",
                self.rows.var
            ),
        })
    }

    /// A loop over the rows around `body`.
    fn row_loop(&self, body: Vec<Stmt>) -> Stmt {
        Stmt::Loop(Loop {
            body,
            kind: LoopKind::Serial,
            ..self.rows.clone()
        })
    }

    /// A new local buffer with one element of `dtype` per row, for local `name`.
    fn array(&mut self, name: &str, dtype: kiln_ir::DType) -> usize {
        let taken = |n: &str| self.buffers.iter().any(|b| b.name == n);
        let buf_name = kiln_ir::unique_name(&format!("{name}_rows"), &taken);
        self.buffers.push(Buffer {
            name: buf_name,
            dtype,
            shape: vec![self.rows.extent.max() as usize],
            output: false,
            scope: Scope::Local,
        });
        let buf = self.buffers.len() - 1;
        self.arrays.push((name.to_string(), buf));
        buf
    }

    fn array_of(&self, name: &str) -> Option<usize> {
        self.arrays.iter().find(|(n, _)| n == name).map(|(_, b)| *b)
    }

    /// The element of row array `buf` of the current row.
    fn element(&self, buf: usize) -> Val {
        Val::Load {
            buf,
            offset: Idx::var(&self.rows.var),
            guard: Vec::new(),
        }
    }

    /// `v` with the locals made row arrays read at the current row.
    fn value(&self, v: &Val) -> Val {
        v.map_leaves(&|leaf| match leaf {
            Val::Local(name) => self.array_of(name).map(|buf| self.element(buf)),
            _ => None,
        })
    }
}

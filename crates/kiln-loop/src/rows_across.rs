//! `rows_across(var)`: a row program run across a strip of rows at once
//! ([`Directive::RowsAcross`](crate::schedule::Directive::RowsAcross)),
//! PANAMERA's y-reduce form (§3.1) for row programs whose reductions read
//! consecutive elements along the rows, not along the reduced axis
//! (Softmax or LayerNorm over an axis other than the last).
//!
//! Needs: loop `var` whose body is a row program (`let`s, reduction
//! loops, output loops, stores, arg-reduction steps; no local buffers or
//! gemms), each iteration one row, the rows independent; no f16 or bf16
//! local but an arg-reduction's extreme (an f16 or bf16 accumulator rounds
//! at each update, which a store of the update's value cast to its type
//! would round twice; an extreme only copies values already in its type).
//! Guarantees: the same stores of the same values. Each statement of the
//! body runs in a loop over `var` of the same extent, innermost: a
//! statement directly in a loop whose body has no loops goes, with its
//! siblings, into one such loop (its `let`s stay one per lane); elsewhere
//! each `let` becomes a local buffer with one element per row, which its
//! updates and reads use at `var`. Every reduction then runs over the rows
//! of the strip in vector lanes, reading consecutive elements, in the
//! order it ran per row. An arg-reduction step reads its extreme and index
//! from their row arrays into lane locals of the same names, takes the step
//! and stores them back, so each row's ties still go as they did.

use crate::ir::{ArgStep, Buffer, Idx, Loop, LoopKind, Scope, Stmt, Val};
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
            let mut lanes = Vec::new();
            for s in body {
                lanes.extend(self.lane(s)?);
            }
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
                    out.push(self.row_loop(lane));
                }
            }
        }
        Ok(out)
    }

    /// Statement `s` (not a loop) as one row's steps inside the loop over the rows.
    fn lane(&self, s: &Stmt) -> Result<Vec<Stmt>> {
        if let Stmt::ArgUpdate(step) = s {
            return Ok(self.arg_lane(step));
        }
        Ok(vec![match s {
            Stmt::Let { name, dtype, value } => Stmt::Let {
                name: name.clone(),
                dtype: *dtype,
                value: self.value(value),
            },
            Stmt::Store { buf, offset, value } => {
                Stmt::store(*buf, offset.clone(), self.value(value))
            }
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
            | Stmt::Combine(_) => {
                bail!(
                    "schedule: rows_across({}): a row program holds only lets, updates, stores, arg-reduction steps and loops",
                    self.rows.var
                )
            }
        }])
    }

    /// Arg-reduction step `step` for the current row: its extreme and index
    /// read from their row arrays into lane locals, the step, and both
    /// stored back (a local not made a row array stays as it is).
    fn arg_lane(&self, step: &ArgStep) -> Vec<Stmt> {
        let locals = [step.best.as_str(), step.name.as_str()];
        let arrays: Vec<(&str, usize)> = locals
            .iter()
            .filter_map(|n| self.array_of(n).map(|b| (*n, b)))
            .collect();
        let mut out: Vec<Stmt> = arrays
            .iter()
            .map(|&(name, buf)| Stmt::Let {
                name: name.to_string(),
                dtype: self.buffers[buf].dtype,
                value: self.element(buf),
            })
            .collect();
        out.push(Stmt::ArgUpdate(Box::new(ArgStep {
            value: self.value(&step.value),
            ..step.clone()
        })));
        let at = Idx::var(&self.rows.var);
        out.extend(
            arrays
                .iter()
                .map(|&(name, buf)| Stmt::store(buf, at.clone(), Val::Local(name.to_string()))),
        );
        out
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

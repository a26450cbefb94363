//! A parallel loop whose iterations combine partial results into locals
//! declared outside it ([`kiln_loop::ir::Combine`], made by kiln-loop's
//! `combine.rs` when a schedule splits a reduction across threads).
//!
//! Needs: a `Parallel` loop whose body ends with `combine` statements.
//! Guarantees: each thread folds its static, contiguous share of the
//! iterations into a private copy `name_t` of every combined local,
//! started at the combiner's identity. Then:
//! - `ordered`: the copy goes into the thread's slot of an array of
//!   `KILN_MAX_THREADS` partials, and after the parallel region the slots
//!   are folded into the local in slot order — the same result on every
//!   run with a given thread count (OpenMP's own `reduction` clause
//!   combines in whatever order threads finish);
//! - `atomic`: the copy is folded into the local as the thread finishes,
//!   under `omp atomic` (sum, product) or `omp critical` (the others),
//!   which every order makes the same (the mode is for exact types).
//!
//! Without OpenMP one thread does it all, in slot 0.

use super::Printer;
use crate::scalar_c::c_type;
use kiln_ir::{bail, DType, Result};
use kiln_loop::combine::combines;
use kiln_loop::ir::{Combine, CombineMode};
use kiln_loop::{Loop, LoopKind, Stmt, Val};
use kiln_ops::te::Combiner;
use std::fmt::Write;

/// One combined local as printed: its combine, C type and identity literal.
struct Combined<'a> {
    c: &'a Combine,
    ty: &'static str,
    identity: String,
}

impl Printer<'_> {
    /// Prints `l`, a parallel loop with combines (see the module doc).
    pub(super) fn combined_parallel(&mut self, l: &Loop, depth: usize) -> Result<()> {
        let pad = "  ".repeat(depth);
        let combined = self.combined_locals(l)?;
        writeln!(self.out, "{pad}{{").ok();
        for v in combined.iter().filter(|v| v.c.mode == CombineMode::Ordered) {
            let (name, ty, id) = (&v.c.name, v.ty, &v.identity);
            writeln!(self.out, "{pad}  {ty} {name}_part[KILN_MAX_THREADS];\n{pad}  for (int kiln_p = 0; kiln_p < KILN_MAX_THREADS; ++kiln_p) {name}_part[kiln_p] = {id};").ok();
        }
        writeln!(
            self.out,
            "{pad}  KILN_OMP(omp parallel num_threads(kiln_gemm_threads()))\n{pad}  {{"
        )
        .ok();
        for v in &combined {
            let (name, ty, id) = (&v.c.name, v.ty, &v.identity);
            writeln!(self.out, "{pad}    {ty} {name}_t = {id};").ok();
            self.locals
                .insert(format!("{name}_t"), self.local_type(name)?);
        }
        writeln!(self.out, "{pad}    KILN_OMP(omp for schedule(static))").ok();
        let serial = Loop {
            kind: LoopKind::Serial,
            ..l.clone()
        };
        self.workshared = true;
        self.stmt(&Stmt::Loop(serial), depth + 2)?;
        for v in &combined {
            self.end_of_thread(v.c, depth + 2)?;
        }
        writeln!(self.out, "{pad}  }}").ok();
        for v in combined.iter().filter(|v| v.c.mode == CombineMode::Ordered) {
            let (name, ty) = (&v.c.name, v.ty);
            writeln!(self.out, "{pad}  for (int kiln_p = 0; kiln_p < KILN_MAX_THREADS; ++kiln_p) {{\n{pad}    {ty} kiln_o = {name}_part[kiln_p];").ok();
            self.fold(name, v.c.combiner, "kiln_o", depth + 2)?;
            writeln!(self.out, "{pad}  }}").ok();
        }
        writeln!(self.out, "{pad}}}").ok();
        Ok(())
    }

    /// A `combine` inside the loop: the iteration's value folded into the
    /// thread's copy.
    pub(super) fn combine_step(&mut self, c: &Combine, depth: usize) -> Result<()> {
        let update = Stmt::Update {
            name: format!("{}_t", c.name),
            combiner: c.combiner,
            value: c.value.clone(),
        };
        self.stmt(&update, depth)
    }

    /// The combines of `l` with their C types and identities.
    fn combined_locals<'l>(&self, l: &'l Loop) -> Result<Vec<Combined<'l>>> {
        let mut out = Vec::new();
        for c in combines(&l.body) {
            let dtype = self.local_type(&c.name)?;
            if dtype == DType::BF16 && matches!(c.combiner, Combiner::Sum | Combiner::Prod) {
                bail!(
                    "parallel loop '{}' would reorder the bf16 sum '{}', which rounds every step in order",
                    l.var,
                    c.name
                );
            }
            let identity = kiln_loop::lower::identity(dtype, c.combiner)?;
            out.push(Combined {
                c,
                ty: c_type(dtype)?,
                identity: super::literal(&identity)?,
            });
        }
        Ok(out)
    }

    /// What a thread does with its copy when its share is done.
    fn end_of_thread(&mut self, c: &Combine, depth: usize) -> Result<()> {
        let pad = "  ".repeat(depth);
        let name = &c.name;
        match (c.mode, c.combiner) {
            (CombineMode::Ordered, _) => {
                writeln!(self.out, "{pad}{name}_part[kiln_thread_num()] = {name}_t;").ok();
                Ok(())
            }
            (CombineMode::Atomic, Combiner::Sum | Combiner::Prod) => {
                writeln!(self.out, "{pad}KILN_OMP(omp atomic update)").ok();
                self.fold(name, c.combiner, &format!("{name}_t"), depth)
            }
            (CombineMode::Atomic, _) => {
                writeln!(self.out, "{pad}KILN_OMP(omp critical)\n{pad}{{").ok();
                self.fold(name, c.combiner, &format!("{name}_t"), depth + 1)?;
                writeln!(self.out, "{pad}}}").ok();
                Ok(())
            }
        }
    }

    /// `name = combiner(name, partial)` by the printer's own rule.
    fn fold(&mut self, name: &str, combiner: Combiner, partial: &str, depth: usize) -> Result<()> {
        let dtype = self.local_type(name)?;
        let declared = self.locals.insert(partial.into(), dtype);
        let update = Stmt::Update {
            name: name.to_string(),
            combiner,
            value: Val::Local(partial.into()),
        };
        let printed = self.stmt(&update, depth);
        if declared.is_none() {
            self.locals.remove(partial);
        }
        printed
    }

    fn local_type(&self, name: &str) -> Result<DType> {
        match self.locals.get(name) {
            Some(&dtype) => Ok(dtype),
            None => bail!("combined local '{name}' is not declared"),
        }
    }
}

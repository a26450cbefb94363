//! A parallel loop that reduces into locals declared outside it (a
//! reduction to scalars split across threads, `scalar_reductions` in
//! kiln-loop's default schedule), printed so the result does not depend
//! on timing.
//!
//! Needs: a `Parallel` loop whose body updates outer locals. Guarantees:
//! each thread combines its static share of the iterations into a private
//! copy of every such local, started at the combiner's identity, stored in
//! its slot of a per-local array of `KILN_MAX_THREADS` partials; after the
//! parallel region the partials are combined into the locals in slot order.
//! With a given thread count the result is the same on every run (OpenMP's
//! own `reduction` clause combines in whatever order threads finish).
//! Without OpenMP one thread does it all, in slot 0.

use super::Printer;
use crate::scalar_c::c_type;
use kiln_ir::{bail, DType, Data, Result, Tensor};
use kiln_loop::ir::reduced_locals;
use kiln_loop::{Loop, LoopKind, Stmt, Val};
use kiln_ops::te::Combiner;
use std::fmt::Write;

impl Printer<'_> {
    /// Prints `l` as an ordered parallel reduction (see the module doc).
    pub(super) fn ordered_reduction(&mut self, l: &Loop, depth: usize) -> Result<()> {
        let pad = "  ".repeat(depth);
        let reduced = reduced_locals(&l.body);
        let mut typed = Vec::new();
        for (name, c) in &reduced {
            let Some(&dtype) = self.locals.get(name) else {
                bail!(
                    "parallel loop '{}' reduces undeclared local '{name}'",
                    l.var
                );
            };
            if dtype == DType::BF16 && matches!(c, Combiner::Sum | Combiner::Prod) {
                bail!(
                    "parallel loop '{}' would reorder the bf16 sum '{name}', which rounds every step in order",
                    l.var
                );
            }
            let identity = Tensor::new(vec![], Data::from_f64(dtype, &[c.identity()])?)?;
            typed.push((
                name.as_str(),
                *c,
                c_type(dtype)?,
                super::literal(&identity)?,
            ));
        }
        writeln!(self.out, "{pad}{{").ok();
        for (name, _, ty, id) in &typed {
            writeln!(self.out, "{pad}  {ty} {name}_part[KILN_MAX_THREADS];\n{pad}  for (int kiln_p = 0; kiln_p < KILN_MAX_THREADS; ++kiln_p) {name}_part[kiln_p] = {id};").ok();
        }
        writeln!(
            self.out,
            "{pad}  KILN_OMP(omp parallel num_threads(kiln_gemm_threads()))\n{pad}  {{"
        )
        .ok();
        for (name, _, ty, id) in &typed {
            writeln!(self.out, "{pad}    {ty} {name} = {id};").ok();
        }
        writeln!(self.out, "{pad}    KILN_OMP(omp for schedule(static))").ok();
        let serial = Loop {
            kind: LoopKind::Serial,
            ..l.clone()
        };
        self.stmt(&Stmt::Loop(serial), depth + 2)?;
        for (name, ..) in &typed {
            writeln!(
                self.out,
                "{pad}    {name}_part[kiln_thread_num()] = {name};"
            )
            .ok();
        }
        writeln!(self.out, "{pad}  }}").ok();
        for (name, c, ty, _) in &typed {
            writeln!(self.out, "{pad}  for (int kiln_p = 0; kiln_p < KILN_MAX_THREADS; ++kiln_p) {{\n{pad}    {ty} kiln_o = {name}_part[kiln_p];").ok();
            self.combine_partial(name, *c, depth + 2)?;
            writeln!(self.out, "{pad}  }}").ok();
        }
        writeln!(self.out, "{pad}}}").ok();
        Ok(())
    }

    /// `name = combiner(name, kiln_o)` by the printer's own rule.
    fn combine_partial(&mut self, name: &str, combiner: Combiner, depth: usize) -> Result<()> {
        let Some(&dtype) = self.locals.get(name) else {
            bail!("reduced local '{name}' is not declared");
        };
        self.locals.insert("kiln_o".into(), dtype);
        let update = Stmt::Update {
            name: name.to_string(),
            combiner,
            value: Val::Local("kiln_o".into()),
        };
        let printed = self.stmt(&update, depth);
        self.locals.remove("kiln_o");
        printed
    }
}

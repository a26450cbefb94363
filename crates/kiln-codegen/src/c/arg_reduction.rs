//! An arg-reduction step (`kiln_loop::ArgStep`) in C.
//!
//! Needs: the step's extreme and index locals declared, and no loop around it
//! between their declarations and the step that runs in parallel or in vector
//! lanes (the steps must run in index order; kiln-loop's default schedule keeps
//! such loops serial, and the printer refuses any other).
//! Guarantees: the rule of `kiln_ops::te::ArgIndex::beats`, branch-free: the
//! value, computed once in the extreme's type, replaces the extreme and its
//! index where it is greater (Max) or smaller (Min), or equal with `last`; a
//! NaN value beats every number, and another NaN only with `last`.

use super::Printer;
use crate::scalar_c::c_type;
use kiln_ir::{bail, Result};
use kiln_loop::ArgStep;
use kiln_ops::te::Combiner;
use std::fmt::Write;

impl Printer<'_> {
    /// Prints `a` (see the module doc).
    pub(super) fn arg_step(&mut self, a: &ArgStep, depth: usize) -> Result<()> {
        let pad = "  ".repeat(depth);
        let Some(&dtype) = self.locals.get(&a.best) else {
            bail!("arg-reduction step on undeclared local '{}'", a.best);
        };
        if !self.locals.contains_key(&a.name) {
            bail!("arg-reduction step on undeclared local '{}'", a.name);
        }
        let compare = match (a.combiner, a.last) {
            (Combiner::Max, false) => ">",
            (Combiner::Max, true) => ">=",
            (Combiner::Min, false) => "<",
            (Combiner::Min, true) => "<=",
            (c, _) => bail!("an arg-reduction by {c:?}: only max and min have one"),
        };
        let (best, name) = (&a.best, &a.name);
        let beats = match (dtype.is_float(), a.last) {
            (false, _) => format!("kiln_arg_v {compare} {best}"),
            (true, true) => format!("(kiln_arg_v {compare} {best}) | (kiln_arg_v != kiln_arg_v)"),
            (true, false) => {
                format!("(kiln_arg_v {compare} {best}) | ((kiln_arg_v != kiln_arg_v) & ({best} == {best}))")
            }
        };
        let ty = c_type(dtype)?;
        let (v, _) = self.val(&a.value)?;
        let index = self.idx(&a.index)?;
        writeln!(self.out, "{pad}{{").ok();
        writeln!(self.out, "{pad}  {ty} kiln_arg_v = ({ty})({v});").ok();
        writeln!(self.out, "{pad}  int kiln_arg_beats = {beats};").ok();
        writeln!(
            self.out,
            "{pad}  {best} = kiln_arg_beats ? kiln_arg_v : {best};"
        )
        .ok();
        writeln!(
            self.out,
            "{pad}  {name} = kiln_arg_beats ? (int64_t)({index}) : {name};"
        )
        .ok();
        writeln!(self.out, "{pad}}}").ok();
        Ok(())
    }
}

//! CUDA for the columns form of a row program (`Launch::Columns`): a
//! reduction over an outer axis (y-reduce) whose 32 neighbouring outputs
//! are a warp's lanes.
//!
//! Needs: a loop the mapping made columns (a row program; with `splits`
//! above 1, its reductions read no combined value: `column_splits`).
//! Guarantees: `groups` warps of a block split each output's reduced
//! iterations and combine them in shared memory in warp order; with
//! `splits` blocks per 32 columns (grid `[column blocks, splits]`), the
//! blocks split them further, each storing its partial results, and the
//! last block to arrive (an atomic counter per 32 columns, reset for the
//! next launch) combines the partials in block order and alone runs the
//! rest of the iteration (PANAMERA §5.1's one kernel). Results do not
//! depend on which block finishes last. Lanes past the end compute the
//! last iteration again and store nothing.

use super::{RowWriter, Spread};
use kiln_ir::{bail, Result};
use kiln_loop::gpu_map::rows::{row_parts, RowPart};
use kiln_loop::{Kernel, Stmt};
use kiln_ops::te::Combiner;
use std::fmt::Write;

/// The function running `k.body[stmt]` (a loop over `var`) as columns
/// (see the module doc).
pub fn columns_function(
    k: &Kernel,
    function: &str,
    params: &str,
    stmt: usize,
    (groups, splits): (u32, u32),
) -> Result<String> {
    let Stmt::Loop(l) = &k.body[stmt] else {
        bail!("{}: statement {stmt} is not a loop", k.name);
    };
    let Some(parts) = row_parts(k, &l.body) else {
        bail!("{}: statement {stmt} is not a row program", k.name);
    };
    let (var, e) = (&l.var, l.extent.max());
    let mut w = RowWriter::new(k);
    w.p.ranges.insert(var.clone(), (0, e.max(1) - 1));
    let spread = Spread::Groups(groups, splits);
    let last_reduce = parts
        .iter()
        .rposition(|p| matches!(p, RowPart::Reduce { .. }));
    let mut globals = String::new();
    let mut split_names = Vec::new();
    for (j, part) in parts.iter().enumerate() {
        match part {
            RowPart::Reduce { reduced, .. } => {
                w.part_spread(part, 2, spread)?;
                for (name, combiner) in reduced {
                    w.groups_combine(name, *combiner, groups)?;
                    if splits > 1 {
                        w.store_partial(function, name, (e, splits), &mut globals)?;
                        split_names.push((name.clone(), *combiner));
                    }
                }
                if splits > 1 && Some(j) == last_reduce {
                    w.last_block_combines(function, &split_names, (e, splits), &mut globals)?;
                }
            }
            RowPart::Spread(l) => {
                writeln!(w.p.out, "    if (kiln_live) {{").ok();
                w.spread(std::slice::from_ref(l), &l.body, 3, spread)?;
                writeln!(w.p.out, "    }}\n    __syncthreads();").ok();
            }
            RowPart::Once(s) => {
                writeln!(w.p.out, "    if (kiln_g == 0 && kiln_live) {{").ok();
                w.p.stmt(s, 3)?;
                writeln!(w.p.out, "    }}\n    __syncthreads();").ok();
            }
            RowPart::Local(s) => w.p.stmt(s, 2)?,
        }
    }
    let body = format!(
        "  const int kiln_lane = threadIdx.x % 32, kiln_g = threadIdx.x / 32;\n  for (int64_t kiln_base = (int64_t)blockIdx.x * 32; kiln_base < {e}; kiln_base += (int64_t)gridDim.x * 32) {{\n    const bool kiln_live = kiln_base + kiln_lane < {e};\n    const int64_t {var} = kiln_live ? kiln_base + kiln_lane : {last};\n{body}    __syncthreads();\n  }}\n",
        last = e - 1,
        body = w.p.out,
    );
    Ok(w.frame(function, params, groups * 32, &globals).wrap(&body))
}

impl RowWriter<'_> {
    /// Combines the `groups` warps' copies of `name` (one per lane) in
    /// warp order through shared memory; every warp gets the result.
    fn groups_combine(&mut self, name: &str, combiner: Combiner, groups: u32) -> Result<()> {
        let ty = self.c_type_of(name)?;
        let col = format!("kiln_col_{name}");
        writeln!(self.shared, "  __shared__ {ty} {col}[{groups}][33];").ok();
        writeln!(self.p.out, "    {col}[kiln_g][kiln_lane] = {name};\n    __syncthreads();\n    if (kiln_g == 0) {{\n      for (int kiln_h = 1; kiln_h < {groups}; ++kiln_h) {{\n        {ty} kiln_o = {col}[kiln_h][kiln_lane];").ok();
        self.combine_into(name, combiner, 4)?;
        writeln!(self.p.out, "      }}\n      {col}[0][kiln_lane] = {name};\n    }}\n    __syncthreads();\n    {name} = {col}[0][kiln_lane];").ok();
        Ok(())
    }

    /// Warp 0 stores this block's partial `name` of its live columns, in
    /// the block's row (`blockIdx.y`) of the partials of `e` columns.
    fn store_partial(
        &mut self,
        function: &str,
        name: &str,
        (e, splits): (i64, u32),
        globals: &mut String,
    ) -> Result<()> {
        let ty = self.c_type_of(name)?;
        writeln!(
            globals,
            "__device__ {ty} {function}_{name}[{}];",
            e * splits as i64
        )
        .ok();
        writeln!(
            self.p.out,
            "    if (kiln_g == 0 && kiln_live) {function}_{name}[(int64_t)blockIdx.y * {e} + kiln_base + kiln_lane] = {name};"
        )
        .ok();
        Ok(())
    }

    /// Every block but the last of its columns to arrive returns; the last
    /// combines the partials of `names` in block order (every warp gets
    /// them) and resets the counter.
    fn last_block_combines(
        &mut self,
        function: &str,
        names: &[(String, Combiner)],
        (e, splits): (i64, u32),
        globals: &mut String,
    ) -> Result<()> {
        let blocks = (e + 31) / 32;
        writeln!(
            globals,
            "__device__ unsigned int {function}_count[{blocks}];"
        )
        .ok();
        writeln!(self.p.out, "    __threadfence();\n    __shared__ int kiln_last;\n    __syncthreads();\n    if (threadIdx.x == 0) kiln_last = atomicAdd(&{function}_count[blockIdx.x], 1u) == gridDim.y - 1;\n    __syncthreads();\n    if (!kiln_last) {{ if (err) *kiln_err = 1; return; }}\n    if (threadIdx.x == 0) {function}_count[blockIdx.x] = 0;").ok();
        for (name, combiner) in names {
            let ty = self.c_type_of(name)?;
            let col = format!("kiln_col_{name}");
            writeln!(self.p.out, "    if (kiln_g == 0) {{\n      const volatile {ty}* kiln_p = {function}_{name} + kiln_base + kiln_lane;\n      {name} = kiln_live ? kiln_p[0] : {name};\n      for (unsigned int kiln_h = 1; kiln_live && kiln_h < {splits}; ++kiln_h) {{\n        {ty} kiln_o = kiln_p[(int64_t)kiln_h * {e}];").ok();
            self.combine_into(name, *combiner, 4)?;
            writeln!(self.p.out, "      }}\n      {col}[0][kiln_lane] = {name};\n    }}\n    __syncthreads();\n    {name} = {col}[0][kiln_lane];").ok();
        }
        Ok(())
    }
}

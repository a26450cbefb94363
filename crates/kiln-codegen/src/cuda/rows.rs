//! CUDA for row programs (`kiln_loop::gpu_map::rows`): a block runs one
//! row's parts together, and the all-reduce form where blocks share the
//! reductions and the last one finishes (PANAMERA §5.1, Figure 7's parts
//! 1–3 with an ordered combine).
//!
//! Needs: a row program the mapping accepted. Guarantees: every thread
//! computes each `let`; a reduction's coalesced iterations go to the
//! threads (grid-stride in the all-reduce form), each combining into its
//! own copy of the reduced locals; the copies are then combined in a fixed
//! order — warp shuffles, then warps in order through shared memory, then
//! (all-reduce) blocks in order by the last block — so results are the
//! same on every run with the same launch; every thread then holds the
//! result. Output loops are spread over the block's threads and lone
//! stores done by thread 0, with a barrier after each part.

mod columns;

use super::Frame;
use crate::c::Printer;
pub use columns::columns_function;
use kiln_ir::{bail, DType, Result};
use kiln_loop::gpu_map::rows::{row_parts, RowPart};
use kiln_loop::{Kernel, Loop, Stmt, Val};
use kiln_ops::te::Combiner;
use std::fmt::Write;

/// The function running statements `from..` of `k` (a row program) on
/// one block.
pub fn block_function(
    k: &Kernel,
    function: &str,
    params: &str,
    from: usize,
    threads: u32,
) -> Result<String> {
    let Some(parts) = row_parts(k, &k.body[from..]) else {
        bail!("{}: statements from {from} are not a row program", k.name);
    };
    let mut w = RowWriter::new(k);
    for part in &parts {
        w.part(part, 1, Spread::Block)?;
    }
    Ok(w.frame(function, params, threads, "").wrap(&w.p.out))
}

/// The function running `k.body[stmt]` (a loop over `var`) one block per
/// iteration.
pub fn rows_function(
    k: &Kernel,
    function: &str,
    params: &str,
    stmt: usize,
    threads: u32,
) -> Result<String> {
    let Stmt::Loop(l) = &k.body[stmt] else {
        bail!("{}: statement {stmt} is not a loop", k.name);
    };
    let Some(parts) = row_parts(k, &l.body) else {
        bail!("{}: statement {stmt} is not a row program", k.name);
    };
    let mut w = RowWriter::new(k);
    w.p.ranges
        .insert(l.var.clone(), (0, l.extent.max().max(1) - 1));
    for part in &parts {
        w.part(part, 2, Spread::Block)?;
    }
    let body = format!(
        "  for (int64_t {v} = blockIdx.x; {v} < {e}; {v} += gridDim.x) {{\n{body}    __syncthreads();\n  }}\n",
        v = l.var,
        e = l.extent.max(),
        body = w.p.out,
    );
    Ok(w.frame(function, params, threads, "").wrap(&body))
}

/// The function running statements `from..` of `k` as an all-reduce over
/// `blocks` blocks.
pub fn all_reduce_function(
    k: &Kernel,
    function: &str,
    params: &str,
    from: usize,
    blocks: u32,
    threads: u32,
) -> Result<String> {
    let Some(parts) = row_parts(k, &k.body[from..]) else {
        bail!("{}: statements from {from} are not a row program", k.name);
    };
    let Some(last) = parts
        .iter()
        .rposition(|p| matches!(p, RowPart::Reduce { .. }))
    else {
        bail!("{}: an all-reduce without a reduction", k.name);
    };
    let mut w = RowWriter::new(k);
    let mut globals = format!("__device__ unsigned int {function}_count;\n");
    let mut finals = Vec::new();
    for part in &parts[..=last] {
        w.part(part, 1, Spread::Grid)?;
        if let RowPart::Reduce { reduced, .. } = part {
            for (name, combiner) in reduced {
                let partials = format!("{function}_{name}");
                let ty = w.c_type_of(name)?;
                writeln!(globals, "__device__ {ty} {partials}[{blocks}];").ok();
                writeln!(
                    w.p.out,
                    "  if (threadIdx.x == 0) {partials}[blockIdx.x] = {name};"
                )
                .ok();
                finals.push((name.clone(), *combiner, partials));
            }
        }
    }
    // The last block to finish combines the partials in block order.
    writeln!(w.p.out, "  __shared__ int kiln_last;\n  if (threadIdx.x == 0) {{\n    __threadfence();\n    kiln_last = atomicAdd(&{function}_count, 1u) == gridDim.x - 1;\n  }}\n  __syncthreads();\n  if (!kiln_last) {{ if (err) *kiln_err = 1; return; }}").ok();
    for (name, combiner, partials) in &finals {
        w.warp_combines_partials(name, *combiner, partials, "gridDim.x")?;
    }
    writeln!(w.p.out, "  if (threadIdx.x == 0) {function}_count = 0;").ok();
    for part in &parts[last + 1..] {
        w.part(part, 1, Spread::Block)?;
    }
    Ok(w.frame(function, params, threads, &globals).wrap(&w.p.out))
}

/// The function running a row program with `blocks_per_row` blocks per
/// row: `stmt` a loop over the rows (`rows` is its variable and extent),
/// or with `rows` `None`, statements `stmt..` as one row.
pub fn split_rows_function(
    k: &Kernel,
    function: &str,
    params: &str,
    (stmt, rows, blocks_per_row, threads): (usize, Option<(&str, i64)>, u32, u32),
) -> Result<String> {
    let body = match (rows, &k.body[stmt]) {
        (Some(_), Stmt::Loop(l)) => l.body.as_slice(),
        (None, _) => &k.body[stmt..],
        _ => bail!("{}: statement {stmt} is not a loop", k.name),
    };
    let Some(parts) = row_parts(k, body) else {
        bail!("{}: statement {stmt} is not a row program", k.name);
    };
    let (var, extent) = rows.unwrap_or(("kiln_row", 1));
    let mut w = RowWriter::new(k);
    w.p.ranges.insert(var.to_string(), (0, extent.max(1) - 1));
    let mut globals = format!(
        "__device__ unsigned int {function}_count[{extent}];\n__device__ unsigned int {function}_gen[{extent}];\n"
    );
    let barrier = format!(
        "kiln_row_barrier(&{function}_count[{var}], &{function}_gen[{var}], {blocks_per_row});"
    );
    let spread = Spread::Row(blocks_per_row);
    for part in &parts {
        match part {
            RowPart::Reduce { reduced, .. } => {
                w.part(part, 1, spread)?;
                for (name, combiner) in reduced {
                    let partials = format!("{function}_{name}");
                    let ty = w.c_type_of(name)?;
                    writeln!(
                        globals,
                        "__device__ {ty} {partials}[{}];",
                        extent * blocks_per_row as i64
                    )
                    .ok();
                    writeln!(w.p.out, "  if (threadIdx.x == 0) {partials}[{var} * {blocks_per_row} + kiln_b] = {name};\n  {barrier}").ok();
                    let row = format!("({partials} + {var} * {blocks_per_row})");
                    w.warp_combines_partials(name, *combiner, &row, &blocks_per_row.to_string())?;
                }
            }
            RowPart::Once(s) => {
                writeln!(w.p.out, "  if (kiln_b == 0 && threadIdx.x == 0) {{").ok();
                w.p.stmt(s, 2)?;
                writeln!(w.p.out, "  }}\n  {barrier}").ok();
            }
            RowPart::Spread(_) => {
                w.part(part, 1, spread)?;
                writeln!(w.p.out, "  {barrier}").ok();
            }
            RowPart::Local(_) => w.part(part, 1, spread)?,
        }
    }
    let body = format!(
        "  const int64_t {var} = blockIdx.x / {blocks_per_row};\n  const unsigned int kiln_b = blockIdx.x % {blocks_per_row};\n  (void){var};\n{}",
        w.p.out
    );
    Ok(w.frame(function, params, threads, &globals).wrap(&body))
}

/// Which threads share a part's iterations.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spread {
    /// The block's threads.
    Block,
    /// Every thread of the grid (a reduction of the all-reduce form).
    Grid,
    /// The threads of the row's blocks (`kiln_b` is the block's number in
    /// its row).
    Row(u32),
    /// The warps of a block of columns (`kiln_g` is the warp's number),
    /// and the blocks sharing those columns (`blockIdx.y` of the count).
    Groups(u32, u32),
}

impl Spread {
    fn start_and_step(self) -> (String, String) {
        match self {
            Spread::Block => ("threadIdx.x".into(), "blockDim.x".into()),
            Spread::Grid => (
                "(int64_t)blockIdx.x * blockDim.x + threadIdx.x".into(),
                "(int64_t)gridDim.x * blockDim.x".into(),
            ),
            Spread::Row(n) => (
                "(int64_t)kiln_b * blockDim.x + threadIdx.x".into(),
                format!("(int64_t){n} * blockDim.x"),
            ),
            Spread::Groups(n, 1) => ("kiln_g".into(), n.to_string()),
            Spread::Groups(n, splits) => (
                format!("(int64_t)blockIdx.y * {n} + kiln_g"),
                (n * splits).to_string(),
            ),
        }
    }
}

/// Prints row parts, declaring the shared memory the combines use.
struct RowWriter<'a> {
    p: Printer<'a>,
    shared: String,
    /// Reduced locals with a shared slot, in order.
    slots: Vec<String>,
}

impl<'a> RowWriter<'a> {
    /// The frame of the function this writer's body goes into.
    fn frame<'f>(
        &'f self,
        function: &'f str,
        params: &'f str,
        threads: u32,
        globals: &'f str,
    ) -> Frame<'f> {
        Frame {
            function,
            params,
            threads: Some(threads),
            min_blocks: 1,
            globals,
            shared: &self.shared,
        }
    }

    fn new(k: &'a Kernel) -> RowWriter<'a> {
        RowWriter {
            p: Printer::for_gpu(k),
            shared: String::new(),
            slots: Vec::new(),
        }
    }

    fn part(&mut self, part: &RowPart, depth: usize, spread: Spread) -> Result<()> {
        let pad = "  ".repeat(depth);
        match part {
            RowPart::Local(s) => self.p.stmt(s, depth)?,
            RowPart::Once(s) => {
                writeln!(self.p.out, "{pad}if (threadIdx.x == 0) {{").ok();
                self.p.stmt(s, depth + 1)?;
                writeln!(self.p.out, "{pad}}}\n{pad}__syncthreads();").ok();
            }
            RowPart::Spread(l) => {
                self.spread(std::slice::from_ref(l), &l.body, depth, spread)?;
                writeln!(self.p.out, "{pad}__syncthreads();").ok();
            }
            RowPart::Reduce {
                loops,
                body,
                reduced,
            } => {
                self.spread(loops, body, depth, spread)?;
                for (name, combiner) in reduced {
                    self.block_combine(name, *combiner, depth)?;
                }
            }
        }
        Ok(())
    }

    /// A reduction part's loops shared by the threads of `spread`, each
    /// combining into its own copies (the caller combines them).
    fn part_spread(&mut self, part: &RowPart, depth: usize, spread: Spread) -> Result<()> {
        if let RowPart::Reduce { loops, body, .. } = part {
            self.spread(loops, body, depth, spread)?;
        }
        Ok(())
    }

    /// The perfect nest `loops` (body `body`) coalesced and shared by the
    /// threads of `spread`.
    fn spread(
        &mut self,
        loops: &[&Loop],
        body: &[Stmt],
        depth: usize,
        spread: Spread,
    ) -> Result<()> {
        let pad = "  ".repeat(depth);
        let total: i64 = loops.iter().map(|l| l.extent.max()).product();
        let (start, step) = spread.start_and_step();
        writeln!(
            self.p.out,
            "{pad}for (int64_t kiln_t = {start}; kiln_t < {total}; kiln_t += {step}) {{"
        )
        .ok();
        let mut inner: i64 = 1;
        for (j, l) in loops.iter().enumerate().rev() {
            let e = l.extent.max();
            let div = if inner == 1 {
                "kiln_t".to_string()
            } else {
                format!("(kiln_t / {inner})")
            };
            let value = if j == 0 { div } else { format!("{div} % {e}") };
            writeln!(self.p.out, "{pad}  const int64_t {} = {value};", l.var).ok();
            self.p.ranges.insert(l.var.clone(), (0, e.max(1) - 1));
            inner *= e;
        }
        for s in body {
            self.p.stmt(s, depth + 1)?;
        }
        for l in loops {
            self.p.ranges.remove(&l.var);
        }
        writeln!(self.p.out, "{pad}}}").ok();
        Ok(())
    }

    /// Combines every thread's `name` across the block: warp shuffles,
    /// then the warps' results in order; every thread gets the result.
    fn block_combine(&mut self, name: &str, combiner: Combiner, depth: usize) -> Result<()> {
        let pad = "  ".repeat(depth);
        let ty = self.c_type_of(name)?;
        let slot = self.shared_slot(name)?;
        writeln!(
            self.p.out,
            "{pad}for (int kiln_s = 16; kiln_s > 0; kiln_s >>= 1) {{\n{pad}  {ty} kiln_o = kiln_shfl_down({name}, kiln_s);"
        )
        .ok();
        self.combine_into(name, combiner, depth + 1)?;
        writeln!(
            self.p.out,
            "{pad}}}\n{pad}if ((threadIdx.x & 31) == 0) {slot}[threadIdx.x >> 5] = {name};\n{pad}__syncthreads();\n{pad}if (threadIdx.x == 0) {{\n{pad}  for (unsigned int kiln_w = 1; kiln_w < (blockDim.x >> 5); ++kiln_w) {{\n{pad}    {ty} kiln_o = {slot}[kiln_w];"
        )
        .ok();
        self.combine_into(name, combiner, depth + 2)?;
        writeln!(
            self.p.out,
            "{pad}  }}\n{pad}  {slot}[0] = {name};\n{pad}}}\n{pad}__syncthreads();\n{pad}{name} = {slot}[0];"
        )
        .ok();
        Ok(())
    }

    /// `name` combined from the `count` partial results at `partials`
    /// (global memory, written by other blocks) by the first warp: lane
    /// `l` combines partials `l, l + 32, …` in order, then a shuffle tree
    /// (lane `l` takes lane `l + s`'s value while that lane holds any),
    /// the same order on every run with the same count; every thread gets
    /// the result. Thread 0 alone would wait on `count` loads in a row.
    fn warp_combines_partials(
        &mut self,
        name: &str,
        combiner: Combiner,
        partials: &str,
        count: &str,
    ) -> Result<()> {
        let ty = self.c_type_of(name)?;
        let slot = self.shared_slot(name)?;
        writeln!(self.p.out, "  if (threadIdx.x < 32) {{\n    const volatile {ty}* kiln_p = {partials};\n    const unsigned int kiln_n = {count};\n    if (threadIdx.x < kiln_n) {name} = kiln_p[threadIdx.x];\n    for (unsigned int kiln_b = threadIdx.x + 32; kiln_b < kiln_n; kiln_b += 32) {{\n      {ty} kiln_o = kiln_p[kiln_b];").ok();
        self.combine_into(name, combiner, 3)?;
        writeln!(self.p.out, "    }}\n    for (int kiln_s = 16; kiln_s > 0; kiln_s >>= 1) {{\n      {ty} kiln_o = kiln_shfl_down({name}, kiln_s);\n      if (threadIdx.x + kiln_s < kiln_n && threadIdx.x + kiln_s < 32) {{").ok();
        self.combine_into(name, combiner, 4)?;
        writeln!(self.p.out, "      }}\n    }}\n    if (threadIdx.x == 0) {slot}[0] = {name};\n  }}\n  __syncthreads();\n  {name} = {slot}[0];").ok();
        Ok(())
    }

    /// `name = combiner(name, kiln_o)`, printed by the C printer's rule.
    fn combine_into(&mut self, name: &str, combiner: Combiner, depth: usize) -> Result<()> {
        let dtype = self.dtype_of(name)?;
        self.p.locals.insert("kiln_o".into(), dtype);
        let update = Stmt::Update {
            name: name.to_string(),
            combiner,
            value: Val::Local("kiln_o".into()),
        };
        let r = self.p.stmt(&update, depth);
        self.p.locals.remove("kiln_o");
        r
    }

    /// The shared array (one slot per warp) of reduced local `name`.
    fn shared_slot(&mut self, name: &str) -> Result<String> {
        let slot = format!("kiln_sh_{name}");
        if !self.slots.iter().any(|s| s == name) {
            let ty = self.c_type_of(name)?;
            writeln!(self.shared, "  __shared__ {ty} {slot}[32];").ok();
            self.slots.push(name.to_string());
        }
        Ok(slot)
    }

    fn dtype_of(&self, name: &str) -> Result<DType> {
        match self.p.locals.get(name) {
            Some(d) => Ok(*d),
            None => bail!("reduced local '{name}' is not declared"),
        }
    }

    fn c_type_of(&self, name: &str) -> Result<&'static str> {
        crate::scalar_c::c_type(self.dtype_of(name)?)
    }
}

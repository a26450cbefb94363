//! The C printer's statements: loops (parallel, vectorized, unrolled, with
//! their OpenMP clauses and f16 blocks), locals, stores, updates and the
//! statements other files print (gemms, arg-reductions, ordered parallel
//! reductions). Values are printed by `values.rs`.

use super::*;

/// Vector loops shorter than this many whole vectors run their partial vector masked
/// (`Printer::padded_bound`): in longer ones the element-by-element remainder is a small
/// share, and a loop the C compiler failed to vectorize under the guard would cost more.
const PADDED_VECTORS: i64 = 8;

/// Vector loops whose body reads more than this many times keep their element-by-element
/// remainder (vectorized by GCC as a narrower epilogue) instead of a masked partial vector:
/// GCC 12 spilled a window's masked reads to the stack (a 5x5 depthwise window over 120
/// channels, six points jammed, ran twice as slow masked: BENCHMARKS.md, session 33).
pub(super) const PADDED_MAX_LOADS: usize = 8;

/// The C bound of a loop of `extent` iterations.
fn loop_bound(extent: &Extent) -> String {
    match extent {
        Extent::Const(n) => n.to_string(),
        Extent::Tail {
            total,
            outer,
            factor,
        } => format!(
            "({total} - {factor}*{outer} < {factor} ? {total} - {factor}*{outer} : {factor})"
        ),
    }
}

impl Printer<'_> {
    pub(crate) fn stmt(&mut self, s: &Stmt, depth: usize) -> Result<()> {
        let pad = "  ".repeat(depth);
        match s {
            Stmt::Loop(l)
                if matches!(l.kind, LoopKind::Parallel | LoopKind::Vectorized)
                    && kiln_loop::ir::carries_arg_reduction(&l.body) =>
            {
                bail!(
                    "{:?} loop '{}' would reorder the steps of an arg-reduction, which run in index order",
                    l.kind,
                    l.var
                )
            }
            Stmt::Loop(l)
                if l.kind == LoopKind::Parallel
                    && !kiln_loop::combine::combines(&l.body).is_empty() =>
            {
                self.combined_parallel(l, depth)?
            }
            Stmt::Loop(l)
                if l.kind == LoopKind::Parallel
                    && !kiln_loop::ir::reduced_locals(&l.body).is_empty() =>
            {
                bail!(
                    "parallel loop '{}' updates locals declared outside it without a combine",
                    l.var
                )
            }
            Stmt::Combine(c) => self.combine_step(c, depth)?,
            Stmt::Loop(l) => self.loop_stmt(l, depth)?,
            Stmt::Store { buf, offset, value } => {
                let narrowed = half_blocks::find(&self.narrowed, *buf, offset);
                if let Some(array) = narrowed.map(|a| format!("{}[{}]", a.array, a.var)) {
                    let (v, _) = self.val(value)?;
                    writeln!(self.out, "{pad}{array} = (float)({v});").ok();
                    return Ok(());
                }
                let b = &self.k.buffers[*buf];
                let off = self.idx(offset)?;
                let v = match value {
                    // A 16-bit float copied to its own type keeps its bits: no widening
                    // and rounding back (movement kernels: transposes, concatenations).
                    Val::Load {
                        buf: src,
                        offset,
                        guard,
                    } if b.dtype.is_half_float() && self.k.buffers[*src].dtype == b.dtype => {
                        self.stored_read(*src, offset, guard)?
                    }
                    _ => {
                        let (v, _) = self.val(value)?;
                        narrow(b.dtype, &format!("({})({v})", c_type(b.dtype)?))
                    }
                };
                writeln!(self.out, "{pad}{}[{off}] = {v};", b.name).ok();
            }
            Stmt::Let { name, dtype, value } => {
                let (v, _) = self.val(value)?;
                let ty = c_type(*dtype)?;
                writeln!(self.out, "{pad}{ty} {name} = ({ty})({v});").ok();
                self.locals.insert(name.clone(), *dtype);
            }
            Stmt::Update {
                name,
                combiner,
                value,
            } => {
                let Some(&dtype) = self.locals.get(name) else {
                    bail!("update of undeclared local '{name}'");
                };
                let (v, _) = self.val(value)?;
                let ty = c_type(dtype)?;
                let v = format!("({ty})({v})");
                let e = match combiner {
                    // A 16-bit float local accumulates one rounded step at a time (bf16 sums,
                    // `kiln_ops::te::Reduction::accumulator_type`), as the interpreter does.
                    Combiner::Sum => round_to(dtype, &format!("{name} + {v}")),
                    Combiner::Prod => round_to(dtype, &format!("{name} * {v}")),
                    Combiner::And if self.has_unconditional_read(value) => {
                        format!("(uint8_t)(({name} != 0) & ({v} != 0))")
                    }
                    Combiner::Or if self.has_unconditional_read(value) => {
                        format!("(uint8_t)(({name} != 0) | ({v} != 0))")
                    }
                    Combiner::And => format!("(uint8_t)({name} && {v})"),
                    Combiner::Or => format!("(uint8_t)({name} || {v})"),
                    Combiner::Min | Combiner::Max if self.nan_flagged.contains(name) => {
                        let step = flagged_extreme_step(name, *combiner, ty, &v);
                        writeln!(self.out, "{pad}{step}").ok();
                        return Ok(());
                    }
                    Combiner::Min | Combiner::Max => {
                        let s = combiner.scalar();
                        call_c(&s, &[dtype, dtype], &[name.clone(), v])?.0
                    }
                };
                writeln!(self.out, "{pad}{name} = {e};").ok();
            }
            Stmt::ArgUpdate(a) => self.arg_step(a, depth)?,
            Stmt::Gemm(_) => bail!("gemm statements are printed by the gemm template"),
            Stmt::Alloc(b) => {
                let b = &self.k.buffers[*b];
                let ty = storage_type(b.dtype)?;
                let (name, n) = (&b.name, b.numel().max(1));
                // Explicitly aligned, so GCC realigns the frame: GCC 12.2 placed a small
                // array whose zeroing it vectorized with aligned stores at an address 8 mod
                // 16 in a leaf function's red zone (a segfault; differential seed 59).
                writeln!(
                    self.out,
                    "#if defined(__GNUC__) && !defined(__CUDACC__)\n{pad}{ty} {name}[{n}] __attribute__((aligned(64)));\n#else\n{pad}{ty} {name}[{n}];\n#endif"
                )
                .ok();
            }
        }
        Ok(())
    }

    /// A loop with its OpenMP pragma: parallel, or `omp simd` with a reduction clause
    /// for every local it updates (float max/min ones with their NaN flags, declared
    /// before the loop and applied after it, see [`reduction_clause`]).
    fn loop_stmt(&mut self, l: &kiln_loop::Loop, depth: usize) -> Result<()> {
        let pad = "  ".repeat(depth);
        let bound = loop_bound(&l.extent);
        let blocks = self.open_half_blocks(l, &bound, &pad)?;
        let workshared = std::mem::take(&mut self.workshared);
        let omp = match l.kind {
            LoopKind::Serial | LoopKind::Unrolled => None,
            LoopKind::Parallel => Some("omp parallel for"),
            LoopKind::Vectorized => Some("omp simd"),
        };
        let mut flagged = Vec::new();
        if let Some(p) = omp {
            let locals = &self.locals;
            let (clause, nan_locals) = reduction_clause(l, &|n| locals.get(n).copied())?;
            let sections = array_reduction_clause(self.k, l)?;
            if !nan_locals.is_empty() {
                // A block of its own: another loop of the same local declares its flag too.
                writeln!(self.out, "{pad}{{").ok();
            }
            for name in &nan_locals {
                let flag_type = nan_flag_type(self.locals.get(name).copied());
                // Set when the local is NaN already: the lanes start from the identity and
                // OpenMP's `max`/`min` would drop it when combining them.
                writeln!(
                    self.out,
                    "{pad}{flag_type} {} = {name} != {name};",
                    nan_flag(name)
                )
                .ok();
            }
            writeln!(self.out, "{pad}KILN_OMP({p}{clause}{sections})").ok();
            flagged = nan_locals;
        } else if l.kind == LoopKind::Unrolled {
            writeln!(self.out, "{pad}KILN_UNROLL").ok();
        } else if !workshared && holds_simd_reduction(&l.body) {
            writeln!(self.out, "{pad}KILN_ROLLED").ok();
        }
        match self.padded_bound(l, blocks) {
            Some(padded) => writeln!(
                self.out,
                "{pad}for (int64_t {v} = 0; {v} < {padded}; ++{v}) if ({v} < {bound}) {{",
                v = l.var
            ),
            None => writeln!(
                self.out,
                "{pad}for (int64_t {v} = 0; {v} < {bound}; ++{v}) {{",
                v = l.var
            ),
        }
        .ok();
        self.ranges
            .insert(l.var.clone(), (0, l.extent.max().max(1) - 1));
        let outer_simd = self.simd.clone();
        if l.kind == LoopKind::Vectorized {
            self.simd = Some((l.var.clone(), l.extent.max()));
        }
        self.nan_flagged.extend(flagged.iter().cloned());
        for s in &l.body {
            self.stmt(s, depth + 1)?;
        }
        self.nan_flagged
            .truncate(self.nan_flagged.len() - flagged.len());
        self.simd = outer_simd;
        self.ranges.remove(&l.var);
        writeln!(self.out, "{pad}}}").ok();
        for name in &flagged {
            writeln!(self.out, "{pad}if ({}) {name} = NAN;", nan_flag(name)).ok();
        }
        if !flagged.is_empty() {
            writeln!(self.out, "{pad}}}").ok();
        }
        self.close_half_blocks(blocks, &bound, &pad)
    }

    /// The whole-vector trip count of short vector loop `l` on a target with masked vectors:
    /// its constant extent rounded up to the lanes, when a partial vector is left and the
    /// loop runs over 16 and under [`PADDED_VECTORS`] vectors' iterations. The body then
    /// runs under `if (v < n)`, which the C compiler turns into masked loads and stores (no
    /// lane past the end is touched), where it ran the partial vector's elements one at a
    /// time: a Softmax over rows of 20 took twice as long so (BENCHMARKS.md, session 31).
    /// Not with f16 blocks, which convert the loop's true extent (`c/half_blocks.rs`), and
    /// only when every read and store of the body is contiguous along the loop: GCC 12
    /// vectorizes neither a read the same for every lane nor a strided one under the mask
    /// (a loop of 20 then ran all 32 iterations one by one); nor when the body reads more
    /// than [`PADDED_MAX_LOADS`] times.
    fn padded_bound(&self, l: &Loop, half_blocks: (usize, usize)) -> Option<i64> {
        let lanes = self.masked_lanes?;
        let Extent::Const(n) = l.extent else {
            return None;
        };
        // Over 16 iterations, as for a conditional read (`c/values.rs` `conditional_read`):
        // GCC 12 may unroll a shorter loop completely and vectorize the loop around it, where
        // its masked loads form a group that gets one vector's mask (differential finding 268).
        let short = n > 16 && n % lanes != 0 && n < PADDED_VECTORS * lanes;
        if l.kind != LoopKind::Vectorized || !short || half_blocks != (0, 0) {
            return None;
        }
        let contiguous = |offset: &Idx| offset.unit_stride_aligned(&l.var, 1);
        let mut masked = true;
        let mut loads = 0;
        kiln_loop::ir::for_each_store(&l.body, &mut |_, offset, _| masked &= contiguous(offset));
        kiln_loop::ir::for_each_load(&l.body, &mut |_, offset, _| {
            masked &= contiguous(offset);
            loads += 1;
        });
        (masked && loads <= PADDED_MAX_LOADS).then(|| (n + lanes - 1) / lanes * lanes)
    }

    /// Before vector loop `l` (of `bound` iterations) on a target with f16 conversion
    /// instructions: its f16 reads widened into float arrays and the arrays its f16 stores
    /// go to declared (`c/half_blocks.rs`). Returns how many of each it added.
    fn open_half_blocks(&mut self, l: &Loop, bound: &str, pad: &str) -> Result<(usize, usize)> {
        if l.kind != LoopKind::Vectorized || !self.half_conversions {
            return Ok((0, 0));
        }
        let reads = widened_reads(self.k, l, self.block_arrays);
        self.block_arrays += reads.len();
        let stores = narrowed_stores(self.k, l, self.block_arrays);
        self.block_arrays += stores.len();
        let len = l.extent.max();
        for a in &reads {
            let start = self.block_start(a)?;
            writeln!(
                self.out,
                "{pad}float {0}[{len}]; {WIDEN_BLOCK}({0}, &{start}, {bound});",
                a.array
            )
            .ok();
        }
        for a in &stores {
            writeln!(self.out, "{pad}float {}[{len}];", a.array).ok();
        }
        let added = (reads.len(), stores.len());
        self.widened.extend(reads);
        self.narrowed.extend(stores);
        Ok(added)
    }

    /// After the loop [`Printer::open_half_blocks`] opened `(reads, stores)` for: its
    /// stores' arrays narrowed into their buffers.
    fn close_half_blocks(
        &mut self,
        (reads, stores): (usize, usize),
        bound: &str,
        pad: &str,
    ) -> Result<()> {
        let narrowed = self.narrowed.split_off(self.narrowed.len() - stores);
        for a in &narrowed {
            let start = self.block_start(a)?;
            writeln!(
                self.out,
                "{pad}{NARROW_BLOCK}(&{start}, {}, {bound});",
                a.array
            )
            .ok();
        }
        self.widened.truncate(self.widened.len() - reads);
        Ok(())
    }

    /// `buf[first]`: the element a block access starts at (its loop variable at 0).
    fn block_start(&self, a: &BlockAccess) -> Result<String> {
        let first = a.offset.substitute(&a.var, &Idx::constant(0));
        Ok(format!(
            "{}[{}]",
            self.k.buffers[a.buf].name,
            self.idx(&first)?
        ))
    }
}

/// Whether `body` holds, at any depth of serial loops, an `omp simd` loop with
/// reductions. GCC fully unrolls short constant-trip loops before it vectorizes,
/// and the copies of a simd loop share its per-lane reduction arrays, which stops
/// their vectorization: a LayerNorm row sum split in two blocks ran scalar at a
/// third of the speed. Such loops are printed `KILN_ROLLED`, so GCC keeps them.
fn holds_simd_reduction(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Loop(l) if l.kind == LoopKind::Vectorized => {
            !kiln_loop::ir::reduced_locals(&l.body).is_empty()
                || kiln_loop::ir::has_arg_reduction(&l.body)
        }
        Stmt::Loop(l) if l.kind != LoopKind::Parallel => holds_simd_reduction(&l.body),
        _ => false,
    })
}

//! The C printer for loop IR kernels (CPU dialect).
//!
//! Needs: a scheduled [`Kernel`] whose element types the C backend has
//! (see [`scalar_c::c_type`]).
//! Guarantees: one C11 function `int NAME(void* const* restrict args)`
//! taking the kernel's buffers in order (inputs `const T* restrict`,
//! outputs `T* restrict`; no `restrict` on an in-place pair), returning 0, or 1 when a data-dependent index
//! was out of range (that read then reads element 0, never outside the
//! buffer). Parallel loops become `omp parallel for` (one that reduces into
//! outer locals becomes an ordered parallel reduction,
//! `c/ordered_reduction.rs`), vectorized loops
//! `omp simd`, unrolled loops `GCC unroll`; without OpenMP the pragmas are
//! ignored and the code stays correct. Floor division and remainder use
//! plain `/` and `%` where the dividend is provably non-negative.

mod arg_reduction;
pub(crate) mod gemm_kernel;
mod half_blocks;
mod omp_clauses;
mod ordered_reduction;

use crate::gemm::{GemmWorkspace, Tuning};
use crate::scalar_c::{c_type, call_c, call_dtype, narrow, round_to, storage_type, widen};
use gemm_kernel::gemm_kernel_c;
use half_blocks::{narrowed_stores, widened_reads, BlockAccess};
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_loop::{Atom, Extent, Idx, Kernel, Loop, LoopKind, Scope, Stmt, Val};
use kiln_ops::te::Combiner;
use kiln_target::TargetDesc;
use omp_clauses::{
    array_reduction_clause, flagged_extreme_step, nan_flag, nan_flag_type, reduction_clause,
};
use std::collections::HashMap;
use std::fmt::Write;

/// Whether `i` reads an index from a buffer (a gather's data-dependent index).
fn reads_data(i: &Idx) -> bool {
    i.terms.iter().any(|(a, _)| match a {
        Atom::Var(_) => false,
        Atom::Div(e, _) | Atom::Mod(e, _) => reads_data(e),
        Atom::Data { .. } => true,
    })
}

/// Whether `v` occurs in `i` only as a plain term (not under a division or remainder).
fn affine_in(i: &Idx, v: &str) -> bool {
    i.terms.iter().all(|(a, _)| match a {
        Atom::Var(_) => true,
        Atom::Div(e, _) | Atom::Mod(e, _) => !e.uses(v),
        Atom::Data { .. } => false,
    })
}

/// The suffix of the prelude's `kiln_keep_*`/`kiln_select_*` for C type `ty`.
fn select_suffix(ty: &str) -> Result<&'static str> {
    Ok(match ty {
        "float" => "f32",
        "double" => "f64",
        "int8_t" => "i8",
        "int16_t" => "i16",
        "int32_t" => "i32",
        "int64_t" => "i64",
        "uint8_t" => "u8",
        "uint16_t" => "u16",
        "uint32_t" => "u32",
        "uint64_t" => "u64",
        other => bail!("no branch-free select for C type {other}"),
    })
}

/// Headers and helpers every generated C file starts with.
pub fn prelude() -> String {
    let mut s = String::from(
        "#include <stdint.h>\n#include <math.h>\n#include <string.h>\n#include <stdlib.h>\n",
    );
    // Scalar helpers must inline into every kernel's loops (to vectorize
    // them), even in a file of many kernels where the compiler's growth
    // limits would stop plain `inline`.
    s.push_str(
        "#if defined(__GNUC__)\n#define KILN_INLINE static inline __attribute__((always_inline, unused))\n#else\n#define KILN_INLINE static inline\n#endif\n",
    );
    s.push_str(
        "#define KILN_SET_ERR(e) __atomic_store_n(e, 1, __ATOMIC_RELAXED)\n#if defined(__clang__)\n#define KILN_UNROLL _Pragma(\"unroll\")\n#else\n#define KILN_UNROLL _Pragma(\"GCC unroll 16\")\n#endif\n",
    );
    s.push_str(INDEX_HELPERS);
    s.push_str(crate::scalar_c::PRELUDE);
    s.push_str(half_blocks::HALF_BLOCKS);
    s.push_str(crate::gemm::gemm_prelude());
    s
}

/// Floor division, remainder and checked data-dependent indices, for
/// every dialect (each defines `KILN_INLINE` and `KILN_SET_ERR` first).
pub(crate) const INDEX_HELPERS: &str = r#"
KILN_INLINE int64_t kiln_fdiv(int64_t a, int64_t d) { int64_t q = a / d; return (a % d != 0 && a < 0) ? q - 1 : q; }
KILN_INLINE int64_t kiln_fmod(int64_t a, int64_t d) { int64_t r = a % d; return r < 0 ? r + d : r; }
KILN_INLINE int64_t kiln_idx(int64_t v, int64_t n, int* err) {
  if (v < 0) v += n;
  if (v < 0 || v >= n) { KILN_SET_ERR(err); return 0; }
  return v;
}
"#;

/// Suffix of a gemm kernel's prepacking entry points: `int NAME_prepack(void* const* args)`
/// (the kernel's buffers, then where to write the packing) and `long NAME_prepack_floats(void)`
/// (its size). Present when `kernel_c` chose to prepack a constant factor; the kernel itself
/// then takes the packing as one more argument after its buffers.
pub const PREPACK_SUFFIX: &str = "_prepack";

/// The entry points of kernel `name` as calls of kernel `to`, whose C is
/// the same but for its name: `int NAME(void* const*)` and, when
/// `prepacked`, the [`PREPACK_SUFFIX`] pair.
pub fn forwarding_kernel_c(name: &str, to: &str, prepacked: bool) -> String {
    let mut c = format!(
        "int {to}(void* const* restrict args);\n\
         int {name}(void* const* restrict args) {{ return {to}(args); }}\n"
    );
    if prepacked {
        let (from, to) = (
            format!("{name}{PREPACK_SUFFIX}"),
            format!("{to}{PREPACK_SUFFIX}"),
        );
        c += &format!(
            "long {to}_floats(void);\n\
             long {from}_floats(void) {{ return {to}_floats(); }}\n\
             int {to}(void* const* restrict args);\n\
             int {from}(void* const* restrict args) {{ return {to}(args); }}\n"
        );
    }
    c
}

/// Prints `k` as a C function for `target` (a gemm's cache blocking reads
/// its L2). `alias`: an input buffer the output may share (in-place
/// execution); neither gets `restrict`. `constants`: input buffers whose
/// values are known before any run (weights), which a gemm may pack once
/// ([`PREPACK_SUFFIX`]). `tuning` overrides a gemm's own choices (`kiln
/// tune`'s measured best; the default overrides nothing).
pub fn kernel_c(
    k: &Kernel,
    alias: Option<usize>,
    constants: &[usize],
    target: &TargetDesc,
    tuning: &Tuning,
) -> Result<KernelSource> {
    if let [Stmt::Gemm(g)] = k.body.as_slice() {
        let tuning = Tuning {
            l2_bytes: tuning.l2_bytes.or(Some(target.l2_per_core())),
            ..tuning.clone()
        };
        return gemm_kernel_c(k, g, constants, &tuning);
    }
    let mut p = Printer::new(k);
    p.half_conversions = target.half_conversions;
    // An in-place pair may alias: neither gets `restrict`.
    let restrict = |i: usize| alias.is_none() || !(k.buffers[i].output || alias == Some(i));
    let args = buffer_arguments(k, &restrict)?;
    write!(
        p.out,
        "int {}(void* const* restrict args) {{\n{args}",
        k.name
    )
    .ok();
    writeln!(p.out, "  int err = 0;").ok();
    for s in &k.body {
        p.stmt(s, 1)?;
    }
    writeln!(p.out, "  return err;\n}}").ok();
    Ok(KernelSource {
        c: p.out,
        packed_buffer: None,
        workspace: GemmWorkspace::default(),
    })
}

/// A kernel's C source.
#[derive(Debug, Clone)]
pub struct KernelSource {
    pub c: String,
    /// The buffer whose packing the kernel reads instead of it: it has the
    /// [`PREPACK_SUFFIX`] entry points and takes the packing after its
    /// buffers.
    pub packed_buffer: Option<usize>,
    /// Scratch memory it takes as its last argument (after the packing),
    /// 64-byte aligned, when nonzero.
    pub workspace: GemmWorkspace,
}

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

/// `T* NAME = (T*)args[i];` for each of `k`'s parameters (inputs `const`;
/// `restrict` where `restrict(i)`).
fn buffer_arguments(k: &Kernel, restrict: &dyn Fn(usize) -> bool) -> Result<String> {
    let mut s = String::new();
    let params = k.buffers.iter().filter(|b| b.scope == Scope::Param);
    for (i, b) in params.enumerate() {
        let ty = storage_type(b.dtype)?;
        let konst = if b.output { "" } else { "const " };
        let qualifier = if restrict(i) { "restrict " } else { "" };
        // A kernel need not read every buffer (a reshape's shape input).
        writeln!(
            s,
            "  {konst}{ty}* {qualifier}{0} = ({konst}{ty}*)args[{i}];\n  (void){0};",
            b.name
        )
        .ok();
    }
    Ok(s)
}

pub(crate) struct Printer<'a> {
    pub(crate) k: &'a Kernel,
    pub(crate) out: String,
    /// Value range of each enclosing loop variable.
    pub(crate) ranges: HashMap<String, (i64, i64)>,
    /// Element type of each local scalar.
    pub(crate) locals: HashMap<String, DType>,
    /// The innermost enclosing vectorized (`omp simd`) loop: its variable and extent.
    simd: Option<(String, i64)>,
    /// Print every guarded read as a conditional read (`g ? buf[i] : 0`); the CUDA
    /// printer's choice (see [`Printer::conditional_read`], [`Printer::for_gpu`]).
    conditional_reads: bool,
    /// Float max/min locals whose NaN the enclosing vectorized loops track in a flag.
    nan_flagged: Vec<String>,
    /// Whether vector loops convert their f16 elements a block at a time with the
    /// target's instructions (`c/half_blocks.rs`).
    half_conversions: bool,
    /// f16 reads the enclosing vector loop takes from arrays widened before it.
    widened: Vec<BlockAccess>,
    /// f16 stores the enclosing vector loop makes to arrays narrowed after it.
    narrowed: Vec<BlockAccess>,
    /// Block arrays declared so far (their names are numbered).
    block_arrays: usize,
}

impl<'a> Printer<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Printer<'a> {
        Printer {
            k,
            out: String::new(),
            ranges: HashMap::new(),
            locals: HashMap::new(),
            simd: None,
            conditional_reads: false,
            nan_flagged: Vec::new(),
            half_conversions: false,
            widened: Vec::new(),
            narrowed: Vec::new(),
            block_arrays: 0,
        }
    }

    /// A printer for GPU code: a thread reads under its guard (the masked
    /// unconditional reads work around a host C compiler's bug, which NVRTC
    /// does not share).
    pub(crate) fn for_gpu(k: &'a Kernel) -> Printer<'a> {
        Printer {
            conditional_reads: true,
            ..Printer::new(k)
        }
    }

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
                    && !kiln_loop::ir::reduced_locals(&l.body).is_empty() =>
            {
                self.ordered_reduction(l, depth)?
            }
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
                writeln!(self.out, "{pad}{ty} {}[{}];", b.name, b.numel().max(1)).ok();
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
        }
        writeln!(
            self.out,
            "{pad}for (int64_t {v} = 0; {v} < {bound}; ++{v}) {{",
            v = l.var
        )
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
        self.close_half_blocks(blocks, &bound, &pad)
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
                "{pad}float {0}[{len}]; kiln_f16_f32_n({0}, &{start}, {bound});",
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
                "{pad}kiln_f32_f16_n(&{start}, {}, {bound});",
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

    fn range(&self, i: &Idx) -> (i64, i64) {
        i.range(&|v| {
            self.ranges
                .get(v)
                .copied()
                .unwrap_or((i64::MIN / 4, i64::MAX / 4))
        })
    }

    pub(crate) fn idx(&self, i: &Idx) -> Result<String> {
        let mut parts = Vec::new();
        for (a, c) in &i.terms {
            let atom = self.atom(a)?;
            parts.push(if *c == 1 { atom } else { format!("{c}*{atom}") });
        }
        if i.constant != 0 || parts.is_empty() {
            parts.push(i.constant.to_string());
        }
        Ok(format!("({})", parts.join(" + ")))
    }

    fn atom(&self, a: &Atom) -> Result<String> {
        Ok(match a {
            Atom::Var(v) => v.clone(),
            Atom::Div(e, d) if self.range(e).0 >= 0 => format!("({} / {d})", self.idx(e)?),
            Atom::Mod(e, d) if self.range(e).0 >= 0 => format!("({} % {d})", self.idx(e)?),
            Atom::Div(e, d) => format!("kiln_fdiv({}, {d})", self.idx(e)?),
            Atom::Mod(e, d) => format!("kiln_fmod({}, {d})", self.idx(e)?),
            Atom::Data { value, extent } => {
                let (v, _) = self.val(value)?;
                format!("kiln_idx((int64_t){v}, {extent}, &err)")
            }
        })
    }

    pub(crate) fn guard(&self, g: &[(Idx, i64)]) -> Result<String> {
        let parts: Vec<String> = g
            .iter()
            .map(|(i, e)| {
                let s = self.idx(i)?;
                Ok(format!("({s} >= 0 && {s} < {e})"))
            })
            .collect::<Result<_>>()?;
        Ok(parts.join(" && "))
    }

    /// The guard `g` as a C condition without short-circuit operators.
    fn guard_mask(&self, g: &[(Idx, i64)]) -> Result<String> {
        let parts: Vec<String> = g
            .iter()
            .map(|(i, e)| {
                let s = self.idx(i)?;
                Ok(format!("({s} >= 0) & ({s} < {e})"))
            })
            .collect::<Result<_>>()?;
        Ok(format!("({})", parts.join(" & ")))
    }

    /// Whether the guarded read of `offset` under `guard` may be printed as a conditional
    /// read, `(g ? buf[offset] : 0)`, which GCC if-converts into a masked load.
    ///
    /// GCC 12.2 vectorizes a group of masked loads (loads at neighbouring offsets, e.g. the
    /// taps of a window once an inner loop is unrolled, in a loop GCC chose to vectorize)
    /// with the first vector's mask for every vector of the group, and reads zeros where the
    /// guard holds: differential finding 268 (`fuzz/regressions/differential/268-gcc12.c`).
    /// A masked load only joins such a group when its offset steps by more than one element
    /// per iteration of the vectorized loop, and the wrong mask only matters when the guard
    /// differs between the lanes. So a read stays conditional (a masked or unswitched load,
    /// as fast as it gets) only inside an `omp simd` loop GCC vectorizes as it is (more
    /// than 16 iterations, so it is never unrolled completely first) that it reads at unit
    /// stride, or under a guard that does not depend on that loop (the padded windows of
    /// pooling and depthwise convolution along rows, channels-last or not; the reads of
    /// one group, within a row, then share one mask); and where a data-dependent index
    /// must not be evaluated out of bounds. Every other guarded read is unconditional: see
    /// [`Printer::val`].
    fn conditional_read(&self, offset: &Idx, guard: &[(Idx, i64)]) -> bool {
        if self.conditional_reads || reads_data(offset) || guard.iter().any(|(i, _)| reads_data(i))
        {
            return true;
        }
        let Some((v, extent)) = &self.simd else {
            return false;
        };
        if *extent <= 16 || !affine_in(offset, v) {
            return false;
        }
        let step: i64 = offset
            .terms
            .iter()
            .filter(|(a, _)| matches!(a, Atom::Var(x) if x == v))
            .map(|(_, c)| *c)
            .sum();
        step == 1 || !guard.iter().any(|(i, _)| i.uses(v))
    }

    /// Whether `v` contains a guarded read printed as an unconditional one: then every
    /// select around it is printed without a branch too (see [`Printer::val`]).
    fn has_unconditional_read(&self, v: &Val) -> bool {
        match v {
            Val::Load { buf, offset, guard } => {
                !guard.is_empty()
                    && !self.k.buffers[*buf].shape.contains(&0)
                    && !self.conditional_read(offset, guard)
            }
            Val::Call(_, args) => args.iter().any(|a| self.has_unconditional_read(a)),
            Val::InBounds(_) | Val::Const(_) | Val::Index(_) | Val::Local(_) => false,
        }
    }

    /// The read of `buf[offset]` under `guard` in the buffer's storage type (see
    /// [`Printer::val`] for the forms of a guarded read).
    fn stored_read(&self, buf: usize, offset: &Idx, guard: &[(Idx, i64)]) -> Result<String> {
        let b = &self.k.buffers[buf];
        let stored = storage_type(b.dtype)?;
        let read = format!("{}[{}]", b.name, self.idx(offset)?);
        Ok(if guard.is_empty() {
            read
        } else if b.shape.contains(&0) {
            // No index is in bounds of an empty buffer.
            format!("({stored})0")
        } else if self.conditional_read(offset, guard) {
            format!("({} ? {read} : ({stored})0)", self.guard(guard)?)
        } else {
            let g = self.guard_mask(guard)?;
            format!(
                "kiln_keep_{}({g}, {}[{} & -(int64_t){g}])",
                select_suffix(stored)?,
                b.name,
                self.idx(offset)?
            )
        })
    }

    /// The C expression of `v` and its element type.
    ///
    /// A guarded read is `(g ? buf[offset] : 0)` where [`Printer::conditional_read`] allows
    /// it. Elsewhere it reads unconditionally, at offset 0 when the guard fails, and selects
    /// with integer masks: `kiln_keep_T(g, buf[offset & -g])`; a `Where` around such a read
    /// is `kiln_select_T(c, a, b)`, also branch-free. A branch on the guard anywhere around
    /// the read (a `?:` arm, or one GCC's jump threading copies the read into) lets GCC move
    /// the read under the branch and if-convert it into a masked load again.
    pub(crate) fn val(&self, v: &Val) -> Result<(String, DType)> {
        Ok(match v {
            Val::Load { buf, offset, guard } => {
                let dtype = self.k.buffers[*buf].dtype;
                match half_blocks::find(&self.widened, *buf, offset).filter(|_| guard.is_empty()) {
                    Some(a) => (format!("{}[{}]", a.array, a.var), dtype),
                    None => (widen(dtype, &self.stored_read(*buf, offset, guard)?), dtype),
                }
            }
            Val::Call(s, args)
                if s.op == "Where" && args.len() == 3 && self.has_unconditional_read(v) =>
            {
                let c = match &args[0] {
                    Val::InBounds(g) if !g.is_empty() => self.guard_mask(g)?,
                    c => self.val(c)?.0,
                };
                let (a, ta) = self.val(&args[1])?;
                let (b, tb) = self.val(&args[2])?;
                let t = call_dtype(s, &[DType::Bool, ta, tb])?;
                let ty = c_type(t)?;
                let e = format!(
                    "kiln_select_{}(({c}) != 0, ({ty})({a}), ({ty})({b}))",
                    select_suffix(ty)?
                );
                (e, t)
            }
            Val::Call(s, args)
                if args.len() == 2
                    && matches!(s.op.as_str(), "And" | "Or" | "Min" | "Max")
                    && self.has_unconditional_read(v) =>
            {
                let (a, ta) = self.val(&args[0])?;
                let (b, tb) = self.val(&args[1])?;
                if ta == DType::Bool && tb == DType::Bool {
                    // `&&` and `||` would read `b` under a branch.
                    let op = if matches!(s.op.as_str(), "And" | "Min") {
                        "&"
                    } else {
                        "|"
                    };
                    (
                        format!("(uint8_t)((({a}) != 0) {op} (({b}) != 0))"),
                        DType::Bool,
                    )
                } else {
                    call_c(s, &[ta, tb], &[a, b])?
                }
            }
            Val::InBounds(g) if g.is_empty() => ("(uint8_t)1".into(), DType::Bool),
            Val::InBounds(g) => (format!("(uint8_t)({})", self.guard(g)?), DType::Bool),
            Val::Const(t) => (literal(t)?, t.dtype()),
            Val::Index(i) => (format!("(int64_t){}", self.idx(i)?), DType::I64),
            Val::Local(n) => match self.locals.get(n) {
                Some(d) => (n.clone(), *d),
                None => bail!("read of undeclared local '{n}'"),
            },
            Val::Call(s, args) => match (s.op.as_str(), args.as_slice()) {
                ("Pow", [x, Val::Const(e)]) => match small_power(e) {
                    Some(n) => self.product(x, n)?,
                    None => self.call(s, args)?,
                },
                _ => self.call(s, args)?,
            },
        })
    }

    /// `x` multiplied by itself to make its `n`-th power.
    fn product(&self, x: &Val, n: u32) -> Result<(String, DType)> {
        let (x, t) = self.val(x)?;
        let v = format!("(({}){x})", c_type(t)?);
        let factors = vec![v; n as usize];
        Ok((format!("({})", factors.join(" * ")), t))
    }

    fn call(&self, s: &kiln_ops::te::Scalar, args: &[Val]) -> Result<(String, DType)> {
        Ok({
            {
                let (texts, types): (Vec<String>, Vec<DType>) = args
                    .iter()
                    .map(|a| self.val(a))
                    .collect::<Result<Vec<_>>>()?
                    .into_iter()
                    .unzip();
                call_c(s, &types, &texts)?
            }
        })
    }
}

/// A float exponent the printer expands into products: 1, 2 or 3.
fn small_power(e: &Tensor) -> Option<u32> {
    if !e.dtype().is_float() || e.data.len() != 1 {
        return None;
    }
    match e.data.get_f64(0) {
        1.0 => Some(1),
        2.0 => Some(2),
        3.0 => Some(3),
        _ => None,
    }
}

/// A C literal of a 0-d tensor's value, exact for every type.
pub fn literal(t: &Tensor) -> Result<String> {
    let dtype = t.dtype();
    if t.data.len() != 1 {
        bail!("constant is not a scalar");
    }
    let x = t.data.get_f64(0);
    Ok(match dtype {
        // f16 and bf16 compute in float, which holds their values exactly.
        DType::F16 | DType::BF16 => literal(&Tensor::new(
            vec![],
            kiln_ir::Data::from_f64(DType::F32, &[x])?,
        )?)?,
        DType::F32 | DType::F64 => {
            let suffix = if dtype == DType::F32 { "f" } else { "" };
            if x.is_nan() {
                "NAN".into()
            } else if x.is_infinite() {
                if x > 0.0 { "INFINITY" } else { "(-INFINITY)" }.into()
            } else if dtype == DType::F32 {
                format!("{:?}{suffix}", x as f32)
            } else {
                format!("{x:?}")
            }
        }
        DType::Bool => (if x != 0.0 { "1" } else { "0" }).into(),
        DType::I64 => match t.as_slice::<i64>()?[0] {
            i64::MIN => "INT64_MIN".into(),
            v => format!("INT64_C({v})"),
        },
        DType::U64 => format!("UINT64_C({})", t.as_slice::<u64>()?[0]),
        DType::I8 | DType::I16 | DType::I32 | DType::U8 | DType::U16 | DType::U32 => {
            format!("(({}){})", c_type(dtype)?, x as i64)
        }
        other => bail!("the C backend has no literal of type {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c_of(text: &str) -> Result<String> {
        let k = kiln_loop::parse_kernel(text)?;
        Ok(kernel_c(
            &k,
            None,
            &[],
            &kiln_target::CpuPreset::X86_64V4.desc(2),
            &Tuning::default(),
        )?
        .c)
    }

    #[test]
    fn a_reduction_split_across_threads_combines_private_copies() {
        let sum = "kernel k(in0: f32[8,40], out out0: f32[40]) {
  for i1 in 0..40 {
    out0[i1] = 0.0:f32
  }
  parallel for r0 in 0..8 {
    vectorized for i1 in 0..40 {
      out0[i1] = Add(out0[i1], in0[40*r0 + i1])
    }
  }
}";
        let c = c_of(sum).expect("C");
        assert!(
            c.contains("KILN_OMP(omp parallel for reduction(+:out0[0:40]))"),
            "{c}"
        );
        let max = sum.replace("0.0:f32", "-inf:f32").replace("Add(", "Max(");
        let c = c_of(&max).expect("C");
        assert!(c.contains("reduction(kiln_rmaxf:out0[0:40])"), "{c}");
    }

    #[test]
    fn a_local_buffer_declared_in_a_parallel_loop_is_each_iteration_s_own() {
        let cached = "kernel k(in0: f32[8,40], out out0: f32[8,40]) {
  parallel for r0 in 0..8 {
    alloc t: f32[40]
    for i1 in 0..40 {
      t[i1] = in0[40*r0 + i1]
    }
    for i1 in 0..40 {
      out0[40*r0 + i1] = t[i1]
    }
  }
}";
        let c = c_of(cached).expect("C");
        assert!(c.contains("KILN_OMP(omp parallel for)\n"), "{c}");
    }

    #[test]
    fn a_parallel_loop_overwriting_the_same_elements_is_an_error() {
        let race = "kernel k(in0: f32[8,40], out out0: f32[40]) {
  parallel for r0 in 0..8 {
    for i1 in 0..40 {
      out0[i1] = in0[40*r0 + i1]
    }
  }
}";
        let err = c_of(race).expect_err("a race").to_string();
        assert!(err.contains("parallel loop 'r0' stores to out0"), "{err}");
    }

    /// Differential finding 268: GCC 12.2 gave a group of masked loads one vector's mask.
    #[test]
    fn guarded_reads_are_conditional_only_where_gcc_cannot_mix_up_their_masks() {
        let window = "kernel k(in0: f32[3,3,5,3], out out0: f32[3,3,6,3]) {
  for i0 in 0..3 {
    for i1 in 0..3 {
      for i2 in 0..6 {
        for i3 in 0..3 {
          let acc: f32 = -inf:f32
          for r0 in 0..2 {
            acc = max(acc, Where(inbounds(i2 + r0 - 1 < 5), in0[45*i0 + 15*i1 + 3*i2 + 3*r0 + i3 - 3 if i2 + r0 - 1 < 5], -inf:f32))
          }
          out0[54*i0 + 18*i1 + 3*i2 + i3] = acc
        }
      }
    }
  }
}";
        let c = c_of(window).expect("C");
        assert!(!c.contains("? in0["), "{c}");
        assert!(c.contains("kiln_select_f32(((((i2 + r0 + -1) >= 0) & ((i2 + r0 + -1) < 5))) != 0, (float)(kiln_keep_f32("), "{c}");
        assert!(
            c.contains("in0[(45*i0 + 15*i1 + 3*i2 + 3*r0 + i3 + -3) & -(int64_t)"),
            "{c}"
        );
        // Channels-last: the vectorized loop reads at unit stride.
        let simd = |i3: &str, extent: usize| {
            window
                .replace(
                    "for i3 in 0..3",
                    &format!("vectorized for i3 in 0..{extent}"),
                )
                .replace("f32[3,3,5,3]", &format!("f32[3,3,5,{}]", 2 * extent))
                .replace("f32[3,3,6,3]", &format!("f32[3,3,6,{extent}]"))
                .replace("r0 + i3 - 3 if", &format!("r0 + {i3} - 3 if"))
        };
        let c = c_of(&simd("i3", 32)).expect("C");
        assert!(c.contains("? in0[(45*i0"), "{c}");
        assert!(!c.contains("kiln_keep_f32(("), "{c}");
        // At stride 2 under a guard independent of i3, all lanes share the mask.
        let c = c_of(&simd("2*i3", 32)).expect("C");
        assert!(c.contains("? in0[(45*i0"), "{c}");
        // A loop GCC may unroll before vectorizing another, or a guard on the vectorized
        // loop at stride 2: unconditional.
        let on_i3 = simd("2*i3", 32)
            .replace(
                "inbounds(i2 + r0 - 1 < 5)",
                "inbounds(i2 + r0 - 1 < 5 && 2*i3 - 1 < 64)",
            )
            .replace(
                "if i2 + r0 - 1 < 5]",
                "if i2 + r0 - 1 < 5 && 2*i3 - 1 < 64]",
            );
        for text in [simd("i3", 8), on_i3] {
            let c = c_of(&text).expect("C");
            assert!(!c.contains("? in0["), "{c}");
        }
    }
}

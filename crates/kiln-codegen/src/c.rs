//! The C printer for loop IR kernels (CPU dialect).
//!
//! Needs: a scheduled [`Kernel`] whose element types the C backend has
//! (see [`scalar_c::c_type`]).
//! Guarantees: one C11 function `int NAME(void* const* restrict args)`
//! taking the kernel's buffers in order (inputs `const T* restrict`,
//! outputs `T* restrict`; no `restrict` on an in-place pair), returning 0, or 1 when a data-dependent index
//! was out of range (that read then reads element 0, never outside the
//! buffer). Parallel loops become `omp parallel for`, vectorized loops
//! `omp simd`, unrolled loops `GCC unroll`; without OpenMP the pragmas are
//! ignored and the code stays correct. Floor division and remainder use
//! plain `/` and `%` where the dividend is provably non-negative.

use crate::gemm::{
    self, gemm_c_tuned, gemm_prepack_c_tuned, gemm_workspace_tuned, prepack_name, Factor, GemmSpec,
    GemmWorkspace, Operand, Param, Prepacked, Tuning, Window,
};
use crate::scalar_c::{c_type, call_c};
use kiln_ir::{bail, DType, Result, Tensor};
use kiln_loop::{
    Atom, ConvWindow, Extent, Gemm, GemmInput, GemmOperand, Idx, Kernel, LoopKind, Scope, Stmt,
    Val, WindowLayout,
};
use kiln_ops::te::Combiner;
use kiln_target::TargetDesc;
use std::collections::HashMap;
use std::fmt::Write;

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
        r#"
KILN_INLINE int64_t kiln_fdiv(int64_t a, int64_t d) { int64_t q = a / d; return (a % d != 0 && a < 0) ? q - 1 : q; }
KILN_INLINE int64_t kiln_fmod(int64_t a, int64_t d) { int64_t r = a % d; return r < 0 ? r + d : r; }
KILN_INLINE int64_t kiln_idx(int64_t v, int64_t n, int* err) {
  if (v < 0) v += n;
  if (v < 0 || v >= n) { __atomic_store_n(err, 1, __ATOMIC_RELAXED); return 0; }
  return v;
}
#if defined(__clang__)
#define KILN_UNROLL _Pragma("unroll")
#else
#define KILN_UNROLL _Pragma("GCC unroll 16")
#endif
"#,
    );
    s.push_str(crate::scalar_c::PRELUDE);
    s.push_str(crate::gemm::gemm_prelude());
    s
}

/// Suffix of a gemm kernel's prepacking entry points: `int NAME_prepack(void* const* args)`
/// (the kernel's buffers, then where to write the packing) and `long NAME_prepack_floats(void)`
/// (its size). Present when `kernel_c` chose to prepack a constant factor; the kernel itself
/// then takes the packing as one more argument after its buffers.
pub const PREPACK_SUFFIX: &str = "_prepack";

/// Prints `k` as a C function for `target` (a gemm's cache blocking reads
/// its L2). `alias`: an input buffer the output may share (in-place
/// execution); neither gets `restrict`. `constants`: input buffers whose
/// values are known before any run (weights), which a gemm may pack once
/// ([`PREPACK_SUFFIX`]).
pub fn kernel_c(
    k: &Kernel,
    alias: Option<usize>,
    constants: &[usize],
    target: &TargetDesc,
) -> Result<KernelSource> {
    if let [Stmt::Gemm(g)] = k.body.as_slice() {
        let tuning = Tuning {
            l2_bytes: Some(target.l2_per_core()),
            ..Tuning::default()
        };
        return gemm_kernel_c(k, g, constants, &tuning);
    }
    let mut p = Printer {
        k,
        out: String::new(),
        ranges: HashMap::new(),
        locals: HashMap::new(),
    };
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

/// A kernel that is one matrix product: the gemm template instantiated on
/// the operands (strided when their offsets are, window expressions
/// otherwise), and the entry point calling it. A factor among `constants`
/// of an unbatched product (strided, or any index of its own buffer, like
/// HWIO weights read in OIHW order) is prepacked (B preferred: a weight
/// right of the activations).
fn gemm_kernel_c(
    k: &Kernel,
    g: &Gemm,
    constants: &[usize],
    tuning: &Tuning,
) -> Result<KernelSource> {
    let mut params: Vec<Param> = k
        .buffers
        .iter()
        .map(|b| {
            let konst = if b.output { "" } else { "const " };
            Ok(Param::new(
                format!("{konst}{}* restrict", c_type(b.dtype)?),
                b.name.clone(),
            ))
        })
        .collect::<Result<_>>()?;
    let rows_cols = |o: &GemmOperand, rows: i64, cols: i64| -> Result<Operand> {
        operand(k, o, [g.batch, rows, cols])
    };
    let factor = |i: &GemmInput, rows: i64, cols: i64| -> Result<Operand> {
        match i {
            GemmInput::Read(o) => rows_cols(o, rows, cols),
            GemmInput::Computed(v) => computed(k, v, [g.batch, rows, cols]),
        }
    };
    let window_of = |i: &GemmInput, w: &ConvWindow| -> Result<Operand> {
        match i.read() {
            Some(o) => Ok(Operand::Window(window(&k.buffers[o.buf].name, w))),
            None => bail!("{}: a convolution window over a computed factor", k.name),
        }
    };
    let (a, b) = match &g.window {
        Some(w) if w.layout.is_a() => (window_of(&g.a, w)?, factor(&g.b, g.k, g.n)?),
        Some(w) => (factor(&g.a, g.m, g.k)?, window_of(&g.b, w)?),
        None => (factor(&g.a, g.m, g.k)?, factor(&g.b, g.k, g.n)?),
    };
    let packed = [(Factor::B, &b, &g.b), (Factor::A, &a, &g.a)]
        .into_iter()
        .find_map(|(factor, o, input)| {
            let buf = input.read()?.buf;
            (g.batch == 1
                && constants.contains(&buf)
                && matches!(o, Operand::Strided { .. } | Operand::Expr(_)))
            .then_some((factor, buf))
        });
    let prepacked = packed.map(|(factor, _)| Prepacked {
        factor,
        param: PACKED_PARAM.into(),
    });
    if prepacked.is_some() {
        params.push(Param::new("const float* restrict", PACKED_PARAM));
    }
    let spec = GemmSpec {
        name: format!("{}_gemm", k.name),
        params,
        batch: g.batch as usize,
        m: g.m as usize,
        n: g.n as usize,
        k: g.k as usize,
        a,
        b,
        c: rows_cols(&g.c, g.m, g.n)?,
        epilogue: match &g.epilogue {
            Some(e) => Some(epilogue(k, g, e)?),
            None => None,
        },
        prepacked,
    };
    let mut out = gemm_c_tuned(&spec, tuning)?;
    let workspace = gemm_workspace_tuned(&spec, tuning)?;
    let mut args: Vec<String> = k.buffers.iter().map(|b| b.name.clone()).collect();
    let unpack = buffer_arguments(k, &|_| false)?;
    write!(
        out,
        "int {}(void* const* restrict args) {{\n{unpack}",
        k.name
    )
    .ok();
    if spec.prepacked.is_some() {
        let n = k.buffers.len();
        writeln!(
            out,
            "  const float* {PACKED_PARAM} = (const float*)args[{n}];"
        )
        .ok();
        args.push(PACKED_PARAM.into());
    }
    let ws_arg = k.buffers.len() + usize::from(spec.prepacked.is_some());
    writeln!(
        out,
        "  {}({}, (float*)args[{ws_arg}]);\n  return 0;\n}}",
        spec.name,
        args.join(", ")
    )
    .ok();
    if spec.prepacked.is_some() {
        out.push_str(&gemm_prepack_c_tuned(&spec, tuning)?);
        let packing = prepack_name(&spec);
        let name = format!("{}{PREPACK_SUFFIX}", k.name);
        let n = k.buffers.len();
        args.pop();
        writeln!(
            out,
            "long {name}_floats(void) {{\n  return {packing}_floats();\n}}\nint {name}(void* const* restrict args) {{\n{unpack}  {packing}({}, 0, (float*)args[{n}]);\n  return 0;\n}}",
            args.join(", ")
        )
        .ok();
    }
    Ok(KernelSource {
        c: out,
        packed_buffer: packed.map(|(_, buf)| buf),
        workspace,
    })
}

/// The name of the prepacked factor's parameter in a gemm kernel.
const PACKED_PARAM: &str = "packed";

/// `T* NAME = (T*)args[i];` for each of `k`'s parameters (inputs `const`;
/// `restrict` where `restrict(i)`).
fn buffer_arguments(k: &Kernel, restrict: &dyn Fn(usize) -> bool) -> Result<String> {
    let mut s = String::new();
    let params = k.buffers.iter().filter(|b| b.scope == Scope::Param);
    for (i, b) in params.enumerate() {
        let ty = c_type(b.dtype)?;
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

/// The C expression of a gemm epilogue: the product is the float `acc`,
/// and `b`, `r`, `c` range over the batch, rows and columns.
fn epilogue(k: &Kernel, g: &Gemm, e: &Val) -> Result<String> {
    let mut p = printer(k, [g.batch, g.m, g.n]);
    p.locals.insert("acc".to_string(), DType::F32);
    let (text, dtype) = p.val(e)?;
    if dtype != DType::F32 {
        bail!("gemm epilogue computes {dtype}, the product is f32");
    }
    Ok(text)
}

/// The gemm template's window read of buffer `param`.
fn window(param: &str, w: &ConvWindow) -> Window {
    let pair = |p: [i64; 2]| [p[0] as usize, p[1] as usize];
    Window {
        param: param.to_string(),
        batch: 0,
        channels: w.channels as usize,
        size: pair(w.size),
        out: pair(w.out),
        kernel: pair(w.kernel),
        stride: pair(w.stride),
        pad: pair(w.pad),
        dilation: pair(w.dilation),
        layout: match w.layout {
            WindowLayout::Nchw => gemm::WindowLayout::Columns,
            WindowLayout::Nhwc => gemm::WindowLayout::ChannelsLast,
            WindowLayout::NchwRows => gemm::WindowLayout::Rows,
        },
    }
}

/// A computed gemm factor (a prologue): its value as a C expression over
/// `b`, `r`, `c`, evaluated while the factor is packed.
fn computed(k: &Kernel, v: &Val, extents: [i64; 3]) -> Result<Operand> {
    let (text, dtype) = printer(k, extents).val(v)?;
    if dtype != DType::F32 {
        bail!(
            "{}: a gemm prologue computes {dtype}, the product is f32",
            k.name
        );
    }
    Ok(Operand::Expr(text))
}

/// A printer of values over a gemm operand's `b`, `r`, `c` below `extents`.
fn printer(k: &Kernel, extents: [i64; 3]) -> Printer<'_> {
    let mut p = Printer {
        k,
        out: String::new(),
        ranges: HashMap::new(),
        locals: HashMap::new(),
    };
    for (v, e) in ["b", "r", "c"].iter().zip(extents) {
        p.ranges.insert(v.to_string(), (0, e - 1));
    }
    p
}

/// A gemm operand: strided when its offset is `sb·b + sr·r + sc·c`,
/// otherwise a C expression over `b`, `r`, `c` (with its guard).
fn operand(k: &Kernel, o: &GemmOperand, extents: [i64; 3]) -> Result<Operand> {
    let name = &k.buffers[o.buf].name;
    let coeff = |v: &str| {
        o.offset
            .terms
            .iter()
            .find(|(a, _)| matches!(a, Atom::Var(x) if x == v))
            .map(|t| t.1 as isize)
            .unwrap_or(0)
    };
    let plain = o.guard.is_empty()
        && o.offset.constant == 0
        && o.offset
            .terms
            .iter()
            .all(|(a, _)| matches!(a, Atom::Var(_)));
    if plain {
        return Ok(Operand::Strided {
            param: name.clone(),
            batch: coeff("b"),
            row: coeff("r"),
            col: coeff("c"),
        });
    }
    let (read, _) = printer(k, extents).val(&Val::Load {
        buf: o.buf,
        offset: o.offset.clone(),
        guard: o.guard.clone(),
    })?;
    Ok(Operand::Expr(read))
}

/// For a vectorized loop that updates locals declared outside it: the
/// OpenMP clause that lets those updates run in lanes (partial results
/// combined at the end). `local_type` gives each local's type. Float
/// max/min use kiln's NaN-propagating reductions (`kiln_rmaxf`, ...);
/// a combiner without a clause is an error rather than a wrong vector loop.
fn reduction_clause(
    l: &kiln_loop::Loop,
    local_type: &dyn Fn(&str) -> Option<DType>,
) -> Result<String> {
    if l.kind != LoopKind::Vectorized {
        return Ok(String::new());
    }
    let mut declared = Vec::new();
    let mut updates = Vec::new();
    collect_updates(&l.body, &mut declared, &mut updates);
    let mut clauses = String::new();
    for (name, c) in updates
        .into_iter()
        .filter(|(name, _)| !declared.contains(name))
    {
        let dtype = local_type(&name);
        let Some(op) = omp_reduction(c, dtype) else {
            bail!(
                "loop '{}' is vectorized over a {c:?} reduction of '{name}' ({dtype:?}) that has no vector form",
                l.var
            )
        };
        clauses.push_str(&format!(" reduction({op}:{name})"));
    }
    Ok(clauses)
}

/// The OpenMP reduction identifier combining partial results of `dtype` by `c`.
fn omp_reduction(c: Combiner, dtype: Option<DType>) -> Option<&'static str> {
    Some(match (c, dtype) {
        (Combiner::Sum, _) => "+",
        (Combiner::Prod, _) => "*",
        (Combiner::Max, Some(DType::F32)) => "kiln_rmaxf",
        (Combiner::Min, Some(DType::F32)) => "kiln_rminf",
        (Combiner::Max, Some(DType::F64)) => "kiln_rmax",
        (Combiner::Min, Some(DType::F64)) => "kiln_rmin",
        (Combiner::Max, Some(d)) if !d.is_float() => "max",
        (Combiner::Min, Some(d)) if !d.is_float() => "min",
        _ => return None,
    })
}

/// For a parallel loop whose iterations combine into the same elements of a buffer (a
/// reduction split across threads: `buf[off] = combine(buf[off], v)` with `off` independent
/// of the loop): OpenMP array-section reductions, so each thread accumulates into a private
/// copy of the elements it combines into, merged into `buf` at the end. Any other store at an
/// offset independent of the loop would race, and is an error.
fn array_reduction_clause(k: &Kernel, l: &kiln_loop::Loop) -> Result<String> {
    if l.kind != LoopKind::Parallel {
        return Ok(String::new());
    }
    let mut inner = HashMap::new();
    let mut stores = Vec::new();
    let mut private = Vec::new();
    collect_stores(&l.body, &mut inner, &mut stores, &mut private);
    // Per buffer: the combiner and the element range combined into.
    let mut sections: Vec<(usize, Combiner, i64, i64)> = Vec::new();
    let shared =
        |(buf, offset, _): &(usize, &Idx, &Val)| !offset.uses(&l.var) && !private.contains(buf);
    for (buf, offset, value) in stores.into_iter().filter(shared) {
        let name = &k.buffers[buf].name;
        let race = || -> Result<String> {
            bail!(
                "parallel loop '{}' stores to {name} at an offset that does not depend on it, and not as a reduction",
                l.var
            )
        };
        let Some(combiner) = combined_into(value, buf, offset) else {
            return race();
        };
        let mut vars = Vec::new();
        offset.vars(&mut vars);
        if vars.iter().any(|v| !inner.contains_key(v)) {
            return race();
        }
        let (lo, hi) = offset.range(&|v| inner[v]);
        match sections.iter_mut().find(|s| s.0 == buf) {
            Some(s) if s.1 == combiner => (s.2, s.3) = (s.2.min(lo), s.3.max(hi)),
            Some(_) => return race(),
            None => sections.push((buf, combiner, lo, hi)),
        }
    }
    let mut clauses = String::new();
    for (buf, combiner, lo, hi) in sections {
        let b = &k.buffers[buf];
        let Some(op) = omp_reduction(combiner, Some(b.dtype)) else {
            bail!(
                "parallel loop '{}' combines into {} by {combiner:?}, which has no OpenMP reduction on {}",
                l.var,
                b.name,
                b.dtype
            );
        };
        clauses.push_str(&format!(
            " reduction({op}:{}[{lo}:{}])",
            b.name,
            hi - lo + 1
        ));
    }
    Ok(clauses)
}

/// The stores in `body`, the value range of each loop around them (inside `body`), and the
/// local buffers `body` declares (each iteration's own).
fn collect_stores<'a>(
    body: &'a [Stmt],
    loops: &mut HashMap<String, (i64, i64)>,
    out: &mut Vec<(usize, &'a Idx, &'a Val)>,
    private: &mut Vec<usize>,
) {
    for s in body {
        match s {
            Stmt::Loop(l) => {
                loops.insert(l.var.clone(), (0, l.extent.max().max(1) - 1));
                collect_stores(&l.body, loops, out, private);
            }
            Stmt::Store { buf, offset, value } => out.push((*buf, offset, value)),
            Stmt::Alloc(buf) => private.push(*buf),
            Stmt::Let { .. } | Stmt::Update { .. } | Stmt::Gemm(_) => {}
        }
    }
}

/// The combiner when `value` is `combine(buf[offset], v)`.
fn combined_into(value: &Val, buf: usize, offset: &Idx) -> Option<Combiner> {
    let Val::Call(scalar, args) = value else {
        return None;
    };
    let [Val::Load {
        buf: read,
        offset: at,
        guard,
    }, _] = args.as_slice()
    else {
        return None;
    };
    if *read != buf || at != offset || !guard.is_empty() {
        return None;
    }
    Combiner::ALL.into_iter().find(|c| c.scalar() == *scalar)
}

fn collect_updates(body: &[Stmt], declared: &mut Vec<String>, out: &mut Vec<(String, Combiner)>) {
    for s in body {
        match s {
            Stmt::Loop(l) => collect_updates(&l.body, declared, out),
            Stmt::Let { name, .. } => declared.push(name.clone()),
            Stmt::Update { name, combiner, .. } => {
                if !out.iter().any(|(n, _)| n == name) {
                    out.push((name.clone(), *combiner));
                }
            }
            Stmt::Store { .. } | Stmt::Gemm(_) | Stmt::Alloc(_) => {}
        }
    }
}

struct Printer<'a> {
    k: &'a Kernel,
    out: String,
    /// Value range of each enclosing loop variable.
    ranges: HashMap<String, (i64, i64)>,
    /// Element type of each local scalar.
    locals: HashMap<String, DType>,
}

impl Printer<'_> {
    fn stmt(&mut self, s: &Stmt, depth: usize) -> Result<()> {
        let pad = "  ".repeat(depth);
        match s {
            Stmt::Loop(l) => {
                let omp = match l.kind {
                    LoopKind::Serial | LoopKind::Unrolled => None,
                    LoopKind::Parallel => Some("omp parallel for"),
                    LoopKind::Vectorized => Some("omp simd"),
                };
                if let Some(p) = omp {
                    let locals = &self.locals;
                    let clause = reduction_clause(l, &|n| locals.get(n).copied())?;
                    let sections = array_reduction_clause(self.k, l)?;
                    writeln!(self.out, "{pad}KILN_OMP({p}{clause}{sections})").ok();
                } else if l.kind == LoopKind::Unrolled {
                    writeln!(self.out, "{pad}KILN_UNROLL").ok();
                }
                let bound = match &l.extent {
                    Extent::Const(n) => n.to_string(),
                    Extent::Tail {
                        total,
                        outer,
                        factor,
                    } => format!("({total} - {factor}*{outer} < {factor} ? {total} - {factor}*{outer} : {factor})"),
                };
                writeln!(
                    self.out,
                    "{pad}for (int64_t {v} = 0; {v} < {bound}; ++{v}) {{",
                    v = l.var
                )
                .ok();
                self.ranges
                    .insert(l.var.clone(), (0, l.extent.max().max(1) - 1));
                for s in &l.body {
                    self.stmt(s, depth + 1)?;
                }
                self.ranges.remove(&l.var);
                writeln!(self.out, "{pad}}}").ok();
            }
            Stmt::Store { buf, offset, value } => {
                let b = &self.k.buffers[*buf];
                let (v, _) = self.val(value)?;
                let off = self.idx(offset)?;
                writeln!(
                    self.out,
                    "{pad}{}[{off}] = ({})({v});",
                    b.name,
                    c_type(b.dtype)?
                )
                .ok();
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
                    Combiner::Sum => format!("{name} + {v}"),
                    Combiner::Prod => format!("{name} * {v}"),
                    Combiner::And => format!("(uint8_t)({name} && {v})"),
                    Combiner::Or => format!("(uint8_t)({name} || {v})"),
                    Combiner::Min | Combiner::Max => {
                        let s = combiner.scalar();
                        call_c(&s, &[dtype, dtype], &[name.clone(), v])?.0
                    }
                };
                writeln!(self.out, "{pad}{name} = {e};").ok();
            }
            Stmt::Gemm(_) => bail!("gemm statements are printed by the gemm template"),
            Stmt::Alloc(b) => {
                let b = &self.k.buffers[*b];
                let ty = c_type(b.dtype)?;
                writeln!(self.out, "{pad}{ty} {}[{}];", b.name, b.numel().max(1)).ok();
            }
        }
        Ok(())
    }

    fn range(&self, i: &Idx) -> (i64, i64) {
        i.range(&|v| {
            self.ranges
                .get(v)
                .copied()
                .unwrap_or((i64::MIN / 4, i64::MAX / 4))
        })
    }

    fn idx(&self, i: &Idx) -> Result<String> {
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

    fn guard(&self, g: &[(Idx, i64)]) -> Result<String> {
        let parts: Vec<String> = g
            .iter()
            .map(|(i, e)| {
                let s = self.idx(i)?;
                Ok(format!("({s} >= 0 && {s} < {e})"))
            })
            .collect::<Result<_>>()?;
        Ok(parts.join(" && "))
    }

    /// The C expression of `v` and its element type.
    fn val(&self, v: &Val) -> Result<(String, DType)> {
        Ok(match v {
            Val::Load { buf, offset, guard } => {
                let b = &self.k.buffers[*buf];
                let read = format!("{}[{}]", b.name, self.idx(offset)?);
                let e = if guard.is_empty() {
                    read
                } else {
                    format!(
                        "({} ? {read} : ({})0)",
                        self.guard(guard)?,
                        c_type(b.dtype)?
                    )
                };
                (e, b.dtype)
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
        Ok(kernel_c(&k, None, &[], &kiln_target::CpuPreset::X86_64V4.desc(2))?.c)
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
}

//! The loop IR: one kernel is a nest of loops over flat buffers.
//!
//! Buffers are the kernel's parameters (the node's inputs, then its
//! outputs), addressed by flat element offsets. Offsets and loop bounds are
//! [`Idx`] values: affine sums of loop variables plus `floordiv`/`mod` by
//! constants (coalesced and reshaped indices) and data-dependent indices
//! (Gather). Scalar values ([`Val`]) are the tensor-expression body with its
//! reads resolved to offsets. Local scalars (`let`) are register-scope
//! locals: reduction accumulators. A [`Stmt::Gemm`] instantiates the
//! matmul micro-kernel template on operands described as data.
//!
//! Everything here is plain data; schedules rewrite it (`schedule.rs`) and
//! the C printer (kiln-codegen) prints it. `Display` gives the text form
//! (text.rs) used by tests, and [`crate::parse_kernel`] reads it back.

use kiln_ir::{DType, Tensor};
use kiln_ops::te::{Combiner, Scalar};

/// A kernel: parameters and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub buffers: Vec<Buffer>,
    pub body: Vec<Stmt>,
}

/// A dense row-major tensor the kernel reads or writes: a parameter, or a
/// local buffer of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Buffer {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub output: bool,
    pub scope: Scope,
}

/// Where a buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A kernel parameter (the node's inputs, then its outputs). Parameters
    /// come before every local buffer in [`Kernel::buffers`].
    Param,
    /// The kernel's own small buffer, declared by a [`Stmt::Alloc`] in the
    /// block that uses it: on the stack of the thread running that block
    /// (a parallel loop's iterations each have their own). Schedules make
    /// them (`cache.rs`: a cached copy of what a loop reads).
    Local,
}

impl Buffer {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// How a loop's iterations are executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopKind {
    Serial,
    /// Iterations spread over the thread pool (OpenMP).
    Parallel,
    /// Iterations mapped to vector lanes (`omp simd`).
    Vectorized,
    /// Fully unrolled by the code generator.
    Unrolled,
}

/// Trip count of a loop: a constant, or the tail of a split
/// (`min(factor, total - outer*factor)`) so any extent splits by any factor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extent {
    Const(i64),
    Tail {
        total: i64,
        outer: String,
        factor: i64,
    },
}

impl Extent {
    /// The largest trip count.
    pub fn max(&self) -> i64 {
        match self {
            Extent::Const(n) => *n,
            Extent::Tail { total, factor, .. } => (*factor).min(*total),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Loop {
    pub var: String,
    pub extent: Extent,
    pub kind: LoopKind,
    pub body: Vec<Stmt>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    Loop(Loop),
    /// `buf[offset] = value`.
    Store {
        buf: usize,
        offset: Idx,
        value: Val,
    },
    /// Declares a register-scope local scalar.
    Let {
        name: String,
        dtype: DType,
        value: Val,
    },
    /// `name = combiner(name, value)`.
    Update {
        name: String,
        combiner: Combiner,
        value: Val,
    },
    /// One step of an arg-reduction.
    ArgUpdate(Box<ArgStep>),
    /// A matrix product computed by the micro-kernel template.
    Gemm(Box<Gemm>),
    /// Declares local buffer `buffers[i]` (uninitialised) for the rest of
    /// the enclosing block.
    Alloc(usize),
    /// A parallel loop's iteration folds its partial result into a local
    /// declared outside the loop (PANAMERA §4–5's combine; see [`Combine`]).
    Combine(Box<Combine>),
}

/// `name = combiner(name, value)` as the last statement of a parallel
/// loop's body, `name` declared outside the loop and `value` the
/// iteration's partial result. The loop's iterations are dealt to the
/// workers in contiguous blocks; how the partials meet is `mode`.
#[derive(Debug, Clone, PartialEq)]
pub struct Combine {
    pub name: String,
    pub combiner: Combiner,
    pub value: Val,
    pub mode: CombineMode,
}

/// How the partial results of a parallel loop's workers are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CombineMode {
    /// Each worker folds its iterations in order, then the workers'
    /// results are folded in worker order: the same result on every run
    /// with the same number of workers (float sums, float max/min with
    /// their NaN).
    Ordered,
    /// Each worker folds its result in as it finishes, in any order: for
    /// combiners whose result does not depend on the order (integer and
    /// bool types). A GPU's atomics, a CPU's atomic update.
    Atomic,
}

impl CombineMode {
    pub fn name(self) -> &'static str {
        match self {
            CombineMode::Ordered => "ordered",
            CombineMode::Atomic => "atomic",
        }
    }
}

/// One step of an arg-reduction (`kiln_ops::te::ArgIndex`): when `value` beats
/// local `best` under `combiner` (Max or Min, NaN the extreme; with `last` an
/// equal value beats it too), `best = value` and local `name = index`. Steps
/// must run in index order (never in vector lanes or thread chunks).
#[derive(Debug, Clone, PartialEq)]
pub struct ArgStep {
    pub name: String,
    pub best: String,
    pub combiner: Combiner,
    pub last: bool,
    pub value: Val,
    pub index: Idx,
}

/// `C[b, m, n] = epilogue(Σ_k A[b, m, k] · B[b, k, n])` over flat buffers, each
/// operand addressed by element strides per logical axis (0 = broadcast)
/// or by an implicit-GEMM window read (convolution); a factor may instead
/// be computed element by element while it is packed (a prologue).
#[derive(Debug, Clone, PartialEq)]
pub struct Gemm {
    pub batch: i64,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub a: GemmInput,
    pub b: GemmInput,
    pub c: GemmOperand,
    /// When an operand is a convolution's input read window by window: its
    /// geometry, so the code generator can copy whole image rows (or point
    /// at them) instead of evaluating the offset per element. A
    /// channels-first window is B (NCHW image, rows `(channel, kh, kw)`,
    /// columns `(oh, ow)`), a channels-last one is A (NHWC image, rows
    /// `(oh, ow)`, columns `(kh, kw, channel)`). That operand's `offset`
    /// and `guard` say the same thing.
    pub window: Option<ConvWindow>,
    /// The value stored at `C[b, r, c]`, computed from the product (the
    /// local `acc`, f32) and loads addressed by `b`, `r`, `c`: fused
    /// element-wise ops applied before the store (bias, activation,
    /// residual add). `None` stores the product.
    pub epilogue: Option<Val>,
}

/// The geometry of an implicit-GEMM convolution input (see [`Gemm::window`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvWindow {
    pub channels: i64,
    /// Input height and width.
    pub size: [i64; 2],
    /// Output height and width.
    pub out: [i64; 2],
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    /// Padding before the first row and column.
    pub pad: [i64; 2],
    pub dilation: [i64; 2],
    pub layout: WindowLayout,
    /// Elements between the windows of consecutive batch entries: a
    /// convolution over several images as a gemm batched over them (entry
    /// `b` reads the image at `b·batch_stride`), or a grouped convolution
    /// batched over its groups (entry `b` reads channels from
    /// `b·batch_stride`); 0 with one entry.
    pub batch_stride: i64,
    /// Elements between neighbouring pixels of the image: its channel
    /// count, which is more than `channels` when the window reads one
    /// group's channels.
    pub pixel_stride: i64,
    /// Images whose output pixels are the operand's rows one after
    /// another ([`WindowLayout::Nhwc`] only): row `r` is pixel `r mod
    /// (out[0]·out[1])` of image `r div (out[0]·out[1])`, which starts
    /// `image_stride` elements after the previous one. 1 (and a stride of
    /// 0) for one image per batch entry. Why: a grouped convolution over
    /// several images keeps its groups as the batch, so its images join
    /// the rows instead of being read element by element.
    pub images: i64,
    pub image_stride: i64,
}

/// How a [`ConvWindow`] reads its image, and which factor it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowLayout {
    /// An NCHW image as B: K = (channel, kernel row, kernel column), N =
    /// output pixels (a convolution with NCHW output).
    Nchw,
    /// An NHWC image as A: M = output pixels, K = (kernel row, kernel
    /// column, channel) (a convolution with NHWC output).
    Nhwc,
    /// An NCHW image as A: M = output pixels, K = (channel, kernel row,
    /// kernel column) (a first convolution over a channels-first input
    /// with NHWC output).
    NchwRows,
}

impl WindowLayout {
    pub const ALL: [WindowLayout; 3] = [
        WindowLayout::Nchw,
        WindowLayout::Nhwc,
        WindowLayout::NchwRows,
    ];

    /// Whether the window is the gemm's A (its rows are output pixels)
    /// rather than its B.
    pub fn is_a(self) -> bool {
        self != WindowLayout::Nchw
    }
}

/// A factor of a [`Gemm`]: read from a buffer, or computed.
#[derive(Debug, Clone, PartialEq)]
pub enum GemmInput {
    Read(GemmOperand),
    /// An element-wise prologue: the factor's element at `(b, r, c)` (A:
    /// batch, row, depth; B: batch, depth, column) as a value whose loads
    /// are addressed by `b`, `r`, `c`, computed while the gemm packs the
    /// factor. Never a window.
    Computed(Val),
}

impl GemmInput {
    /// The buffer read, when the factor is read from memory.
    pub fn read(&self) -> Option<&GemmOperand> {
        match self {
            GemmInput::Read(o) => Some(o),
            GemmInput::Computed(_) => None,
        }
    }
}

/// One operand of a [`Gemm`]: the buffer and the offset of its element as
/// an index over the variables `b`, `r`, `c` (the operand's batch, row and
/// column: A's rows are M and columns K, B's K and N, C's M and N).
#[derive(Debug, Clone, PartialEq)]
pub struct GemmOperand {
    pub buf: usize,
    pub offset: Idx,
    /// For window reads: the conditions under which the element exists
    /// (others read as zero).
    pub guard: Vec<(Idx, i64)>,
}

/// Bounds `0 <= idx < extent` that must all hold for a read to happen.
pub type Guard = Vec<(Idx, i64)>;

/// `Σ coeff·atom + constant`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Idx {
    pub terms: Vec<(Atom, i64)>,
    pub constant: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Atom {
    Var(String),
    /// Floor division by a positive constant.
    Div(Box<Idx>, i64),
    /// Non-negative remainder by a positive constant.
    Mod(Box<Idx>, i64),
    /// An integer read from a buffer; negative values count from `extent`
    /// (Gather). Out-of-range values make the kernel fail.
    Data {
        value: Box<Val>,
        extent: i64,
    },
}

/// A scalar value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// `buf[offset]`; when `guard` is not empty the read happens only if
    /// every `0 <= idx < extent` holds and is zero otherwise.
    Load {
        buf: usize,
        offset: Idx,
        guard: Vec<(Idx, i64)>,
    },
    /// Whether every `0 <= idx < extent` holds.
    InBounds(Vec<(Idx, i64)>),
    Const(Tensor),
    /// The value of an index (i64).
    Index(Idx),
    /// A local scalar.
    Local(String),
    /// An element-wise op's scalar rule.
    Call(Scalar, Vec<Val>),
}

impl Idx {
    pub fn constant(c: i64) -> Idx {
        Idx {
            terms: Vec::new(),
            constant: c,
        }
    }

    pub fn var(name: &str) -> Idx {
        Idx::atom(Atom::Var(name.to_string()))
    }

    pub fn atom(a: Atom) -> Idx {
        Idx {
            terms: vec![(a, 1)],
            constant: 0,
        }
    }

    pub fn as_constant(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.constant)
    }

    /// `self + other`, like terms merged.
    pub fn plus(mut self, other: &Idx) -> Idx {
        for (a, c) in &other.terms {
            self.add_term(a.clone(), *c);
        }
        self.constant += other.constant;
        self
    }

    pub fn scale(mut self, k: i64) -> Idx {
        if k == 0 {
            return Idx::constant(0);
        }
        for t in &mut self.terms {
            t.1 *= k;
        }
        self.constant *= k;
        self
    }

    fn add_term(&mut self, a: Atom, c: i64) {
        match self.terms.iter().position(|(b, _)| *b == a) {
            Some(p) => {
                self.terms[p].1 += c;
                if self.terms[p].1 == 0 {
                    self.terms.remove(p);
                }
            }
            None if c != 0 => self.terms.push((a, c)),
            None => {}
        }
    }

    /// `floor(self / d)`, folded when exact.
    /// Whether every term is a plain variable (no division, remainder or
    /// data-dependent index).
    pub fn is_affine(&self) -> bool {
        self.terms.iter().all(|(a, _)| matches!(a, Atom::Var(_)))
    }

    pub fn floordiv(self, d: i64) -> Idx {
        if d == 1 {
            return self;
        }
        if let Some(c) = self.as_constant() {
            return Idx::constant(c.div_euclid(d));
        }
        Idx::atom(Atom::Div(Box::new(self), d))
    }

    /// `self mod d`, folded when constant.
    pub fn modulo(self, d: i64) -> Idx {
        if d == 1 {
            return Idx::constant(0);
        }
        if let Some(c) = self.as_constant() {
            return Idx::constant(c.rem_euclid(d));
        }
        Idx::atom(Atom::Mod(Box::new(self), d))
    }

    /// Replaces variable `name` by `with` everywhere, then simplifies.
    pub fn substitute(&self, name: &str, with: &Idx) -> Idx {
        let mut out = Idx::constant(self.constant);
        for (a, c) in &self.terms {
            let replaced = match a {
                Atom::Var(v) if v == name => with.clone(),
                Atom::Var(_) => Idx::atom(a.clone()),
                Atom::Div(e, d) => e.substitute(name, with).floordiv(*d),
                Atom::Mod(e, d) => e.substitute(name, with).modulo(*d),
                Atom::Data { value, extent } => Idx::atom(Atom::Data {
                    value: Box::new(value.substitute(name, with)),
                    extent: *extent,
                }),
            };
            out = out.plus(&replaced.scale(*c));
        }
        out.merge_div_mod()
    }

    /// Folds the digit identities of mixed-radix indices, for any `x` and
    /// positive `d`, `e`:
    /// - `c·d·(x floordiv d) + c·(x mod d)` is `c·x`;
    /// - `c·d·((x floordiv d) mod e) + c·(x mod d)` is `c·(x mod d·e)`.
    ///
    /// Together they collapse a flattened multi-digit index back to its
    /// variable, which makes coalesced loops and flattened reduction axes
    /// read contiguous buffers with plain affine offsets.
    pub fn merge_div_mod(mut self) -> Idx {
        while let Some((i, j, merged)) = self.digit_pair() {
            let (hi, lo) = (i.max(j), i.min(j));
            self.terms.remove(hi);
            self.terms.remove(lo);
            self = self.plus(&merged);
        }
        self
    }

    /// Two terms one of the identities of [`Idx::merge_div_mod`] merges,
    /// and what they merge into.
    fn digit_pair(&self) -> Option<(usize, usize, Idx)> {
        self.terms.iter().enumerate().find_map(|(i, (a, c))| {
            let Atom::Mod(x, d) = a else { return None };
            self.terms.iter().enumerate().find_map(|(j, (b, k))| {
                if *k != c * d {
                    return None;
                }
                match b {
                    Atom::Div(y, e) if y == x && e == d => Some((i, j, (**x).clone().scale(*c))),
                    Atom::Mod(inner, e) => match &inner.terms[..] {
                        [(Atom::Div(y, f), 1)] if inner.constant == 0 && y == x && f == d => {
                            Some((i, j, (**x).clone().modulo(d * e).scale(*c)))
                        }
                        _ => None,
                    },
                    _ => None,
                }
            })
        })
    }

    /// Smallest and largest value given each loop variable's range.
    pub fn range(&self, var_range: &dyn Fn(&str) -> (i64, i64)) -> (i64, i64) {
        let (mut lo, mut hi) = (self.constant, self.constant);
        for (a, c) in &self.terms {
            let (alo, ahi) = match a {
                Atom::Var(v) => var_range(v),
                // A division by 0 comes from an empty dimension, in a
                // loop that never runs: any range will do.
                Atom::Div(_, 0) => (0, 0),
                Atom::Div(e, d) => {
                    let (l, h) = e.range(var_range);
                    (l.div_euclid(*d), h.div_euclid(*d))
                }
                Atom::Mod(e, d) => {
                    let (l, h) = e.range(var_range);
                    if l >= 0 && h < *d {
                        (l, h)
                    } else {
                        (0, d - 1)
                    }
                }
                Atom::Data { extent, .. } => (0, extent - 1),
            };
            let (x, y) = (alo * c, ahi * c);
            lo += x.min(y);
            hi += x.max(y);
        }
        (lo, hi)
    }

    /// Variables the index reads (with repeats).
    pub fn vars(&self, out: &mut Vec<String>) {
        for (a, _) in &self.terms {
            match a {
                Atom::Var(v) => out.push(v.clone()),
                Atom::Div(e, _) | Atom::Mod(e, _) => e.vars(out),
                Atom::Data { value, .. } => value.vars(out),
            }
        }
    }

    pub fn uses(&self, name: &str) -> bool {
        let mut v = Vec::new();
        self.vars(&mut v);
        v.iter().any(|x| x == name)
    }

    /// Whether the index is `var + rest`, `rest` independent of `var` and
    /// a multiple of `width`: then `width` consecutive values of `var`
    /// from a multiple of `width` address `width` consecutive elements,
    /// the first a multiple of `width` (a vector of them, aligned).
    pub fn unit_stride_aligned(&self, var: &str, width: i64) -> bool {
        let mut unit = false;
        for (atom, coeff) in &self.terms {
            match atom {
                Atom::Var(v) if v == var => unit = *coeff == 1,
                _ if Idx::atom(atom.clone()).uses(var) || coeff % width != 0 => return false,
                _ => {}
            }
        }
        unit && self.constant % width == 0
    }
}

impl Val {
    pub fn substitute(&self, name: &str, with: &Idx) -> Val {
        let guard = |g: &[(Idx, i64)]| -> Vec<(Idx, i64)> {
            g.iter()
                .map(|(i, e)| (i.substitute(name, with), *e))
                .collect()
        };
        match self {
            Val::Load {
                buf,
                offset,
                guard: g,
            } => Val::Load {
                buf: *buf,
                offset: offset.substitute(name, with),
                guard: guard(g),
            },
            Val::InBounds(g) => Val::InBounds(guard(g)),
            Val::Index(i) => Val::Index(i.substitute(name, with)),
            Val::Call(s, args) => Val::Call(
                s.clone(),
                args.iter().map(|a| a.substitute(name, with)).collect(),
            ),
            Val::Const(_) | Val::Local(_) => self.clone(),
        }
    }

    /// The value with every leaf (not a call) that `f` maps replaced by
    /// what it gives, calls rebuilt around their arguments (loads inside
    /// data-dependent indices are not visited).
    pub fn map_leaves(&self, f: &dyn Fn(&Val) -> Option<Val>) -> Val {
        match self {
            Val::Call(s, args) => {
                Val::Call(s.clone(), args.iter().map(|a| a.map_leaves(f)).collect())
            }
            _ => f(self).unwrap_or_else(|| self.clone()),
        }
    }

    /// Calls `f` with the buffer, offset and guard of every load of the
    /// value (not those inside data-dependent indices).
    pub fn for_each_load(&self, f: &mut dyn FnMut(usize, &Idx, &Guard)) {
        match self {
            Val::Load { buf, offset, guard } => f(*buf, offset, guard),
            Val::Call(_, args) => args.iter().for_each(|a| a.for_each_load(f)),
            _ => {}
        }
    }

    pub fn vars(&self, out: &mut Vec<String>) {
        match self {
            Val::Load { offset, guard, .. } => {
                offset.vars(out);
                guard.iter().for_each(|(i, _)| i.vars(out));
            }
            Val::InBounds(g) => g.iter().for_each(|(i, _)| i.vars(out)),
            Val::Index(i) => i.vars(out),
            Val::Call(_, args) => args.iter().for_each(|a| a.vars(out)),
            Val::Const(_) | Val::Local(_) => {}
        }
    }
}

impl Val {
    /// `v` cast to `dtype` (ONNX Cast's scalar rule).
    pub fn cast(dtype: DType, v: Val) -> Val {
        let to = kiln_ir::Attr::Int(dtype.onnx_code() as i64);
        Val::Call(Scalar::new("Cast").with_attr("to", to), vec![v])
    }
}

impl Stmt {
    /// `buf[offset] = value`.
    pub fn store(buf: usize, offset: Idx, value: Val) -> Stmt {
        Stmt::Store { buf, offset, value }
    }

    /// The statement with every value it stores, declares or combines
    /// replaced by `f(value, enclosing loops, outermost first)`.
    pub fn map_values(&self, f: &mut dyn FnMut(&Val, &[&Loop]) -> Val) -> Stmt {
        self.map_values_in(f, &mut Vec::new())
    }

    fn map_values_in<'a>(
        &'a self,
        f: &mut dyn FnMut(&Val, &[&Loop]) -> Val,
        loops: &mut Vec<&'a Loop>,
    ) -> Stmt {
        match self {
            Stmt::Loop(l) => {
                loops.push(l);
                let body = l.body.iter().map(|s| s.map_values_in(f, loops)).collect();
                loops.pop();
                Stmt::Loop(Loop { body, ..l.clone() })
            }
            Stmt::Store { buf, offset, value } => Stmt::Store {
                buf: *buf,
                offset: offset.clone(),
                value: f(value, loops),
            },
            Stmt::Let { name, dtype, value } => Stmt::Let {
                name: name.clone(),
                dtype: *dtype,
                value: f(value, loops),
            },
            Stmt::Update {
                name,
                combiner,
                value,
            } => Stmt::Update {
                name: name.clone(),
                combiner: *combiner,
                value: f(value, loops),
            },
            Stmt::ArgUpdate(a) => Stmt::ArgUpdate(Box::new(ArgStep {
                value: f(&a.value, loops),
                ..(**a).clone()
            })),
            Stmt::Combine(c) => Stmt::Combine(Box::new(Combine {
                value: f(&c.value, loops),
                ..(**c).clone()
            })),
            Stmt::Gemm(g) => Stmt::Gemm(g.clone()),
            Stmt::Alloc(b) => Stmt::Alloc(*b),
        }
    }

    /// Replaces variable `name` by `with` in every index of the statement.
    pub fn substitute(&self, name: &str, with: &Idx) -> Stmt {
        match self {
            Stmt::Loop(l) => Stmt::Loop(Loop {
                body: l.body.iter().map(|s| s.substitute(name, with)).collect(),
                ..l.clone()
            }),
            Stmt::Store { buf, offset, value } => Stmt::Store {
                buf: *buf,
                offset: offset.substitute(name, with),
                value: value.substitute(name, with),
            },
            Stmt::Let {
                name: n,
                dtype,
                value,
            } => Stmt::Let {
                name: n.clone(),
                dtype: *dtype,
                value: value.substitute(name, with),
            },
            Stmt::Update {
                name: n,
                combiner,
                value,
            } => Stmt::Update {
                name: n.clone(),
                combiner: *combiner,
                value: value.substitute(name, with),
            },
            Stmt::ArgUpdate(a) => Stmt::ArgUpdate(Box::new(ArgStep {
                value: a.value.substitute(name, with),
                index: a.index.substitute(name, with),
                ..(**a).clone()
            })),
            Stmt::Combine(c) => Stmt::Combine(Box::new(Combine {
                value: c.value.substitute(name, with),
                ..(**c).clone()
            })),
            Stmt::Gemm(g) => Stmt::Gemm(g.clone()),
            Stmt::Alloc(b) => Stmt::Alloc(*b),
        }
    }
}

/// Every local `body` declares (inside loops too), with its type.
pub fn declared_locals(body: &[Stmt]) -> Vec<(&str, DType)> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Let { name, dtype, .. } => out.push((name.as_str(), *dtype)),
            Stmt::Loop(l) => out.extend(declared_locals(&l.body)),
            _ => {}
        }
    }
    out
}

/// The first loop over `var` in `body`, searching nested loops too.
pub fn find_loop<'a>(body: &'a [Stmt], var: &str) -> Option<&'a Loop> {
    body.iter().find_map(|s| match s {
        Stmt::Loop(l) if l.var == var => Some(l),
        Stmt::Loop(l) => find_loop(&l.body, var),
        _ => None,
    })
}

/// `s` with each update (inside loops too) of a local that `rename(name,
/// combiner)` gives a new name for updating that name instead.
pub fn renamed_updates(s: &Stmt, rename: &dyn Fn(&str, Combiner) -> Option<String>) -> Stmt {
    match s {
        Stmt::Update {
            name,
            combiner,
            value,
        } => Stmt::Update {
            name: rename(name, *combiner).unwrap_or_else(|| name.clone()),
            combiner: *combiner,
            value: value.clone(),
        },
        Stmt::Loop(l) => Stmt::Loop(Loop {
            body: l.body.iter().map(|s| renamed_updates(s, rename)).collect(),
            ..l.clone()
        }),
        other => other.clone(),
    }
}

/// The locals `body` updates without declaring them (reductions carried
/// in from outside it), with their combiners, each once, in order.
pub fn reduced_locals(body: &[Stmt]) -> Vec<(String, Combiner)> {
    fn walk(body: &[Stmt], inside: &mut Vec<String>, out: &mut Vec<(String, Combiner)>) {
        for s in body {
            match s {
                Stmt::Let { name, .. } => inside.push(name.clone()),
                Stmt::Update { name, combiner, .. }
                    if !inside.contains(name) && !out.iter().any(|(n, _)| n == name) =>
                {
                    out.push((name.clone(), *combiner));
                }
                Stmt::Loop(l) => walk(&l.body, inside, out),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(body, &mut Vec::new(), &mut out);
    out
}

/// Whether `body` takes arg-reduction steps, inside loops too.
pub fn has_arg_reduction(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::ArgUpdate(_) => true,
        Stmt::Loop(l) => has_arg_reduction(&l.body),
        _ => false,
    })
}

/// Whether `body` takes arg-reduction steps on locals declared outside it: then its
/// loops must run in order (see [`Stmt::ArgUpdate`]).
pub fn carries_arg_reduction(body: &[Stmt]) -> bool {
    fn walk<'a>(body: &'a [Stmt], inside: &mut Vec<&'a str>) -> bool {
        body.iter().any(|s| match s {
            Stmt::Let { name, .. } => {
                inside.push(name);
                false
            }
            Stmt::ArgUpdate(a) => !inside.contains(&a.name.as_str()),
            Stmt::Loop(l) => walk(&l.body, inside),
            _ => false,
        })
    }
    walk(body, &mut Vec::new())
}

/// Calls `f` on every load of the values `body` stores, declares and
/// combines, inside loops too (see [`Val::for_each_load`]).
pub fn for_each_load(body: &[Stmt], f: &mut dyn FnMut(usize, &Idx, &Guard)) {
    for s in body {
        match s {
            Stmt::Loop(l) => for_each_load(&l.body, f),
            Stmt::Store { value, .. } | Stmt::Let { value, .. } | Stmt::Update { value, .. } => {
                value.for_each_load(f)
            }
            Stmt::ArgUpdate(a) => a.value.for_each_load(f),
            Stmt::Combine(c) => c.value.for_each_load(f),
            Stmt::Gemm(_) | Stmt::Alloc(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(a: Atom, c: i64) -> Idx {
        Idx::atom(a).scale(c)
    }

    #[test]
    fn unit_stride_aligned_needs_unit_c_and_aligned_rest() {
        let row_major = term(Atom::Var("r".into()), 3072).plus(&Idx::var("c"));
        assert!(row_major.unit_stride_aligned("c", 4));
        // A row length that is not a multiple of four misaligns rows.
        let odd_rows = term(Atom::Var("r".into()), 30).plus(&Idx::var("c"));
        assert!(!odd_rows.unit_stride_aligned("c", 4));
        // Strided along c, or c absent: not consecutive.
        assert!(!term(Atom::Var("c".into()), 2).unit_stride_aligned("c", 4));
        assert!(!term(Atom::Var("r".into()), 4).unit_stride_aligned("c", 4));
        // c inside a division (a window's channel split) is not a unit stride.
        let window = Idx::var("c").plus(&term(Atom::Div(Box::new(Idx::var("c")), 64), 4));
        assert!(!window.unit_stride_aligned("c", 4));
        let shifted = row_major.clone().plus(&Idx::constant(2));
        assert!(!shifted.unit_stride_aligned("c", 4));
        assert!(row_major
            .plus(&Idx::constant(8))
            .unit_stride_aligned("c", 4));
    }
}

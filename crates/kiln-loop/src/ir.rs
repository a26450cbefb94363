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
//! The index algebra is in `ir/idx.rs`; rewrites of and queries over
//! values and statements (substitution, mapping, locals, loads) in
//! `ir/walk.rs`.

use kiln_ir::{DType, Tensor};
use kiln_ops::te::{Combiner, Scalar};

mod idx;
mod walk;

pub use walk::{
    accumulates_in_half_float, carries_arg_reduction, declared_locals, find_loop, for_each_load,
    for_each_loop, for_each_store, for_each_value, has_arg_reduction, loop_ranges, reduced_locals,
    reduces_in_order, renamed_updates, stored_buffers,
};

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

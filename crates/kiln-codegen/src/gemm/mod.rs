//! Generated matrix multiplication (and implicit-GEMM convolution) for CPUs: kiln writes its
//! own GotoBLAS/BLIS-style matmul as C source instead of calling a BLAS.
//!
//! `gemm_c(spec)` returns one self-contained C function computing, for every batch index `b`,
//! `C[b] = epilogue(A[b] (M x K) * B[b] (K x N))`, where each operand is either strided memory or
//! an arbitrary C expression or a convolution window (how convolutions read their input without
//! materialising im2col). The function relies on `gemm_prelude()`, pasted once per C file before it.
//!
//! Structure (Goto & van de Geijn 2008; Van Zee & van de Geijn 2015): the generator plans each
//! vector width separately (`plan.rs`: micro-kernel shape, orientation, cache blocks); the C
//! packs A and B blocks into contiguous zero-padded panels (`pack.rs`) and runs a
//! register-blocked micro-kernel over them (`kernel.rs`), in tasks spread over OpenMP threads
//! (`driver.rs`; its tiles into C in `driver/tiles.rs`, a weight's prepacking in
//! `driver/prepack.rs`, the K blocks inside each tile in `driver/k_inner.rs`). Sizes are
//! compile-time constants, so every bound is a literal.

mod driver;
mod emit;
mod epilogue;
mod kernel;
mod lanes;
mod pack;
mod plan;
mod prelude;
mod tuning;
mod validate;
mod view;
mod window;

pub use kernel::KernelShape;
pub use tuning::candidates;
pub use window::{Window, WindowLayout};

use emit::CWriter;
use kernel::{contracted, for_each_target};

/// How element (b, row, col) of an operand is found. `b` is the batch index.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// Base pointer parameter `param` + b*batch + row*row_stride + col*col_stride (element
    /// strides, may be 0 for broadcast).
    Strided {
        param: String,
        batch: isize,
        row: isize,
        col: isize,
    },
    /// An arbitrary C expression of type float using variables `b`, `r`, `c` (long) and any
    /// parameter names; used for implicit-GEMM convolution (window reads with padding -> 0).
    /// It is only evaluated inside the matrix.
    Expr(String),
    /// The im2col matrix of a convolution over an NCHW input (see `Window`): like an `Expr`
    /// for the window read, but packed by runs of image rows, which is several times faster.
    Window(Window),
}

/// One of the two factors of a [`GemmSpec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Factor {
    A,
    B,
}

/// A factor whose values are known before the first call (a weight): [`gemm_prepack_c`] writes
/// the function that packs it once into the panels the micro-kernel reads, and the matmul reads
/// them from parameter `param` instead of packing that factor on every call.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepacked {
    pub factor: Factor,
    pub param: String,
}

/// One C function parameter, e.g. `("const float* restrict", "A")`.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub c_type: String,
    pub name: String,
}

impl Param {
    pub fn new(c_type: impl Into<String>, name: impl Into<String>) -> Param {
        Param {
            c_type: c_type.into(),
            name: name.into(),
        }
    }
}

/// A batch-1 strided operand, for the unit tests' specs.
#[cfg(test)]
pub(crate) fn strided(param: &str, row: isize, col: isize) -> Operand {
    Operand::Strided {
        param: param.into(),
        batch: 0,
        row,
        col,
    }
}

/// `type name` of each parameter, as declared in C.
fn declared(params: &[Param]) -> Vec<String> {
    params
        .iter()
        .map(|p| format!("{} {}", p.c_type, p.name))
        .collect()
}

/// One (batched) matmul to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmSpec {
    /// C function name (`static void NAME(params...)`).
    pub name: String,
    /// C parameter list, in order. Names `b`, `r`, `c`, `acc` and the prefix `kiln_` are
    /// reserved for the generated code.
    pub params: Vec<Param>,
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// M x K.
    pub a: Operand,
    /// K x N.
    pub b: Operand,
    /// M x N output; must be `Strided` and must not overlap itself.
    pub c: Operand,
    /// Optional C expression computing the stored value from `acc` (float) and `b`, `r`, `c`,
    /// e.g. `"acc + bias[r]"` or `"fmaxf(acc + bias[r], 0.0f)"`; `None` stores `acc`.
    pub epilogue: Option<String>,
    /// A strided factor (batch 1) read from its packing instead (see [`Prepacked`]).
    pub prepacked: Option<Prepacked>,
}

impl GemmSpec {
    /// Floating-point operations (a multiply-add counts 2).
    pub fn flops(&self) -> f64 {
        2.0 * self.batch as f64 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// Overrides of the generator's own choices, for measuring alternatives (`examples/gemm_bench`).
/// `None` keeps the cache model's choice. Sizes are in elements and apply to every vector width;
/// a forced kernel shape applies to the widths that have it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tuning {
    pub kc: Option<usize>,
    pub mc: Option<usize>,
    pub nc: Option<usize>,
    pub shape: Option<KernelShape>,
    pub transposed: Option<bool>,
    /// Pack A (true) or let the micro-kernel read A's rows in place where A allows (false).
    pub pack_a: Option<bool>,
    /// Pack B (true) or let the micro-kernel read B's rows in place where B allows (false).
    pub pack_b: Option<bool>,
    /// Pack a convolution window from a zero-padded copy by gathers (true) or by runs of image
    /// rows (false).
    pub staged: Option<bool>,
    /// L2 per core of the target (`kiln_target::TargetDesc::l2_per_core`), which bounds the
    /// packed A block; `None` keeps each vector width's typical size.
    pub l2_bytes: Option<usize>,
    /// L1 data cache per core of the target (`kiln_target::TargetDesc::l1_per_core`), which
    /// decides whether the next prepacked weight panel is prefetched; `None` keeps each vector
    /// width's typical size.
    pub l1_bytes: Option<usize>,
    /// Prefetch the next prepacked B panel while the current one is in use (true) or leave
    /// it to the hardware prefetchers (false); `None`: the plan's rule (`plan.rs`).
    pub prefetch: Option<bool>,
}

/// The C function for `spec` (plus nothing else: the shared helpers are in `gemm_prelude`).
pub fn gemm_c(spec: &GemmSpec) -> kiln_ir::Result<String> {
    gemm_c_tuned(spec, &Tuning::default())
}

/// `gemm_c` with some of the generator's choices overridden.
pub fn gemm_c_tuned(spec: &GemmSpec, tuning: &Tuning) -> kiln_ir::Result<String> {
    validate::validate(spec)?;
    let mut w = CWriter::new();
    w.line(format!(
        "/* kiln gemm {}: batch {} x ({} x {} x {}){} */",
        spec.name,
        spec.batch,
        spec.m,
        spec.n,
        spec.k,
        if spec.epilogue.is_some() {
            ", with epilogue"
        } else {
            ""
        }
    ));
    if spec.epilogue.is_some() {
        contracted(&mut w, |w| {
            for_each_target(w, |w, target| {
                let plan = plan::plan(spec, target, tuning);
                epilogue::emit_fused_kernels(w, spec, &plan, target.vector_len());
            })
        });
    }
    for_each_target(&mut w, |w, target| {
        if lanes::LaneGroups::of(spec, target).is_none() {
            driver::emit_edge_function(w, spec, &plan::plan(spec, target, tuning));
        }
    });
    let layout = gemm_workspace_tuned(spec, tuning)?;
    let mut params = declared(&spec.params);
    params.push(format!("float* restrict {WORKSPACE_PARAM}"));
    w.open(format!("static void {}({})", spec.name, params.join(", ")));
    // A prepacked factor's own parameter is not read, nor an empty workspace.
    for p in &spec.params {
        w.line(format!("(void){};", p.name));
    }
    w.line(format!("(void){WORKSPACE_PARAM};"));
    for_each_target(&mut w, |w, target| {
        match lanes::LaneGroups::of(spec, target) {
            Some(groups) => lanes::emit_body(w, spec, &groups),
            None => {
                let plan = plan::plan(spec, target, tuning);
                driver::emit_body(w, spec, &plan, &layout);
            }
        }
    });
    w.close();
    Ok(w.finish())
}

/// The last parameter of every function [`gemm_c`] writes: its scratch memory.
pub const WORKSPACE_PARAM: &str = "kiln_ws";

/// The scratch memory a gemm function reads and writes through [`WORKSPACE_PARAM`], in floats
/// from a 64-byte aligned start: `fixed` floats shared by the threads (a staged window copy),
/// then one slot of `per_thread` floats for each of at most `KILN_MAX_THREADS` threads (its
/// packed A and B blocks and row pointers). The largest over the vector widths the C supports,
/// so one size serves whichever the compiler selects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemmWorkspace {
    pub fixed: usize,
    pub per_thread: usize,
}

impl GemmWorkspace {
    /// Floats for `threads` threads.
    pub fn floats(&self, threads: usize) -> usize {
        self.fixed + self.per_thread * threads.max(1)
    }
}

/// The workspace layout of `gemm_c(spec)`.
pub fn gemm_workspace(spec: &GemmSpec) -> kiln_ir::Result<GemmWorkspace> {
    gemm_workspace_tuned(spec, &Tuning::default())
}

/// The workspace layout of `gemm_c_tuned(spec, tuning)`.
pub fn gemm_workspace_tuned(spec: &GemmSpec, tuning: &Tuning) -> kiln_ir::Result<GemmWorkspace> {
    validate::validate(spec)?;
    let mut layout = GemmWorkspace::default();
    for target in kernel::TARGETS {
        let plan = plan::plan(spec, target, tuning);
        layout.fixed = layout.fixed.max(driver::shared_floats(spec, &plan));
        let parts = driver::ThreadParts::new(spec, &plan);
        layout.per_thread = layout.per_thread.max(parts.floats());
    }
    Ok(layout)
}

/// Name of the function [`gemm_prepack_c`] writes for `spec`; `NAME_floats()` gives the size
/// of its output in floats.
pub fn prepack_name(spec: &GemmSpec) -> String {
    format!("{}_prepack", spec.name)
}

/// For a spec with a [`Prepacked`] factor: `static long NAME_floats(void)` (the packing's size
/// in floats) and `static void NAME(params..., float* restrict kiln_out)` writing the packing
/// (every K block's panels, zero-padded, in the order the matmul reads them), both for the
/// vector width the C is compiled for. Only the prepacked factor's parameter is read.
pub fn gemm_prepack_c(spec: &GemmSpec) -> kiln_ir::Result<String> {
    gemm_prepack_c_tuned(spec, &Tuning::default())
}

/// `gemm_prepack_c` for the plan `gemm_c_tuned(spec, tuning)` makes.
pub fn gemm_prepack_c_tuned(spec: &GemmSpec, tuning: &Tuning) -> kiln_ir::Result<String> {
    validate::validate(spec)?;
    let name = prepack_name(spec);
    let mut w = CWriter::new();
    w.open(format!("static long {name}_floats(void)"));
    for_each_target(&mut w, |w, target| {
        let plan = plan::plan(spec, target, tuning);
        w.line(format!("return {};", driver::prepacked_floats(spec, &plan)));
    });
    w.close();
    let mut params = declared(&spec.params);
    params.push("float* restrict kiln_out".into());
    w.open(format!("static void {name}({})", params.join(", ")));
    for p in &spec.params {
        // Only the prepacked factor is read.
        w.line(format!("(void){};", p.name));
    }
    for_each_target(&mut w, |w, target| {
        let plan = plan::plan(spec, target, tuning);
        driver::emit_prepack_body(w, spec, &plan);
    });
    w.close();
    Ok(w.finish())
}

/// Shared typedefs, helpers and micro-kernels; emit once per C file, before any `gemm_c` output.
pub fn gemm_prelude() -> &'static str {
    prelude::prelude()
}

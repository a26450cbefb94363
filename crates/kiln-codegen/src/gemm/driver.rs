//! The per-matmul C function: the GotoBLAS/BLIS loop nest around the micro-kernel
//! (Goto & van de Geijn 2008 §6; Smith et al. 2014 for the choice of loop to parallelise).
//!
//! Needs a validated spec and a plan per vector target. Guarantees a function
//! `static void NAME(params)` that computes `C[b] = epilogue(A[b] B[b])` for every batch index:
//! the work is cut into tasks (batch, M block, N block) handed to OpenMP threads with equal
//! work per thread where the split allows; each task runs the K blocks in order, packs its B
//! and A blocks into thread-private buffers and runs the micro-kernel over all tiles (or, with
//! [`Plan::k_inner`], packs B for every K block first and runs each tile's blocks together:
//! `driver/k_inner.rs`). The epilogue is applied once, after the last K block. Packing buffers, row pointers and a staged
//! window copy live in the caller's workspace (the function's last parameter, laid out by
//! [`super::gemm_workspace`]): the function allocates nothing and never fails. At most
//! `KILN_MAX_THREADS` threads run it, each in its own slot. Without OpenMP the pragmas are
//! ignored and the same loops run on one thread.

use super::emit::CWriter;
use super::epilogue::FusedEpilogue;
use super::kernel::{ukernel_name, ASource};
use super::pack::{emit_pack, PackJob, Side};
use super::plan::Plan;
use super::view::{linear_index, Axis, View};
use super::window::{
    emit_depth_offsets, emit_pixel_pointers, emit_row_pointers, emit_staging, staged_floats,
    Window, WindowLayout, DEPTH_OFFSETS, STAGED,
};
use super::{declared, GemmSpec, GemmWorkspace, Operand, WORKSPACE_PARAM};

mod k_inner;
mod prepack;
mod tiles;

pub(crate) use prepack::{emit_prepack_body, prepacked_floats};
pub(crate) use tiles::emit_edge_function;
use tiles::emit_tile;

/// The operands in kernel orientation.
struct Views<'a> {
    a: View<'a>,
    b: View<'a>,
    c: View<'a>,
}

impl<'a> Views<'a> {
    fn new(spec: &'a GemmSpec, transposed: bool) -> Views<'a> {
        let (a, b) = if transposed {
            (&spec.b, &spec.a)
        } else {
            (&spec.a, &spec.b)
        };
        Views {
            a: View::new(a, transposed),
            b: View::new(b, transposed),
            c: View::new(&spec.c, transposed),
        }
    }
}

/// Emits the statements of the function body for one target's plan.
pub(crate) fn emit_body(w: &mut CWriter, spec: &GemmSpec, plan: &Plan, layout: &GemmWorkspace) {
    let views = Views::new(spec, plan.transposed);
    let (mr, nr, kc) = (plan.shape.mr, plan.shape.nr, plan.kc);
    w.line(format!(
        "/* {mr}x{nr} micro-kernel, {}, K blocks of {kc}, blocks of at most {} x {} panels */",
        if plan.transposed {
            "computed as C^T = B^T A^T"
        } else {
            "C = A B"
        },
        plan.mc_panels,
        plan.nc_panels
    ));
    let (mpan, npan) = (plan.m_panels(), plan.n_panels());
    w.line(format!(
        "const long kiln_mpan = {mpan}, kiln_npan = {npan};"
    ));
    w.line(format!(
        "long kiln_mb = {}, kiln_nb = {};",
        mpan.div_ceil(plan.mc_panels),
        npan.div_ceil(plan.nc_panels)
    ));
    w.line(format!(
        "kiln_gemm_split({}, kiln_mpan, kiln_npan, {mr}, {nr}, {}, {}, &kiln_mb, &kiln_nb);",
        spec.batch,
        u8::from(plan.pack_a && plan.prepacked != Some(Side::A)),
        u8::from(plan.pack_b && plan.prepacked != Some(Side::B))
    ));
    w.line(format!(
        "const long kiln_tasks = {} * kiln_mb * kiln_nb;",
        spec.batch
    ));
    let pointers = pointer_rows(plan, &views);
    if let Some(window) = pointers {
        match pointer_source(window) {
            // What a row pointer points at in the padding: zeros, as deep as a K block.
            ASource::Pointers => w.line(format!("static const float kiln_zeros[{kc}];")),
            _ => emit_depth_offsets(w, window),
        }
    }
    let staged = staged_window(plan, spec);
    if staged.is_some() {
        w.line(format!("float* const {STAGED} = {WORKSPACE_PARAM};"));
    }
    w.line("KILN_OMP(omp parallel num_threads(kiln_gemm_threads()))");
    w.open("");
    if let Some(window) = staged {
        emit_staging(w, window, spec.batch);
    }
    // This thread's slot of the workspace: its A and B blocks, then its row pointers.
    let parts = ThreadParts::new(spec, plan);
    w.line(format!(
        "float* const kiln_slot = {WORKSPACE_PARAM} + {} + (long)kiln_thread_num() * {};",
        layout.fixed, layout.per_thread
    ));
    w.line("float* const kiln_ap = kiln_slot;");
    w.line(format!("float* const kiln_bp = kiln_slot + {};", parts.a));
    w.line("(void)kiln_ap;");
    w.line("(void)kiln_bp;");
    if pointers.is_some() {
        w.line(format!(
            "const float** const kiln_arow = (const float**)(kiln_slot + {});",
            parts.a + parts.b
        ));
    }
    w.line("KILN_OMP(omp for schedule(static))");
    w.open("for (long kiln_task = 0; kiln_task < kiln_tasks; kiln_task++)");
    w.line("const long b = kiln_task / (kiln_mb * kiln_nb);");
    w.line("(void)b;");
    w.line("const long kiln_ib = kiln_task / kiln_nb % kiln_mb, kiln_jb = kiln_task % kiln_nb;");
    w.line("const long kiln_pa0 = kiln_ib * kiln_mpan / kiln_mb, kiln_pa1 = (kiln_ib + 1) * kiln_mpan / kiln_mb;");
    w.line("const long kiln_pb0 = kiln_jb * kiln_npan / kiln_nb, kiln_pb1 = (kiln_jb + 1) * kiln_npan / kiln_nb;");
    emit_k_blocks(w, spec, plan, &views);
    w.close();
    w.close();
}

/// Floats of one thread's workspace slot, each part rounded up to a cache line: the largest
/// A block and B block a task packs (blocks only get smaller than their first split, see
/// `kiln_gemm_split`), and the row pointers of an A read through a pointer per row.
pub(crate) struct ThreadParts {
    pub a: usize,
    pub b: usize,
    pub rows: usize,
}

impl ThreadParts {
    pub(crate) fn new(spec: &GemmSpec, plan: &Plan) -> ThreadParts {
        let (mr, nr, kc) = (plan.shape.mr, plan.shape.nr, plan.kc);
        let (mpan, npan) = (plan.m_panels(), plan.n_panels());
        let a_block = mpan.div_ceil(mpan.div_ceil(plan.mc_panels));
        let b_block = npan.div_ceil(npan.div_ceil(plan.nc_panels));
        let a = match (plan.prepacked, plan.pack_a) {
            (Some(Side::A), _) => 0,
            (_, true) => a_block * mr * kc,
            (_, false) => mr * kc,
        };
        let b = match plan.prepacked {
            Some(Side::B) => 0,
            // Every K block's panels, packed before the tiles run.
            _ if plan.k_inner => b_block * nr * spec.k,
            _ => b_block * nr * kc,
        };
        let views = Views::new(spec, plan.transposed);
        // A pointer takes at most two floats.
        let rows = if pointer_rows(plan, &views).is_some() {
            a_block * mr * 2
        } else {
            0
        };
        ThreadParts {
            a: cache_lines(a),
            b: cache_lines(b),
            rows: cache_lines(rows),
        }
    }

    pub(crate) fn floats(&self) -> usize {
        self.a + self.b + self.rows
    }
}

/// The shared part of the workspace: the staged copy of a window, if the plan stages one.
pub(crate) fn shared_floats(spec: &GemmSpec, plan: &Plan) -> usize {
    staged_window(plan, spec).map_or(0, |w| cache_lines(staged_floats(w, spec.batch)))
}

/// `floats` rounded up to whole 64-byte lines.
fn cache_lines(floats: usize) -> usize {
    floats.div_ceil(16) * 16
}

/// The window A when the plan reads it through a pointer per row.
fn pointer_rows<'a>(plan: &Plan, views: &Views<'a>) -> Option<&'a Window> {
    views.a.pixel_rows_window().filter(|_| !plan.pack_a)
}

/// The window operand read from a staged copy, when the plan stages one.
fn staged_window<'a>(plan: &Plan, spec: &'a GemmSpec) -> Option<&'a Window> {
    if !plan.staged {
        return None;
    }
    [&spec.b, &spec.a]
        .into_iter()
        .find_map(|operand| match operand {
            Operand::Window(window) => Some(window),
            _ => None,
        })
}

/// The K-block loop of one task: pack, then every tile of the block (or, with
/// [`Plan::k_inner`], the blocks inside each tile: `k_inner.rs`).
fn emit_k_blocks(w: &mut CWriter, spec: &GemmSpec, plan: &Plan, views: &Views) {
    if let Some(window) = pointer_rows(plan, views).filter(|_| plan.k_inner) {
        k_inner::emit(w, &KBlock { spec, plan, views }, window);
        return;
    }
    open_k_block(w, spec, plan);
    let block = KBlock { spec, plan, views };
    let b_rows = block.emit_b_packing(w, "kiln_bp");
    block.emit_a_packing(w);
    w.open("for (long kiln_q = kiln_pb0; kiln_q < kiln_pb1; kiln_q++)");
    block.emit_b_panel(w, b_rows);
    w.open("for (long kiln_s = kiln_pa0; kiln_s < kiln_pa1; kiln_s++)");
    block.emit_row_panel(w);
    w.close();
    w.close();
    w.close();
}

/// Opens the loop over K blocks: `kiln_k0`, the block's depth `kiln_kc` and `kiln_last`.
fn open_k_block(w: &mut CWriter, spec: &GemmSpec, plan: &Plan) {
    let (kc, k) = (plan.kc, spec.k);
    w.open(format!(
        "for (long kiln_k0 = 0; kiln_k0 < {k}; kiln_k0 += {kc})"
    ));
    w.line(format!(
        "const long kiln_kc = {k} - kiln_k0 < {kc} ? {k} - kiln_k0 : {kc};"
    ));
    w.line(format!("const int kiln_last = kiln_k0 + kiln_kc == {k};"));
    w.line("(void)kiln_last;");
}

/// One K block of a task's loop nest, emitted a part at a time.
struct KBlock<'a> {
    spec: &'a GemmSpec,
    plan: &'a Plan,
    views: &'a Views<'a>,
}

impl KBlock<'_> {
    /// The prepacked factor's parameter, when `side` is the prepacked one.
    fn prepacked(&self, side: Side) -> Option<&str> {
        self.spec
            .prepacked
            .as_ref()
            .filter(|_| self.plan.prepacked == Some(side))
            .map(|p| p.param.as_str())
    }

    /// `kiln_pbe` and B's packing for this block into `buffer`; B's rows when the kernel reads
    /// them in place.
    fn emit_b_packing(&self, w: &mut CWriter, buffer: &str) -> Option<(String, isize)> {
        let (plan, nr) = (self.plan, self.plan.shape.nr);
        // B's panels are packed in [kiln_pbe, kiln_pb1); below kiln_pbe the kernel reads B's rows.
        let b_rows = b_rows(plan, self.views).filter(|_| self.prepacked(Side::B).is_none());
        let pbe = match b_rows {
            None => "kiln_pb0".to_string(),
            Some(_) => first_partial_panel(plan.n, nr, ("kiln_pb0", "kiln_pb1")),
        };
        w.line(format!("const long kiln_pbe = {pbe};"));
        w.line("(void)kiln_pbe;");
        if self.prepacked(Side::B).is_none() && (b_rows.is_none() || !plan.n.is_multiple_of(nr)) {
            emit_pack(
                w,
                &PackJob {
                    view: &self.views.b,
                    side: Side::B,
                    width: nr,
                    extent: plan.n,
                    buffer,
                    first: "kiln_pbe",
                    end: "kiln_pb1",
                    staged: plan.staged,
                },
            );
        }
        b_rows
    }

    /// `kiln_pe` and A's packing (or row pointers) for this block.
    fn emit_a_packing(&self, w: &mut CWriter) {
        let (plan, mr) = (self.plan, self.plan.shape.mr);
        let partial = !plan.m.is_multiple_of(mr);
        // A's panels are packed in [kiln_pe, kiln_pa1); below kiln_pe the kernel reads A's rows.
        let pointers = pointer_rows(plan, self.views);
        let pe = match plan.pack_a {
            _ if self.prepacked(Side::A).is_some() => "kiln_pa0".to_string(),
            // Rows past the last point at zeros: nothing is packed.
            _ if pointers.is_some() => "kiln_pa1".to_string(),
            true => "kiln_pa0".to_string(),
            false => first_partial_panel(plan.m, mr, ("kiln_pa0", "kiln_pa1")),
        };
        w.line(format!("const long kiln_pe = {pe};"));
        w.line("(void)kiln_pe;");
        if let Some(window) = pointers {
            let (pixel0, count) = (
                format!("kiln_pa0 * {mr}"),
                format!("(kiln_pa1 - kiln_pa0) * {mr}"),
            );
            match pointer_source(window) {
                ASource::Pointers => emit_row_pointers(w, window, &pixel0, &count),
                _ => emit_pixel_pointers(w, window, &pixel0, &count),
            }
        } else if (plan.pack_a || partial) && self.prepacked(Side::A).is_none() {
            emit_pack(
                w,
                &PackJob {
                    view: &self.views.a,
                    side: Side::A,
                    width: mr,
                    extent: plan.m,
                    buffer: "kiln_ap",
                    first: "kiln_pe",
                    end: "kiln_pa1",
                    staged: plan.staged,
                },
            );
        }
    }

    /// Column panel `kiln_q`'s B pointer and stride, and the panel to prefetch after it.
    fn emit_b_panel(&self, w: &mut CWriter, b_rows: Option<(String, isize)>) {
        let (plan, nr, kc, k) = (self.plan, self.plan.shape.nr, self.plan.kc, self.spec.k);
        let packed_b = panel_pointer(
            "kiln_bpanel",
            self.prepacked(Side::B),
            ("kiln_bp", "kiln_q", "kiln_pbe"),
            nr,
            plan.n_panels(),
        );
        match &b_rows {
            None => {
                w.line(packed_b);
                w.line(format!("const long kiln_ldb = {nr};"));
            }
            Some((pointer, ldb)) => {
                w.line(format!(
                    "const float* kiln_bpanel = kiln_q < kiln_pbe ? {pointer} : kiln_bp + (kiln_q - kiln_pbe) * kiln_kc * {nr};"
                ));
                w.line(format!(
                    "const long kiln_ldb = kiln_q < kiln_pbe ? {ldb} : {nr};"
                ));
            }
        }
        if let Some(param) = self.prepacked(Side::B).filter(|_| plan.prefetch_b) {
            // The panel the task reads next: this block's next one, or the next block's first.
            let block = plan.n_panels() * nr;
            w.line(format!(
                "const long kiln_kn = {k} - kiln_k0 - kiln_kc < {kc} ? {k} - kiln_k0 - kiln_kc : {kc};"
            ));
            w.line(format!(
                "const float* kiln_bnext = kiln_q + 1 < kiln_pb1 ? kiln_bpanel + kiln_kc * {nr} : kiln_kn > 0 ? {param} + (kiln_k0 + kiln_kc) * {block} + kiln_pb0 * kiln_kn * {nr} : 0;"
            ));
            w.line(format!(
                "const long kiln_bnext_floats = (kiln_q + 1 < kiln_pb1 ? kiln_kc : kiln_kn) * {nr};"
            ));
        }
    }

    /// Row panel `kiln_s`'s tile in column panel `kiln_q`, reading A as the plan says.
    fn emit_row_panel(&self, w: &mut CWriter) {
        let (spec, plan, views) = (self.spec, self.plan, self.views);
        let (mr, nr) = (plan.shape.mr, plan.shape.nr);
        w.line(format!(
            "const long kiln_r0 = kiln_s * {mr}, kiln_c0 = kiln_q * {nr};"
        ));
        if plan.prefetch_b {
            w.line("if (kiln_bnext) kiln_gemm_prefetch_part(kiln_bnext, kiln_bnext_floats, kiln_s - kiln_pa0, kiln_pa1 - kiln_pa0);");
        }
        let packed = |w: &mut CWriter| {
            w.line(panel_pointer(
                "kiln_apanel",
                self.prepacked(Side::A),
                ("kiln_ap", "kiln_s", "kiln_pe"),
                mr,
                plan.m_panels(),
            ));
            emit_tile(w, spec, plan, views, &KernelCall::packed());
        };
        match a_read(spec, plan, views) {
            ARead::Packed => packed(w),
            ARead::Pointers(source) => {
                w.line(format!(
                    "const float* const* kiln_apanel = kiln_arow + (kiln_s - kiln_pa0) * {mr};"
                ));
                let a_args = match source {
                    ASource::Offsets => format!("kiln_apanel, {DEPTH_OFFSETS} + kiln_k0"),
                    _ => "kiln_apanel".to_string(),
                };
                let call = KernelCall { source, a_args };
                emit_tile(w, spec, plan, views, &call);
            }
            ARead::Rows {
                pointer,
                call,
                partial,
            } => {
                let rows = |w: &mut CWriter| {
                    w.line(format!("const float* kiln_apanel = {pointer};"));
                    emit_tile(w, spec, plan, views, &call);
                };
                if partial {
                    w.open("if (kiln_s < kiln_pe)");
                    rows(w);
                    w.close();
                    w.open("else");
                    packed(w);
                    w.close();
                } else {
                    rows(w);
                }
            }
        }
    }
}

/// How a plan's tiles read A.
enum ARead {
    /// From packed panels: a prepacked factor's or this task's.
    Packed,
    /// The window through row pointers (`kiln_arow`): into an NHWC image
    /// ([`ASource::Pointers`]) or a staged NCHW one ([`ASource::Offsets`]).
    Pointers(ASource),
    /// A's own rows in place (`pointer`: the tile's first element), the partial last panel
    /// packed when there is one.
    Rows {
        pointer: String,
        call: KernelCall,
        partial: bool,
    },
}

fn a_read(spec: &GemmSpec, plan: &Plan, views: &Views) -> ARead {
    if spec.prepacked.is_some() && plan.prepacked == Some(Side::A) {
        return ARead::Packed;
    }
    if let Some(window) = pointer_rows(plan, views) {
        return ARead::Pointers(pointer_source(window));
    }
    match (plan.pack_a, rows_call(views)) {
        (false, Some((pointer, call))) => ARead::Rows {
            pointer,
            call,
            partial: !plan.m.is_multiple_of(plan.shape.mr),
        },
        _ => ARead::Packed,
    }
}

/// How the micro-kernel reads a window through row pointers: a channel run per pointer (NHWC),
/// or per-K offsets from each pixel's pointer into the staged copy (NCHW).
fn pointer_source(window: &Window) -> ASource {
    match window.layout {
        WindowLayout::ChannelsLast => ASource::Pointers,
        WindowLayout::Rows | WindowLayout::Columns => ASource::Offsets,
    }
}

/// The A sources of the micro-kernels a plan calls, each once.
pub(crate) fn kernel_sources(spec: &GemmSpec, plan: &Plan) -> Vec<ASource> {
    match a_read(spec, plan, &Views::new(spec, plan.transposed)) {
        ARead::Packed => vec![ASource::Packed],
        ARead::Pointers(source) => vec![source],
        ARead::Rows { partial: true, .. } => vec![ASource::Rows, ASource::Packed],
        ARead::Rows { .. } => vec![ASource::Rows],
    }
}

/// For an operand read in place, the C expression of the first panel of `[first, end)` that
/// is packed all the same: the partial last panel of an `extent` cut into panels of `width`
/// (`end` when there is none in the range).
fn first_partial_panel(extent: usize, width: usize, (first, end): (&str, &str)) -> String {
    if extent.is_multiple_of(width) {
        return end.to_string();
    }
    let full = extent / width;
    format!("({end} > {full} ? ({full} > {first} ? {full} : {first}) : {end})")
}

/// `const float* NAME = ...;`: micro-panel `index` (of `width` floats per
/// depth step) of this K block, in the prepacked factor `prepacked` (all
/// `panels` of every block, block by block) or else in this task's packing
/// buffer (`buffer`, `index`, `first`: panels from `first` on).
fn panel_pointer(
    name: &str,
    prepacked: Option<&str>,
    (buffer, index, first): (&str, &str, &str),
    width: usize,
    panels: usize,
) -> String {
    match prepacked {
        Some(param) => format!(
            "const float* {name} = {param} + kiln_k0 * {} + {index} * kiln_kc * {width};",
            panels * width
        ),
        None => {
            format!("const float* {name} = {buffer} + ({index} - {first}) * kiln_kc * {width};")
        }
    }
}

/// How the micro-kernel is called: where it reads A and the A arguments after `kiln_kc`.
struct KernelCall {
    source: ASource,
    a_args: String,
}

impl KernelCall {
    fn packed() -> KernelCall {
        KernelCall {
            source: ASource::Packed,
            a_args: "kiln_apanel".into(),
        }
    }

    /// The micro-kernel's name: the shared one, or the gemm's variant applying its epilogue.
    fn name(&self, plan: &Plan, epilogue: Option<&FusedEpilogue>) -> String {
        ukernel_name(plan.shape, self.source, epilogue)
    }
}

/// For A read in place (strided, contiguous along K): the C pointer to the tile's first A
/// element and the kernel call.
fn rows_call(views: &Views) -> Option<(String, KernelCall)> {
    let (batch, lda, 1) = views.a.kernel_strides()? else {
        return None;
    };
    let param = views.a.param()?;
    let offset = linear_index(&[("b", batch), ("kiln_r0", lda), ("kiln_k0", 1)]);
    let call = KernelCall {
        source: ASource::Rows,
        a_args: format!("kiln_apanel, {lda}"),
    };
    Some((format!("{param} + {offset}"), call))
}

/// For B read in place (strided, contiguous along N): the C pointer to panel `kiln_q`'s first
/// element in this K block, and B's row stride.
fn b_rows(plan: &Plan, views: &Views) -> Option<(String, isize)> {
    if plan.pack_b {
        return None;
    }
    let (batch, ldb, 1) = views.b.kernel_strides()? else {
        return None;
    };
    let param = views.b.param()?;
    let offset = linear_index(&[
        ("b", batch),
        ("kiln_k0", ldb),
        ("kiln_q", plan.shape.nr as isize),
    ]);
    Some((format!("{param} + {offset}"), ldb))
}

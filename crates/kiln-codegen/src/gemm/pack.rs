//! Packing of one K block of an operand into contiguous micro-panels (Goto & van de Geijn 2008
//! §5: packing makes the micro-kernel's reads sequential and cache/TLB friendly).
//!
//! Needs a view in kernel orientation, the panel width (`mr` for A, `nr` for B) and the C
//! variables of the driver (`b`, `kiln_k0`, `kiln_kc`, the panel range). Guarantees panel `t`
//! of the range holds `kiln_kc` rows of `width` floats, element `(p, x)` at `t*kc*width +
//! p*width + x`, and that the rows (A) or columns (B) past the matrix edge are zero, so the
//! micro-kernel needs no edge branches. The operand is only read inside the matrix.

use super::emit::CWriter;
use super::view::{Axis, View};
use super::window::{emit_gather_pack, emit_window_pack};

/// Which packed operand: A panels run along kernel rows, B panels along kernel columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    A,
    B,
}

/// What to pack: `view`'s panels `[first, end)` (C variable names) of `width` along the
/// panel axis whose extent is `extent`, into buffer `buffer`.
pub(crate) struct PackJob<'a> {
    pub view: &'a View<'a>,
    pub side: Side,
    pub width: usize,
    pub extent: usize,
    pub buffer: &'a str,
    pub first: &'a str,
    pub end: &'a str,
    /// A window operand is packed from its staged copy (`window::emit_staging`).
    pub staged: bool,
}

impl PackJob<'_> {
    /// The kernel axis a panel runs across (rows of A panels, columns of B panels).
    pub(crate) fn panel_axis(&self) -> Axis {
        match self.side {
            Side::A => Axis::Row,
            Side::B => Axis::Col,
        }
    }
}

/// Emits the packing loop nest for one K block, in the order that reads the operand best.
pub(crate) fn emit_pack(w: &mut CWriter, job: &PackJob) {
    if let Some(window) = job.view.window_along(job.panel_axis()) {
        if job.staged {
            emit_gather_pack(w, job, window);
        } else {
            emit_window_pack(w, job, window);
        }
        return;
    }
    w.line(format!(
        "/* pack {:?}: panels [{}, {}) of {}, depth kiln_kc from kiln_k0 */",
        job.side, job.first, job.end, job.width
    ));
    if job.view.inner_axis() == job.panel_axis() {
        emit_depth_major(w, job);
    } else {
        emit_panel_major(w, job);
    }
}

/// The operand runs along the panels (e.g. a row-major B): one depth row at a time, across all
/// panels of the range, so each row of the block is read in order from start to end.
fn emit_depth_major(w: &mut CWriter, job: &PackJob) {
    let (width, first, end) = (job.width, job.first, job.end);
    let full_panels = job.extent / width;
    let last_width = job.extent % width;
    if last_width != 0 {
        w.open(format!("if ({end} > {full_panels})"));
        w.line(format!(
            "memset({} + ({full_panels} - {first}) * kiln_kc * {width}, 0, sizeof(float) * (size_t)kiln_kc * {width});",
            job.buffer
        ));
        w.close();
    }
    w.open("for (long kiln_p = 0; kiln_p < kiln_kc; kiln_p++)");
    w.line(job.view.bind(job.panel_axis().other(), "kiln_k0 + kiln_p"));
    if last_width == 0 {
        w.open(format!(
            "for (long kiln_t = {first}; kiln_t < {end}; kiln_t++)"
        ));
    } else {
        w.open(format!(
            "for (long kiln_t = {first}; kiln_t < ({end} < {full_panels} ? {end} : {full_panels}); kiln_t++)"
        ));
    }
    emit_panel_row(w, job, width);
    w.close();
    if last_width != 0 {
        w.open(format!("if ({end} > {full_panels})"));
        w.line(format!("const long kiln_t = {full_panels};"));
        emit_panel_row(w, job, last_width);
        w.close();
    }
    w.close();
}

/// One depth row `kiln_p` of panel `kiln_t`: `count` elements along the panel axis.
fn emit_panel_row(w: &mut CWriter, job: &PackJob, count: usize) {
    let width = job.width;
    w.line(format!(
        "float* restrict kiln_d = {} + (kiln_t - {}) * kiln_kc * {width} + kiln_p * {width};",
        job.buffer, job.first
    ));
    w.line(format!("const long kiln_x0 = kiln_t * {width};"));
    w.open(format!("for (long kiln_x = 0; kiln_x < {count}; kiln_x++)"));
    w.line(job.view.bind(job.panel_axis(), "kiln_x0 + kiln_x"));
    w.line(format!("kiln_d[kiln_x] = {};", job.view.value()));
    w.close();
}

/// The operand runs along the depth (e.g. a row-major A): panel by panel, each panel row's
/// depth segment read in order, the segments a few rows ahead prefetched.
fn emit_panel_major(w: &mut CWriter, job: &PackJob) {
    let width = job.width;
    w.open(format!(
        "for (long kiln_t = {}; kiln_t < {}; kiln_t++)",
        job.first, job.end
    ));
    w.line(format!(
        "float* restrict kiln_d = {} + (kiln_t - {}) * kiln_kc * {width};",
        job.buffer, job.first
    ));
    w.line(format!("const long kiln_x0 = kiln_t * {width};"));
    let full_panels = job.extent / width;
    let last_width = job.extent % width;
    if last_width == 0 {
        emit_segments(w, job, width);
    } else {
        w.open(format!("if (kiln_t < {full_panels})"));
        emit_segments(w, job, width);
        w.close();
        w.open("else");
        w.line(format!(
            "memset(kiln_d, 0, sizeof(float) * (size_t)kiln_kc * {width});"
        ));
        emit_segments(w, job, last_width);
        w.close();
    }
    w.close();
}

/// `count` panel positions, each copying its depth segment.
fn emit_segments(w: &mut CWriter, job: &PackJob, count: usize) {
    let panel_axis = job.panel_axis();
    w.open(format!("for (long kiln_x = 0; kiln_x < {count}; kiln_x++)"));
    w.line(job.view.bind(panel_axis, "kiln_x0 + kiln_x"));
    emit_prefetch_ahead(w, job);
    w.open("for (long kiln_p = 0; kiln_p < kiln_kc; kiln_p++)");
    w.line(job.view.bind(panel_axis.other(), "kiln_k0 + kiln_p"));
    w.line(format!(
        "kiln_d[kiln_p * {} + kiln_x] = {};",
        job.width,
        job.view.value()
    ));
    w.close();
    w.close();
}

/// Rows further along the panel axis whose depth segment is prefetched while this one is
/// packed (each segment usually starts a new page, where hardware prefetchers start cold).
fn prefetch_distance(width: usize) -> usize {
    (2 * width).max(24)
}

/// When the panel loop is outermost and the depth axis is contiguous, asks for the segment
/// `prefetch_distance` rows ahead, one request per 64-byte line; skipped past the matrix edge
/// so no pointer leaves the operand.
fn emit_prefetch_ahead(w: &mut CWriter, job: &PackJob) {
    let depth_axis = job.panel_axis().other();
    let Some((_, row, col)) = job.view.kernel_strides() else {
        return;
    };
    let depth_stride = if depth_axis == Axis::Row { row } else { col };
    if depth_stride != 1 {
        return;
    }
    let ahead = prefetch_distance(job.width);
    w.open(format!("if (kiln_x0 + kiln_x + {ahead} < {})", job.extent));
    w.open("for (long kiln_l = 0; kiln_l < kiln_kc; kiln_l += 16)");
    w.line(
        job.view
            .bind(job.panel_axis(), &format!("kiln_x0 + kiln_x + {ahead}")),
    );
    w.line(job.view.bind(depth_axis, "kiln_k0 + kiln_l"));
    w.line(format!("__builtin_prefetch(&{}, 0, 3);", job.view.value()));
    w.close();
    w.close();
}

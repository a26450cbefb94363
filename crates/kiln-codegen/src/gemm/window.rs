//! Convolution windows as a matmul operand (implicit GEMM: the im2col matrix is never
//! materialised; Chellapilla et al. 2006 for im2col, Georganas et al. 2018 for packing windows
//! straight from the image).
//!
//! Needs the image's layout and the convolution geometry. Guarantees: the generic element
//! expression (for the unpacked path and any orientation), a packer for the common case
//! (panels running along output pixels) that decodes each im2col row `r = (ci, kh, kw)` once,
//! then fills every panel of that row by runs of one output row: zeros where the window hangs
//! over the padding, a plain (for stride 1, contiguous) copy of the image row elsewhere; row
//! pointers into an NHWC image; and, for an NCHW image read as pixel rows, a row pointer per
//! pixel into a zero-padded copy with a per-K offset table. No pointer is formed outside the
//! image or its copy.

use super::emit::CWriter;
use super::pack::PackJob;

/// The im2col matrix of a 2-D convolution (see [`WindowLayout`] for its orientation): the
/// element of output pixel `(oh, ow)`, input channel `ci` and tap `(kh, kw)` reads the image at
/// `ih = oh*stride[0] + kh*dilation[0] - pad[0]`, `iw = ow*stride[1] + kw*dilation[1] - pad[1]`,
/// and is 0 where `(ih, iw)` falls outside the `size[0] x size[1]` image.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub param: String,
    /// Element stride between batch entries (e.g. one image, or one group of channels).
    pub batch: isize,
    pub channels: usize,
    /// Elements between neighbouring pixels of a channels-last image (its
    /// channel count; more when the window reads one group's channels).
    pub pixel_stride: usize,
    /// Input height and width.
    pub size: [usize; 2],
    /// Output height and width.
    pub out: [usize; 2],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    /// Padding before the first row and column (after the last is implied by `out`).
    pub pad: [usize; 2],
    pub dilation: [usize; 2],
    pub layout: WindowLayout,
    /// Images whose output pixels follow one another as rows
    /// ([`WindowLayout::ChannelsLast`] only; 1 otherwise), each
    /// `image_stride` elements after the previous.
    pub images: usize,
    pub image_stride: isize,
}

/// The image's layout and which way the operand runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowLayout {
    /// NCHW image; element (b, r, c) with `r = (ci, kh, kw)` and `c = (oh, ow)` is
    /// `param[b*batch + ci*H*W + ih*W + iw]`. As the B operand of `weights (Co x Ci*KH*KW) *
    /// window`, a convolution producing NCHW output; packed by runs of image rows.
    Columns,
    /// NHWC image; element (b, r, c) with `r = (oh, ow)` and `c = (kh, kw, ci)` is
    /// `param[b*batch + (ih*W + iw)*channels + ci]`. As the A operand of `window * weights
    /// (KH*KW*Ci x Co)`, a convolution producing NHWC output; the micro-kernel reads it through
    /// row pointers.
    ChannelsLast,
    /// NCHW image; element (b, r, c) with `r = (oh, ow)` and `c = (ci, kh, kw)` is
    /// `param[b*batch + ci*H*W + ih*W + iw]`. As the A operand of `window * weights (Ci*KH*KW
    /// x Co)`, a convolution from NCHW input to NHWC output (a network's first convolution);
    /// the micro-kernel reads it from a zero-padded copy through a pointer per pixel and a
    /// per-K offset table.
    Rows,
}

impl Window {
    /// Whether the operand's rows are output pixels (else im2col rows).
    pub fn pixel_rows(&self) -> bool {
        self.layout != WindowLayout::Columns
    }

    /// Rows of the operand (output pixels, or im2col rows `channels x kernel window`).
    pub fn rows(&self) -> usize {
        if self.pixel_rows() {
            self.pixels()
        } else {
            self.depth()
        }
    }

    /// Columns of the operand (the window depth, or output pixels).
    pub fn cols(&self) -> usize {
        if self.pixel_rows() {
            self.depth()
        } else {
            self.pixels()
        }
    }

    fn depth(&self) -> usize {
        self.channels * self.kernel[0] * self.kernel[1]
    }

    /// Output pixels of all the images.
    fn pixels(&self) -> usize {
        self.images * self.image_pixels()
    }

    /// Output pixels of one image.
    fn image_pixels(&self) -> usize {
        self.out[0] * self.out[1]
    }

    /// For output pixel `px` (a C expression) of all the images: the C
    /// expression of its pixel within its image, and the term adding its
    /// image's offset in elements (empty for one image).
    fn image_of(&self, px: &str) -> (String, String) {
        if self.images == 1 {
            return (px.to_string(), String::new());
        }
        let per_image = self.image_pixels();
        (
            format!("({px} % {per_image})"),
            format!(" + {px} / {per_image} * {}", self.image_stride),
        )
    }
}

/// Input row and column read by element (r, c), as C expressions, given the C expressions of
/// its output pixel and its tap index (`kh * KW + kw`).
fn input_coordinates(window: &Window, pixel: &str, tap: &str) -> (String, String) {
    let [_, kw] = window.kernel;
    let ih = format!(
        "({pixel} / {} * {} + {tap} / {kw} * {} - {})",
        window.out[1], window.stride[0], window.dilation[0], window.pad[0]
    );
    let iw = format!(
        "({pixel} % {} * {} + {tap} % {kw} * {} - {})",
        window.out[1], window.stride[1], window.dilation[1], window.pad[1]
    );
    (ih, iw)
}

/// The element at (b, r, c) as one C expression of type float.
pub(crate) fn element_expr(window: &Window) -> String {
    let [h, w] = window.size;
    let taps = window.kernel[0] * window.kernel[1];
    let channels = window.channels;
    let (pixel, depth) = if window.pixel_rows() {
        ("r", "c")
    } else {
        ("c", "r")
    };
    let tap = match window.layout {
        WindowLayout::ChannelsLast => format!("({depth} / {channels})"),
        WindowLayout::Columns | WindowLayout::Rows => format!("({depth} % {taps})"),
    };
    let (pixel, image) = window.image_of(pixel);
    let (ih, iw) = input_coordinates(window, &pixel, &tap);
    let element = match window.layout {
        WindowLayout::ChannelsLast => format!(
            "({ih} * {w} + {iw}) * {} + c % {channels}{image}",
            window.pixel_stride
        ),
        WindowLayout::Columns | WindowLayout::Rows => {
            format!("{depth} / {taps} * {} + {ih} * {w} + {iw}", h * w)
        }
    };
    format!(
        "(({ih} >= 0 && {ih} < {h} && {iw} >= 0 && {iw} < {w}) ? {}[b * {} + {element}] : 0.0f)",
        window.param, window.batch
    )
}

/// Emits, for one K block from `kiln_k0` (within one tap: `kiln_kc` divides the channels), the
/// pointers `kiln_arow[i]` to the channel run of output pixel `pixel0 + i` (`i < count`) in an
/// NHWC window, or to `kiln_zeros` where the tap falls in the padding or the pixel is past the
/// last one.
pub(crate) fn emit_row_pointers(w: &mut CWriter, window: &Window, pixel0: &str, count: &str) {
    let ([h, iw_count], [_, kw], channels) = (window.size, window.kernel, window.channels);
    let ([sh, sw], [dh, dw], [ph, pw]) = (window.stride, window.dilation, window.pad);
    let pixels = window.pixels();
    let ow = window.out[1];
    w.line(format!(
        "const long kiln_tap = kiln_k0 / {channels}, kiln_ci0 = kiln_k0 % {channels};"
    ));
    w.line(format!(
        "const long kiln_dy = kiln_tap / {kw} * {dh} - {ph}, kiln_dx = kiln_tap % {kw} * {dw} - {pw};"
    ));
    let (pixel, image) = window.image_of("kiln_px");
    w.open(format!("for (long kiln_i = 0; kiln_i < {count}; kiln_i++)"));
    w.line(format!("const long kiln_px = {pixel0} + kiln_i;"));
    w.line(format!(
        "const long kiln_ih = {pixel} / {ow} * {sh} + kiln_dy, kiln_iw = {pixel} % {ow} * {sw} + kiln_dx;"
    ));
    w.line(format!(
        "const int kiln_inside = kiln_px < {pixels} && kiln_ih >= 0 && kiln_ih < {h} && kiln_iw >= 0 && kiln_iw < {iw_count};"
    ));
    w.line(format!(
        "kiln_arow[kiln_i] = kiln_inside ? {} + b * {} + (kiln_ih * {iw_count} + kiln_iw) * {} + kiln_ci0{image} : kiln_zeros;",
        window.param, window.batch, window.pixel_stride
    ));
    w.close();
}

/// The C buffer holding the zero-padded copy of a window's image (see [`emit_staging`]).
pub(crate) const STAGED: &str = "kiln_staged";

/// Rows and columns of one staged plane: every input row and column a window reads, from the
/// first padding row and column on (so each read lands inside the plane).
fn staged_plane(window: &Window) -> [usize; 2] {
    [0, 1].map(|d| {
        (window.out[d] - 1) * window.stride[d] + (window.kernel[d] - 1) * window.dilation[d] + 1
    })
}

/// Floats of the staged copy for `batch` entries.
pub(crate) fn staged_floats(window: &Window, batch: usize) -> usize {
    let [hp, wp] = staged_plane(window);
    batch * window.channels * hp * wp
}

/// The C array of a [`WindowLayout::Rows`] window's per-K offsets (see [`emit_depth_offsets`]).
pub(crate) const DEPTH_OFFSETS: &str = "kiln_koff";

/// Emits [`DEPTH_OFFSETS`]: for each depth index `k = (ci, kh, kw)`, how far past its pixel's
/// pointer (see [`emit_pixel_pointers`]) element `k` lies in the staged copy.
pub(crate) fn emit_depth_offsets(w: &mut CWriter, window: &Window) {
    let [hp, wp] = staged_plane(window);
    let ([kh, kw], [dh, dw]) = (window.kernel, window.dilation);
    let offsets: Vec<String> = (0..window.depth())
        .map(|k| (k / (kh * kw) * hp * wp + k / kw % kh * dh * wp + k % kw * dw).to_string())
        .collect();
    w.line(format!(
        "static const long {DEPTH_OFFSETS}[{}] = {{{}}};",
        offsets.len(),
        offsets.join(", ")
    ));
}

/// Emits the pointers `kiln_arow[i]` (`i < count`) to the first tap of output pixel
/// `pixel0 + i` in the staged copy of batch entry `b`. A pixel past the last points at the
/// last one's: its row of the tile is computed and dropped by the tile copy.
pub(crate) fn emit_pixel_pointers(w: &mut CWriter, window: &Window, pixel0: &str, count: &str) {
    let [hp, wp] = staged_plane(window);
    let ([sh, sw], ow) = (window.stride, window.out[1]);
    let last = window.pixels() - 1;
    w.open(format!("for (long kiln_i = 0; kiln_i < {count}; kiln_i++)"));
    w.line(format!(
        "const long kiln_px = {pixel0} + kiln_i < {last} ? {pixel0} + kiln_i : {last};"
    ));
    w.line(format!(
        "kiln_arow[kiln_i] = {STAGED} + b * {} + kiln_px / {ow} * {} + kiln_px % {ow} * {sw};",
        window.channels * hp * wp,
        sh * wp
    ));
    w.close();
}

/// Whether packing reads a zero-padded copy of the image through per-pixel offsets (one gather
/// per element, no bounds checks) instead of copying runs of image rows with zeros around them.
/// The runs pay a fixed cost each (bounds, clamps, three loops), so short output rows pack
/// several times slower: measured with `gemm_bench --conv3x3` on Zen 4 (see BENCHMARKS.md).
pub(crate) fn packs_by_gather(window: &Window, forced: Option<bool>) -> bool {
    forced.unwrap_or(window.out[1] < GATHER_BELOW_WIDTH)
}

/// Output rows narrower than this pack by gathers (see [`packs_by_gather`]).
const GATHER_BELOW_WIDTH: usize = 20;

/// Fills [`STAGED`] (a buffer of `staged_floats` floats, shared by the team) with every plane of
/// the window's `batch` entries, zero where the window hangs over the image, one plane per
/// iteration of a work-shared loop (its implicit barrier makes the copy complete for all).
pub(crate) fn emit_staging(w: &mut CWriter, window: &Window, batch: usize) {
    let [hp, wp] = staged_plane(window);
    let ([h, iw], [ph, pw], channels) = (window.size, window.pad, window.channels);
    w.line(format!(
        "/* zero-padded copy of the convolution image: {batch} x {channels} planes of {hp} x {wp} */"
    ));
    w.line("KILN_OMP(omp for schedule(static))");
    w.open(format!(
        "for (long kiln_pl = 0; kiln_pl < {}; kiln_pl++)",
        batch * channels
    ));
    w.line(format!(
        "const float* kiln_src = {} + kiln_pl / {channels} * {} + kiln_pl % {channels} * {};",
        window.param,
        window.batch,
        h * iw
    ));
    w.line(format!(
        "float* restrict kiln_dst = {STAGED} + kiln_pl * {};",
        hp * wp
    ));
    w.open(format!("for (long kiln_y = 0; kiln_y < {hp}; kiln_y++)"));
    w.line(format!(
        "float* restrict kiln_row = kiln_dst + kiln_y * {wp};"
    ));
    w.line(format!("const long kiln_ih = kiln_y - {ph};"));
    w.open(format!("if (kiln_ih < 0 || kiln_ih >= {h})"));
    w.line(format!("memset(kiln_row, 0, sizeof(float) * {wp});"));
    w.line("continue;");
    w.close();
    // Columns [pw, pw + copied) come from the image row; the rest are padding.
    let copied = iw.min(wp.saturating_sub(pw));
    let pw = pw.min(wp);
    if pw > 0 {
        w.line(format!("memset(kiln_row, 0, sizeof(float) * {pw});"));
    }
    w.line(format!(
        "memcpy(kiln_row + {pw}, kiln_src + kiln_ih * {iw}, sizeof(float) * {copied});"
    ));
    if pw + copied < wp {
        w.line(format!(
            "memset(kiln_row + {}, 0, sizeof(float) * {});",
            pw + copied,
            wp - pw - copied
        ));
    }
    w.close();
    w.close();
}

/// Packs panels along output pixels from the staged copy: per panel, each pixel's offset in a
/// staged plane once; per im2col row, its tap's offset, then one read per pixel.
pub(crate) fn emit_gather_pack(w: &mut CWriter, job: &PackJob, window: &Window) {
    let [hp, wp] = staged_plane(window);
    let (width, extent) = (job.width, job.extent);
    let ([kh, kw], [sh, sw], [dh, dw]) = (window.kernel, window.stride, window.dilation);
    let ow = window.out[1];
    let (buffer, first, end) = (job.buffer, job.first, job.end);
    w.line(format!(
        "/* pack {:?} from the staged image: panels [{first}, {end}) of {width} output pixels, depth kiln_kc from kiln_k0 */",
        job.side
    ));
    w.open(format!(
        "for (long kiln_t = {first}; kiln_t < {end}; kiln_t++)"
    ));
    w.line(format!(
        "float* restrict kiln_d = {buffer} + (kiln_t - {first}) * kiln_kc * {width};"
    ));
    w.line(format!(
        "const long kiln_x0 = kiln_t * {width}, kiln_count = {extent} - kiln_x0 < {width} ? {extent} - kiln_x0 : {width};"
    ));
    w.open(format!("if (kiln_count < {width})"));
    w.line(format!(
        "memset(kiln_d, 0, sizeof(float) * (size_t)kiln_kc * {width});"
    ));
    w.close();
    w.line(format!("int kiln_at[{width}];"));
    w.open("for (long kiln_x = 0; kiln_x < kiln_count; kiln_x++)");
    w.line(format!(
        "kiln_at[kiln_x] = (int)((kiln_x0 + kiln_x) / {ow} * {} + (kiln_x0 + kiln_x) % {ow} * {sw});",
        sh * wp
    ));
    w.close();
    w.open("for (long kiln_p = 0; kiln_p < kiln_kc; kiln_p++)");
    w.line("const long kiln_r = kiln_k0 + kiln_p;");
    w.line(format!(
        "const float* kiln_tap = {STAGED} + b * {} + kiln_r / {} * {} + kiln_r / {kw} % {kh} * {} + kiln_r % {kw} * {dw};",
        window.channels * hp * wp,
        kh * kw,
        hp * wp,
        dh * wp
    ));
    w.line(format!(
        "float* restrict kiln_dp = kiln_d + kiln_p * {width};"
    ));
    w.line("for (long kiln_x = 0; kiln_x < kiln_count; kiln_x++) kiln_dp[kiln_x] = kiln_tap[kiln_at[kiln_x]];");
    w.close();
    w.close();
}

/// Packs panels that run along output pixels (the operand's columns), depth along im2col rows.
pub(crate) fn emit_window_pack(w: &mut CWriter, job: &PackJob, window: &Window) {
    let (width, extent) = (job.width, job.extent);
    let ([h, iw_count], [kh, kw]) = (window.size, window.kernel);
    let ([sh, sw], [dh, dw], [ph, pw]) = (window.stride, window.dilation, window.pad);
    let ow_count = window.out[1];
    let (buffer, first, end) = (job.buffer, job.first, job.end);
    w.line(format!(
        "/* pack {:?} from convolution windows: panels [{first}, {end}) of {width} output pixels, depth kiln_kc from kiln_k0 */",
        job.side
    ));
    w.open("");
    w.line(format!(
        "const long kiln_cfirst = {first} * {width}, kiln_cend = {end} * {width} < {extent} ? {end} * {width} : {extent};"
    ));
    if extent % width != 0 {
        w.open(format!("if ({end} * {width} > {extent})"));
        w.line(format!(
            "memset({buffer} + ({end} - 1 - {first}) * kiln_kc * {width}, 0, sizeof(float) * (size_t)kiln_kc * {width});"
        ));
        w.close();
    }
    w.open("for (long kiln_p = 0; kiln_p < kiln_kc; kiln_p++)");
    w.line("const long kiln_r = kiln_k0 + kiln_p;");
    w.line(format!(
        "const long kiln_dy = kiln_r / {kw} % {kh} * {dh} - {ph}, kiln_dx = kiln_r % {kw} * {dw} - {pw};"
    ));
    w.line(format!(
        "const float* kiln_plane = {} + b * {} + kiln_r / {} * {};",
        window.param,
        window.batch,
        kh * kw,
        h * iw_count
    ));
    w.line("/* output columns [kiln_lo, kiln_hi) read inside the image row */");
    w.line(format!(
        "long kiln_lo = kiln_dx < 0 ? (-kiln_dx + {sw} - 1) / {sw} : 0;"
    ));
    w.line(format!(
        "long kiln_hi = kiln_dx >= {iw_count} ? 0 : ({iw_count} - kiln_dx + {sw} - 1) / {sw};"
    ));
    w.line(format!("if (kiln_hi > {ow_count}) kiln_hi = {ow_count};"));
    w.line("if (kiln_lo > kiln_hi) kiln_lo = kiln_hi;");
    w.open("for (long kiln_c = kiln_cfirst; kiln_c < kiln_cend;)");
    w.line(format!(
        "const long kiln_oh = kiln_c / {ow_count}, kiln_ow = kiln_c % {ow_count};"
    ));
    w.line(format!(
        "long kiln_run = {ow_count} - kiln_ow, kiln_room = (kiln_c / {width} + 1) * {width} - kiln_c;"
    ));
    w.line("if (kiln_run > kiln_room) kiln_run = kiln_room;");
    w.line("if (kiln_run > kiln_cend - kiln_c) kiln_run = kiln_cend - kiln_c;");
    w.line(format!(
        "float* restrict kiln_d = {buffer} + (kiln_c / {width} - {first}) * kiln_kc * {width} + kiln_p * {width} + kiln_c % {width};"
    ));
    w.line(format!("const long kiln_ih = kiln_oh * {sh} + kiln_dy;"));
    w.open(format!("if (kiln_ih < 0 || kiln_ih >= {h})"));
    w.line("memset(kiln_d, 0, sizeof(float) * (size_t)kiln_run);");
    w.close();
    w.open("else");
    w.line(format!(
        "const float* kiln_row = kiln_plane + kiln_ih * {iw_count};"
    ));
    w.line("long kiln_a = kiln_lo - kiln_ow, kiln_z = kiln_hi - kiln_ow;");
    w.line("kiln_a = kiln_a < 0 ? 0 : kiln_a > kiln_run ? kiln_run : kiln_a;");
    w.line("kiln_z = kiln_z < kiln_a ? kiln_a : kiln_z > kiln_run ? kiln_run : kiln_z;");
    w.line("for (long kiln_j = 0; kiln_j < kiln_a; kiln_j++) kiln_d[kiln_j] = 0.0f;");
    w.line(format!(
        "for (long kiln_j = kiln_a; kiln_j < kiln_z; kiln_j++) kiln_d[kiln_j] = kiln_row[(kiln_ow + kiln_j) * {sw} + kiln_dx];"
    ));
    w.line("for (long kiln_j = kiln_z; kiln_j < kiln_run; kiln_j++) kiln_d[kiln_j] = 0.0f;");
    w.close();
    w.line("kiln_c += kiln_run;");
    w.close();
    w.close();
    w.close();
}

//! Grouped convolutions with few channels per group, their vector lanes
//! spanning several groups.
//!
//! A grouped channels-last convolution is a gemm batched over its groups
//! whose N is one group's output channels (`L`). When `L` is below the
//! vector length `VL`, a micro-kernel pads each group's `L` columns to
//! whole vectors and most lanes compute zeros. Here a vector instead holds
//! `VL / L` consecutive groups' outputs (`VL` consecutive output channels
//! of a pixel): for input channel `ci` of each group, the lanes take the
//! image's channel vector permuted so each group's lanes see its own
//! `ci`-th channel (lane `j` reads lane `j - j mod L + ci`), times the
//! weights' row `(tap, ci)`, which is already laid out by output channel.
//! Every lane does useful work; the cost is one lane permutation per
//! multiply-add. When `L` is the vector length (8 channels per group on
//! AVX2), a vector is one group and every lane takes the same channel: a
//! broadcast load instead of a permutation, and eight pixels per task (no
//! image vectors to hold), where the batched gemm's micro-kernel columns
//! would be half zeros (BENCHMARKS.md, session 19, compares them).
//!
//! Needs: a spec batched over `G` groups with N = `L` and K = taps × `L`,
//! A a [`WindowLayout::ChannelsLast`] window reading `L` channels per group
//! at `b·L` of a pixel of `G·L` channels, B and C strided with batch stride
//! `L`, row stride `G·L` and column stride 1 (HWIO weights, an NHWC
//! output), nothing prepacked; and a vector target whose `VL` is a multiple
//! of `L` ([`LaneGroups::of`]). Guarantees: the same values as the
//! gemm (each output a sum over taps then channels, in that order, of the
//! same products), the epilogue applied once per output, no read outside
//! the image, the weights or a pixel's channels (the last vector of a pixel
//! is read partially when `G·L` is not a multiple of `VL`), and tasks of
//! `MR` pixels × one vector spread statically over the threads.

use super::emit::CWriter;
use super::kernel::VectorTarget;
use super::window::{Window, WindowLayout};
use super::{GemmSpec, Operand};

/// A grouped convolution this module computes, on one vector target.
#[derive(Debug)]
pub(crate) struct LaneGroups<'a> {
    window: &'a Window,
    weights: &'a str,
    output: &'a str,
    /// Channels per group.
    group: usize,
    /// All channels of a pixel (input and output alike).
    channels: usize,
    vl: usize,
}

impl<'a> LaneGroups<'a> {
    /// `spec` as lane groups on `target`, when it is such a convolution
    /// (see the module doc).
    pub(crate) fn of(spec: &'a GemmSpec, target: &VectorTarget) -> Option<LaneGroups<'a>> {
        let (group, vl) = (spec.n, target.vector_len());
        let channels = spec.batch * group;
        let Operand::Window(window) = &spec.a else {
            return None;
        };
        let layout_fits = window.layout == WindowLayout::ChannelsLast
            && window.channels == group
            && window.batch == group as isize
            && window.pixel_stride == channels;
        let strided = |o: &'a Operand| match o {
            Operand::Strided {
                param,
                batch,
                row,
                col: 1,
            } if *batch == group as isize && *row == channels as isize => Some(param.as_str()),
            _ => None,
        };
        let (weights, output) = (strided(&spec.b)?, strided(&spec.c)?);
        let lanes_fit = spec.batch > 1 && group <= vl && vl.is_multiple_of(group);
        (layout_fits && lanes_fit && spec.prepacked.is_none()).then_some(LaneGroups {
            window,
            weights,
            output,
            group,
            channels,
            vl,
        })
    }

    /// Vectors per pixel.
    fn vectors(&self) -> usize {
        self.channels.div_ceil(self.vl)
    }

    /// Lanes of a pixel's last vector.
    fn tail(&self) -> usize {
        self.channels - (self.vectors() - 1) * self.vl
    }

    /// Whether a vector holds one group: every lane takes the same input
    /// channel, broadcast from memory, and no image vectors are held.
    fn broadcast(&self) -> bool {
        self.group == self.vl
    }

    /// Pixels per task: accumulators, image vectors and a weight vector
    /// fit the target's registers (32 with 64-byte vectors, 16 otherwise;
    /// broadcasts hold no image vectors). Eight accumulators also cover
    /// the latency of two FMA ports.
    fn rows(&self) -> usize {
        if self.vl >= 16 || self.broadcast() {
            8
        } else {
            4
        }
    }
}

/// Emits the body of `spec`'s function for one vector target (the C
/// `#if` branch [`super::gemm_c_tuned`] writes it in).
pub(crate) fn emit_body(w: &mut CWriter, spec: &GemmSpec, lanes: &LaneGroups) {
    let (vectors, rows, vl) = (lanes.vectors(), lanes.rows(), lanes.vl);
    w.line(format!(
        "/* grouped convolution, {} groups of {} channels: {vl}-lane vectors of {} groups, tasks of {rows} pixels x 1 vector */",
        spec.batch,
        lanes.group,
        vl / lanes.group
    ));
    w.line("KILN_OMP(omp parallel for schedule(static) num_threads(kiln_gemm_threads()))");
    w.open(format!(
        "for (long kiln_t = 0; kiln_t < {}; kiln_t++)",
        spec.m.div_ceil(rows) * vectors
    ));
    w.line(format!(
        "const long kiln_p0 = kiln_t / {vectors} * {rows}, kiln_v = kiln_t % {vectors};"
    ));
    w.line(format!(
        "const long kiln_valid = kiln_v == {} ? {} : {vl};",
        vectors - 1,
        lanes.tail()
    ));
    w.line(format!("kiln_vf kiln_acc[{rows}];"));
    w.line(format!(
        "for (int kiln_i = 0; kiln_i < {rows}; kiln_i++) kiln_acc[kiln_i] = (kiln_vf){{0}};"
    ));
    emit_prefetch(w, spec, lanes);
    emit_taps(w, spec, lanes);
    emit_stores(w, spec, lanes);
    w.close();
}

/// Pixel blocks between a block and the one whose input its first task
/// prefetches (measured on one CPU only: BENCHMARKS.md, session 22).
const PREFETCH_BLOCKS_AHEAD: usize = 2;

/// The first task of a pixel block (vector 0) asks for the image rows a
/// later block's taps read, every channel of each pixel from the first
/// tap column to the last, into the second-level cache. A task reads a
/// vector of each of its pixels, several lines apart in a strided
/// convolution, and waits for each new line in turn: the hardware
/// prefetchers do not follow that pattern (BENCHMARKS.md, session 22).
/// Only lines inside the image are named, so no address leaves it.
fn emit_prefetch(w: &mut CWriter, spec: &GemmSpec, lanes: &LaneGroups) {
    let win = lanes.window;
    let ([h, iw], [kh, kw]) = (win.size, win.kernel);
    let span = (lanes.rows() - 1) * win.stride[1] + (kw - 1) * win.dilation[1] + 1;
    let pixel_bytes = lanes.channels * 4;
    let dh = win.dilation[0];
    w.open(format!(
        "if (kiln_v == 0 && kiln_p0 + {} < {})",
        PREFETCH_BLOCKS_AHEAD * lanes.rows(),
        spec.m
    ));
    w.line(format!(
        "const long kiln_np = kiln_p0 + {};",
        PREFETCH_BLOCKS_AHEAD * lanes.rows()
    ));
    let [top, left, image] = window_origin(win, "kiln_np");
    w.line(format!("const long kiln_nh = {top}, kiln_nw = {left};"));
    w.line(format!("const char* kiln_nimg = (const char*)({image});"));
    w.line(format!(
        "const long kiln_nw0 = kiln_nw < 0 ? 0 : kiln_nw, kiln_nw1 = kiln_nw + {span} < {iw} ? kiln_nw + {span} : {iw};"
    ));
    w.open(format!("for (long kiln_r = 0; kiln_r < {kh}; kiln_r++)"));
    w.line(format!("const long kiln_ih = kiln_nh + kiln_r * {dh};"));
    w.line(format!("if (kiln_ih < 0 || kiln_ih >= {h}) continue;"));
    w.line(format!(
        "for (long kiln_b = (kiln_ih * {iw} + kiln_nw0) * {pixel_bytes}; kiln_b < (kiln_ih * {iw} + kiln_nw1) * {pixel_bytes}; kiln_b += 64) __builtin_prefetch(kiln_nimg + kiln_b, 0, 2);"
    ));
    w.close();
    w.close();
}

/// C expressions of output pixel `px`'s window origin (its first tap's
/// input row and column, negative in the padding) and of its image's
/// first element.
fn window_origin(win: &Window, px: &str) -> [String; 3] {
    let ([sh, sw], [ph, pw]) = (win.stride, win.pad);
    let (per_image, ow) = (win.out[0] * win.out[1], win.out[1]);
    [
        format!("{px} % {per_image} / {ow} * {sh} - {ph}"),
        format!("{px} % {per_image} % {ow} * {sw} - {pw}"),
        format!("{} + {px} / {per_image} * {}", win.param, win.image_stride),
    ]
}

/// The sum over taps: each pixel's image and window origin once per task,
/// then per tap the pixels' inputs and per input channel the (broadcast
/// or permuted) inputs times the weights' row. A tap whose pixels all lie
/// in one output row and inside the image (most taps of most tasks) reads
/// them at a constant stride from one pointer, without a bounds check per
/// pixel; the others check each pixel (zero in the padding or past the
/// last pixel).
fn emit_taps(w: &mut CWriter, spec: &GemmSpec, lanes: &LaneGroups) {
    let win = lanes.window;
    let ([h, iw], [_, kw]) = (win.size, win.kernel);
    let ([_, sw], [dh, dw], ph) = (win.stride, win.dilation, win.pad[0]);
    let (ow, rows) = (win.out[1], lanes.rows());
    // Past the last pixel: an origin no tap brings inside the image.
    w.line(format!("long kiln_oh[{rows}], kiln_ow[{rows}];"));
    w.line(format!("const float* kiln_img[{rows}];"));
    w.open(format!("for (int kiln_i = 0; kiln_i < {rows}; kiln_i++)"));
    w.line("const long kiln_px = kiln_p0 + kiln_i;");
    let [top, left, image] = window_origin(win, "kiln_px");
    w.line(format!(
        "kiln_oh[kiln_i] = kiln_px < {} ? {top} : -{};",
        spec.m,
        h + win.kernel[0] * dh + ph
    ));
    w.line(format!("kiln_ow[kiln_i] = {left};"));
    w.line(format!(
        "kiln_img[kiln_i] = {image} + kiln_v * {};",
        lanes.vl
    ));
    w.close();
    w.line(format!(
        "const int kiln_one_row = kiln_p0 % {ow} + {rows} <= {ow} && kiln_p0 + {rows} <= {};",
        spec.m
    ));
    w.open(format!(
        "for (long kiln_tap = 0; kiln_tap < {}; kiln_tap++)",
        win.kernel[0] * kw
    ));
    w.line(format!(
        "const long kiln_dy = kiln_tap / {kw} * {dh}, kiln_dx = kiln_tap % {kw} * {dw};"
    ));
    w.line(format!(
        "const float* kiln_w = {} + kiln_tap * {} + kiln_v * {};",
        lanes.weights,
        lanes.group * lanes.channels,
        lanes.vl
    ));
    w.line("const long kiln_ih0 = kiln_oh[0] + kiln_dy, kiln_iw0 = kiln_ow[0] + kiln_dx;");
    w.open(format!(
        "if (kiln_one_row && kiln_ih0 >= 0 && kiln_ih0 < {h} && kiln_iw0 >= 0 && kiln_iw0 + {} < {iw})",
        (rows - 1) * sw
    ));
    emit_row_inputs(w, lanes);
    if lanes.broadcast() {
        emit_row_broadcast_products(w, lanes);
    } else {
        emit_channel_products(w, lanes);
    }
    w.close();
    w.open("else");
    emit_tap_inputs(w, lanes);
    emit_channel_products(w, lanes);
    w.close();
    w.close();
}

/// Per input channel of a one-group vector, the weights' row times each
/// pixel's input broadcast from `kiln_p` at a constant stride, in a
/// rolled loop over the channels: unrolled, GCC loads all `L` weight
/// vectors first and spills accumulators, whose multiply-adds then wait
/// on the stack.
fn emit_row_broadcast_products(w: &mut CWriter, lanes: &LaneGroups) {
    let pixel_step = lanes.window.stride[1] * lanes.channels;
    w.line("KILN_ROLLED");
    w.open(format!(
        "for (long kiln_c = 0; kiln_c < {}; kiln_c++)",
        lanes.group
    ));
    w.line(format!(
        "const kiln_vf kiln_wv = {};",
        vector_load(lanes, &format!("kiln_w + kiln_c * {}", lanes.channels))
    ));
    w.line(format!(
        "for (int kiln_i = 0; kiln_i < {}; kiln_i++) kiln_acc[kiln_i] += kiln_p[kiln_i * {pixel_step} + kiln_c] * kiln_wv;",
        lanes.rows()
    ));
    w.close();
}

/// Per input channel of the group, the weights' row times each pixel's
/// input: broadcast through the pixels' own pointers, or permuted from
/// their channel vectors ([`emit_row_inputs`], [`emit_tap_inputs`]).
fn emit_channel_products(w: &mut CWriter, lanes: &LaneGroups) {
    for ci in 0..lanes.group {
        w.open("");
        w.line(format!(
            "const kiln_vf kiln_wv = {};",
            vector_load(lanes, &format!("kiln_w + {}", ci * lanes.channels))
        ));
        let x = if lanes.broadcast() {
            // One group per vector: every lane takes the same channel, a
            // broadcast load (no lane permutation).
            format!("kiln_xp[kiln_i][{ci}]")
        } else {
            let lane_of: Vec<String> = (0..lanes.vl)
                .map(|j| (j - j % lanes.group + ci).to_string())
                .collect();
            format!("KILN_LANES(kiln_x[kiln_i], {})", lane_of.join(", "))
        };
        w.line(format!(
            "for (int kiln_i = 0; kiln_i < {}; kiln_i++) kiln_acc[kiln_i] += {x} * kiln_wv;",
            lanes.rows()
        ));
        w.close();
    }
}

/// The pixels' inputs at a tap inside the image for all of them, in one
/// output row: a pointer to the first pixel's channels and, unless a
/// vector is one group, each pixel's channel vector.
fn emit_row_inputs(w: &mut CWriter, lanes: &LaneGroups) {
    let ([_, iw], channels) = (lanes.window.size, lanes.channels);
    w.line(format!(
        "const float* kiln_p = kiln_img[0] + (kiln_ih0 * {iw} + kiln_iw0) * {channels};"
    ));
    if !lanes.broadcast() {
        let rows = lanes.rows();
        w.line(format!("kiln_vf kiln_x[{rows}];"));
        w.line(format!(
            "for (int kiln_i = 0; kiln_i < {rows}; kiln_i++) kiln_x[kiln_i] = {};",
            vector_load(
                lanes,
                &format!("kiln_p + kiln_i * {}", lanes.window.stride[1] * channels)
            )
        ));
    }
}

/// Each pixel's input at the current tap: its channel vector (zero in
/// the padding or past the last pixel), or when a vector is one group a pointer to
/// its channels (to zeros there).
fn emit_tap_inputs(w: &mut CWriter, lanes: &LaneGroups) {
    let broadcast = lanes.broadcast();
    let win = lanes.window;
    let ([h, iw], rows, channels) = (win.size, lanes.rows(), lanes.channels);
    if broadcast {
        w.line(format!(
            "static const float kiln_zeros[{}] = {{0}};",
            lanes.vl
        ));
        w.line(format!("const float* kiln_xp[{rows}];"));
    } else {
        w.line(format!("kiln_vf kiln_x[{rows}];"));
    }
    w.open(format!("for (int kiln_i = 0; kiln_i < {rows}; kiln_i++)"));
    w.line("const long kiln_ih = kiln_oh[kiln_i] + kiln_dy, kiln_iw = kiln_ow[kiln_i] + kiln_dx;");
    w.line(if broadcast {
        "kiln_xp[kiln_i] = kiln_zeros;"
    } else {
        "kiln_x[kiln_i] = (kiln_vf){0};"
    });
    w.open(format!(
        "if (kiln_ih >= 0 && kiln_ih < {h} && kiln_iw >= 0 && kiln_iw < {iw})"
    ));
    w.line(format!(
        "const float* kiln_p = kiln_img[kiln_i] + (kiln_ih * {iw} + kiln_iw) * {channels};"
    ));
    if broadcast {
        w.line("kiln_xp[kiln_i] = kiln_p;");
    } else {
        w.line(format!(
            "kiln_x[kiln_i] = {};",
            vector_load(lanes, "kiln_p")
        ));
    }
    w.close();
    w.close();
}

/// A vector load at `p` of a pixel's channels: whole, or the valid lanes
/// of the last vector (the rest zero).
fn vector_load(lanes: &LaneGroups, p: &str) -> String {
    if lanes.tail() == lanes.vl {
        format!("kiln_vload({p})")
    } else {
        format!(
            "(kiln_valid == {} ? kiln_vload({p}) : kiln_vload_part({p}, kiln_valid))",
            lanes.vl
        )
    }
}

/// Each pixel's accumulated lanes, through the epilogue, into the output:
/// a vector loop over the lanes (the epilogue's group `b` and channel `c`
/// per lane are shifts and masks when `L` is a power of two), so the
/// stores cost a few vector operations rather than a scalar epilogue per
/// lane.
fn emit_stores(w: &mut CWriter, spec: &GemmSpec, lanes: &LaneGroups) {
    let (rows, vl, group) = (lanes.rows(), lanes.vl, lanes.group);
    w.open(format!("for (int kiln_i = 0; kiln_i < {rows}; kiln_i++)"));
    w.line("const long r = kiln_p0 + kiln_i;");
    w.line(format!("if (r >= {}) break;", spec.m));
    w.line(format!("float kiln_lane[{vl}];"));
    w.line("kiln_vstore(kiln_lane, kiln_acc[kiln_i]);");
    w.line("KILN_OMP(omp simd)");
    w.open("for (long kiln_j = 0; kiln_j < kiln_valid; kiln_j++)");
    w.line(format!(
        "const long kiln_ch = kiln_v * {vl} + kiln_j, b = kiln_ch / {group}, c = kiln_ch % {group};"
    ));
    w.line("const float acc = kiln_lane[kiln_j];");
    w.line("(void)b; (void)c;");
    w.line(format!(
        "{}[r * {} + kiln_ch] = {};",
        lanes.output,
        lanes.channels,
        spec.epilogue.as_deref().unwrap_or("acc")
    ));
    w.close();
    w.close();
}

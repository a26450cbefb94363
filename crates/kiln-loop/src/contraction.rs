//! Recognising a contraction (matmul, batched matmul, convolution) in a
//! tensor expression and lowering it to one [`Gemm`] statement.
//!
//! Needs: a primitive's [`TensorExpr`] and its input types.
//! Guarantees: `Some(kernel)` only for `out[i] = sum_r A[f(i, r)] * B[g(i, r)]`
//! over f32 with affine index maps, where the output variables split into
//! M (read by A only), N (read by B only) and batch (read by both, or by
//! neither); the reduction variables form K. The kernel's single
//! [`Stmt::Gemm`] addresses each operand by `(b, r, c)` (batch, row,
//! column of that operand) through the original index maps, so what it
//! computes is exactly the expression: strided matmuls get affine offsets,
//! convolutions window reads (`floordiv`/`mod` of the flattened K and N
//! indices, with the padding guard). The product is oriented so the
//! output's contiguous axis is N. A's reads may be guarded only when A is
//! an image read window by window with output pixels as rows
//! ([`WindowLayout::Nhwc`], [`WindowLayout::NchwRows`]: the code generator
//! reads its rows through pointers, zeros for padding); any other padded
//! read on A first tries a gemm batched over A's images (each batch entry
//! one image's window, [`ConvWindow::batch_stride`]; a grouped
//! convolution's groups read their channels of one image the same way,
//! [`ConvWindow::pixel_stride`]), then takes the other
//! orientation, where a window shorter than `SMALL_WINDOW` is left to the
//! loop forms. A grouped convolution is
//! first made a batch over its groups (`grouped.rs`). Anything else
//! returns `None` and is lowered as loops.

use crate::grouped;
use crate::ir::{ConvWindow, Gemm, GemmInput, GemmOperand, Idx, Kernel, Stmt, WindowLayout};
use crate::lower::{flatten, input_buffers, push_output};
use kiln_ir::{DType, Result};
use kiln_ops::te::{Combiner, Expr, IndexExpr, TensorExpr, Var};

/// Which GEMM axis an expression variable belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Axis {
    Batch,
    M,
    N,
    K,
}

pub fn lower_contraction(
    te: &TensorExpr,
    name: &str,
    input_dtypes: &[Option<DType>],
) -> Result<Option<Kernel>> {
    // Buffers: present inputs in order, then the output (as `lower` makes them).
    let (mut buffers, buffer_of) = input_buffers(te, input_dtypes)?;
    let out = push_output(&mut buffers, te);
    let Some(contraction) = contraction_gemm(te, input_dtypes, &buffer_of, out)? else {
        return Ok(None);
    };
    Ok(Some(Kernel {
        name: name.to_string(),
        buffers,
        body: vec![Stmt::Gemm(Box::new(contraction.gemm))],
    }))
}

/// A recognised contraction: its gemm statement, and each output
/// dimension's index as a function of the gemm's `b`, `r`, `c` (what an
/// epilogue reads other tensors at).
pub struct Contraction {
    pub gemm: Gemm,
    pub out_index: Vec<Idx>,
    /// For A and B: the expression input the factor reads and its index
    /// per dimension as a function of the factor's own `b`, `r`, `c`
    /// (where a prologue computing that input is evaluated).
    pub factors: [Factor; 2],
}

/// One factor of a [`Contraction`] (see [`Contraction::factors`]).
pub struct Factor {
    pub input: usize,
    pub index: Vec<Idx>,
}

/// The gemm computing `te` with input position `i` in buffer
/// `buffer_of[i]` and the output in buffer `out`, when `te` is a
/// contraction this module handles (see the module doc).
pub fn contraction_gemm(
    te: &TensorExpr,
    input_dtypes: &[Option<DType>],
    buffer_of: &[Option<usize>],
    out: usize,
) -> Result<Option<Contraction>> {
    // A grouped convolution: a batch of gemms over its groups, its output
    // index stated in the expression's own dimensions.
    if let Some((batched, split)) = grouped::ungroup(te) {
        let site = Site {
            input_dtypes,
            buffer_of,
            out,
            grouped: true,
        };
        let c = ungrouped_gemm(&batched, &site)?;
        return Ok(c.map(|c| Contraction {
            out_index: split.restore(&c.out_index),
            ..c
        }));
    }
    let site = Site {
        input_dtypes,
        buffer_of,
        out,
        grouped: false,
    };
    ungrouped_gemm(te, &site)
}

/// What a product is lowered against: its inputs' types, each input's
/// buffer, the output buffer, and whether it is a grouped convolution's
/// batch of small gemms (sized by all of them together: each alone may be
/// below the gemm's size, the whole is not).
struct Site<'a> {
    input_dtypes: &'a [Option<DType>],
    buffer_of: &'a [Option<usize>],
    out: usize,
    grouped: bool,
}

/// [`contraction_gemm`] of an expression without a pinned group. A
/// grouped convolution's channels per group may be too few for the
/// orientation that puts the output's contiguous axis on N (channels-last:
/// the channels of one group); it then takes the other one.
fn ungrouped_gemm(te: &TensorExpr, site: &Site) -> Result<Option<Contraction>> {
    let Some((mut ka, mut kb)) = product_of_two_loads(te) else {
        return Ok(None);
    };
    // Orient the product so the output's contiguous axis is N (columns):
    // the micro-kernel then stores whole vectors.
    let innermost = (0..te.shape.len()).rev().find(|&l| te.shape[l] > 1);
    if let Some(l) = innermost {
        let reads_l = |k: usize| {
            let mut vars = Vec::new();
            te.accesses[k].index.iter().for_each(|e| e.vars(&mut vars));
            vars.contains(&Var::Out(l))
        };
        if reads_l(ka) && !reads_l(kb) {
            std::mem::swap(&mut ka, &mut kb);
        }
    }
    // A's reads must stay in bounds: a padded image read that is not a
    // window with pixel rows takes the other side. Several images read
    // window by window are first tried as a gemm batched over the images.
    let first = match oriented(te, ka, kb, site, None)? {
        Oriented::GuardedA => match oriented(te, ka, kb, site, Some(Axis::M))? {
            Oriented::Gemm(c) => Oriented::Gemm(c),
            _ => Oriented::GuardedA,
        },
        other => other,
    };
    let first = match first {
        // Images among the rows or columns with the pixels (a convolution
        // over several images reading or writing channels-first) leave an
        // operand no row or column stride: they are the batch instead.
        Oriented::Gemm(c) if unstrided_operands(&c.gemm) > 0 => {
            match oriented(te, ka, kb, site, Some(Axis::M))? {
                Oriented::Gemm(batched)
                    if unstrided_operands(&batched.gemm) < unstrided_operands(&c.gemm) =>
                {
                    Oriented::Gemm(batched)
                }
                _ => match oriented(te, ka, kb, site, Some(Axis::N))? {
                    Oriented::Gemm(batched) => Oriented::Gemm(batched),
                    _ => Oriented::Gemm(c),
                },
            }
        }
        other => other,
    };
    match first {
        Oriented::GuardedA => match oriented(te, kb, ka, site, None)? {
            // A small window (a first convolution's 3x3x3 over several
            // images) is left to the window form, vectorized along the
            // output's contiguous axis.
            Oriented::Gemm(c) if c.gemm.k >= SMALL_WINDOW => Ok(Some(*c)),
            _ => Ok(None),
        },
        Oriented::Gemm(c) => Ok(Some(*c)),
        Oriented::No if site.grouped => match oriented(te, kb, ka, site, None)? {
            Oriented::Gemm(c) => Ok(Some(*c)),
            _ => Ok(None),
        },
        Oriented::No => Ok(None),
    }
}

/// How many operands of `g` read through their offsets (not a window, not
/// computed) lack a stride per batch entry, row and column (non-affine
/// offsets). A weight read in another order than the gemm's K (a
/// channels-last convolution's taps) stays so however the images are
/// placed, so orientations are compared by this count.
fn unstrided_operands(g: &Gemm) -> usize {
    let window_on_a = g.window.as_ref().map(|w| w.layout.is_a());
    let unstrided = |input: &GemmInput, is_window: bool| {
        !is_window && input.read().is_some_and(|o| !o.offset.is_affine())
    };
    [
        !g.c.offset.is_affine(),
        unstrided(&g.a, window_on_a == Some(true)),
        unstrided(&g.b, window_on_a == Some(false)),
    ]
    .iter()
    .filter(|&&u| u)
    .count()
}

/// Reduction length below which a padded product that cannot be oriented
/// with the output's contiguous axis as N is not made a gemm: a choice
/// between two lowerings (packing does not pay over so few steps), the
/// same for every target.
const SMALL_WINDOW: i64 = 32;

/// What one orientation of a product gives.
enum Oriented {
    Gemm(Box<Contraction>),
    /// A contraction whose A operand would read outside its input.
    GuardedA,
    No,
}

/// The gemm computing `te` as `A = access ka`, `B = access kb`; with
/// `images_as_batch` `Some(M)`, A's images (its first dimension, read at
/// an output variable B does not read) are the gemm's batch instead of
/// part of its rows, with `Some(N)` B's instead of part of its columns, so
/// that factor is a window or a strided matrix per image.
fn oriented(
    te: &TensorExpr,
    ka: usize,
    kb: usize,
    site: &Site,
    images_as_batch: Option<Axis>,
) -> Result<Oriented> {
    let (input_dtypes, buffer_of, out) = (site.input_dtypes, site.buffer_of, site.out);
    let all_f32 = te.dtype == DType::F32 && input_dtypes.iter().flatten().all(|d| *d == DType::F32);
    let affine = te
        .accesses
        .iter()
        .all(|a| a.index.iter().all(|e| e.as_affine().is_some()));
    if !all_f32 || !affine {
        return Ok(Oriented::No);
    }
    let (a_in, b_in) = (te.accesses[ka].input, te.accesses[kb].input);
    let reads = |k: usize, v: Var| {
        let mut vars = Vec::new();
        te.accesses[k].index.iter().for_each(|e| e.vars(&mut vars));
        vars.contains(&v)
    };
    // Output variables by which operand reads them.
    let mut axes: Vec<(Var, Axis, i64)> = Vec::new();
    for (l, &e) in te.shape.iter().enumerate() {
        let v = Var::Out(l);
        let axis = match (reads(ka, v), reads(kb, v)) {
            (true, false) => Axis::M,
            (false, true) => Axis::N,
            _ => Axis::Batch,
        };
        axes.push((v, axis, e as i64));
    }
    let red = te
        .reduction
        .as_ref()
        .map(|r| r.extents.clone())
        .unwrap_or_default();
    for (k, &e) in red.iter().enumerate() {
        axes.push((Var::Red(k), Axis::K, e as i64));
    }
    if let Some(axis) = images_as_batch {
        let factor = if axis == Axis::M { ka } else { kb };
        let Some(l) = image_batch_var(te, factor, &axes, axis) else {
            return Ok(Oriented::No);
        };
        axes[l].1 = Axis::Batch;
    }
    let size = |axis| -> i64 { axes.iter().filter(|a| a.1 == axis).map(|a| a.2).product() };
    let (batch, m, n, k) = (
        size(Axis::Batch),
        size(Axis::M),
        size(Axis::N),
        size(Axis::K),
    );
    let work = if site.grouped || images_as_batch.is_some() {
        batch * m * n * k
    } else {
        m * n * k
    };
    // A grouped convolution's few channels per group (N) still make a
    // gemm: the code generator spans vector lanes over several groups,
    // where the loop forms would sum over every group under a select.
    let narrow = if site.grouped { n < 2 } else { n < 8 };
    if work < 32 * 32 * 32 || m < 4 || narrow {
        // Too small to pay for packing, or a matrix-vector product
        // (depthwise convolution, M = 1): plain loops in the y-reduce form
        // stream the data once and vectorize along the output row.
        return Ok(Oriented::No);
    }
    // Each expression variable as a function of its axis' flat index.
    let value_of = |v: Var, frame: &[(Axis, &str)]| -> Idx {
        let (axis, extent) = axes
            .iter()
            .find(|a| a.0 == v)
            .map(|a| (a.1, a.2))
            .unwrap_or((Axis::Batch, 1));
        let Some((_, flat)) = frame.iter().find(|f| f.0 == axis) else {
            return Idx::constant(0);
        };
        if extent == 1 {
            return Idx::constant(0);
        }
        let position = axes.iter().position(|a| a.0 == v).unwrap_or(0);
        let later = |a: &&(Var, Axis, i64)| a.1 == axis;
        let inner: i64 = axes[position + 1..]
            .iter()
            .filter(later)
            .map(|a| a.2)
            .product();
        // (Variables of extent 1, like a 1x1 window's taps, are 0.)
        let outermost = !axes[..position].iter().any(|a| a.1 == axis && a.2 > 1);
        let q = Idx::var(flat).floordiv(inner);
        // The outermost variable of a group is below its extent already.
        if outermost {
            q
        } else {
            q.modulo(extent)
        }
    };
    let operand = |index: &[IndexExpr], shape: &[usize], frame: &[(Axis, &str)]| {
        let idx: Vec<Idx> = index
            .iter()
            .map(|e| {
                let a = e.as_affine().cloned().unwrap_or_default();
                a.terms
                    .iter()
                    .fold(Idx::constant(a.constant), |acc, (v, c)| {
                        acc.plus(&value_of(*v, frame).scale(*c))
                    })
            })
            .collect();
        let extents = |name: &str| -> (i64, i64) {
            let ext = frame
                .iter()
                .find(|f| f.1 == name)
                .map(|f| size(f.0))
                .unwrap_or(1);
            (0, ext - 1)
        };
        let guard: Vec<(Idx, i64)> = idx
            .iter()
            .zip(shape)
            .filter(|(i, &d)| {
                let (lo, hi) = i.range(&extents);
                lo < 0 || hi >= d as i64
            })
            .map(|(i, &d)| (i.clone(), d as i64))
            .collect();
        (flatten(&idx, shape).merge_div_mod(), guard, idx)
    };
    let shape_of = |input: usize| te.inputs[input].clone().unwrap_or_default();
    let a_frame = [(Axis::Batch, "b"), (Axis::M, "r"), (Axis::K, "c")];
    let b_frame = [(Axis::Batch, "b"), (Axis::K, "r"), (Axis::N, "c")];
    let c_frame = [(Axis::Batch, "b"), (Axis::M, "r"), (Axis::N, "c")];
    let (a_off, a_guard, a_index) = operand(&te.accesses[ka].index, &shape_of(a_in), &a_frame);
    // A padded read on A is allowed only as a window with pixel rows,
    // which the code generator reads through row pointers (zeros for the
    // padding).
    // Windows are read per batch entry only over one image, over each
    // entry's image, or over each group's channels.
    let windows = batch == 1 || images_as_batch.is_some() || site.grouped;
    let a_window = if windows {
        conv_window_last(te, ka, &axes).or_else(|| conv_window(te, ka, &axes, Axis::M))
    } else {
        None
    };
    if !a_guard.is_empty() && a_window.is_none() {
        return Ok(Oriented::GuardedA);
    }
    let window = if windows {
        a_window.or_else(|| conv_window(te, kb, &axes, Axis::N))
    } else {
        None
    };
    let (b_off, b_guard, b_index) = operand(&te.accesses[kb].index, &shape_of(b_in), &b_frame);
    let outs: Vec<IndexExpr> = (0..te.shape.len()).map(IndexExpr::out).collect();
    let (c_off, ..) = operand(&outs, &te.shape, &c_frame);
    let out_index: Vec<Idx> = (0..te.shape.len())
        .map(|l| value_of(Var::Out(l), &c_frame))
        .collect();
    let (Some(a_buf), Some(b_buf)) = (
        buffer_of.get(a_in).copied().flatten(),
        buffer_of.get(b_in).copied().flatten(),
    ) else {
        return Ok(Oriented::No);
    };
    let gemm = Gemm {
        batch,
        m,
        n,
        k,
        a: GemmInput::Read(GemmOperand {
            buf: a_buf,
            offset: a_off,
            guard: a_guard,
        }),
        b: GemmInput::Read(GemmOperand {
            buf: b_buf,
            offset: b_off,
            guard: b_guard,
        }),
        c: GemmOperand {
            buf: out,
            offset: c_off,
            guard: Vec::new(),
        },
        window,
        epilogue: None,
    };
    let factors = [
        Factor {
            input: a_in,
            index: a_index,
        },
        Factor {
            input: b_in,
            index: b_index,
        },
    ];
    Ok(Oriented::Gemm(Box::new(Contraction {
        gemm,
        out_index,
        factors,
    })))
}

/// The geometry of access `k` when it reads an NCHW image window by
/// window: `X[0, r0, s_h·oh + d_h·r1 − p_h, s_w·ow + d_w·r2 − p_w]` with
/// the output pixels (oh, ow) on `pixels` (N for B, M for A) and K = (r0,
/// r1, r2) in that order (a kernel dimension of size 1 has no reduction
/// variable). `None` for a 1x1 window of stride 1 without padding: that
/// operand is a plain strided matrix (the strided packer copies whole
/// panels; the window packer copies by image rows, measured 10% slower on
/// MobileNetV2).
fn conv_window(
    te: &TensorExpr,
    k: usize,
    axes: &[(Var, Axis, i64)],
    pixels: Axis,
) -> Option<ConvWindow> {
    let ([images, channels, h, w], [_, e1, e2, e3]) = image_access(te, k, axes)?;
    let red = te.reduction.as_ref()?;
    if red.extents.len() != 3 {
        return None;
    }
    if e1.as_affine()?.as_var() != Some(Var::Red(0)) || red.extents[0] != channels {
        return None;
    }
    let (outs, reads) = spatial_reads(axes, pixels, None, [e2, e3])?;
    if reads[0].3.is_some_and(|k| k != 1) || reads[1].3.is_some_and(|k| k != 2) {
        return None;
    }
    let kernel = [red.extents[1] as i64, red.extents[2] as i64];
    let layout = match pixels {
        Axis::M => WindowLayout::NchwRows,
        _ => WindowLayout::Nchw,
    };
    window(te, [images, channels, h, w], outs, kernel, reads, layout)
}

/// The geometry of A when it reads an NHWC image window by window:
/// `X[0, s_h·oh + d_h·r_h − p_h, s_w·ow + d_w·r_w − p_w, r_c]` with
/// M = (oh, ow) and K = (r_h, r_w, r_c) in that order (a kernel dimension
/// of size 1 may have no reduction variable; the channel one is last).
/// `None` for a 1x1 window of stride 1 without padding: that A is a plain
/// strided matrix.
fn conv_window_last(te: &TensorExpr, ka: usize, axes: &[(Var, Axis, i64)]) -> Option<ConvWindow> {
    let (([images, h, w, pixel], [_, e1, e2, e3]), image_rows) = match image_access(te, ka, axes) {
        Some(access) => (access, None),
        None => image_rows_access(te, ka, axes)?,
    };
    let red = te.reduction.as_ref()?;
    let last = red.extents.len().checked_sub(1)?;
    let channels = red.extents[last];
    let group_stride = group_channels(e3, Var::Red(last), axes)?;
    let whole = group_stride.is_none() && channels == pixel;
    let grouped = group_stride.is_some_and(|s| s as usize == channels);
    if !whole && !grouped {
        return None;
    }
    let (outs, reads) = spatial_reads(axes, Axis::M, image_rows, [e1, e2])?;
    if image_rows.is_some_and(|l| l > outs[0]) {
        return None;
    }
    let (rh, rw) = (reads[0].3, reads[1].3);
    // K must flatten as (r_h, r_w, r_c): taps in order, every other
    // reduction variable of extent 1.
    let ordered = match (rh, rw) {
        (Some(a), Some(b)) => a < b && b < last,
        (Some(k), None) | (None, Some(k)) => k < last,
        (None, None) => true,
    };
    let others_unit = (0..last)
        .filter(|&k| Some(k) != rh && Some(k) != rw)
        .all(|k| red.extents[k] == 1);
    if !ordered || !others_unit {
        return None;
    }
    let extent = |r: Option<usize>| r.map_or(1, |k| red.extents[k] as i64);
    let mut window = window(
        te,
        [images, channels, h, w],
        outs,
        [extent(rh), extent(rw)],
        reads,
        WindowLayout::Nhwc,
    )?;
    if image_rows.is_some() {
        window.batch_stride = 0;
        window.images = images as i64;
        window.image_stride = (h * w * pixel) as i64;
    }
    if let Some(stride) = group_stride {
        window.batch_stride = stride;
        window.pixel_stride = pixel as i64;
    }
    Some(window)
}

/// [`image_access`] for access `k` reading its images at an M variable
/// (several images whose output pixels are all rows of the gemm, see
/// [`ConvWindow::images`]), with that variable's position.
fn image_rows_access<'a>(
    te: &'a TensorExpr,
    k: usize,
    axes: &[(Var, Axis, i64)],
) -> Option<(ImageAccess<'a>, Option<usize>)> {
    let (shape, index) = four_d_access(te, k)?;
    let Var::Out(l) = index[0].as_affine()?.as_var()? else {
        return None;
    };
    let &(_, axis, extent) = axes.get(l)?;
    let n = shape[0];
    (axis == Axis::M && extent == n as i64 && n > 1).then_some(((shape, index), Some(l)))
}

/// How a channels-last window's channel index `e` reads: `red` alone
/// (`Some(None)`), or `red + s·g` for the only batch variable `g` longer
/// than 1 (a grouped convolution batched over its groups: `Some(Some(s))`,
/// the group's first channel at `s·g`); `None` otherwise.
fn group_channels(e: &IndexExpr, red: Var, axes: &[(Var, Axis, i64)]) -> Option<Option<i64>> {
    let a = e.as_affine()?;
    if a.constant != 0 {
        return None;
    }
    let mut batch = axes.iter().filter(|x| x.1 == Axis::Batch && x.2 > 1);
    let group = match (batch.next(), batch.next()) {
        (Some(&(v, ..)), None) => Some(v),
        _ => None,
    };
    let (mut unit, mut stride) = (false, None);
    for &(v, c) in &a.terms {
        match v {
            _ if v == red && c == 1 => unit = true,
            _ if Some(v) == group && c > 0 => stride = Some(c),
            _ => return None,
        }
    }
    unit.then_some(stride)
}

/// A 4-D input's shape and the index an access reads it at.
type ImageAccess<'a> = ([usize; 4], [&'a IndexExpr; 4]);

/// Access `k`'s input shape and index when its input is 4-D.
fn four_d_access(te: &TensorExpr, k: usize) -> Option<ImageAccess<'_>> {
    let access = &te.accesses[k];
    let shape = te.inputs.get(access.input)?.as_ref()?;
    let [n, d1, d2, d3] = shape[..] else {
        return None;
    };
    let [e0, e1, e2, e3] = &access.index[..] else {
        return None;
    };
    Some(([n, d1, d2, d3], [e0, e1, e2, e3]))
}

/// Access `k`'s input shape and index when it reads 4-D images: one
/// (entry 0 of 1), or one per batch entry of the gemm (the first index is
/// the only batch variable of `axes`, over every image).
fn image_access<'a>(
    te: &'a TensorExpr,
    k: usize,
    axes: &[(Var, Axis, i64)],
) -> Option<ImageAccess<'a>> {
    let (shape, index) = four_d_access(te, k)?;
    let (n, e0) = (shape[0], index[0]);
    let one_image = n == 1 && e0.as_constant() == Some(0);
    let mut batch_vars = axes.iter().filter(|a| a.1 == Axis::Batch && a.2 > 1);
    let per_entry = match (batch_vars.next(), batch_vars.next()) {
        (Some(&(v, _, extent)), None) => {
            extent == n as i64 && e0.as_affine().and_then(|a| a.as_var()) == Some(v)
        }
        _ => false,
    };
    (one_image || per_entry).then_some((shape, index))
}

/// The output variable at which factor `k` reads the first dimension of
/// its 4-D input, when it could be the gemm's batch over images: a
/// variable of the factor's own `axis` (M for A, N for B) of the images'
/// extent (above 1), with no other batch variable longer than 1.
fn image_batch_var(
    te: &TensorExpr,
    k: usize,
    axes: &[(Var, Axis, i64)],
    axis: Axis,
) -> Option<usize> {
    if axes.iter().any(|a| a.1 == Axis::Batch && a.2 > 1) {
        return None;
    }
    let access = &te.accesses[k];
    let shape = te.inputs.get(access.input)?.as_ref()?;
    let (&[n, _, _, _], Some(first)) = (&shape[..], access.index.first()) else {
        return None;
    };
    let Var::Out(l) = first.as_affine()?.as_var()? else {
        return None;
    };
    let &(_, read_on, extent) = axes.get(l)?;
    (read_on == axis && extent == n as i64 && n > 1).then_some(l)
}

/// One spatial axis' read: stride, dilation, padding and reduction variable.
type SpatialRead = (i64, i64, i64, Option<usize>);

/// The output variables of `axis` longer than 1 but for the images' own
/// (`images`, when they are rows too): two, the output image's height and
/// width; and how `index` reads the image along them.
fn spatial_reads(
    axes: &[(Var, Axis, i64)],
    axis: Axis,
    images: Option<usize>,
    index: [&IndexExpr; 2],
) -> Option<([usize; 2], [SpatialRead; 2])> {
    let vars: Vec<Var> = axes
        .iter()
        .filter(|a| a.1 == axis && a.2 > 1 && images.map(Var::Out) != Some(a.0))
        .map(|a| a.0)
        .collect();
    let [Var::Out(lh), Var::Out(lw)] = vars[..] else {
        return None;
    };
    Some((
        [lh, lw],
        [spatial_read(index[0], lh)?, spatial_read(index[1], lw)?],
    ))
}

/// The window of `images` images `[channels, h, w]` (one per batch entry
/// when several) read at output variables `outs`; `None` for a 1x1 window
/// of stride 1 without padding (a plain strided matrix).
fn window(
    te: &TensorExpr,
    [images, channels, h, w]: [usize; 4],
    outs: [usize; 2],
    kernel: [i64; 2],
    reads: [SpatialRead; 2],
    layout: WindowLayout,
) -> Option<ConvWindow> {
    let [(sh, dh, ph, _), (sw, dw, pw, _)] = reads;
    if kernel == [1, 1] && (sh, sw, ph, pw) == (1, 1, 0, 0) {
        return None;
    }
    Some(ConvWindow {
        channels: channels as i64,
        size: [h as i64, w as i64],
        out: outs.map(|l| te.shape[l] as i64),
        kernel,
        stride: [sh, sw],
        pad: [ph, pw],
        dilation: [dh, dw],
        layout,
        batch_stride: if images > 1 {
            (channels * h * w) as i64
        } else {
            0
        },
        pixel_stride: channels as i64,
        images: 1,
        image_stride: 0,
    })
}

/// `s·out + d·red − p` for one spatial axis read at output variable `out`:
/// stride, dilation, padding and the reduction variable (none when the
/// kernel is 1 wide there).
fn spatial_read(e: &IndexExpr, out: usize) -> Option<SpatialRead> {
    let a = e.as_affine()?;
    let (mut stride, mut dilation, mut red) = (0, 1, None);
    for &(v, c) in &a.terms {
        match v {
            Var::Out(l) if l == out => stride = c,
            Var::Red(k) if red.is_none() => (red, dilation) = (Some(k), c),
            _ => return None,
        }
    }
    (stride > 0 && dilation > 0 && a.constant <= 0).then_some((stride, dilation, -a.constant, red))
}

/// The two accesses of a `sum_r Mul(load a, load b)` body, where a load
/// may be padded (`Where(InBounds(k), Load(k), 0)`: an out-of-bounds load
/// reads zero anyway, and the operand keeps the bounds as its guard).
fn product_of_two_loads(te: &TensorExpr) -> Option<(usize, usize)> {
    let r = te.reduction.as_ref()?;
    if r.combiner != Combiner::Sum {
        return None;
    }
    match &te.body {
        Expr::Call(s, args) if s.op == "Mul" && s.attrs.is_empty() => match args.as_slice() {
            [a, b] => match (a.as_padded_load()?, b.as_padded_load()?) {
                (a, b) if a != b => Some((a, b)),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

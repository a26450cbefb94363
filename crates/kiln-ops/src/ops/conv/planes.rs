//! A 3-D convolution as 2-D ones over its frames (a video network's
//! `(3, 3, 3)` and `(3, 7, 7)` convolutions), so the backends run it
//! through their 2-D convolution kernels instead of a generic loop nest.
//!
//! - Time stride 1, one video (`stacked_taps`): the frames as a batch of
//!   images, `[T, C, H, W]`, go through one 2-D convolution whose output
//!   channels are every time tap's weights stacked (`[kt·M, C, kh, kw]`);
//!   output frame `t` sums tap `j`'s channels of frame `t + j·d - p`, the
//!   frames outside the video contributing nothing (a slice of the
//!   product, zero-padded in time, per tap). No padded or sliced copy of
//!   the input is made, and the product has `kt` times the columns.
//! - Otherwise, for each tap `j` of the kernel's first (time) axis, the
//!   frames that tap reads, `x[:, :, j·d + s·t]` for every output frame `t`
//!   (the input padded in time first), batched with the images as
//!   `[N·T_out, C, H, W]`, go through a 2-D convolution by the weight's
//!   slice `W[:, :, j]`; the products are summed over `j`.
//!
//! Either way the 2-D convolutions take the other two axes' stride,
//! dilation and padding, and the frames are put back between the channels
//! and the image: `[N, M, T_out, H_out, W_out]`.
//!
//! Needs: static shapes, a constant weight (its slices fold), opset 11 or
//! later (Pad and Slice take their sizes as inputs). Declines (`None`: the
//! convolution keeps its own tensor expression) grouped convolutions, a
//! bias (the biased Conv opens into this one and an Add first), other
//! ranks, and a convolution none of whose taps reads a frame. Guarantees:
//! the convolution's values up to the order of the sums (time taps are
//! summed last).

use super::ConvShape;
use crate::ops::compose::{reshape, slice};
use crate::{Builder, InferCx};
use kiln_ir::{Attr, Result, ValueId};

/// The decomposition of 3-D Conv node `cx.node` over `inputs`, or `None`
/// where it declines (see the module doc).
pub(super) fn decompose(
    cx: &InferCx,
    b: &mut Builder,
    inputs: &[Option<ValueId>],
) -> Result<Option<Vec<Option<ValueId>>>> {
    let Some((x, w, shape)) = super::rewritable(cx, b, inputs, 5)? else {
        return Ok(None);
    };
    let (xs, ws) = (b.shape(x)?, b.shape(w)?);
    let g = &shape.geom;
    let pads = [g.pads_begin[0], g.pads_end[0]];
    if pads.iter().any(|&p| p < 0) {
        return Ok(None);
    }
    let (n, m, frames) = (shape.batch, shape.out_channels, g.windows[0]);
    if frames == 0 {
        return Ok(None);
    }
    let plane_attrs = [
        ("strides", ints(&g.strides[1..])),
        ("dilations", ints(&g.dilations[1..])),
        (
            "pads",
            Attr::Ints([&g.pads_begin[1..], &g.pads_end[1..]].concat()),
        ),
    ];
    if g.strides[0] == 1 && n == 1 {
        return Ok(stacked_taps(b, x, w, &shape, &plane_attrs)?.map(|y| vec![Some(y)]));
    }
    let x = padded_in_time(b, x, pads)?;
    let x = b.op(
        "Transpose",
        &[x],
        &[("perm", Attr::Ints(FRAMES_OUTSIDE.into()))],
    )?;
    let mut sum: Option<ValueId> = None;
    for tap in 0..g.kernel[0] {
        let first = tap * g.dilations[0];
        let last = first + (frames - 1) * g.strides[0];
        let read = slice(b, x, &[1], &[first], &[last + 1], &[g.strides[0]])?;
        let read = reshape(b, read, &[&[n * frames][..], &xs[1..2], &xs[3..]].concat())?;
        let wt = slice(b, w, &[2], &[tap], &[tap + 1], &[])?;
        let wt = reshape(b, wt, &[&ws[..2], &ws[3..]].concat())?;
        let y = b.op("Conv", &[read, wt], &plane_attrs)?;
        sum = Some(match sum {
            None => y,
            Some(s) => b.op("Add", &[s, y], &[])?,
        });
    }
    let Some(sum) = sum else {
        return Ok(None);
    };
    let planes = [&[n, frames, m][..], &g.windows[1..]].concat();
    let y = reshape(b, sum, &planes)?;
    let y = b.op(
        "Transpose",
        &[y],
        &[("perm", Attr::Ints(FRAMES_OUTSIDE.into()))],
    )?;
    Ok(Some(vec![Some(y)]))
}

/// Swaps the channel and time axes of a 5-D tensor (its own inverse).
const FRAMES_OUTSIDE: [i64; 5] = [0, 2, 1, 3, 4];

/// A convolution of time stride 1 over one video as one 2-D convolution of
/// every frame by all time taps' weights stacked as output channels
/// (`[kt·M, C, kh, kw]`), then each output frame `t` summed from tap `j`'s
/// channels of frame `t + j·d - p` (the frames before the first and after
/// the last read nothing): no padded or sliced copy of the input, and one
/// product with `kt` times the columns. The sums stay 4-D (frames as the
/// batch), so a channels-last layout carries through them. Taps whose
/// frames all fall outside are left out; `None` when every tap's are.
fn stacked_taps(
    b: &mut Builder,
    x: ValueId,
    w: ValueId,
    shape: &ConvShape,
    plane_attrs: &[(&str, Attr)],
) -> Result<Option<ValueId>> {
    let (xs, ws) = (b.shape(x)?, b.shape(w)?);
    let g = &shape.geom;
    let (m, taps) = (shape.out_channels, g.kernel[0]);
    let (frames_in, frames) = (xs[2], g.windows[0]);
    let x = b.op(
        "Transpose",
        &[x],
        &[("perm", Attr::Ints(FRAMES_OUTSIDE.into()))],
    )?;
    let x = reshape(b, x, &[&[frames_in][..], &xs[1..2], &xs[3..]].concat())?;
    let w = b.op(
        "Transpose",
        &[w],
        &[("perm", Attr::Ints(vec![2, 0, 1, 3, 4]))],
    )?;
    let w = reshape(b, w, &[&[taps * m][..], &ws[1..2], &ws[3..]].concat())?;
    let y = b.op("Conv", &[x, w], plane_attrs)?;
    let mut sum: Option<ValueId> = None;
    for tap in 0..taps {
        // Output frame t reads input frame t + shift.
        let shift = (tap * g.dilations[0]) as i64 - g.pads_begin[0];
        let first = (-shift).clamp(0, frames as i64) as usize;
        let end = (frames_in as i64 - shift).clamp(first as i64, frames as i64) as usize;
        if first == end {
            continue;
        }
        let read = (first as i64 + shift) as usize;
        let part = slice(
            b,
            y,
            &[0, 1],
            &[read, tap * m],
            &[read + end - first, (tap + 1) * m],
            &[],
        )?;
        let part = padded_frames(b, part, first, frames - end)?;
        sum = Some(match sum {
            None => part,
            Some(s) => b.op("Add", &[s, part], &[])?,
        });
    }
    let Some(sum) = sum else {
        return Ok(None);
    };
    let y = reshape(b, sum, &[&[1, frames, m][..], &g.windows[1..]].concat())?;
    let y = b.op(
        "Transpose",
        &[y],
        &[("perm", Attr::Ints(FRAMES_OUTSIDE.into()))],
    )?;
    Ok(Some(y))
}

/// `y` (`[T, M, H, W]`, frames as the batch) with `before` and `after`
/// zero frames.
fn padded_frames(b: &mut Builder, y: ValueId, before: usize, after: usize) -> Result<ValueId> {
    if before == 0 && after == 0 {
        return Ok(y);
    }
    let mut pads = vec![0i64; 8];
    pads[0] = before as i64;
    pads[4] = after as i64;
    let pads = b.ints(&pads);
    b.op(
        "Pad",
        &[y, pads],
        &[("mode", Attr::String("constant".into()))],
    )
}

/// `x` (`[N, C, T, H, W]`) with `pads` zero frames before and after.
fn padded_in_time(b: &mut Builder, x: ValueId, [before, after]: [i64; 2]) -> Result<ValueId> {
    if before == 0 && after == 0 {
        return Ok(x);
    }
    let pads = b.ints(&[0, 0, before, 0, 0, 0, 0, after, 0, 0]);
    b.op(
        "Pad",
        &[x, pads],
        &[("mode", Attr::String("constant".into()))],
    )
}

fn ints(v: &[usize]) -> Attr {
    Attr::Ints(v.iter().map(|&i| i as i64).collect())
}

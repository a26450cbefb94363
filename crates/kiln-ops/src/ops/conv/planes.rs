//! A 3-D convolution as 2-D ones over its frames (a video network's
//! `(3, 3, 3)` and `(3, 7, 7)` convolutions), so the backends run it
//! through their 2-D convolution kernels instead of a generic loop nest:
//! for each tap `j` of the kernel's first (time) axis, the frames that tap
//! reads, `x[:, :, j·d + s·t]` for every output frame `t` (the input
//! padded in time first), batched with the images as
//! `[N·T_out, C, H, W]`, go through a 2-D convolution by the weight's
//! slice `W[:, :, j]` with the other two axes' stride, dilation and
//! padding; the products are summed over `j` and the frames put back
//! between the channels and the image: `[N, M, T_out, H_out, W_out]`.
//!
//! Needs: static shapes, a constant weight (its slices fold), opset 11 or
//! later (Pad and Slice take their sizes as inputs). Declines (`None`: the
//! convolution keeps its own tensor expression) grouped convolutions, a
//! bias (the biased Conv opens into this one and an Add first) and other
//! ranks. Guarantees: the convolution's values up to the order of the
//! sums (time taps are summed last).

use super::ConvShape;
use crate::ops::compose::{reshape, slice};
use crate::{inputs_id, Builder, InferCx};
use kiln_ir::{Attr, Result, ValueId};

/// The decomposition of 3-D Conv node `cx.node` over `inputs`, or `None`
/// where it declines (see the module doc).
pub(super) fn decompose(
    cx: &InferCx,
    b: &mut Builder,
    inputs: &[Option<ValueId>],
) -> Result<Option<Vec<Option<ValueId>>>> {
    let (x, w) = (inputs_id(inputs, 0)?, inputs_id(inputs, 1)?);
    let biased = inputs.get(2).is_some_and(Option::is_some);
    let (Ok(xs), Ok(ws)) = (b.shape(x), b.shape(w)) else {
        return Ok(None);
    };
    if biased || xs.len() != 5 || cx.opset < 11 || b.value(w)?.is_none() {
        return Ok(None);
    }
    let shape = ConvShape::new(cx.node, &xs, &ws)?;
    let g = &shape.geom;
    let pads = [g.pads_begin[0], g.pads_end[0]];
    if shape.group != 1 || pads.iter().any(|&p| p < 0) || !b.ty(x).dtype.is_float() {
        return Ok(None);
    }
    let (n, m, frames) = (shape.batch, shape.out_channels, g.windows[0]);
    if frames == 0 {
        return Ok(None);
    }
    let x = padded_in_time(b, x, pads)?;
    let x = b.op(
        "Transpose",
        &[x],
        &[("perm", Attr::Ints(vec![0, 2, 1, 3, 4]))],
    )?;
    let plane_attrs = [
        ("strides", ints(&g.strides[1..])),
        ("dilations", ints(&g.dilations[1..])),
        (
            "pads",
            Attr::Ints([&g.pads_begin[1..], &g.pads_end[1..]].concat()),
        ),
    ];
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
        &[("perm", Attr::Ints(vec![0, 2, 1, 3, 4]))],
    )?;
    Ok(Some(vec![Some(y)]))
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

//! A 1-D convolution as a 2-D one over images one row high (an audio
//! network's feature extractor), so it takes the backends' 2-D
//! convolution path (channels-last, the generated matmul over windows)
//! instead of the generic form: `X [N, C, L]` and `W [M, C/group, k]` gain
//! a unit axis before their last, the stride, dilation and padding gain a
//! first entry of 1, 1 and 0, and the result loses the unit axis again.
//!
//! Needs: static shapes, explicit padding (`auto_pad` NOTSET). Declines
//! (`None`) a bias (the biased Conv opens into this one and an Add
//! first) and other ranks. Guarantees: the convolution's values exactly
//! (the same products and sums).

use super::ConvShape;
use crate::ops::compose::reshape;
use crate::{inputs_id, Builder, InferCx};
use kiln_ir::{Attr, Result, ValueId};

/// The decomposition of 1-D Conv node `cx.node` over `inputs`, or `None`
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
    let auto_pad = cx.node.attr_string_or("auto_pad", "NOTSET")?;
    if biased || xs.len() != 3 || auto_pad != "NOTSET" {
        return Ok(None);
    }
    let shape = ConvShape::new(cx.node, &xs, &ws)?;
    let g = &shape.geom;
    let row = |v: usize| Attr::Ints(vec![1, v as i64]);
    let attrs = [
        ("strides", row(g.strides[0])),
        ("dilations", row(g.dilations[0])),
        (
            "pads",
            Attr::Ints(vec![0, g.pads_begin[0], 0, g.pads_end[0]]),
        ),
        ("group", Attr::Int(shape.group as i64)),
    ];
    let x = reshape(b, x, &[xs[0], xs[1], 1, xs[2]])?;
    let w = reshape(b, w, &[ws[0], ws[1], 1, ws[2]])?;
    let y = b.op("Conv", &[x, w], &attrs)?;
    let y = reshape(b, y, &[shape.batch, shape.out_channels, g.windows[0]])?;
    Ok(Some(vec![Some(y)]))
}

//! A transposed convolution whose kernel tiles its output (stride equal
//! to the kernel, no dilation, padding or output padding, one group: the
//! 2x2 stride-2 upsampling of a U-Net's decoder) as primitive ops, so the
//! backends generate it as a matrix product instead of leaving it to the
//! interpreter: every input pixel's channels times the weight `[C, M·k…]`
//! give the `M × k…` block of output pixels it alone writes, so
//!
//! `X [N, C, H…]` → Transpose `[N, H…, C]` → Reshape `[N·ΠH, C]` → MatMul
//! by `W` reshaped to `[C, M·Πk]` → Reshape `[N, H…, M, k…]` → Transpose
//! `[N, M, H₁, k₁, H₂, k₂, …]` → Reshape `[N, M, H₁·k₁, …]`, then the bias
//! added per output channel.
//!
//! Needs: static shapes. Declines (`None`: the interpreter's col2im kernel
//! runs it) every other geometry, where output blocks overlap or are
//! cropped. Guarantees: the interpreter's values up to the order of each
//! pixel's sum over input channels.

use super::ConvTransposeShape;
use crate::ops::compose::reshape;
use crate::{inputs_id, Builder, InferCx};
use kiln_ir::{Attr, Result, ValueId};

/// The decomposition of ConvTranspose node `cx.node` over `inputs`, or
/// `None` where it declines (see the module doc).
pub(super) fn decompose(
    cx: &InferCx,
    b: &mut Builder,
    inputs: &[Option<ValueId>],
) -> Result<Option<Vec<Option<ValueId>>>> {
    let (x, w) = (inputs_id(inputs, 0)?, inputs_id(inputs, 1)?);
    let (Ok(xs), Ok(ws)) = (b.shape(x), b.shape(w)) else {
        return Ok(None);
    };
    let shape = ConvTransposeShape::new(cx.node, &xs, &ws)?;
    let g = &shape.geom;
    let tiles = g.strides == g.kernel
        && g.dilations.iter().all(|&d| d == 1)
        && g.pads_begin.iter().all(|&p| p == 0)
        && g.image
            .iter()
            .zip(&g.windows)
            .zip(&g.kernel)
            .all(|((&o, &i), &k)| o == i * k);
    if shape.group != 1 || !tiles || !b.ty(x).dtype.is_float() {
        return Ok(None);
    }
    let rank = g.kernel.len();
    let (n, c, m) = (shape.batch, shape.in_channels, shape.out_channels);
    let pixels: usize = g.windows.iter().product();
    let taps: usize = g.kernel.iter().product();
    let channels_last: Vec<i64> = [0]
        .into_iter()
        .chain(2..rank as i64 + 2)
        .chain([1])
        .collect();
    let x = b.op("Transpose", &[x], &[("perm", Attr::Ints(channels_last))])?;
    let x = reshape(b, x, &[n * pixels, c])?;
    let w = reshape(b, w, &[c, m * taps])?;
    let blocks = b.op("MatMul", &[x, w], &[])?;
    let blocks_shape = [&[n][..], &g.windows, &[m], &g.kernel].concat();
    let blocks = reshape(b, blocks, &blocks_shape)?;
    // [N, H…, M, k…] → [N, M, H₁, k₁, …]: M is axis rank + 1, kernel axis a
    // is rank + 2 + a, image axis a is 1 + a.
    let r = rank as i64;
    let interleave: Vec<i64> = [0, r + 1]
        .into_iter()
        .chain((0..r).flat_map(|a| [1 + a, r + 2 + a]))
        .collect();
    let y = b.op("Transpose", &[blocks], &[("perm", Attr::Ints(interleave))])?;
    let y = reshape(b, y, &shape.out_shape())?;
    let y = match inputs.get(2).copied().flatten() {
        Some(bias) => {
            let mut column = vec![m];
            column.resize(rank + 1, 1);
            let bias = reshape(b, bias, &column)?;
            b.op("Add", &[y, bias], &[])?
        }
        None => y,
    };
    Ok(Some(vec![Some(y)]))
}

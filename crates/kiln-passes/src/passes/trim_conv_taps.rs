//! Kernel taps that only ever read padding are dropped: a convolution
//! whose dilation is wide against its image (DeepLabV3's atrous pyramid:
//! dilations 24 and 36 over a 14x14 feature map) multiplies whole rows and
//! columns of its kernel by the zeros around the image. Along each spatial
//! axis, the taps no output position reads inside the image are cut from
//! the ends of the kernel, and the padding shrinks by the span they
//! covered, so every output position reads the same input pixels through
//! the taps that are left (a 3x3 convolution of dilation 24 over 14x14
//! pixels becomes a 1x1 one, a ninth of the work).
//!
//! Fires on an ONNX Conv with explicit padding, static shapes and a
//! constant weight, when an end tap of some axis reads only padding and
//! the shrunk padding stays non-negative. Needs: a type-inferred graph.
//! Guarantees: the same outputs (the dropped products were of zeros; the
//! sums lose only zero terms), the node keeps its output value; the old
//! weight is left to dead-code elimination when nothing else reads it.

use crate::edit::{sweep, Editor};
use crate::pass::{each_graph, Pass};
use kiln_ir::{Attr, Graph, Result, Tensor};

pub struct TrimConvTaps;

impl Pass for TrimConvTaps {
    fn name(&self) -> &'static str {
        "trim_conv_taps"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        each_graph(g, &mut |g| sweep(g, &mut trim_node))
    }
}

/// One spatial axis of a convolution.
#[derive(Clone, Copy)]
struct Side {
    image: usize,
    output: usize,
    taps: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
}

impl Side {
    /// Whether tap `r` reads inside the image for some output position.
    fn read(&self, r: usize) -> bool {
        (0..self.output).any(|y| {
            let at = (y * self.stride + r * self.dilation) as i64 - self.pad_begin as i64;
            (0..self.image as i64).contains(&at)
        })
    }

    /// The taps kept (first, last) and the padding left (begin, end);
    /// `None` when no tap reads the image or the padding would go
    /// negative.
    fn trimmed(&self) -> Option<((usize, usize), (usize, usize))> {
        let first = (0..self.taps).find(|&r| self.read(r))?;
        let last = (0..self.taps).rev().find(|&r| self.read(r))?;
        let begin = self.pad_begin.checked_sub(first * self.dilation)?;
        let end = self
            .pad_end
            .checked_sub((self.taps - 1 - last) * self.dilation)?;
        Some(((first, last), (begin, end)))
    }
}

fn trim_node(ed: &mut Editor, n: usize) -> Result<()> {
    let node = ed.node(n);
    if node.op != "Conv" || !node.domain.is_empty() {
        return Ok(());
    }
    let Some(sides) = sides(ed, n) else {
        return Ok(());
    };
    let Some(trims) = sides.iter().map(Side::trimmed).collect::<Option<Vec<_>>>() else {
        return Ok(());
    };
    let unchanged = trims
        .iter()
        .zip(&sides)
        .all(|(&((first, last), _), s)| first == 0 && last + 1 == s.taps);
    let Some(w) = ed.input(n, 1) else {
        return Ok(());
    };
    let weight = match ed.constant(w) {
        Some(init) if !unchanged => init.to_tensor()?,
        _ => return Ok(()),
    };
    let kept: Vec<(usize, usize)> = trims.iter().map(|t| t.0).collect();
    let sliced = slice_taps(&weight, &kept);
    let hint = format!("{}_trimmed", ed.graph().name(w));
    let c = ed.add_constant(&hint, sliced);
    ed.set_input(n, 1, Some(c));
    let mut attrs = ed.node(n).attrs.clone();
    let pads = trims
        .iter()
        .map(|t| t.1 .0)
        .chain(trims.iter().map(|t| t.1 .1));
    attrs.insert("pads".into(), Attr::Ints(pads.map(|p| p as i64).collect()));
    if attrs.contains_key("kernel_shape") {
        let shape = kept.iter().map(|&(f, l)| (l + 1 - f) as i64).collect();
        attrs.insert("kernel_shape".into(), Attr::Ints(shape));
    }
    let op = ed.node(n).op.clone();
    ed.set_op(n, &op, attrs);
    Ok(())
}

/// Node `n`'s spatial axes, when its shapes are static and its padding
/// explicit.
fn sides(ed: &Editor, n: usize) -> Option<Vec<Side>> {
    let node = ed.node(n);
    let auto_pad = node.attr_string("auto_pad").ok().flatten();
    if auto_pad.is_some_and(|p| p != "NOTSET") {
        return None;
    }
    let (x, w, y) = (ed.input(n, 0)?, ed.input(n, 1)?, ed.output(n, 0)?);
    let (xs, ws, ys) = (ed.shape(x)?, ed.shape(w)?, ed.shape(y)?);
    let spatial = xs.len().checked_sub(2)?;
    let ints = |name: &str, default: i64, len: usize| -> Option<Vec<usize>> {
        let v = match node.attr_ints(name).ok()? {
            Some(v) => v.to_vec(),
            None => vec![default; len],
        };
        (v.len() == len).then_some(())?;
        v.into_iter().map(|i| usize::try_from(i).ok()).collect()
    };
    let (strides, dilations) = (ints("strides", 1, spatial)?, ints("dilations", 1, spatial)?);
    let pads = ints("pads", 0, 2 * spatial)?;
    if ws.len() != xs.len() || ys.len() != xs.len() {
        return None;
    }
    Some(
        (0..spatial)
            .map(|a| Side {
                image: xs[2 + a],
                output: ys[2 + a],
                taps: ws[2 + a],
                stride: strides[a],
                dilation: dilations[a],
                pad_begin: pads[a],
                pad_end: pads[spatial + a],
            })
            .collect(),
    )
}

/// The weight `w` (`[M, C, k…]`) with only taps `kept[a]` (first, last)
/// along each spatial axis `a`.
fn slice_taps(w: &Tensor, kept: &[(usize, usize)]) -> Tensor {
    let mut shape = w.shape.clone();
    for (a, &(first, last)) in kept.iter().enumerate() {
        shape[2 + a] = last + 1 - first;
    }
    let strides = kiln_ops::util::strides(&w.shape);
    let total: usize = shape.iter().product();
    let offsets = (0..total).map(|mut flat| {
        let mut offset = 0;
        for d in (0..shape.len()).rev() {
            let i = flat % shape[d];
            flat /= shape[d];
            let start = if d >= 2 { kept[d - 2].0 } else { 0 };
            offset += (i + start) * strides[d];
        }
        offset
    });
    Tensor {
        data: w.data.gather(offsets),
        shape,
    }
}

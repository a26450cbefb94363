//! A 2-D convolution whose taps mostly read padding, split into regions of
//! its output that each read the image through the taps that reach it.
//!
//! A dilation wide against the image (DeepLabV3's atrous pyramid: a 3x3
//! convolution of dilation 12 over a 14x14 feature map, padded by 12)
//! leaves most output positions with only the centre tap inside the image:
//! dense, the convolution multiplies zeros for 82% of its taps. Along each
//! spatial axis, consecutive output positions whose taps reach the image
//! through the same run of taps form a band (rows 0-1 read through taps 1
//! and 2, rows 2-11 through tap 1, rows 12-13 through taps 0 and 1); each
//! pair of a row band and a column band is one region, computed by an
//! unpadded convolution of the input rows and columns its taps read with
//! the weight's slice of those taps, and the regions are concatenated back
//! along the columns, then the rows. That dilation-12 convolution then does
//! 324 products per channel pair where the dense one does 1764.
//!
//! Needs: static shapes, a constant weight (its slices fold), opset 11 or
//! later (Slice takes its bounds as inputs). Declines (`None`: the
//! convolution keeps its own tensor expression) grouped convolutions, a
//! bias (the biased Conv opens into this one and an Add first), ranks
//! other than 2-D, an output position that reads only padding, and
//! convolutions whose regions would do more than [`MAX_WORK_FRACTION`] of
//! the dense work: an ordinary 3x3 convolution padded by 1 has three bands
//! per axis (its borders lose one tap) and stays one convolution.
//! Guarantees: the convolution's values (each output sums the same
//! products, less the zero ones).

use crate::ops::compose::slice;
use crate::{Builder, InferCx};
use kiln_ir::{Attr, Result, ValueId};
use std::ops::Range;

/// The most of the dense convolution's products (output positions times
/// taps) the regions may do together for the split to be made: below it,
/// the products saved outweigh the extra kernels and the weight slices
/// each region reads.
pub const MAX_WORK_FRACTION: f64 = 0.5;

/// Output positions along one axis that read the image through the same
/// run of taps.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Band {
    outputs: Range<usize>,
    /// First and last tap reaching the image (inclusive).
    taps: (usize, usize),
}

/// One spatial axis of the convolution.
struct Axis {
    image: usize,
    outputs: usize,
    taps: usize,
    stride: usize,
    dilation: usize,
    pad_begin: i64,
}

impl Axis {
    /// The input position tap `k` of output `o` reads (negative or past the
    /// image: padding).
    fn reads(&self, o: usize, k: usize) -> i64 {
        (o * self.stride + k * self.dilation) as i64 - self.pad_begin
    }

    /// The run of taps of output `o` that reads inside the image; `None`
    /// when every tap reads padding.
    fn inside(&self, o: usize) -> Option<(usize, usize)> {
        let image = 0..self.image as i64;
        let first = (0..self.taps).find(|&k| image.contains(&self.reads(o, k)))?;
        let last = (0..self.taps)
            .rev()
            .find(|&k| image.contains(&self.reads(o, k)))?;
        Some((first, last))
    }

    /// The axis's outputs grouped into bands; `None` when an output reads
    /// only padding.
    fn bands(&self) -> Option<Vec<Band>> {
        let mut bands: Vec<Band> = Vec::new();
        for o in 0..self.outputs {
            let taps = self.inside(o)?;
            match bands.last_mut() {
                Some(b) if b.taps == taps => b.outputs.end = o + 1,
                _ => bands.push(Band {
                    outputs: o..o + 1,
                    taps,
                }),
            }
        }
        Some(bands)
    }

    /// The input positions band `b` reads, first to last (inclusive).
    fn read_span(&self, b: &Band) -> (usize, usize) {
        let first = self.reads(b.outputs.start, b.taps.0);
        let last = self.reads(b.outputs.end - 1, b.taps.1);
        (first as usize, last as usize)
    }
}

/// Output positions times taps over `bands`.
fn work(bands: &[Band]) -> usize {
    bands
        .iter()
        .map(|b| b.outputs.len() * (b.taps.1 + 1 - b.taps.0))
        .sum()
}

/// The decomposition of 2-D Conv node `cx.node` over `inputs`, or `None`
/// where it declines (see the module doc).
pub(super) fn decompose(
    cx: &InferCx,
    b: &mut Builder,
    inputs: &[Option<ValueId>],
) -> Result<Option<Vec<Option<ValueId>>>> {
    let Some((x, w, shape)) = super::rewritable(cx, b, inputs, 4)? else {
        return Ok(None);
    };
    let g = &shape.geom;
    let axes: Vec<Axis> = (0..2)
        .map(|a| Axis {
            image: g.image[a],
            outputs: g.windows[a],
            taps: g.kernel[a],
            stride: g.strides[a],
            dilation: g.dilations[a],
            pad_begin: g.pads_begin[a],
        })
        .collect();
    let Some(bands) = axes.iter().map(Axis::bands).collect::<Option<Vec<_>>>() else {
        return Ok(None);
    };
    let dense = (0..2)
        .map(|a| g.windows[a] * g.kernel[a])
        .product::<usize>();
    let split = bands.iter().map(|b| work(b)).product::<usize>();
    if dense == 0 || split as f64 > MAX_WORK_FRACTION * dense as f64 {
        return Ok(None);
    }
    let mut rows = Vec::new();
    for row in &bands[0] {
        let mut cols = Vec::new();
        for col in &bands[1] {
            cols.push(region(b, x, w, &axes, [row, col])?);
        }
        rows.push(concat(b, cols, 3)?);
    }
    Ok(Some(vec![Some(concat(b, rows, 2)?)]))
}

/// The convolution's outputs in the region of bands `[row, col]`: an
/// unpadded convolution of the input span the bands read by the weight's
/// slice of their taps.
fn region(
    b: &mut Builder,
    x: ValueId,
    w: ValueId,
    axes: &[Axis],
    bands: [&Band; 2],
) -> Result<ValueId> {
    let spans: Vec<(usize, usize)> = (0..2).map(|a| axes[a].read_span(bands[a])).collect();
    let read = slice(
        b,
        x,
        &[2, 3],
        &[spans[0].0, spans[1].0],
        &[spans[0].1 + 1, spans[1].1 + 1],
        &[],
    )?;
    let taps = slice(
        b,
        w,
        &[2, 3],
        &[bands[0].taps.0, bands[1].taps.0],
        &[bands[0].taps.1 + 1, bands[1].taps.1 + 1],
        &[],
    )?;
    let ints = |f: &dyn Fn(&Axis) -> usize| Attr::Ints(axes.iter().map(|a| f(a) as i64).collect());
    b.op(
        "Conv",
        &[read, taps],
        &[
            ("strides", ints(&|a| a.stride)),
            ("dilations", ints(&|a| a.dilation)),
            ("pads", Attr::Ints(vec![0; 4])),
        ],
    )
}

/// `parts` joined along `axis` (the one part itself when alone).
fn concat(b: &mut Builder, parts: Vec<ValueId>, axis: i64) -> Result<ValueId> {
    match parts.as_slice() {
        [one] => Ok(*one),
        _ => b.op("Concat", &parts, &[("axis", Attr::Int(axis))]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(image: usize, taps: usize, dilation: usize, pad: i64) -> Axis {
        Axis {
            image,
            outputs: (image as i64 + 2 * pad - ((taps - 1) * dilation) as i64) as usize,
            taps,
            stride: 1,
            dilation,
            pad_begin: pad,
        }
    }

    #[test]
    fn an_atrous_axis_has_three_bands_of_two_one_and_two_taps() {
        let bands = axis(14, 3, 12, 12).bands().unwrap();
        let want = [(0..2, (1, 2)), (2..12, (1, 1)), (12..14, (0, 1))];
        let got: Vec<(Range<usize>, (usize, usize))> =
            bands.iter().map(|b| (b.outputs.clone(), b.taps)).collect();
        assert_eq!(got, want);
        assert_eq!(work(&bands), 18);
        assert_eq!(axis(14, 3, 12, 12).read_span(&bands[0]), (0, 13));
    }

    #[test]
    fn an_ordinary_padded_axis_keeps_most_of_its_work() {
        let bands = axis(56, 3, 1, 1).bands().unwrap();
        assert_eq!(bands.len(), 3);
        assert_eq!(work(&bands), 56 * 3 - 2);
    }
}

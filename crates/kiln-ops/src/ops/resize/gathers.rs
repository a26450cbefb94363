//! Resize (and Upsample) as primitive ops, so the planners fuse and the
//! backends generate it (the bilinear upsampling of a segmentation head,
//! the nearest one of a U-Net or an FPN) instead of leaving it to the
//! interpreter: one axis after another, as the interpreter's kernel
//! resamples them, each output position's taps along the axis become
//! `Gather`s of the input along that axis by constant index tables, one
//! per tap, weighted by constant `[out, 1, …]` tables and summed (a
//! nearest tap is the `Gather` alone). The tables are the interpreter's
//! own taps (`sample::Sampler::taps`), so both follow the same coordinate
//! formulas.
//!
//! Needs: a static input shape and constant scales or sizes. Declines
//! (`None`: the node keeps the interpreter's kernel) tf_crop_and_resize,
//! an empty output, and linear or cubic modes over integers (whose
//! results the interpreter rounds once from f64). Guarantees: nearest
//! modes give the interpreter's values exactly; linear and cubic ones up
//! to the element type's rounding of each product and sum (the
//! interpreter sums in f64).

use super::sample::{Axis, Kernel, Sampler};
use crate::Builder;
use kiln_ir::{Attr, Data, Result, Tensor, ValueId};

/// `x` resampled per `axes` (one plan per dimension) with `sampler`, or
/// `None` where the decomposition declines (see the module doc).
pub(super) fn resized(
    b: &mut Builder,
    x: ValueId,
    axes: &[Axis],
    sampler: &Sampler,
) -> Result<Option<ValueId>> {
    let dtype = b.ty(x).dtype;
    let nearest = matches!(sampler.kernel, Kernel::Nearest(_));
    if (!nearest && !dtype.is_float()) || axes.iter().any(|a| a.out_len == 0) {
        return Ok(None);
    }
    let mut y = x;
    for (d, a) in axes.iter().enumerate() {
        let Some(taps) = sampler.taps(a).into_iter().collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        if taps
            .iter()
            .any(|t| t.is_empty() || t.len() != taps[0].len())
        {
            return Ok(None);
        }
        let identity = taps.iter().enumerate().all(|(j, t)| t[..] == [(j, 1.0)]);
        if !identity {
            y = resampled_axis(b, y, d, axes.len(), &taps)?;
        }
    }
    Ok(Some(y))
}

/// `y` (of rank `rank`) resampled along axis `d` with `taps[j]`, the
/// (index, weight) pairs of output position `j` (as many for every
/// position).
fn resampled_axis(
    b: &mut Builder,
    y: ValueId,
    d: usize,
    rank: usize,
    taps: &[Vec<(usize, f64)>],
) -> Result<ValueId> {
    let dtype = b.ty(y).dtype;
    let weighted = taps.iter().any(|t| t.len() > 1 || t[0].1 != 1.0);
    let mut sum: Option<ValueId> = None;
    for k in 0..taps[0].len() {
        let index: Vec<i64> = taps.iter().map(|t| t[k].0 as i64).collect();
        let index = b.ints(&index);
        let mut term = b.op("Gather", &[y, index], &[("axis", Attr::Int(d as i64))])?;
        if weighted {
            let weights: Vec<f64> = taps.iter().map(|t| t[k].1).collect();
            let mut shape = vec![taps.len()];
            shape.resize(rank - d, 1);
            let w = b.constant(Tensor::new(shape, Data::from_f64(dtype, &weights)?)?);
            term = b.op("Mul", &[term, w], &[])?;
        }
        sum = Some(match sum {
            None => term,
            Some(s) => b.op("Add", &[s, term], &[])?,
        });
    }
    Ok(sum.unwrap_or(y))
}

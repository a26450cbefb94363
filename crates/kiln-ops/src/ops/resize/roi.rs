//! RoiAlign (opset 10, 16, 22): bilinear sampling of regions of interest on
//! a feature map, pooled per output bin by average or max.

use super::from_f64;
use crate::registry::Registry;
use crate::util::ints;
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, Node, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("RoiAlign", RoiAlign);
}

struct RoiAlign;

struct RoiParams {
    max: bool,
    out_h: usize,
    out_w: usize,
    sampling_ratio: usize,
    spatial_scale: f64,
    /// Shift input coordinates by -0.5 (opset 16's default "half_pixel");
    /// opset 10 behaves as "output_half_pixel".
    half_pixel: bool,
}

impl RoiParams {
    fn parse(node: &Node, opset: i64) -> Result<RoiParams> {
        let max = match node.attr_string_or("mode", "avg")? {
            "avg" => false,
            "max" => true,
            other => bail!("unknown mode '{other}'"),
        };
        let positive = |name: &str| -> Result<usize> {
            let v = node.attr_int_or(name, 1)?;
            ensure!(v > 0, "{name} must be positive, got {v}");
            Ok(v as usize)
        };
        let ratio = node.attr_int_or("sampling_ratio", 0)?;
        ensure!(
            ratio >= 0,
            "sampling_ratio must not be negative, got {ratio}"
        );
        let default_mode = if opset < 16 {
            "output_half_pixel"
        } else {
            "half_pixel"
        };
        let half_pixel =
            match node.attr_string_or("coordinate_transformation_mode", default_mode)? {
                "half_pixel" => true,
                "output_half_pixel" => false,
                other => bail!("unknown coordinate_transformation_mode '{other}'"),
            };
        Ok(RoiParams {
            max,
            out_h: positive("output_height")?,
            out_w: positive("output_width")?,
            sampling_ratio: ratio as usize,
            spatial_scale: node.attr_float_or("spatial_scale", 1.0)? as f64,
            half_pixel,
        })
    }
}

/// One bilinear sample: four (offset within a channel plane, weight) pairs.
type Sample = [(usize, f64); 4];

/// Bilinear sample at (y, x) of an h x w plane; all-zero weights when the
/// point is more than one pixel outside the plane.
fn bilinear(y: f64, x: f64, h: usize, w: usize) -> Sample {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
        return [(0, 0.0); 4];
    }
    let clamp = |v: f64, n: usize| -> (usize, usize, f64) {
        let v = v.max(0.0);
        let low = v as usize;
        if low >= n - 1 {
            (n - 1, n - 1, 0.0)
        } else {
            (low, low + 1, v - low as f64)
        }
    };
    let (y0, y1, ly) = clamp(y, h);
    let (x0, x1, lx) = clamp(x, w);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    [
        (y0 * w + x0, hy * hx),
        (y0 * w + x1, hy * lx),
        (y1 * w + x0, ly * hx),
        (y1 * w + x1, ly * lx),
    ]
}

impl RoiParams {
    /// The samples of each output bin (row-major over bins) of one roi.
    fn bins(&self, roi: &[f64], h: usize, w: usize) -> Vec<Vec<Sample>> {
        let offset = if self.half_pixel { 0.5 } else { 0.0 };
        let coord = |v: f64| v * self.spatial_scale - offset;
        let (x0, y0, x1, y1) = (coord(roi[0]), coord(roi[1]), coord(roi[2]), coord(roi[3]));
        let (mut roi_w, mut roi_h) = (x1 - x0, y1 - y0);
        if !self.half_pixel {
            // Legacy behaviour: force malformed rois to be 1x1.
            roi_w = roi_w.max(1.0);
            roi_h = roi_h.max(1.0);
        }
        let (bin_h, bin_w) = (roi_h / self.out_h as f64, roi_w / self.out_w as f64);
        let grid = |extent: f64, bins: usize| -> usize {
            if self.sampling_ratio > 0 {
                self.sampling_ratio
            } else {
                (extent / bins as f64).ceil().max(0.0) as usize
            }
        };
        let (grid_h, grid_w) = (grid(roi_h, self.out_h), grid(roi_w, self.out_w));
        let mut out = Vec::with_capacity(self.out_h * self.out_w);
        for ph in 0..self.out_h {
            for pw in 0..self.out_w {
                let mut samples = Vec::with_capacity(grid_h * grid_w);
                for iy in 0..grid_h {
                    let y = y0 + ph as f64 * bin_h + (iy as f64 + 0.5) * bin_h / grid_h as f64;
                    for ix in 0..grid_w {
                        let x = x0 + pw as f64 * bin_w + (ix as f64 + 0.5) * bin_w / grid_w as f64;
                        samples.push(bilinear(y, x, h, w));
                    }
                }
                out.push(samples);
            }
        }
        out
    }

    /// Pools one bin of one channel plane.
    fn pool(&self, samples: &[Sample], plane: &[f64]) -> f64 {
        if self.max {
            // As the reference implementations do: the max over samples of
            // the largest weighted corner value.
            samples
                .iter()
                .map(|s| {
                    s.iter()
                        .map(|&(o, w)| w * plane[o])
                        .fold(f64::NEG_INFINITY, f64::max)
                })
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                .unwrap_or(0.0)
        } else {
            let sum: f64 = samples
                .iter()
                .map(|s| s.iter().map(|&(o, w)| w * plane[o]).sum::<f64>())
                .sum();
            sum / samples.len().max(1) as f64
        }
    }
}

/// Output shape (num_rois, C, output_height, output_width).
fn roi_shape(x: &[usize], rois: &[usize], p: &RoiParams) -> Result<Vec<usize>> {
    ensure!(x.len() == 4, "X must be 4-D (N, C, H, W), got {:?}", x);
    ensure!(
        rois.len() == 2 && rois[1] == 4,
        "rois must have shape [num_rois, 4], got {:?}",
        rois
    );
    Ok(vec![rois[0], x[1], p.out_h, p.out_w])
}

impl Op for RoiAlign {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = &cx.input(0)?.ty;
        let p = RoiParams::parse(cx.node, cx.opset)?;
        Ok(vec![match (&x.shape, cx.shape(1)?) {
            (Some(xs), Some(rs)) => TensorType::new(x.dtype, roi_shape(xs, rs, &p)?),
            _ => TensorType::unknown_shape(x.dtype),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, rois, batch) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        let p = RoiParams::parse(cx.node, cx.opset)?;
        let shape = roi_shape(&x.shape, &rois.shape, &p)?;
        ensure!(
            x.dtype().is_float() && rois.dtype().is_float(),
            "X and rois must be float tensors"
        );
        let batch = ints(batch)?;
        ensure!(
            batch.len() == shape[0],
            "batch_indices has {} entries for {} rois",
            batch.len(),
            shape[0]
        );
        let (n, c, h, w) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
        let xv = x.data.to_f64_vec()?;
        let rv = rois.data.to_f64_vec()?;
        let mut out = Vec::with_capacity(shape.iter().product());
        for (r, &b) in batch.iter().enumerate() {
            ensure!(
                b >= 0 && (b as usize) < n,
                "batch index {b} is out of range for batch size {n}"
            );
            if h == 0 || w == 0 {
                out.extend(std::iter::repeat_n(0.0, c * p.out_h * p.out_w));
                continue;
            }
            let bins = p.bins(&rv[r * 4..r * 4 + 4], h, w);
            for ch in 0..c {
                let base = (b as usize * c + ch) * h * w;
                let plane = &xv[base..base + h * w];
                out.extend(bins.iter().map(|s| p.pool(s, plane)));
            }
        }
        Ok(vec![Tensor::new(shape, from_f64(out, x.dtype(), false)?)?])
    }
}

//! The resampling engine behind Resize and Upsample: maps output coordinates
//! to input coordinates (coordinate_transformation_mode), turns them into
//! weighted input taps (nearest, linear or cubic kernels, optionally
//! antialiased) and applies them one axis at a time. Interpolation is
//! separable, so an N-D resize is a sequence of 1-D resizes.

use kiln_ir::{bail, dispatch_num, Data, Elem, Num, Result};

/// How a nearest-mode coordinate is rounded to an input index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NearestRound {
    /// Round half down (the default).
    RoundPreferFloor,
    /// Round half up.
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Resize-10 and Upsample, which have no nearest_mode: floor when
    /// upsampling, ceil when downsampling (what onnxruntime does).
    Legacy,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kernel {
    Nearest(NearestRound),
    Linear,
    /// Keys cubic convolution with coefficient `a`.
    Cubic(f64),
}

/// coordinate_transformation_mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

impl Coord {
    pub fn parse(s: &str) -> Result<Coord> {
        Ok(match s {
            "half_pixel" => Coord::HalfPixel,
            "half_pixel_symmetric" => Coord::HalfPixelSymmetric,
            "pytorch_half_pixel" => Coord::PytorchHalfPixel,
            "align_corners" => Coord::AlignCorners,
            "asymmetric" => Coord::Asymmetric,
            "tf_half_pixel_for_nn" => Coord::TfHalfPixelForNn,
            "tf_crop_and_resize" => Coord::TfCropAndResize,
            other => bail!("unknown coordinate_transformation_mode '{other}'"),
        })
    }
}

/// One axis of a resize.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub in_len: usize,
    pub out_len: usize,
    /// The scale the coordinate formulas divide by: the given scale, or
    /// out_len / in_len when sizes were given.
    pub scale: f64,
    /// The spec's `length_resized`: `scale * in_len`, which is fractional
    /// when it comes from a scale factor.
    pub resized_len: f64,
    /// Region of interest (start, end), normalized; tf_crop_and_resize only.
    pub roi: (f64, f64),
}

impl Axis {
    /// True when resampling this axis changes nothing.
    pub fn is_identity(&self, coord: Coord) -> bool {
        let roi_default =
            coord != Coord::TfCropAndResize || (self.roi.0 == 0.0 && self.roi.1 == 1.0);
        self.out_len == self.in_len && (self.scale - 1.0).abs() <= 1e-9 && roi_default
    }
}

/// Everything that decides how input samples are weighted.
#[derive(Debug, Clone, Copy)]
pub struct Sampler {
    pub kernel: Kernel,
    pub coord: Coord,
    pub antialias: bool,
    pub exclude_outside: bool,
}

/// Input taps (index, weight) of one output position; `None` when the
/// position lies outside the crop region (tf_crop_and_resize) and takes the
/// extrapolation value.
pub type Taps = Option<Vec<(usize, f64)>>;

impl Sampler {
    /// The input coordinate that output position `x` maps to.
    fn source(&self, a: &Axis, x: f64) -> f64 {
        let (in_len, scale, len) = (a.in_len as f64, a.scale, a.resized_len);
        match self.coord {
            Coord::HalfPixel => (x + 0.5) / scale - 0.5,
            Coord::HalfPixelSymmetric => {
                // Centers the implicit ROI on the output when the integer
                // output length differs from the fractional one.
                let adjustment = a.out_len as f64 / len;
                let offset = in_len / 2.0 * (1.0 - adjustment);
                offset + (x + 0.5) / scale - 0.5
            }
            Coord::PytorchHalfPixel => {
                if len > 1.0 {
                    (x + 0.5) / scale - 0.5
                } else {
                    0.0
                }
            }
            Coord::AlignCorners => {
                if len == 1.0 {
                    0.0
                } else {
                    x * (in_len - 1.0) / (len - 1.0)
                }
            }
            Coord::Asymmetric => x / scale,
            Coord::TfHalfPixelForNn => (x + 0.5) / scale,
            Coord::TfCropAndResize => {
                let (start, end) = a.roi;
                let span = if len == 1.0 {
                    (end - start) * (in_len - 1.0) / 2.0
                } else {
                    x * (end - start) * (in_len - 1.0) / (len - 1.0)
                };
                span + start * (in_len - 1.0)
            }
        }
    }

    /// The taps of every output position along axis `a`.
    pub fn taps(&self, a: &Axis) -> Vec<Taps> {
        (0..a.out_len).map(|x| self.taps_at(a, x)).collect()
    }

    fn taps_at(&self, a: &Axis, x: usize) -> Taps {
        let src = self.source(a, x as f64);
        let last = a.in_len as f64 - 1.0;
        if self.coord == Coord::TfCropAndResize && (src < 0.0 || src > last) {
            return None;
        }
        let clamp = |i: f64| i.clamp(0.0, last.max(0.0)) as usize;
        let (radius, kernel): (f64, &dyn Fn(f64) -> f64) = match self.kernel {
            Kernel::Nearest(round) => {
                return Some(vec![(clamp(nearest(src, round, a.scale)), 1.0)])
            }
            Kernel::Linear => (1.0, &|d: f64| (1.0 - d.abs()).max(0.0)),
            Kernel::Cubic(coef) => (2.0, &move |d: f64| cubic(coef, d)),
        };
        // Taps sit at base + i with the fraction `ratio` in (0, 1]: an
        // integral coordinate counts as the right end of the interval to its
        // left, as in the ONNX reference.
        let base = if src == src.floor() {
            src - 1.0
        } else {
            src.floor()
        };
        let ratio = src - base;
        // Antialiasing stretches the kernel by 1/scale when downsampling.
        let stretch = if self.antialias {
            a.scale.min(1.0)
        } else {
            1.0
        };
        let first = (-radius / stretch).floor() as i64 + 1;
        let mut taps: Vec<(f64, f64)> = (first..=1 - first)
            .map(|i| (base + i as f64, kernel(stretch * (i as f64 - ratio))))
            .collect();
        if self.antialias {
            normalize(&mut taps);
        }
        if self.exclude_outside {
            for t in taps.iter_mut().filter(|t| t.0 < 0.0 || t.0 > last) {
                t.1 = 0.0;
            }
            normalize(&mut taps);
        }
        Some(taps.into_iter().map(|(i, w)| (clamp(i), w)).collect())
    }
}

/// Scales weights to sum to one (left alone when they sum to zero).
fn normalize(taps: &mut [(f64, f64)]) {
    let sum: f64 = taps.iter().map(|t| t.1).sum();
    if sum != 0.0 {
        for t in taps.iter_mut() {
            t.1 /= sum;
        }
    }
}

/// Keys' cubic convolution kernel with coefficient `a`.
fn cubic(a: f64, d: f64) -> f64 {
    let x = d.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// The input index nearest to coordinate `x` (before clamping).
fn nearest(x: f64, round: NearestRound, scale: f64) -> f64 {
    let floor = x.floor();
    let frac = x - floor;
    match round {
        NearestRound::RoundPreferFloor => {
            if frac > 0.5 {
                floor + 1.0
            } else {
                floor
            }
        }
        NearestRound::RoundPreferCeil => {
            if frac >= 0.5 {
                floor + 1.0
            } else {
                floor
            }
        }
        NearestRound::Floor => floor,
        NearestRound::Ceil => x.ceil(),
        NearestRound::Legacy => {
            if scale < 1.0 {
                x.ceil()
            } else {
                floor
            }
        }
    }
}

/// Resamples axis `axis` of row-major `data` (of `shape`) with `taps`;
/// returns the new data (the axis becomes `taps.len()` long).
pub fn resample_axis(
    data: &[f64],
    shape: &[usize],
    axis: usize,
    taps: &[Taps],
    extrapolation: f64,
) -> Vec<f64> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let n_in = shape[axis];
    let mut out = vec![0.0; outer * taps.len() * inner];
    for o in 0..outer {
        let src = &data[o * n_in * inner..(o + 1) * n_in * inner];
        for (j, t) in taps.iter().enumerate() {
            let dst = &mut out[(o * taps.len() + j) * inner..(o * taps.len() + j + 1) * inner];
            match t {
                None => dst.fill(extrapolation),
                Some(t) => {
                    for &(idx, w) in t {
                        let row = &src[idx * inner..(idx + 1) * inner];
                        for (d, s) in dst.iter_mut().zip(row) {
                            *d += w * s;
                        }
                    }
                }
            }
        }
    }
    out
}

/// Nearest-neighbour resampling of all axes at once, exact for every dtype:
/// `index[d][j]` is the input index along axis d for output position j
/// (`None`: the extrapolation value, numeric dtypes only).
pub fn gather_nearest(
    data: &Data,
    shape: &[usize],
    index: &[Vec<Option<usize>>],
    extrapolation: f64,
) -> Result<Data> {
    let strides = crate::util::strides(shape);
    let out_shape: Vec<usize> = index.iter().map(|v| v.len()).collect();
    let total: usize = out_shape.iter().product();
    // Flat input offset per output element; None where extrapolated.
    let mut offsets: Vec<Option<usize>> = Vec::with_capacity(total);
    let mut pos = vec![0usize; shape.len()];
    for _ in 0..total {
        let mut off = Some(0usize);
        for (d, &p) in pos.iter().enumerate() {
            off = match (off, index[d][p]) {
                (Some(o), Some(i)) => Some(o + i * strides[d]),
                _ => None,
            };
        }
        offsets.push(off);
        for d in (0..pos.len()).rev() {
            pos[d] += 1;
            if pos[d] < out_shape[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    if offsets.iter().all(Option::is_some) {
        return Ok(data.gather(offsets.into_iter().flatten()));
    }
    dispatch_num!(
        data,
        |v: T| {
            let fill = T::from_f64(extrapolation);
            Ok(T::wrap(
                offsets.iter().map(|o| o.map_or(fill, |o| v[o])).collect(),
            ))
        },
        bail!("tf_crop_and_resize extrapolation needs a numeric tensor, got strings")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(in_len: usize, out_len: usize, scale: f64) -> Axis {
        Axis {
            in_len,
            out_len,
            scale,
            resized_len: scale * in_len as f64,
            roi: (0.0, 1.0),
        }
    }

    #[test]
    fn linear_half_pixel_taps() {
        let s = Sampler {
            kernel: Kernel::Linear,
            coord: Coord::HalfPixel,
            antialias: false,
            exclude_outside: false,
        };
        // Upsample 2 -> 4: source of output 1 is 0.25.
        let t = s.taps(&axis(2, 4, 2.0));
        let t1 = t[1].as_ref().unwrap();
        assert_eq!(t1.len(), 2);
        assert_eq!(t1[0], (0, 0.75));
        assert_eq!(t1[1], (1, 0.25));
    }

    #[test]
    fn nearest_rounding_modes() {
        assert_eq!(nearest(1.5, NearestRound::RoundPreferFloor, 2.0), 1.0);
        assert_eq!(nearest(1.5, NearestRound::RoundPreferCeil, 2.0), 2.0);
        assert_eq!(nearest(1.2, NearestRound::Ceil, 2.0), 2.0);
        assert_eq!(nearest(1.7, NearestRound::Legacy, 0.5), 2.0);
        assert_eq!(nearest(1.7, NearestRound::Legacy, 2.0), 1.0);
    }

    #[test]
    fn cubic_kernel_partition_of_unity() {
        for r in [0.1, 0.5, 0.9] {
            let sum: f64 = (-1..=2).map(|i| cubic(-0.75, i as f64 - r)).sum();
            assert!((sum - 1.0).abs() < 1e-12);
        }
    }
}

//! GridSample (opset 16: 2-D; 20+: N-D) and AffineGrid (20+), following
//! PyTorch's grid_sample / affine_grid conventions that the spec adopts.

use super::from_f64;
use crate::registry::Registry;
use crate::util::{ints, strides};
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, dispatch_num, ensure, DType, Elem, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("GridSample", GridSample);
    r.add("AffineGrid", AffineGrid);
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

struct GridSample;

/// GridSample's attributes.
struct GridParams {
    mode: Mode,
    padding: Padding,
    align_corners: bool,
}

impl GridParams {
    fn parse(node: &kiln_ir::Node, opset: i64) -> Result<GridParams> {
        let default = if opset < 20 { "bilinear" } else { "linear" };
        let mode = match node.attr_string_or("mode", default)? {
            "nearest" => Mode::Nearest,
            "linear" | "bilinear" => Mode::Linear,
            "cubic" | "bicubic" => Mode::Cubic,
            other => bail!("unknown mode '{other}'"),
        };
        let padding = match node.attr_string_or("padding_mode", "zeros")? {
            "zeros" => Padding::Zeros,
            "border" => Padding::Border,
            "reflection" => Padding::Reflection,
            other => bail!("unknown padding_mode '{other}'"),
        };
        Ok(GridParams {
            mode,
            padding,
            align_corners: node.attr_int_or("align_corners", 0)? != 0,
        })
    }

    /// Pixel-space coordinate of normalized `n` on an axis of `len` pixels.
    /// Computed in the grid's precision (f32 unless f64), like PyTorch,
    /// so that nearest-mode ties round the same way.
    fn denormalize(&self, n: f64, len: usize, wide: bool) -> f64 {
        if wide {
            if self.align_corners {
                (n + 1.0) / 2.0 * (len as f64 - 1.0)
            } else {
                ((n + 1.0) * len as f64 - 1.0) / 2.0
            }
        } else {
            let (n, l) = (n as f32, len as f32);
            (if self.align_corners {
                (n + 1.0) / 2.0 * (l - 1.0)
            } else {
                ((n + 1.0) * l - 1.0) / 2.0
            }) as f64
        }
    }

    /// Valid coordinate range of an axis: pixel centers with align_corners,
    /// else pixel edges.
    fn bounds(&self, len: usize) -> (f64, f64) {
        if self.align_corners {
            (0.0, len as f64 - 1.0)
        } else {
            (-0.5, len as f64 - 0.5)
        }
    }

    /// Applies border or reflection padding to a coordinate outside the
    /// valid range (zeros padding leaves it for `index` to reject).
    fn pad_coord(&self, x: f64, len: usize) -> f64 {
        let (lo, hi) = self.bounds(len);
        if x >= lo && x <= hi {
            return x;
        }
        match self.padding {
            Padding::Zeros => x,
            Padding::Border => x.clamp(0.0, len as f64 - 1.0),
            Padding::Reflection => reflect(x, lo, hi),
        }
    }

    /// Input index for integer position `i`, or None for a zero.
    fn index(&self, i: i64, len: usize) -> Option<usize> {
        let n = len as i64;
        match self.padding {
            Padding::Zeros => (0..n).contains(&i).then_some(i as usize),
            Padding::Border => Some(i.clamp(0, n - 1) as usize),
            Padding::Reflection => {
                let (lo, hi) = self.bounds(len);
                Some((reflect(i as f64, lo, hi) as i64).clamp(0, n - 1) as usize)
            }
        }
    }
}

/// Reflects `x` at the borders until it lies in [lo, hi].
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let (dx, from_low) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let flips = (dx / range).floor();
    let r = dx - flips * range;
    let even = flips % 2.0 == 0.0;
    if from_low == even {
        lo + r
    } else {
        hi - r
    }
}

/// Keys cubic weights (a = -0.75, as PyTorch) for taps -1..=2 at fraction t.
fn cubic_weights(t: f64) -> [f64; 4] {
    let a = -0.75;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// Per spatial axis, the (input index or None for zero, weight) taps.
type AxisTaps = Vec<(Option<usize>, f64)>;

impl GridParams {
    /// Taps along one axis for pixel coordinate `x` (already padded).
    fn taps(&self, x: f64, len: usize) -> AxisTaps {
        match self.mode {
            Mode::Nearest => vec![(self.index(x.round_ties_even() as i64, len), 1.0)],
            Mode::Linear => {
                let f = x.floor();
                let t = x - f;
                vec![
                    (self.index(f as i64, len), 1.0 - t),
                    (self.index(f as i64 + 1, len), t),
                ]
            }
            Mode::Cubic => {
                let f = x.floor();
                let w = cubic_weights(x - f);
                (0..4)
                    .map(|k| (self.index(f as i64 - 1 + k as i64, len), w[k]))
                    .collect()
            }
        }
    }
}

/// Output shape: (N, C, grid's spatial dims...).
fn grid_sample_shape(x: &[usize], grid: &[usize]) -> Result<Vec<usize>> {
    ensure!(
        x.len() >= 3,
        "X must have rank 3 or more (N, C, spatial...), got {:?}",
        x
    );
    let r = x.len() - 2;
    ensure!(
        grid.len() == r + 2,
        "grid must have rank {} for X of rank {}, got {:?}",
        r + 2,
        x.len(),
        grid
    );
    ensure!(
        grid[0] == x[0],
        "grid batch {} differs from X batch {}",
        grid[0],
        x[0]
    );
    ensure!(
        grid[r + 1] == r,
        "grid's last dimension must be {r} (one coordinate per spatial axis), got {}",
        grid[r + 1]
    );
    let mut out = vec![x[0], x[1]];
    out.extend_from_slice(&grid[1..=r]);
    Ok(out)
}

impl Op for GridSample {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = &cx.input(0)?.ty;
        GridParams::parse(cx.node, cx.opset)?;
        Ok(vec![match (&x.shape, cx.shape(1)?) {
            (Some(xs), Some(gs)) => TensorType::new(x.dtype, grid_sample_shape(xs, gs)?),
            _ => TensorType::unknown_shape(x.dtype),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, grid) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let p = GridParams::parse(cx.node, cx.opset)?;
        let out_shape = grid_sample_shape(&x.shape, &grid.shape)?;
        ensure!(
            grid.dtype().is_float(),
            "grid must be a float tensor, got {}",
            grid.dtype()
        );
        let wide = grid.dtype() == DType::F64;
        let g = grid.data.to_f64_vec()?;
        let (n, c) = (x.shape[0], x.shape[1]);
        let dims = &x.shape[2..];
        let r = dims.len();
        let x_strides = strides(dims);
        let plane: usize = dims.iter().product();
        let points: usize = out_shape[2..].iter().product();
        // For every batch and output point: the flattened taps (input offset
        // within a channel plane or None, weight).
        let mut taps: Vec<Vec<(Option<usize>, f64)>> = Vec::with_capacity(n * points);
        for b in 0..n {
            for pt in 0..points {
                let coords = &g[(b * points + pt) * r..(b * points + pt + 1) * r];
                // The grid lists coordinates innermost axis first.
                let per_axis: Vec<AxisTaps> = (0..r)
                    .map(|d| {
                        let len = dims[d];
                        let mut v = p.denormalize(coords[r - 1 - d], len, wide);
                        if p.mode == Mode::Nearest {
                            v = v.round_ties_even();
                        }
                        p.taps(p.pad_coord(v, len), len)
                    })
                    .collect();
                taps.push(combine(&per_axis, &x_strides));
            }
        }
        let data = if p.mode == Mode::Nearest {
            // Exact for every dtype: pick one input element or a zero.
            dispatch_num!(
                &x.data,
                |v: T| T::wrap(
                    (0..n * c)
                        .flat_map(|bc| {
                            let (b, base) = (bc / c, bc * plane);
                            taps[b * points..(b + 1) * points]
                                .iter()
                                .map(move |t| t[0].0.map_or(T::default(), |o| v[base + o]))
                        })
                        .collect()
                ),
                bail!("GridSample on strings is not supported")
            )
        } else {
            let v = x.data.to_f64_vec()?;
            let mut out = Vec::with_capacity(n * c * points);
            for bc in 0..n * c {
                let (b, base) = (bc / c, bc * plane);
                for t in &taps[b * points..(b + 1) * points] {
                    out.push(
                        t.iter()
                            .map(|&(o, w)| o.map_or(0.0, |o| w * v[base + o]))
                            .sum(),
                    );
                }
            }
            from_f64(out, x.dtype(), false)?
        };
        Ok(vec![Tensor::new(out_shape, data)?])
    }
}

/// Tensor product of per-axis taps: flat offsets (None if any axis is a
/// zero) with multiplied weights.
fn combine(per_axis: &[AxisTaps], strides: &[usize]) -> Vec<(Option<usize>, f64)> {
    let mut acc: Vec<(Option<usize>, f64)> = vec![(Some(0), 1.0)];
    for (d, axis) in per_axis.iter().enumerate() {
        acc = acc
            .iter()
            .flat_map(|&(o, w)| {
                axis.iter()
                    .map(move |&(i, wi)| (o.zip(i).map(|(o, i)| o + i * strides[d]), w * wi))
            })
            .collect();
    }
    acc
}

/// AffineGrid(theta, size): the sampling grid for GridSample.
struct AffineGrid;

impl AffineGrid {
    /// Spatial sizes (D?, H, W) and batch from the `size` input.
    fn spatial(size: &[i64]) -> Result<(usize, Vec<usize>)> {
        ensure!(
            size.len() == 4 || size.len() == 5,
            "size must have 4 (N, C, H, W) or 5 (N, C, D, H, W) entries, got {}",
            size.len()
        );
        ensure!(
            size.iter().all(|&d| d >= 0),
            "size must not be negative, got {:?}",
            size
        );
        Ok((
            size[0] as usize,
            size[2..].iter().map(|&d| d as usize).collect(),
        ))
    }

    fn output_shape(n: usize, spatial: &[usize]) -> Vec<usize> {
        let mut s = vec![n];
        s.extend_from_slice(spatial);
        s.push(spatial.len());
        s
    }
}

/// Normalized positions of the `len` pixels of an axis in [-1, 1].
fn base_positions(len: usize, align_corners: bool) -> Vec<f64> {
    (0..len)
        .map(|i| {
            let i = i as f64;
            let n = len as f64;
            if align_corners {
                if len > 1 {
                    -1.0 + 2.0 * i / (n - 1.0)
                } else {
                    -1.0
                }
            } else {
                (2.0 * i + 1.0) / n - 1.0
            }
        })
        .collect()
}

impl Op for AffineGrid {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        Ok(vec![match cx.value(1) {
            Some(size) => {
                let (n, spatial) = AffineGrid::spatial(&ints(size)?)?;
                TensorType::new(dtype, AffineGrid::output_shape(n, &spatial))
            }
            None => TensorType::unknown_shape(dtype),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (theta, size) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let (n, spatial) = AffineGrid::spatial(&ints(size)?)?;
        let r = spatial.len();
        ensure!(
            theta.shape == [n, r, r + 1],
            "theta must have shape [{n}, {r}, {}], got {:?}",
            r + 1,
            theta.shape
        );
        ensure!(
            theta.dtype().is_float(),
            "theta must be a float tensor, got {}",
            theta.dtype()
        );
        let align = cx.node.attr_int_or("align_corners", 0)? != 0;
        let th = theta.data.to_f64_vec()?;
        // Homogeneous base coordinates, innermost axis first: (x, y[, z], 1).
        let bases: Vec<Vec<f64>> = spatial.iter().map(|&l| base_positions(l, align)).collect();
        let points: usize = spatial.iter().product();
        let pstrides = strides(&spatial);
        let mut out = Vec::with_capacity(n * points * r);
        for b in 0..n {
            let m = &th[b * r * (r + 1)..(b + 1) * r * (r + 1)];
            for pt in 0..points {
                let mut homo: Vec<f64> = (0..r)
                    .rev()
                    .map(|d| bases[d][(pt / pstrides[d]) % spatial[d]])
                    .collect();
                homo.push(1.0);
                for row in 0..r {
                    out.push((0..=r).map(|k| m[row * (r + 1) + k] * homo[k]).sum());
                }
            }
        }
        let data = from_f64(out, theta.dtype(), false)?;
        Ok(vec![Tensor::new(
            AffineGrid::output_shape(n, &spatial),
            data,
        )?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_follows_spec_example() {
        // x = -3.5 reflects by -1 to 1.5, then by 1 to 0.5.
        assert!((reflect(-3.5, -1.0, 1.0) - 0.5).abs() < 1e-12);
        assert_eq!(reflect(0.25, -1.0, 1.0), 0.25);
    }
}

//! Pooling: MaxPool (with its Indices output), AveragePool, LpPool, their
//! Global forms, and MaxUnpool. Window placement (pads, auto_pad,
//! ceil_mode, dilations) comes from the geometry shared with Conv.

use crate::ops::conv::window::{checked_numel, kernel_shape, Geometry, WindowAttrs};
use crate::ops::quant::floats_to;
use crate::registry::Registry;
use crate::util::{ints, numel, strides as row_strides};
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{
    bail, dispatch_all, dispatch_num, ensure, Attr, DType, Elem, Node, Num, Result, Tensor,
    TensorType,
};

pub fn register(r: &mut Registry) {
    r.add("MaxPool", MaxPool);
    r.add("AveragePool", AveragePool);
    r.add("LpPool", LpPool);
    r.add("GlobalAveragePool", GlobalPool(Reduce::Mean));
    r.add("GlobalMaxPool", GlobalPool(Reduce::Max));
    r.add("GlobalLpPool", GlobalPool(Reduce::Lp));
    r.add("MaxUnpool", MaxUnpool);
}

/// Shapes of a pool over X `[N, C, image...]`.
struct PoolShape {
    planes: usize,
    geom: Geometry,
    out: Vec<usize>,
}

impl PoolShape {
    fn new(node: &Node, x: &[usize]) -> Result<PoolShape> {
        ensure!(
            x.len() >= 3,
            "pooling input must have rank >= 3 ([N, C, spatial...]), got {x:?}"
        );
        let kernel = kernel_shape(node, None)?;
        let attrs = WindowAttrs::from_node(node, x.len() - 2)?;
        let geom = Geometry::forward(&attrs, &x[2..], &kernel)?;
        let mut out = x[..2].to_vec();
        out.extend(&geom.windows);
        checked_numel(&out)?;
        Ok(PoolShape {
            planes: x[0] * x[1],
            geom,
            out,
        })
    }
}

/// Calls `f(window_index, tap_offsets, padded_count)` for every window in
/// row-major order: the plane offsets of its taps that lie inside the image,
/// and how many of its taps lie inside the padded image (what
/// `count_include_pad` divides by; the extra room `ceil_mode` adds is not
/// padding).
fn for_each_window(g: &Geometry, mut f: impl FnMut(usize, &[usize], usize)) {
    let rank = g.image.len();
    let img_strides = row_strides(&g.image);
    // Per dimension and window position: in-image offsets and padded count.
    let per_dim: Vec<Vec<(Vec<usize>, usize)>> = (0..rank)
        .map(|d| {
            let (lo, hi) = (-g.pads_begin[d], g.image[d] as i64 + g.pads_end[d]);
            (0..g.windows[d])
                .map(|o| {
                    let coords = (0..g.kernel[d]).map(|k| g.coord(d, o, k));
                    let inside = coords
                        .clone()
                        .filter(|&c| c >= 0 && c < g.image[d] as i64)
                        .map(|c| c as usize * img_strides[d])
                        .collect();
                    (inside, coords.filter(|&c| c >= lo && c < hi).count())
                })
                .collect()
        })
        .collect();
    let (mut taps, mut next) = (Vec::new(), Vec::new());
    let mut idx = vec![0usize; rank];
    for w in 0..numel(&g.windows) {
        taps.clear();
        taps.push(0usize);
        let mut counted = 1;
        for d in 0..rank {
            let (inside, count) = &per_dim[d][idx[d]];
            counted *= count;
            next.clear();
            next.extend(
                taps.iter()
                    .flat_map(|&b| inside.iter().map(move |&o| b + o)),
            );
            std::mem::swap(&mut taps, &mut next);
        }
        f(w, &taps, counted);
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < g.windows[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Row-major plane offset → the column-major offset `storage_order=1` reports.
fn column_major(offset: usize, image: &[usize]) -> usize {
    let (mut rest, mut col, mut scale) = (offset, 0, 1);
    let mut coords = vec![0; image.len()];
    for d in (0..image.len()).rev() {
        coords[d] = rest % image[d];
        rest /= image[d];
    }
    for (d, &c) in coords.iter().enumerate() {
        col += c * scale;
        scale *= image[d];
    }
    col
}

struct MaxPool;

impl MaxPool {
    fn typed<T: Num>(x: &[T], s: &PoolShape, column_order: bool) -> (Vec<T>, Vec<i64>) {
        let (plane, wins) = (s.geom.image_size(), s.geom.window_count());
        let mut values = vec![T::default(); s.planes * wins];
        let mut indices = vec![-1i64; s.planes * wins];
        for p in 0..s.planes {
            let src = &x[p * plane..(p + 1) * plane];
            for_each_window(&s.geom, |w, taps, _| {
                let Some((&first, rest)) = taps.split_first() else {
                    return;
                };
                // Strictly greater keeps the first maximum (and a leading NaN).
                let best = rest
                    .iter()
                    .fold(first, |b, &o| if src[o] > src[b] { o } else { b });
                values[p * wins + w] = src[best];
                let spatial = if column_order {
                    column_major(best, &s.geom.image)
                } else {
                    best
                };
                indices[p * wins + w] = (p * plane + spatial) as i64;
            });
        }
        (values, indices)
    }
}

impl Op for MaxPool {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        Ok(match cx.shape(0)? {
            Some(x) => {
                let out = PoolShape::new(cx.node, x)?.out;
                vec![
                    TensorType::new(dtype, out.clone()),
                    TensorType::new(DType::I64, out),
                ]
            }
            None => vec![
                TensorType::unknown_shape(dtype),
                TensorType::unknown_shape(DType::I64),
            ],
        })
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let s = PoolShape::new(cx.node, &x.shape)?;
        let column_order = cx.node.attr_int_or("storage_order", 0)? != 0;
        ensure!(x.dtype() != DType::Bool, "MaxPool does not support bool");
        let (values, indices) = dispatch_num!(
            &x.data,
            |v: T| {
                let (values, indices) = Self::typed::<T>(v, &s, column_order);
                (T::wrap(values), indices)
            },
            bail!("MaxPool does not support strings")
        );
        Ok(vec![
            Tensor::new(s.out.clone(), values)?,
            Tensor::from_vec(s.out, indices)?,
        ])
    }
}

/// Applies `f(taps' values, padded_count) -> value` to every window of
/// every plane of a float tensor, computing in f64.
fn float_pool(
    x: &Tensor,
    s: &PoolShape,
    f: impl Fn(&mut dyn Iterator<Item = f64>, usize, usize) -> f64,
) -> Result<Tensor> {
    ensure!(
        x.dtype().is_float(),
        "pooling needs a float tensor, got {}",
        x.dtype()
    );
    let (plane, wins) = (s.geom.image_size(), s.geom.window_count());
    let xs = x.data.to_f64_vec()?;
    let mut out = vec![0f64; s.planes * wins];
    for p in 0..s.planes {
        let src = &xs[p * plane..(p + 1) * plane];
        for_each_window(&s.geom, |w, taps, counted| {
            out[p * wins + w] = f(&mut taps.iter().map(|&o| src[o]), taps.len(), counted);
        });
    }
    Tensor::new(s.out.clone(), floats_to(x.dtype(), out.into_iter())?)
}

fn float_pool_type(cx: &InferCx) -> Result<Vec<TensorType>> {
    let dtype = cx.input(0)?.ty.dtype;
    Ok(vec![match cx.shape(0)? {
        Some(x) => TensorType::new(dtype, PoolShape::new(cx.node, x)?.out),
        None => TensorType::unknown_shape(dtype),
    }])
}

struct AveragePool;

impl Op for AveragePool {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        float_pool_type(cx)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let s = PoolShape::new(cx.node, &x.shape)?;
        let include_pad = cx.node.attr_int_or("count_include_pad", 0)? != 0;
        let y = float_pool(x, &s, |vals, inside, counted| {
            vals.sum::<f64>() / if include_pad { counted } else { inside } as f64
        })?;
        Ok(vec![y])
    }
}

/// LpPool's and GlobalLpPool's `p`: a float before opset 2, an int since.
fn lp_exponent(node: &Node) -> Result<f64> {
    let p = match node.attr("p") {
        None => 2.0,
        Some(Attr::Int(p)) => *p as f64,
        Some(Attr::Float(p)) => *p as f64,
        Some(a) => bail!("attribute 'p' must be a number, got {}", a.kind()),
    };
    ensure!(p > 0.0, "attribute 'p' must be positive, got {p}");
    Ok(p)
}

fn lp_norm(vals: &mut dyn Iterator<Item = f64>, p: f64) -> f64 {
    vals.map(|v| v.abs().powf(p)).sum::<f64>().powf(1.0 / p)
}

struct LpPool;

impl Op for LpPool {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        float_pool_type(cx)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let s = PoolShape::new(cx.node, &x.shape)?;
        let p = lp_exponent(cx.node)?;
        Ok(vec![float_pool(x, &s, |vals, _, _| lp_norm(vals, p))?])
    }
}

#[derive(Clone, Copy)]
enum Reduce {
    Mean,
    Max,
    Lp,
}

/// GlobalAveragePool, GlobalMaxPool, GlobalLpPool: one window over each
/// whole plane; the spatial dims become 1.
struct GlobalPool(Reduce);

fn global_shape(x: &[usize]) -> Result<Vec<usize>> {
    ensure!(
        x.len() >= 2,
        "global pooling input must have rank >= 2 ([N, C, spatial...]), got {x:?}"
    );
    let mut out = x[..2].to_vec();
    out.resize(x.len(), 1);
    Ok(out)
}

impl Op for GlobalPool {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        Ok(vec![match cx.shape(0)? {
            Some(x) => TensorType::new(dtype, global_shape(x)?),
            None => TensorType::unknown_shape(dtype),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let out = global_shape(&x.shape)?;
        ensure!(
            x.dtype().is_float(),
            "global pooling needs a float tensor, got {}",
            x.dtype()
        );
        let planes = x.shape[0] * x.shape[1];
        let plane = numel(&x.shape[2..]);
        let xs = x.data.to_f64_vec()?;
        let p = if matches!(self.0, Reduce::Lp) {
            lp_exponent(cx.node)?
        } else {
            2.0
        };
        let values = (0..planes).map(|i| {
            let v = &xs[i * plane..(i + 1) * plane];
            match self.0 {
                Reduce::Mean => v.iter().sum::<f64>() / plane as f64,
                Reduce::Max => v.iter().copied().fold(f64::NEG_INFINITY, |m, x| {
                    if x > m || x.is_nan() {
                        x
                    } else {
                        m
                    }
                }),
                Reduce::Lp => lp_norm(&mut v.iter().copied(), p),
            }
        });
        Ok(vec![Tensor::new(out, floats_to(x.dtype(), values)?)?])
    }
}

/// MaxUnpool(X, I, output_shape?): scatters X into zeros at the flat
/// positions I (as MaxPool's Indices give them) of the image MaxPool came
/// from, `(in-1)*stride - pads + kernel`; a larger `output_shape` keeps
/// that image in its leading corner.
struct MaxUnpool;

impl MaxUnpool {
    /// (inferred shape, output shape).
    fn shapes(
        node: &Node,
        x: &[usize],
        output_shape: Option<&Tensor>,
    ) -> Result<(Vec<usize>, Vec<usize>)> {
        ensure!(
            x.len() >= 3,
            "MaxUnpool input must have rank >= 3, got {x:?}"
        );
        let rank = x.len() - 2;
        let kernel = kernel_shape(node, None)?;
        let attrs = WindowAttrs::from_node(node, rank)?;
        let geom = Geometry::transposed(&attrs, &x[2..], &kernel, &vec![0; rank], None)?;
        let mut inferred = x[..2].to_vec();
        inferred.extend(&geom.image);
        checked_numel(&inferred)?;
        let Some(os) = output_shape else {
            return Ok((inferred.clone(), inferred));
        };
        let os = ints(os)?;
        ensure!(
            os.len() == x.len(),
            "output_shape {os:?} must have rank {}",
            x.len()
        );
        ensure!(
            os.iter().all(|&v| v >= 0),
            "output_shape must not be negative, got {os:?}"
        );
        let os: Vec<usize> = os.into_iter().map(|v| v as usize).collect();
        ensure!(
            os[..2] == x[..2],
            "output_shape {os:?} must keep N and C of {x:?}"
        );
        ensure!(
            os.iter().zip(&inferred).all(|(o, i)| o >= i),
            "output_shape {os:?} is smaller than the unpooled shape {inferred:?}"
        );
        checked_numel(&os)?;
        Ok((inferred, os))
    }

    fn typed<T: Elem + Default>(
        x: &[T],
        idx: &[i64],
        inferred: &[usize],
        out: &[usize],
    ) -> Result<Vec<T>> {
        let total = numel(inferred);
        let mut y = vec![T::default(); numel(out)];
        let (in_strides, out_strides) = (row_strides(inferred), row_strides(out));
        for (v, &i) in x.iter().zip(idx) {
            ensure!(
                i >= 0 && (i as usize) < total,
                "index {i} is out of range for the unpooled shape {inferred:?}"
            );
            // Re-address the flat index of the inferred image in the output.
            let (mut rest, mut o) = (i as usize, 0);
            for d in 0..inferred.len() {
                o += rest / in_strides[d] * out_strides[d];
                rest %= in_strides[d];
            }
            y[o] = v.clone();
        }
        Ok(y)
    }
}

impl Op for MaxUnpool {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        if cx.opt_input(2).is_some() && cx.value(2).is_none() {
            return Ok(vec![TensorType::unknown_shape(dtype)]);
        }
        Ok(vec![match cx.shape(0)? {
            Some(x) => TensorType::new(dtype, Self::shapes(cx.node, x, cx.value(2))?.1),
            None => TensorType::unknown_shape(dtype),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, idx) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let (inferred, out) = Self::shapes(cx.node, &x.shape, opt_arg(inputs, 2))?;
        ensure!(
            idx.shape == x.shape,
            "indices shape {:?} differs from input shape {:?}",
            idx.shape,
            x.shape
        );
        let idx = idx.as_slice::<i64>()?;
        let data = dispatch_all!(&x.data, |v: T| T::wrap(Self::typed::<T>(
            v, idx, &inferred, &out
        )?));
        Ok(vec![Tensor::new(out, data)?])
    }
}

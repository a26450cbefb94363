//! Pooling. MaxPool with one output is a primitive (the max over each
//! window, padding never winning), with the old direct kernel; MaxPool
//! that also returns Indices stays a library op. AveragePool opens into
//! the window sums (a depthwise Conv with a kernel of ones) divided by
//! each window's constant element count; GlobalAveragePool and
//! GlobalMaxPool open into ReduceMean and ReduceMax over the spatial axes.
//! LpPool, GlobalLpPool and MaxUnpool stay library ops. Window placement
//! (pads, auto_pad, ceil_mode, dilations) comes from the geometry shared
//! with Conv.

use crate::compound::{Comp, Compound, PerNode};
use crate::ops::conv::window::{checked_numel, kernel_shape, Geometry, WindowAttrs};
use crate::ops::movement::common::input_shapes;
use crate::ops::quant::floats_to;
use crate::registry::Registry;
use crate::te::primitive::{Prim, Primitive};
use crate::te::{Access, Combiner, Expr, IndexExpr, Reduction, TensorExpr};
use crate::util::{ints, numel, strides as row_strides};
use crate::{arg, inputs_id, opt_arg, Builder, EvalCx, InferCx, Op};
use kiln_ir::{
    bail, dispatch_all, dispatch_num, ensure, Attr, DType, Data, Elem, Node, Num, Result, Tensor,
    TensorType, ValueId,
};

pub fn register(r: &mut Registry) {
    r.add(
        "MaxPool",
        PerNode {
            main: Prim(MaxPool),
            other: MaxPoolWithIndices,
            uses_other: returns_indices,
        },
    );
    r.add("AveragePool", Comp(AveragePool));
    r.add("LpPool", LpPool);
    r.add("GlobalAveragePool", Comp(GlobalPool("ReduceMean")));
    r.add("GlobalMaxPool", Comp(GlobalPool("ReduceMax")));
    r.add("GlobalLpPool", GlobalLpPool);
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

/// `out[n, c, o…] = max[k…] x[n, c, o·stride + k·dilation - pad_begin]`,
/// taps outside the image counting as the type's lowest value (-inf for
/// floats). A window lying entirely in the padding therefore gives that
/// lowest value, as PyTorch does (-inf) and onnxruntime does for integers;
/// ONNX's reference implementation leaves such an output 0.
struct MaxPool;

/// Whether a MaxPool node asks for its Indices output.
fn returns_indices(node: &Node) -> bool {
    node.outputs.get(1).is_some_and(|o| o.is_some())
}

impl MaxPool {
    /// The maxima and the flat input index of each (the first one on ties).
    fn typed<T: Num>(x: &[T], s: &PoolShape, column_order: bool) -> (Vec<T>, Vec<i64>) {
        let (plane, wins) = (s.geom.image_size(), s.geom.window_count());
        // A window with no tap in the image keeps the lowest value.
        let mut values = vec![T::from_f64(f64::NEG_INFINITY); s.planes * wins];
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

    /// Values and indices as tensors of the output shape.
    fn run(node: &Node, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let s = PoolShape::new(node, &x.shape)?;
        let column_order = node.attr_int_or("storage_order", 0)? != 0;
        ensure!(x.dtype() != DType::Bool, "MaxPool does not support bool");
        let (values, indices) = dispatch_num!(
            &x.data,
            |v: T| {
                let (values, indices) = Self::typed::<T>(v, &s, column_order);
                (T::wrap(values), indices)
            },
            bail!("MaxPool does not support strings")
        );
        Ok((
            Tensor::new(s.out.clone(), values)?,
            Tensor::from_vec(s.out, indices)?,
        ))
    }
}

impl Primitive for MaxPool {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        ensure!(
            !returns_indices(cx.node),
            "a MaxPool that returns indices has no tensor expression"
        );
        let dtype = cx.input(0)?.ty.dtype;
        ensure!(
            dtype.is_numeric() && dtype != DType::Bool,
            "MaxPool does not support {dtype}"
        );
        let (Some(inputs), Some(x)) = (input_shapes(cx), cx.shape(0)?) else {
            return Ok(None);
        };
        let s = PoolShape::new(cx.node, x)?;
        let g = &s.geom;
        let mut index = vec![IndexExpr::out(0), IndexExpr::out(1)];
        index.extend((0..g.image.len()).map(|d| g.tap_index(d, 2, 0)));
        let body = match g.reads_outside() {
            true => Expr::call(
                "Where",
                vec![
                    Expr::InBounds(0),
                    Expr::Load(0),
                    Expr::constant(dtype, f64::NEG_INFINITY)?,
                ],
            ),
            false => Expr::Load(0),
        };
        Ok(Some(
            TensorExpr {
                dtype,
                shape: s.out,
                inputs,
                accesses: vec![Access { input: 0, index }],
                reduction: Some(Reduction {
                    extents: g.kernel.clone(),
                    combiner: Combiner::Max,
                    widened: false,
                    arg: None,
                }),
                body,
            }
            .simplified(),
        ))
    }

    /// The window walk of [`MaxPoolWithIndices`], keeping the values.
    fn kernel(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Option<Result<Tensor>> {
        Some(arg(inputs, 0).and_then(|x| Ok(MaxPool::run(cx.node, x)?.0)))
    }
}

/// MaxPool with its Indices output: the flat input position of each
/// maximum (column-major within the image with `storage_order`).
struct MaxPoolWithIndices;

impl Op for MaxPoolWithIndices {
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
        let (values, indices) = MaxPool::run(cx.node, arg(inputs, 0)?)?;
        Ok(vec![values, indices])
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

/// AveragePool: the window sums, a depthwise Conv of the same windows with
/// a kernel of ones, divided by the number of taps each window averages
/// (those inside the image, or inside the padded image with
/// `count_include_pad`), a constant of the geometry.
struct AveragePool;

impl AveragePool {
    /// The Conv attributes that place its windows where the pool's are:
    /// explicit pads, the end one grown to hold the windows `ceil_mode` adds.
    fn conv_attrs(g: &Geometry, channels: usize) -> Vec<(&'static str, Attr)> {
        let ints = |v: &[usize]| Attr::Ints(v.iter().map(|&x| x as i64).collect());
        let ends = (0..g.image.len()).map(|d| {
            let reach = (g.windows[d] as i64 - 1) * g.strides[d] as i64
                + (g.kernel[d] as i64 - 1) * g.dilations[d] as i64
                + 1;
            (reach - g.image[d] as i64 - g.pads_begin[d]).max(0)
        });
        let pads = g.pads_begin.iter().copied().chain(ends).collect();
        vec![
            ("group", Attr::Int(channels as i64)),
            ("kernel_shape", ints(&g.kernel)),
            ("strides", ints(&g.strides)),
            ("dilations", ints(&g.dilations)),
            ("pads", Attr::Ints(pads)),
        ]
    }

    /// How many taps each window averages, shaped `[1, 1, windows…]`.
    fn counts(g: &Geometry, include_pad: bool, dtype: DType) -> Result<Tensor> {
        let mut counts = vec![0.0; g.window_count()];
        for_each_window(g, |w, taps, counted| {
            counts[w] = if include_pad { counted } else { taps.len() } as f64;
        });
        let mut shape = vec![1, 1];
        shape.extend(&g.windows);
        Tensor::new(shape, Data::from_f64(dtype, &counts)?)
    }
}

impl Compound for AveragePool {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let x = inputs_id(inputs, 0)?;
        let (dtype, shape) = (b.ty(x).dtype, b.shape(x)?);
        ensure!(
            dtype.is_float(),
            "pooling needs a float tensor, got {dtype}"
        );
        let s = PoolShape::new(cx.node, &shape)?;
        let g = &s.geom;
        let mut kernel = vec![shape[1], 1];
        kernel.extend(&g.kernel);
        let ones = vec![1.0; numel(&kernel)];
        let ones = b.constant(Tensor::new(kernel, Data::from_f64(dtype, &ones)?)?);
        let sums = b.op("Conv", &[x, ones], &AveragePool::conv_attrs(g, shape[1]))?;
        let include_pad = cx.node.attr_int_or("count_include_pad", 0)? != 0;
        let counts = b.constant(AveragePool::counts(g, include_pad, dtype)?);
        Ok(vec![Some(b.op("Div", &[sums, counts], &[])?)])
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

/// GlobalAveragePool and GlobalMaxPool: the reduction named here over the
/// spatial axes, which stay as 1s.
struct GlobalPool(&'static str);

fn global_shape(x: &[usize]) -> Result<Vec<usize>> {
    ensure!(
        x.len() >= 2,
        "global pooling input must have rank >= 2 ([N, C, spatial...]), got {x:?}"
    );
    let mut out = x[..2].to_vec();
    out.resize(x.len(), 1);
    Ok(out)
}

impl Compound for GlobalPool {
    fn decompose(
        &self,
        _cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let x = inputs_id(inputs, 0)?;
        let dtype = b.ty(x).dtype;
        ensure!(
            dtype.is_float(),
            "global pooling needs a float tensor, got {dtype}"
        );
        let rank = global_shape(&b.shape(x)?)?.len();
        if rank == 2 {
            // No spatial axes: every window is one element.
            return Ok(vec![Some(b.op("Identity", &[x], &[])?)]);
        }
        let axes: Vec<i64> = (2..rank as i64).collect();
        let axes = b.ints(&axes);
        let y = b.op(self.0, &[x, axes], &[("keepdims", Attr::Int(1))])?;
        Ok(vec![Some(y)])
    }
}

/// GlobalLpPool: the p-norm of each whole plane.
struct GlobalLpPool;

impl Op for GlobalLpPool {
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
        let plane = numel(&x.shape[2..]);
        let xs = x.data.to_f64_vec()?;
        let p = lp_exponent(cx.node)?;
        let values = (0..x.shape[0] * x.shape[1])
            .map(|i| lp_norm(&mut xs[i * plane..(i + 1) * plane].iter().copied(), p));
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

#[cfg(test)]
mod tests {
    use crate::ops::linalg::kernel_check::{both, random};
    use kiln_ir::Attr;

    /// The direct MaxPool kernel computes what its tensor expression says,
    /// with padding, ceil_mode, dilations and SAME padding in 1-3 dims.
    #[test]
    fn maxpool_kernel_matches_its_expression() {
        let ints = |v: &[i64]| Attr::Ints(v.to_vec());
        type Case<'a> = (&'a [usize], Vec<(&'a str, Attr)>);
        let cases: Vec<Case> = vec![
            (
                &[1, 2, 7, 7],
                vec![
                    ("kernel_shape", ints(&[3, 3])),
                    ("strides", ints(&[2, 2])),
                    ("pads", ints(&[1, 1, 1, 1])),
                ],
            ),
            (
                &[1, 1, 6, 6],
                vec![
                    ("kernel_shape", ints(&[3, 3])),
                    ("strides", ints(&[2, 2])),
                    ("ceil_mode", Attr::Int(1)),
                ],
            ),
            (
                &[1, 2, 8, 8],
                vec![
                    ("kernel_shape", ints(&[2, 2])),
                    ("dilations", ints(&[2, 2])),
                ],
            ),
            (
                &[2, 3, 10],
                vec![
                    ("kernel_shape", ints(&[4])),
                    ("strides", ints(&[3])),
                    ("auto_pad", Attr::String("SAME_UPPER".into())),
                ],
            ),
            (&[1, 1, 5, 5, 5], vec![("kernel_shape", ints(&[2, 2, 2]))]),
        ];
        let mut seed = 5;
        for (xs, attrs) in &cases {
            let x = random(xs, &mut seed);
            let (got, want) = both("MaxPool", attrs, &[&x]);
            assert_eq!(got, want, "MaxPool {xs:?} {attrs:?}");
        }
        let (xs, attrs) = &cases[0];
        assert_eq!(
            crate::ops::linalg::kernel_check::classes("MaxPool", attrs, &[&random(xs, &mut seed)]),
            "opaque(window) / many-to-many"
        );
    }
}

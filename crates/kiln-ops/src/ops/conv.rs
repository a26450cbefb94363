//! Convolutions. Conv without a bias is a primitive: a tensor expression
//! summing products over (input channel of the group, kernel window), whose
//! direct kernel is im2col per group and a matrix product; Conv with a bias
//! is a compound (that Conv, then Add of the bias). ConvInteger,
//! QLinearConv (the same kernel on centered integers), ConvTranspose and
//! Col2Im (a matrix product and col2im), DeformConv (in [`deform`]) and
//! CausalConvWithState stay library ops. The window geometry shared with
//! the pools is in [`window`].

mod deform;
pub(crate) mod window;

use crate::compound::{Comp, Compound, PerNode};
use crate::ops::linalg::gemm::{gemm, run_typed, Accepts, GemmElem, MatView, TypedKernel};
use crate::ops::linalg::{centered, infer_from};
use crate::ops::movement::common::input_shapes;
use crate::ops::quant::{combined_scale, saturate_round};
use crate::registry::Registry;
use crate::te::primitive::{Prim, Primitive};
use crate::te::{Access, Combiner, Expr, IndexExpr, Reduction, TensorExpr, Var};
use crate::util::ints;
use crate::{arg, inputs_id, opt_arg, Builder, EvalCx, InferCx, Op};
use kiln_ir::{
    bail, dispatch_num, ensure, Attr, DType, Elem, Node, Num, Result, Tensor, TensorType, ValueId,
};
use window::{checked_numel, col2im, im2col, kernel_shape, Geometry, Taps, WindowAttrs};

pub fn register(r: &mut Registry) {
    r.add(
        "Conv",
        PerNode {
            main: Prim(Conv),
            other: BiasedConv(Comp(ConvThenBias)),
            uses_other: has_bias,
        },
    );
    r.add("ConvInteger", ConvInteger);
    r.add("QLinearConv", QLinearConv);
    r.add("ConvTranspose", ConvTranspose);
    r.add("Col2Im", Col2Im);
    r.add("DeformConv", deform::DeformConv);
    r.add("CausalConvWithState", CausalConvWithState);
}

/// Shapes of a convolution: X `[N, C, image...]`, W `[M, C/group, kernel...]`.
pub(crate) struct ConvShape {
    pub batch: usize,
    pub in_channels: usize,
    pub out_channels: usize,
    pub group: usize,
    pub geom: Geometry,
}

impl ConvShape {
    pub fn new(node: &Node, x: &[usize], w: &[usize]) -> Result<ConvShape> {
        ensure!(
            x.len() >= 3,
            "convolution input must have rank >= 3 ([N, C, spatial...]), got {x:?}"
        );
        ensure!(
            w.len() == x.len(),
            "weights of shape {w:?} do not match input rank {}",
            x.len()
        );
        let group = node.attr_int_or("group", 1)?;
        ensure!(group >= 1, "group must be positive, got {group}");
        let group = group as usize;
        let (c, m) = (x[1], w[0]);
        ensure!(
            w[1].checked_mul(group) == Some(c),
            "input has {c} channels but weights {w:?} with group {group} disagree"
        );
        ensure!(
            m.is_multiple_of(group),
            "{m} output channels do not divide into {group} groups"
        );
        let kernel = kernel_shape(node, Some(&w[2..]))?;
        let attrs = WindowAttrs::from_node(node, x.len() - 2)?;
        let geom = Geometry::forward(&attrs, &x[2..], &kernel)?;
        let cs = ConvShape {
            batch: x[0],
            in_channels: c,
            out_channels: m,
            group,
            geom,
        };
        checked_numel(&cs.out_shape())?;
        Ok(cs)
    }

    pub fn out_shape(&self) -> Vec<usize> {
        let mut s = vec![self.batch, self.out_channels];
        s.extend(&self.geom.windows);
        s
    }
}

/// Checks an optional per-output-channel bias.
fn check_bias(b: Option<&[usize]>, channels: usize) -> Result<()> {
    if let Some(b) = b {
        ensure!(
            b == [channels],
            "bias must have shape [{channels}], got {b:?}"
        );
    }
    Ok(())
}

/// Adds `bias[c]` to every element of output channel `c`.
fn add_bias<T: GemmElem>(out: &mut [T], bias: &[T], plane: usize) {
    if plane == 0 {
        return;
    }
    for (i, chunk) in out.chunks_exact_mut(plane).enumerate() {
        let b = bias[i % bias.len()];
        chunk.iter_mut().for_each(|v| *v = v.add(b));
    }
}

/// The convolution of `x` by `w` (plus `bias`), per batch item and group:
/// the group's weights `[M/g, C/g*K]` times its im2col matrix `[C/g*K, windows]`.
pub(crate) fn conv_forward<T: GemmElem>(
    cs: &ConvShape,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
) -> Result<Vec<T>> {
    let g = &cs.geom;
    let (cg, mg) = (cs.in_channels / cs.group, cs.out_channels / cs.group);
    let (kt, wins, plane) = (g.kernel_size(), g.window_count(), g.image_size());
    ensure!(
        x.len() == cs.batch * cs.in_channels * plane,
        "input size does not match its shape"
    );
    ensure!(
        w.len() == cs.out_channels * cg * kt,
        "weight size does not match its shape"
    );
    let taps = Taps::new(g);
    let pointwise = g.is_pointwise();
    let mut cols = if pointwise {
        Vec::new()
    } else {
        vec![T::default(); cg * kt * wins]
    };
    let mut out = vec![T::zero(); cs.batch * cs.out_channels * wins];
    for b in 0..cs.batch {
        for gi in 0..cs.group {
            let x_off = (b * cs.in_channels + gi * cg) * plane;
            let col_view = if pointwise {
                MatView::row_major(x, x_off, cg, wins)?
            } else {
                im2col(&x[x_off..x_off + cg * plane], cg, g, &taps, &mut cols);
                MatView::row_major(&cols, 0, cg * kt, wins)?
            };
            let w_view = MatView::row_major(w, gi * mg * cg * kt, mg, cg * kt)?;
            let o_off = (b * cs.out_channels + gi * mg) * wins;
            gemm(w_view, col_view, &mut out[o_off..o_off + mg * wins])?;
        }
    }
    if let Some(bias) = bias {
        add_bias(&mut out, bias, wins);
    }
    Ok(out)
}

/// `out[n, m, o…] = sum[c < C/group, k…] Mul(x[n, g·C/group + c, o·stride +
/// k·dilation - pad_begin], w[m, c, k…])` where `g` is the group of output
/// channel `m`; taps in the padding read zero.
struct Conv;

/// Whether a Conv node has a bias input.
fn has_bias(node: &Node) -> bool {
    node.inputs.get(2).is_some_and(|b| b.is_some())
}

struct ConvKernel<'a>(&'a ConvShape);

impl TypedKernel for ConvKernel<'_> {
    fn run<T: GemmElem>(&self, inputs: &[&[T]]) -> Result<Vec<T>> {
        conv_forward(self.0, inputs[0], inputs[1], inputs.get(2).copied())
    }
}

impl Primitive for Conv {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        ensure!(
            cx.opt_input(2).is_none(),
            "a Conv with a bias is a compound (Conv, then Add) and has no tensor expression"
        );
        let (dtype, wtype) = (cx.input(0)?.ty.dtype, cx.input(1)?.ty.dtype);
        ensure!(dtype == wtype, "input types differ: {dtype} and {wtype}");
        let (Some(inputs), Some(x), Some(w)) = (input_shapes(cx), cx.shape(0)?, cx.shape(1)?)
        else {
            return Ok(None);
        };
        let cs = ConvShape::new(cx.node, x, w)?;
        conv_expression(dtype, &cs, inputs).map(Some)
    }

    /// im2col and a matrix product per batch item and group.
    fn kernel(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Option<Result<Tensor>> {
        Some(conv_kernel(cx.node, inputs))
    }
}

/// The direct convolution kernel, adding the bias input when there is one.
fn conv_kernel(node: &Node, inputs: &[Option<&Tensor>]) -> Result<Tensor> {
    let (x, w, b) = (arg(inputs, 0)?, arg(inputs, 1)?, opt_arg(inputs, 2));
    let cs = ConvShape::new(node, &x.shape, &w.shape)?;
    check_bias(b.map(|b| b.shape.as_slice()), cs.out_channels)?;
    let mut operands = vec![x, w];
    operands.extend(b);
    let data = run_typed(&ConvKernel(&cs), &operands, Accepts::Floats)?;
    Tensor::new(cs.out_shape(), data)
}

/// The tensor expression of a convolution of shapes `cs`. Reduction dims:
/// `r0` the input channel within the group, `r1…` the kernel taps. The
/// input channel is `g·C/group + r0` with `g = m floordiv (M/group)`, an
/// affine or floordiv map when the group has one input or one output
/// channel (depthwise) or there is one group; otherwise a last reduction
/// dim runs over the groups and a select keeps the one of `m`.
fn conv_expression(
    dtype: DType,
    cs: &ConvShape,
    inputs: Vec<Option<Vec<usize>>>,
) -> Result<TensorExpr> {
    let g = &cs.geom;
    let n = g.image.len();
    let (cg, mg) = (cs.in_channels / cs.group, cs.out_channels / cs.group);
    let mut extents = vec![cg];
    extents.extend(&g.kernel);
    let per_group = cs.group > 1 && cg > 1 && mg > 1;
    let channel = if cs.group == 1 {
        IndexExpr::red(0)
    } else if mg == 1 {
        IndexExpr::affine([(Var::Out(1), cg as i64), (Var::Red(0), 1)], 0)
    } else if cg == 1 {
        IndexExpr::Div(Box::new(IndexExpr::out(1)), mg as i64)
    } else {
        extents.push(cs.group);
        IndexExpr::affine([(Var::Red(n + 1), cg as i64), (Var::Red(0), 1)], 0)
    };
    let mut ix = vec![IndexExpr::out(0), channel];
    let mut iw = vec![IndexExpr::out(1), IndexExpr::red(0)];
    for d in 0..n {
        ix.push(g.tap_index(d, 2, 1));
        iw.push(IndexExpr::red(1 + d));
    }
    let zero = Expr::constant(dtype, 0.0)?;
    let x = match g.reads_outside() {
        true => Expr::call(
            "Where",
            vec![Expr::InBounds(0), Expr::Load(0), zero.clone()],
        ),
        false => Expr::Load(0),
    };
    let mut body = Expr::call("Mul", vec![x, Expr::Load(1)]);
    if per_group {
        let own_group = Expr::call(
            "Equal",
            vec![
                Expr::Index(IndexExpr::red(n + 1)),
                Expr::Index(IndexExpr::Div(Box::new(IndexExpr::out(1)), mg as i64)),
            ],
        );
        body = Expr::call("Where", vec![own_group, body, zero]);
    }
    Ok(TensorExpr {
        dtype,
        shape: cs.out_shape(),
        inputs,
        accesses: vec![
            Access {
                input: 0,
                index: ix,
            },
            Access {
                input: 1,
                index: iw,
            },
        ],
        reduction: Some(Reduction {
            extents,
            combiner: Combiner::Sum,
            widened: true,
        }),
        body,
    }
    .simplified())
}

/// Conv with a bias: the compound [`ConvThenBias`]. The interpreter runs it
/// with the bias fused into the direct kernel, which rounds each sum to the
/// element type and then adds the bias, as the decomposition's Add does
/// (bit for bit in f32 and f64; f16 and bf16 round once instead of twice).
struct BiasedConv(Comp<ConvThenBias>);

impl Op for BiasedConv {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        self.0.infer(cx)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![conv_kernel(cx.node, inputs)?])
    }

    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        self.0.decompose(cx, b, inputs)
    }
}

/// The Conv without its bias, then Add of the bias viewed as `[M, 1, …, 1]`
/// so it broadcasts over the output channels.
struct ConvThenBias;

impl Compound for ConvThenBias {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let (x, w, bias) = (
            inputs_id(inputs, 0)?,
            inputs_id(inputs, 1)?,
            inputs_id(inputs, 2)?,
        );
        let attrs: Vec<(&str, Attr)> = cx
            .node
            .attrs
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let y = b.op("Conv", &[x, w], &attrs)?;
        let out = b.shape(y)?;
        check_bias(Some(&b.shape(bias)?), out[1])?;
        let mut view = vec![out[1] as i64];
        view.resize(out.len() - 1, 1);
        let view = b.ints(&view);
        let column = b.op("Reshape", &[bias, view], &[])?;
        Ok(vec![Some(b.op("Add", &[y, column], &[])?)])
    }
}

/// How a convolution zero point broadcasts: a scalar, or one value per
/// index of `axis` (channels of X, output channels of W).
fn channel_param_shape(p: &Tensor, rank: usize, axis: usize) -> Vec<usize> {
    if p.len() == 1 {
        return vec![];
    }
    let mut s = vec![1; rank];
    s[axis] = p.len();
    s
}

/// `x - x_zp` and `w - w_zp` as exact i32 values and the convolution of them.
fn integer_conv(
    node: &Node,
    x: &Tensor,
    x_zp: Option<&Tensor>,
    w: &Tensor,
    w_zp: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<(ConvShape, Vec<i32>)> {
    let cs = ConvShape::new(node, &x.shape, &w.shape)?;
    let xc = centered(
        x,
        x_zp,
        &x_zp.map_or(vec![], |z| channel_param_shape(z, x.rank(), 1)),
    )?;
    let wc = centered(
        w,
        w_zp,
        &w_zp.map_or(vec![], |z| channel_param_shape(z, w.rank(), 0)),
    )?;
    let bias = match bias {
        Some(b) => {
            check_bias(Some(&b.shape), cs.out_channels)?;
            Some(b.as_slice::<i32>()?)
        }
        None => None,
    };
    let out = conv_forward(&cs, &xc, &wc, bias)?;
    Ok((cs, out))
}

/// ConvInteger(x, w, x_zero_point?, w_zero_point?) -> i32.
struct ConvInteger;

impl Op for ConvInteger {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![infer_from(cx, DType::I32, &[0, 1], |s| {
            Ok(ConvShape::new(cx.node, s[0], s[1])?.out_shape())
        })?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, w) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let (cs, out) = integer_conv(cx.node, x, opt_arg(inputs, 2), w, opt_arg(inputs, 3), None)?;
        Ok(vec![Tensor::from_vec(cs.out_shape(), out)?])
    }
}

/// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?).
struct QLinearConv;

impl Op for QLinearConv {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx
            .opt_input(7)
            .map_or(cx.input(0)?.ty.dtype, |z| z.ty.dtype);
        Ok(vec![infer_from(cx, dtype, &[0, 3], |s| {
            Ok(ConvShape::new(cx.node, s[0], s[1])?.out_shape())
        })?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, x_scale, w, w_scale, y_scale) = (
            arg(inputs, 0)?,
            arg(inputs, 1)?,
            arg(inputs, 3)?,
            arg(inputs, 4)?,
            arg(inputs, 6)?,
        );
        let y_zp = opt_arg(inputs, 7);
        let (cs, acc) = integer_conv(
            cx.node,
            x,
            opt_arg(inputs, 2),
            w,
            opt_arg(inputs, 5),
            opt_arg(inputs, 8),
        )?;
        ensure!(
            x_scale.len() == 1 && y_scale.len() == 1,
            "QLinearConv x_scale and y_scale must be scalars"
        );
        ensure!(
            w_scale.len() == 1 || w_scale.shape == [cs.out_channels],
            "w_scale must be a scalar or have shape [{}], got {:?}",
            cs.out_channels,
            w_scale.shape
        );
        let scale_dtype = x_scale.dtype();
        ensure!(
            scale_dtype.is_float(),
            "QLinearConv scales must be floats, got {scale_dtype}"
        );
        let (xs, ys) = (x_scale.data.get_f64(0), y_scale.data.get_f64(0));
        let multipliers: Vec<f64> = w_scale
            .data
            .to_f64_vec()?
            .into_iter()
            .map(|ws| combined_scale(scale_dtype, xs, ws, ys))
            .collect();
        let zp = match y_zp {
            Some(z) => {
                ensure!(z.len() == 1, "QLinearConv y_zero_point must be a scalar");
                z.data.get_f64(0)
            }
            None => 0.0,
        };
        let plane = cs.geom.window_count().max(1);
        let values = acc.iter().enumerate().map(|(i, &v)| {
            v as f64 * multipliers[(i / plane) % cs.out_channels % multipliers.len()] + zp
        });
        let dtype = y_zp.map_or(x.dtype(), |z| z.dtype());
        Ok(vec![Tensor::new(
            cs.out_shape(),
            saturate_round(dtype, values)?,
        )?])
    }
}

/// Shapes of a transposed convolution: X `[N, C, in...]`, W `[C, M/group, kernel...]`;
/// the output image follows [`Geometry::transposed`].
struct ConvTransposeShape {
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    group: usize,
    geom: Geometry,
}

impl ConvTransposeShape {
    fn new(node: &Node, x: &[usize], w: &[usize]) -> Result<ConvTransposeShape> {
        ensure!(
            x.len() >= 3,
            "ConvTranspose input must have rank >= 3, got {x:?}"
        );
        ensure!(
            w.len() == x.len(),
            "weights of shape {w:?} do not match input rank {}",
            x.len()
        );
        let rank = x.len() - 2;
        let group = node.attr_int_or("group", 1)?;
        ensure!(group >= 1, "group must be positive, got {group}");
        let group = group as usize;
        ensure!(
            w[0] == x[1],
            "input has {} channels but weights {w:?} expect {}",
            x[1],
            w[0]
        );
        ensure!(
            x[1].is_multiple_of(group),
            "{} input channels do not divide into {group} groups",
            x[1]
        );
        let kernel = kernel_shape(node, Some(&w[2..]))?;
        let attrs = WindowAttrs::from_node(node, rank)?;
        let output_padding: Vec<usize> = match node.attr_ints("output_padding")? {
            Some(p) => {
                ensure!(
                    p.iter().all(|&v| v >= 0),
                    "output_padding must not be negative, got {p:?}"
                );
                p.iter().map(|&v| v as usize).collect()
            }
            None => vec![0; rank],
        };
        let output_shape: Option<Vec<usize>> = match node.attr_ints("output_shape")? {
            Some(s) => {
                ensure!(
                    s.iter().all(|&v| v >= 0),
                    "output_shape must not be negative, got {s:?}"
                );
                // Some exporters write the full [N, C, spatial...] shape.
                let spatial = if s.len() == rank + 2 { &s[2..] } else { s };
                Some(spatial.iter().map(|&v| v as usize).collect())
            }
            None => None,
        };
        let geom = Geometry::transposed(
            &attrs,
            &x[2..],
            &kernel,
            &output_padding,
            output_shape.as_deref(),
        )?;
        let out_channels = w[1]
            .checked_mul(group)
            .ok_or_else(|| kiln_ir::Error::new("too many output channels"))?;
        let shape = ConvTransposeShape {
            batch: x[0],
            in_channels: x[1],
            out_channels,
            group,
            geom,
        };
        checked_numel(&shape.out_shape())?;
        Ok(shape)
    }

    fn out_shape(&self) -> Vec<usize> {
        let mut s = vec![self.batch, self.out_channels];
        s.extend(&self.geom.image);
        s
    }
}

struct ConvTranspose;

struct ConvTransposeKernel<'a>(&'a ConvTransposeShape);

impl TypedKernel for ConvTransposeKernel<'_> {
    /// Per batch item and group: columns = W_gᵀ · X_g, scattered into the
    /// output image by col2im.
    fn run<T: GemmElem>(&self, inputs: &[&[T]]) -> Result<Vec<T>> {
        let s = self.0;
        let (x, w) = (inputs[0], inputs[1]);
        let g = &s.geom;
        let (cg, mg) = (s.in_channels / s.group, s.out_channels / s.group);
        let (kt, wins, plane) = (g.kernel_size(), g.window_count(), g.image_size());
        let taps = Taps::new(g);
        let mut cols = vec![T::zero(); mg * kt * wins];
        let mut out = vec![T::zero(); s.batch * s.out_channels * plane];
        for b in 0..s.batch {
            for gi in 0..s.group {
                let x_view = MatView::row_major(x, (b * s.in_channels + gi * cg) * wins, cg, wins)?;
                let w_view = MatView::row_major(w, gi * cg * mg * kt, cg, mg * kt)?;
                gemm(w_view.t(), x_view, &mut cols)?;
                let o_off = (b * s.out_channels + gi * mg) * plane;
                col2im(
                    &cols,
                    mg,
                    g,
                    &taps,
                    &mut out[o_off..o_off + mg * plane],
                    T::add,
                );
            }
        }
        if let Some(bias) = inputs.get(2) {
            add_bias(&mut out, bias, plane);
        }
        Ok(out)
    }
}

impl Op for ConvTranspose {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        Ok(vec![infer_from(cx, dtype, &[0, 1], |s| {
            let shape = ConvTransposeShape::new(cx.node, s[0], s[1])?;
            check_bias(
                cx.opt_input(2).and_then(|b| b.ty.shape.as_deref()),
                shape.out_channels,
            )?;
            Ok(shape.out_shape())
        })?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, w, b) = (arg(inputs, 0)?, arg(inputs, 1)?, opt_arg(inputs, 2));
        let shape = ConvTransposeShape::new(cx.node, &x.shape, &w.shape)?;
        check_bias(b.map(|b| b.shape.as_slice()), shape.out_channels)?;
        let mut operands = vec![x, w];
        operands.extend(b);
        let data = run_typed(&ConvTransposeKernel(&shape), &operands, Accepts::Floats)?;
        Ok(vec![Tensor::new(shape.out_shape(), data)?])
    }
}

/// Col2Im(input [N, C*prod(block), L], image_shape, block_shape): sums the
/// sliding blocks back into images `[N, C, image...]`.
struct Col2Im;

struct Col2ImShape {
    batch: usize,
    channels: usize,
    geom: Geometry,
}

impl Col2ImShape {
    fn new(node: &Node, input: &[usize], image: &Tensor, block: &Tensor) -> Result<Col2ImShape> {
        let to_dims = |t: &Tensor, what: &str| -> Result<Vec<usize>> {
            let v = ints(t)?;
            ensure!(
                t.rank() == 1 && !v.is_empty(),
                "{what} must be a non-empty 1-D tensor"
            );
            ensure!(
                v.iter().all(|&x| x >= 1),
                "{what} must be positive, got {v:?}"
            );
            Ok(v.into_iter().map(|x| x as usize).collect())
        };
        let (image, block) = (
            to_dims(image, "image_shape")?,
            to_dims(block, "block_shape")?,
        );
        ensure!(
            image.len() == block.len(),
            "image_shape {image:?} and block_shape {block:?} differ in rank"
        );
        ensure!(
            input.len() == 3,
            "Col2Im input must be [N, C*prod(block_shape), L], got {input:?}"
        );
        let attrs = WindowAttrs::from_node(node, image.len())?;
        let geom = Geometry::forward(&attrs, &image, &block)?;
        let kt = geom.kernel_size();
        ensure!(
            input[1].is_multiple_of(kt),
            "input dim 1 ({}) is not a multiple of the block size {kt}",
            input[1]
        );
        ensure!(
            input[2] == geom.window_count(),
            "input has {} blocks but the geometry gives {}",
            input[2],
            geom.window_count()
        );
        let shape = Col2ImShape {
            batch: input[0],
            channels: input[1] / kt,
            geom,
        };
        checked_numel(&shape.out_shape())?;
        Ok(shape)
    }

    fn out_shape(&self) -> Vec<usize> {
        let mut s = vec![self.batch, self.channels];
        s.extend(&self.geom.image);
        s
    }
}

struct Col2ImKernel<'a>(&'a Col2ImShape);

impl TypedKernel for Col2ImKernel<'_> {
    fn run<T: GemmElem>(&self, inputs: &[&[T]]) -> Result<Vec<T>> {
        let s = self.0;
        let g = &s.geom;
        let taps = Taps::new(g);
        let (per_in, per_out) = (
            s.channels * g.kernel_size() * g.window_count(),
            s.channels * g.image_size(),
        );
        let mut out = vec![T::zero(); s.batch * per_out];
        for b in 0..s.batch {
            col2im(
                &inputs[0][b * per_in..(b + 1) * per_in],
                s.channels,
                g,
                &taps,
                &mut out[b * per_out..(b + 1) * per_out],
                T::add,
            );
        }
        Ok(out)
    }
}

impl Op for Col2Im {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        match (cx.shape(0)?, cx.value(1), cx.value(2)) {
            (Some(input), Some(image), Some(block)) => Ok(vec![TensorType::new(
                dtype,
                Col2ImShape::new(cx.node, input, image, block)?.out_shape(),
            )]),
            _ => Ok(vec![TensorType::unknown_shape(dtype)]),
        }
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let shape = Col2ImShape::new(cx.node, &x.shape, arg(inputs, 1)?, arg(inputs, 2)?)?;
        if x.dtype() == DType::Bool || x.dtype() == DType::Str {
            bail!("Col2Im does not support {}", x.dtype());
        }
        let data = run_typed(&Col2ImKernel(&shape), &[x], Accepts::Numbers)?;
        Ok(vec![Tensor::new(shape.out_shape(), data)?])
    }
}

/// CausalConvWithState(input [B, C, L], weight [C, 1, k], bias?, past_state?)
/// -> (output [B, C, L], present_state [B, C, k-1]): per channel, the
/// sequence `past_state ++ input` (zeros when there is no state) is
/// convolved with the channel's kernel, optionally followed by SiLU; the
/// last k-1 positions of that sequence are the next state.
struct CausalConvWithState;

impl CausalConvWithState {
    /// (kernel size, whether SiLU follows) after checking the shapes.
    fn check(
        node: &Node,
        x: &[usize],
        w: &[usize],
        bias: Option<&[usize]>,
        past: Option<&[usize]>,
    ) -> Result<(usize, bool)> {
        ensure!(
            x.len() == 3,
            "input must be [batch, channels, length], got {x:?}"
        );
        ensure!(
            w.len() == 3 && w[0] == x[1] && w[1] == 1 && w[2] >= 1,
            "weight must be [{}, 1, k] with k >= 1, got {w:?}",
            x[1]
        );
        check_bias(bias, x[1])?;
        if let Some(p) = past {
            ensure!(
                p == [x[0], x[1], w[2] - 1],
                "past_state must be [{}, {}, {}], got {p:?}",
                x[0],
                x[1],
                w[2] - 1
            );
        }
        let silu = match node.attr_string_or("activation", "none")? {
            "none" => false,
            "silu" | "swish" => true,
            other => bail!("unknown activation '{other}' (expected none, silu or swish)"),
        };
        Ok((w[2], silu))
    }

    fn typed<T: Num>(
        x: &[T],
        shape: &[usize],
        w: &[T],
        bias: Option<&[T]>,
        past: Option<&[T]>,
        k: usize,
        silu: bool,
    ) -> (Vec<T>, Vec<T>) {
        let (rows, len) = (shape[0] * shape[1], shape[2]);
        let mut out = Vec::with_capacity(rows * len);
        let mut state = Vec::with_capacity(rows * (k - 1));
        let mut seq = Vec::with_capacity(len + k - 1);
        for r in 0..rows {
            let c = r % shape[1];
            seq.clear();
            match past {
                Some(p) => seq.extend(p[r * (k - 1)..(r + 1) * (k - 1)].iter().map(|v| v.to_f64())),
                None => seq.resize(k - 1, 0.0),
            }
            seq.extend(x[r * len..(r + 1) * len].iter().map(|v| v.to_f64()));
            let kernel = &w[c * k..(c + 1) * k];
            let b = bias.map_or(0.0, |b| b[c].to_f64());
            for t in 0..len {
                let sum = b + kernel
                    .iter()
                    .zip(&seq[t..t + k])
                    .map(|(wv, sv)| wv.to_f64() * sv)
                    .sum::<f64>();
                // The convolution is rounded to T before the activation, as the reference does.
                let v = T::from_f64(sum).to_f64();
                out.push(T::from_f64(if silu { v / (1.0 + (-v).exp()) } else { v }));
            }
            state.extend(seq[seq.len() - (k - 1)..].iter().map(|&v| T::from_f64(v)));
        }
        (out, state)
    }
}

impl Op for CausalConvWithState {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        let (Some(x), Some(w)) = (cx.shape(0)?, cx.shape(1)?) else {
            return Ok(vec![TensorType::unknown_shape(dtype); 2]);
        };
        let shape_of = |i: usize| cx.opt_input(i).and_then(|t| t.ty.shape.as_deref());
        let (k, _) = Self::check(cx.node, x, w, shape_of(2), shape_of(3))?;
        Ok(vec![
            TensorType::new(dtype, x.to_vec()),
            TensorType::new(dtype, vec![x[0], x[1], k - 1]),
        ])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, w, bias, past) = (
            arg(inputs, 0)?,
            arg(inputs, 1)?,
            opt_arg(inputs, 2),
            opt_arg(inputs, 3),
        );
        let (k, silu) = Self::check(
            cx.node,
            &x.shape,
            &w.shape,
            bias.map(|b| b.shape.as_slice()),
            past.map(|p| p.shape.as_slice()),
        )?;
        ensure!(
            x.dtype().is_float(),
            "CausalConvWithState needs a float input, got {}",
            x.dtype()
        );
        let (out, state) = dispatch_num!(
            &x.data,
            |v: T| {
                let bias = bias.map(|b| b.as_slice::<T>()).transpose()?;
                let past = past.map(|p| p.as_slice::<T>()).transpose()?;
                let (out, state) =
                    Self::typed::<T>(v, &x.shape, w.as_slice::<T>()?, bias, past, k, silu);
                (T::wrap(out), T::wrap(state))
            },
            bail!("CausalConvWithState needs a float input")
        );
        Ok(vec![
            Tensor::new(x.shape.clone(), out)?,
            Tensor::new(vec![x.shape[0], x.shape[1], k - 1], state)?,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::Attr;

    /// Direct convolution straight from the definition, in f64.
    #[allow(clippy::too_many_arguments)]
    fn naive_conv2d(
        x: &[f32],
        xs: [usize; 4],
        w: &[f32],
        ws: [usize; 4],
        group: usize,
        stride: [usize; 2],
        dil: [usize; 2],
        pads: [usize; 4],
    ) -> (Vec<usize>, Vec<f32>) {
        let [n, c, h, wd] = xs;
        let [m, cg, kh, kw] = ws;
        let oh = (h + pads[0] + pads[2] - (dil[0] * (kh - 1) + 1)) / stride[0] + 1;
        let ow = (wd + pads[1] + pads[3] - (dil[1] * (kw - 1) + 1)) / stride[1] + 1;
        let mg = m / group;
        let mut out = vec![0f32; n * m * oh * ow];
        for b in 0..n {
            for oc in 0..m {
                let g = oc / mg;
                for y in 0..oh {
                    for xq in 0..ow {
                        let mut s = 0f64;
                        for ic in 0..cg {
                            let ci = g * cg + ic;
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (y * stride[0] + ky * dil[0]) as i64 - pads[0] as i64;
                                    let ix = (xq * stride[1] + kx * dil[1]) as i64 - pads[1] as i64;
                                    if iy < 0 || ix < 0 || iy >= h as i64 || ix >= wd as i64 {
                                        continue;
                                    }
                                    let xv = x[((b * c + ci) * h + iy as usize) * wd + ix as usize]
                                        as f64;
                                    let wv = w[((oc * cg + ic) * kh + ky) * kw + kx] as f64;
                                    s += xv * wv;
                                }
                            }
                        }
                        out[((b * m + oc) * oh + y) * ow + xq] = s as f32;
                    }
                }
            }
        }
        (vec![n, m, oh, ow], out)
    }

    #[test]
    fn strided_dilated_grouped_conv_matches_direct_convolution() {
        let (xs, ws) = ([2, 6, 11, 9], [4, 3, 3, 2]);
        let (group, stride, dil, pads) = (2, [2, 1], [2, 3], [1, 2, 0, 1]);
        let x: Vec<f32> = (0..xs.iter().product::<usize>())
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let w: Vec<f32> = (0..ws.iter().product::<usize>())
            .map(|i| ((i * 13 % 17) as f32 - 8.0) / 5.0)
            .collect();
        let mut node = Node {
            name: String::new(),
            op: "Conv".into(),
            domain: String::new(),
            inputs: vec![],
            outputs: vec![],
            attrs: Default::default(),
        };
        node.attrs.insert("group".into(), Attr::Int(group as i64));
        node.attrs.insert(
            "strides".into(),
            Attr::Ints(stride.iter().map(|&v| v as i64).collect()),
        );
        node.attrs.insert(
            "dilations".into(),
            Attr::Ints(dil.iter().map(|&v| v as i64).collect()),
        );
        node.attrs.insert(
            "pads".into(),
            Attr::Ints(pads.iter().map(|&v| v as i64).collect()),
        );
        let cs = ConvShape::new(&node, &xs, &ws).unwrap();
        let got = conv_forward::<f32>(&cs, &x, &w, None).unwrap();
        let (want_shape, want) = naive_conv2d(&x, xs, &w, ws, group, stride, dil, pads);
        assert_eq!(cs.out_shape(), want_shape);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "element {i}: {g} vs {w}"
            );
        }
    }

    /// The im2col kernel computes what Conv's tensor expression says: plain,
    /// grouped (one and several channels per group on each side), strided,
    /// dilated, padded and SAME-padded, in 1, 2 and 3 spatial dims.
    #[test]
    fn conv_kernel_matches_its_expression() {
        use crate::ops::linalg::kernel_check::{assert_close, both, random};
        let ints = |v: &[i64]| Attr::Ints(v.to_vec());
        let same = |s: &str| Attr::String(s.into());
        type Case<'a> = (&'a [usize], &'a [usize], Vec<(&'a str, Attr)>);
        let cases: Vec<Case> = vec![
            (
                &[1, 3, 7, 6],
                &[4, 3, 3, 3],
                vec![("pads", ints(&[1, 1, 1, 1])), ("strides", ints(&[2, 1]))],
            ),
            (
                &[2, 6, 5, 5],
                &[4, 3, 3, 2],
                vec![
                    ("group", Attr::Int(2)),
                    ("dilations", ints(&[2, 1])),
                    ("pads", ints(&[1, 0, 2, 1])),
                ],
            ),
            (
                &[1, 4, 6, 6],
                &[8, 1, 3, 3],
                vec![
                    ("group", Attr::Int(4)),
                    ("auto_pad", same("SAME_UPPER")),
                    ("strides", ints(&[2, 2])),
                ],
            ),
            (
                &[1, 6, 5, 5],
                &[3, 2, 2, 2],
                vec![("group", Attr::Int(3)), ("auto_pad", same("SAME_LOWER"))],
            ),
            (
                &[2, 2, 9],
                &[3, 2, 4],
                vec![
                    ("strides", ints(&[3])),
                    ("pads", ints(&[2, 1])),
                    ("dilations", ints(&[2])),
                ],
            ),
            (
                &[1, 2, 4, 4, 3],
                &[2, 2, 2, 3, 2],
                vec![("pads", ints(&[1, 0, 1, 0, 1, 1]))],
            ),
            (&[1, 5, 4, 4], &[3, 5, 1, 1], vec![]),
        ];
        let mut seed = 11;
        for (xs, ws, attrs) in &cases {
            let (x, w) = (random(xs, &mut seed), random(ws, &mut seed));
            let (got, want) = both("Conv", attrs, &[&x, &w]);
            assert_close(
                &got,
                &want,
                1e-5,
                &format!("Conv {xs:?} * {ws:?} {attrs:?}"),
            );
        }
        // Padding guards the input read; the product is still a convolution.
        let (xs, ws, attrs) = &cases[0];
        let (x, w) = (random(xs, &mut seed), random(ws, &mut seed));
        assert_eq!(
            crate::ops::linalg::kernel_check::classes("Conv", attrs, &[&x, &w]),
            "opaque(conv) / many-to-many"
        );
    }

    /// The fused bias gives what the decomposition (Conv, then Add) gives.
    #[test]
    fn fused_bias_matches_the_decomposition() {
        use crate::ops::linalg::kernel_check::random;
        let node = Node {
            name: "conv".into(),
            op: "Conv".into(),
            domain: String::new(),
            inputs: vec![None; 3],
            outputs: vec![None],
            attrs: [("pads".to_string(), Attr::Ints(vec![1, 0, 1, 0]))].into(),
        };
        let mut seed = 13;
        let (x, w, b) = (
            random(&[1, 4, 5, 5], &mut seed),
            random(&[6, 4, 3, 2], &mut seed),
            random(&[6], &mut seed),
        );
        let ins = [Some(&x), Some(&w), Some(&b)];
        let cx = EvalCx {
            node: &node,
            opset: 17,
            subgraphs: &NoSubgraphs,
        };
        let fused = BiasedConv(Comp(ConvThenBias)).eval(&cx, &ins).unwrap();
        let opened = Comp(ConvThenBias).eval(&cx, &ins).unwrap();
        assert_eq!(fused, opened);
    }

    struct NoSubgraphs;

    impl crate::SubgraphRunner for NoSubgraphs {
        fn run(&self, _g: &kiln_ir::Graph, _inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
            bail!("no subgraphs here")
        }
    }
}

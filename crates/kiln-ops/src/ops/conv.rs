//! Convolutions. Conv without a bias is a primitive: a tensor expression
//! summing products over (input channel of the group, kernel window), whose
//! direct kernel is im2col per group and a matrix product; Conv with a bias
//! is a compound (that Conv, then Add of the bias). ConvInteger,
//! QLinearConv (the same kernel on centered integers), ConvTranspose and
//! Col2Im (a matrix product and col2im), DeformConv and CausalConvWithState
//! stay library ops, one file each by job: [`integer`] (ConvInteger,
//! QLinearConv), [`transpose`] (ConvTranspose, Col2Im), [`deform`],
//! [`causal`]. The window geometry shared with the pools is in [`window`].

mod causal;
mod deform;
mod integer;
mod planes;
mod regions;
mod transpose;
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
            main: UnbiasedConv(Prim(Conv)),
            other: BiasedConv(Comp(ConvThenBias)),
            uses_other: has_bias,
        },
    );
    r.add("ConvInteger", integer::ConvInteger);
    r.add("QLinearConv", integer::QLinearConv);
    r.add("ConvTranspose", transpose::ConvTranspose);
    r.add("Col2Im", transpose::Col2Im);
    r.add("DeformConv", deform::DeformConv);
    r.add("CausalConvWithState", causal::CausalConvWithState);
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
            arg: None,
        }),
        body,
    }
    .simplified())
}

/// Conv without a bias: the primitive [`Conv`], which opens into 2-D
/// convolutions over its frames when its image is 3-D (`planes`), and into
/// regions of its output when most of its taps read padding (`regions`).
struct UnbiasedConv(Prim<Conv>);

impl Op for UnbiasedConv {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        self.0.infer(cx)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        self.0.eval(cx, inputs)
    }

    fn fold(&self, cx: &InferCx) -> Result<Option<Vec<Tensor>>> {
        self.0.fold(cx)
    }

    fn primitive(&self) -> Option<&dyn Primitive> {
        self.0.primitive()
    }

    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        match planes::decompose(cx, b, inputs)? {
            Some(planar) => Ok(Some(planar)),
            None => regions::decompose(cx, b, inputs),
        }
    }
}

/// The input, weight and shape of an unbiased, ungrouped float Conv of
/// `rank` (the input's) with a constant weight, at opset 11 or later:
/// what the decompositions into other convolutions (`planes`, `regions`)
/// need, their weight slices folding. `None` for any other.
fn rewritable(
    cx: &InferCx,
    b: &mut Builder,
    inputs: &[Option<ValueId>],
    rank: usize,
) -> Result<Option<(ValueId, ValueId, ConvShape)>> {
    let (x, w) = (inputs_id(inputs, 0)?, inputs_id(inputs, 1)?);
    let biased = inputs.get(2).is_some_and(Option::is_some);
    let (Ok(xs), Ok(ws)) = (b.shape(x), b.shape(w)) else {
        return Ok(None);
    };
    if biased || xs.len() != rank || cx.opset < 11 || b.value(w)?.is_none() {
        return Ok(None);
    }
    let shape = ConvShape::new(cx.node, &xs, &ws)?;
    let plain = shape.group == 1 && b.ty(x).dtype.is_float();
    Ok(plain.then_some((x, w, shape)))
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

//! Ops that change or report a tensor's shape without reordering its
//! elements. Reshape and Expand are primitives (tensor expressions:
//! Reshape reads the input at the output's row-major position, Expand
//! broadcasts); Flatten, Squeeze and Unsqueeze open into a Reshape to their
//! static output shape. Shape, Size and Dropout (identity at inference)
//! stay library ops. Shape and Size fold to constants during shape
//! inference whenever their input's shape is static, so exporters' shape
//! computations (Shape → Gather → Concat → Reshape) resolve at compile time.

use crate::compound::{Comp, Compound};
use crate::ops::generate::Rng;
use crate::ops::movement::common::{
    checked_numel, i64_tensor, input_shapes, int_values, moved, normalize_axes,
};
use crate::registry::Registry;
use crate::te::primitive::{broadcast_index, Prim, Primitive};
use crate::te::{IndexExpr, TensorExpr, Var};
use crate::util::{broadcast_shapes, numel, strides};
use crate::{arg, inputs_id, opt_arg, Builder, EvalCx, InferCx, Op};
use kiln_ir::{
    bail, dispatch_num, ensure, Attr, DType, Data, Elem, Node, Num, Result, Tensor, TensorType,
    ValueId,
};

pub fn register(r: &mut Registry) {
    r.add("Reshape", Prim(Reshape));
    r.add("Flatten", Comp(ReshapeTo(flatten_shape)));
    r.add("Squeeze", Comp(ReshapeTo(squeeze_shape)));
    r.add("Unsqueeze", Comp(ReshapeTo(unsqueeze_shape)));
    r.add("Expand", Prim(Expand));
    r.add("Shape", ShapeOp);
    r.add("Size", Size);
    r.add("Dropout", Dropout);
}

fn required<'a>(t: Option<&'a Tensor>, what: &str) -> Result<&'a Tensor> {
    t.ok_or_else(|| kiln_ir::Error::new(format!("input '{what}' is required")))
}

/// The data shape and the value of input 1 (the target shape) when both
/// are known: what Reshape and Expand need to build their expressions.
fn shape_and_param<'a>(cx: &'a InferCx) -> Option<(&'a [usize], &'a Tensor)> {
    Some((cx.input(0).ok()?.ty.shape.as_deref()?, cx.value(1)?))
}

struct Reshape;

impl Reshape {
    /// The spec's rule: 0 copies the input dimension (or means 0 with
    /// `allowzero`), one -1 takes whatever size is left.
    fn out_shape(node: &Node, input: &[usize], target: Option<&Tensor>) -> Result<Vec<usize>> {
        let target = int_values(required(target, "shape")?)?;
        let allowzero = node.attr_int_or("allowzero", 0)? != 0;
        let total: usize = input.iter().product();
        let mut out = Vec::with_capacity(target.len());
        let mut infer_at = None;
        for (i, &t) in target.iter().enumerate() {
            out.push(match t {
                -1 if infer_at.is_some() => bail!("shape {target:?} has more than one -1"),
                -1 => {
                    infer_at = Some(i);
                    1
                }
                0 if allowzero => 0,
                0 => match input.get(i) {
                    Some(&d) => d,
                    None => bail!("shape {target:?} copies dimension {i} with 0, but the input {input:?} has rank {}", input.len()),
                },
                t if t < 0 => bail!("shape {target:?} has an invalid dimension {t}"),
                t => t as usize,
            });
        }
        if allowzero && infer_at.is_some() && target.contains(&0) {
            bail!("shape {target:?} has both 0 and -1 with allowzero set");
        }
        let known = checked_numel(&out)?;
        if let Some(i) = infer_at {
            ensure!(
                known != 0 && total.is_multiple_of(known),
                "cannot reshape {input:?} to {target:?}"
            );
            out[i] = total / known;
        } else {
            ensure!(
                known == total,
                "cannot reshape {input:?} ({total} elements) to {out:?}"
            );
        }
        Ok(out)
    }
}

/// `out[i] = in0[j]` where `j` is the input position with the same
/// row-major rank as `i`.
impl Primitive for Reshape {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let (Some((shape, target)), Some(inputs)) = (shape_and_param(cx), input_shapes(cx)) else {
            return Ok(None);
        };
        let out = Reshape::out_shape(cx.node, shape, Some(target))?;
        let index = reshape_index(shape, &out);
        Ok(Some(moved(cx.input(0)?.ty.dtype, out, inputs, index)))
    }

    /// The same elements under the new shape, without copying them.
    fn kernel(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Option<Result<Tensor>> {
        let run = || {
            let x = arg(inputs, 0)?;
            x.reshaped(Reshape::out_shape(cx.node, &x.shape, opt_arg(inputs, 1))?)
        };
        Some(run())
    }
}

/// Index map reading `input` in row-major order as the shape `out`. The
/// dims are cut into the shortest groups whose sizes agree on both sides
/// (`[2, 3, 4] → [2, 12]` is `{2} → {2}`, `{3, 4} → {12}`); inside a group,
/// input dim `j` is `(group's linear output index / stride j) mod dim j`,
/// so splits and merges of neighbouring dims get the simplest maps.
pub fn reshape_index(input: &[usize], out: &[usize]) -> Vec<IndexExpr> {
    if numel(input) == 0 {
        // No element is read.
        return vec![IndexExpr::constant(0); input.len()];
    }
    let mut index = Vec::with_capacity(input.len());
    let (mut j, mut l) = (0, 0);
    while j < input.len() || l < out.len() {
        let (j0, l0) = (j, l);
        let (mut pi, mut po) = (1usize, 1usize);
        // Take dims from the side with the smaller product until both agree;
        // unit dims each form a group of their own.
        loop {
            if j < input.len() && (pi < po || l == out.len() || (pi == po && j == j0)) {
                pi *= input[j];
                j += 1;
            } else if l < out.len() {
                po *= out[l];
                l += 1;
            } else {
                break;
            }
            if pi == po {
                break;
            }
        }
        let lin = IndexExpr::affine(
            strides(&out[l0..l])
                .into_iter()
                .enumerate()
                .map(|(k, s)| (Var::Out(l0 + k), s as i64)),
            0,
        );
        let group = &input[j0..j];
        for (k, (&d, s)) in group.iter().zip(strides(group)).enumerate() {
            let q = IndexExpr::Div(Box::new(lin.clone()), s as i64);
            index.push(match (k, d) {
                (_, 1) => IndexExpr::constant(0),
                (0, _) => q,
                _ => IndexExpr::Mod(Box::new(q), d as i64),
            });
        }
    }
    index
}

/// An output shape from the node, the data shape and the value of input 1.
type ShapeRule = fn(&InferCx, &[usize], Option<&Tensor>) -> Result<Vec<usize>>;

/// Flatten, Squeeze and Unsqueeze: a Reshape to the shape their rule gives
/// for the data shape and the (constant) input 1.
struct ReshapeTo(ShapeRule);

impl Compound for ReshapeTo {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let x = inputs_id(inputs, 0)?;
        let param = match inputs.get(1).copied().flatten() {
            Some(p) => Some(b.require_value(p)?),
            None => None,
        };
        let out = (self.0)(cx, &b.shape(x)?, param.as_ref())?;
        let dims: Vec<i64> = out.iter().map(|&d| d as i64).collect();
        let shape = b.ints(&dims);
        // allowzero: a 0 in the target is a size, not "copy the input's".
        let y = b.op("Reshape", &[x, shape], &[("allowzero", Attr::Int(1))])?;
        Ok(vec![Some(y)])
    }
}

/// Flatten: `[d0 … d(axis-1)]` and `[d(axis) …]` each collapse to one dim.
fn flatten_shape(cx: &InferCx, input: &[usize], _: Option<&Tensor>) -> Result<Vec<usize>> {
    // Axis is in [-r, r]; negative values count from the end of the input.
    let (axis, r) = (cx.node.attr_int_or("axis", 1)?, input.len() as i64);
    ensure!(
        (-r..=r).contains(&axis),
        "axis {axis} is out of range for rank {r}"
    );
    let axis = if axis < 0 { axis + r } else { axis } as usize;
    Ok(vec![
        input[..axis].iter().product(),
        input[axis..].iter().product(),
    ])
}

/// Squeeze removes the listed axes (each of size 1), or every size-1 axis
/// when none are given. Before opset 13 axes were an attribute, where an
/// empty list also meant "all".
fn squeeze_shape(cx: &InferCx, input: &[usize], axes: Option<&Tensor>) -> Result<Vec<usize>> {
    let axes = axes
        .map(int_values)
        .transpose()?
        .filter(|a| cx.opset >= 13 || !a.is_empty());
    let Some(axes) = axes else {
        return Ok(input.iter().copied().filter(|&d| d != 1).collect());
    };
    let axes = normalize_axes(&axes, input.len())?;
    for &a in &axes {
        match input.get(a) {
            Some(1) => {}
            Some(d) => bail!("cannot squeeze axis {a} of size {d} (shape {input:?})"),
            // normalize_axis lets axis 0 through for scalars (ops that
            // treat a scalar as one element); a scalar has no axis to squeeze.
            None => bail!("cannot squeeze axis {a} of a scalar"),
        }
    }
    Ok(input
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &d)| d)
        .collect())
}

/// Unsqueeze inserts size-1 axes at the listed positions of the output.
fn unsqueeze_shape(_: &InferCx, input: &[usize], axes: Option<&Tensor>) -> Result<Vec<usize>> {
    let axes = int_values(required(axes, "axes")?)?;
    let rank = input.len() + axes.len();
    let axes = normalize_axes(&axes, rank)?;
    let mut rest = input.iter();
    (0..rank)
        .map(|i| match axes.contains(&i) {
            true => Ok(1),
            false => rest
                .next()
                .copied()
                .ok_or_else(|| kiln_ir::Error::new("Unsqueeze axes contain duplicates")),
        })
        .collect()
}

/// `out[i] = in0[broadcast(i)]` for the numpy broadcast of the input and the
/// requested shape.
struct Expand;

impl Expand {
    fn out_shape(input: &[usize], shape: &Tensor) -> Result<Vec<usize>> {
        ensure!(
            shape.rank() == 1,
            "shape must be 1-D, got shape {:?}",
            shape.shape
        );
        let target = crate::ops::movement::common::dims_from_i64(&int_values(shape)?, "shape")?;
        let out = broadcast_shapes(&[input, &target])?;
        checked_numel(&out)?;
        Ok(out)
    }
}

impl Primitive for Expand {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let (Some((shape, target)), Some(inputs)) = (shape_and_param(cx), input_shapes(cx)) else {
            return Ok(None);
        };
        let out = Expand::out_shape(shape, target)?;
        let index = broadcast_index(shape, &out);
        Ok(Some(moved(cx.input(0)?.ty.dtype, out, inputs, index)))
    }
}

struct ShapeOp;

impl ShapeOp {
    /// The dims `start..end` (opset 15), negative counting from the end,
    /// clamped to the rank.
    fn dims(node: &Node, shape: &[usize]) -> Result<Tensor> {
        let r = shape.len() as i64;
        let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let start = clamp(node.attr_int_or("start", 0)?);
        let end = clamp(node.attr_int_or("end", r)?);
        let dims = if start < end {
            &shape[start..end]
        } else {
            &[][..]
        };
        Ok(i64_tensor(dims.iter().map(|&d| d as i64).collect()))
    }
}

impl Op for ShapeOp {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![match cx.shape(0)? {
            Some(s) => ShapeOp::dims(cx.node, s)?.ty(),
            None => TensorType::unknown_shape(DType::I64),
        }])
    }
    fn fold(&self, cx: &InferCx) -> Result<Option<Vec<Tensor>>> {
        cx.shape(0)?
            .map(|s| Ok(vec![ShapeOp::dims(cx.node, s)?]))
            .transpose()
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![ShapeOp::dims(cx.node, &arg(inputs, 0)?.shape)?])
    }
}

struct Size;

impl Size {
    fn of(shape: &[usize]) -> Tensor {
        Tensor::scalar(shape.iter().product::<usize>() as i64)
    }
}

impl Op for Size {
    fn infer(&self, _cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![TensorType::new(DType::I64, vec![])])
    }
    fn fold(&self, cx: &InferCx) -> Result<Option<Vec<Tensor>>> {
        Ok(cx.shape(0)?.map(|s| vec![Size::of(s)]))
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![Size::of(&arg(inputs, 0)?.shape)])
    }
}

/// Dropout: the identity (with an all-true mask) at inference, which is
/// every opset before 12 and opset 12+ unless `training_mode` is true.
/// In training mode elements are dropped with probability `ratio` by an RNG
/// seeded from the `seed` attribute and the rest scaled by 1/(1-ratio).
struct Dropout;

impl Dropout {
    /// Opset 10 made the mask boolean; before it had the data's type.
    fn mask_dtype(opset: i64, data: DType) -> DType {
        if opset >= 10 {
            DType::Bool
        } else {
            data
        }
    }

    /// The drop probability when dropout is active, else None.
    fn active_ratio(cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Option<f64>> {
        if cx.opset < 12 {
            return Ok(None);
        }
        let training = match opt_arg(inputs, 2) {
            Some(t) => {
                ensure!(
                    t.len() == 1,
                    "training_mode must be a scalar, got shape {:?}",
                    t.shape
                );
                t.data.get_f64(0) != 0.0
            }
            None => false,
        };
        let ratio = match opt_arg(inputs, 1) {
            Some(t) => {
                ensure!(
                    t.len() == 1,
                    "ratio must be a scalar, got shape {:?}",
                    t.shape
                );
                t.data.get_f64(0)
            }
            None => 0.5,
        };
        ensure!(
            (0.0..=1.0).contains(&ratio),
            "ratio must be in [0, 1], got {ratio}"
        );
        Ok((training && ratio > 0.0).then_some(ratio))
    }
}

impl Op for Dropout {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = cx.input(0)?.ty.clone();
        let mask = TensorType {
            dtype: Dropout::mask_dtype(cx.opset, x.dtype),
            shape: x.shape.clone(),
        };
        Ok(vec![x, mask])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let mask_dtype = Dropout::mask_dtype(cx.opset, x.dtype());
        let Some(ratio) = Dropout::active_ratio(cx, inputs)? else {
            let ones = vec![1.0; x.len()];
            return Ok(vec![x.clone(), mask_tensor(&x.shape, mask_dtype, &ones)?]);
        };
        let seed = cx.node.attr_int("seed")?;
        let mut rng = Rng::new(seed.map(|s| s as u64));
        let keep: Vec<f64> = (0..x.len())
            .map(|_| if rng.uniform() >= ratio { 1.0 } else { 0.0 })
            .collect();
        let scale = if ratio < 1.0 {
            1.0 / (1.0 - ratio)
        } else {
            0.0
        };
        let y = dispatch_num!(
            &x.data,
            |v: T| T::wrap(
                v.iter()
                    .zip(&keep)
                    .map(|(e, k)| T::from_f64(e.to_f64() * k * scale))
                    .collect()
            ),
            bail!("Dropout needs numeric data")
        );
        Ok(vec![
            Tensor::new(x.shape.clone(), y)?,
            mask_tensor(&x.shape, mask_dtype, &keep)?,
        ])
    }
}

/// The mask as a tensor of `dtype` (bool, or the data's type before opset 10).
fn mask_tensor(shape: &[usize], dtype: DType, keep: &[f64]) -> Result<Tensor> {
    let data = dispatch_num!(
        &Data::zeros(dtype, 0),
        |_z: T| T::wrap(keep.iter().map(|&k| T::from_f64(k)).collect()),
        bail!("mask cannot be {dtype}")
    );
    Tensor::new(shape.to_vec(), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(attrs: &[(&str, i64)]) -> Node {
        Node {
            name: String::new(),
            op: "Reshape".into(),
            domain: String::new(),
            inputs: vec![],
            outputs: vec![],
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), kiln_ir::Attr::Int(*v)))
                .collect(),
        }
    }

    /// Exporters' dynamic reshape chain resolves to a static shape: Shape
    /// folds to a constant, so Gather, Concat and Reshape see known values.
    #[test]
    fn shape_chain_folds_during_inference() {
        use kiln_ir::{Graph, Initializer};
        let mut g = Graph::new("chain");
        g.opsets.insert(String::new(), 17);
        let x = g.add_value("x", TensorType::new(DType::F32, vec![2, 3, 4]));
        let mut value = |name: &str| g.add_value(name, TensorType::unknown_shape(DType::F32));
        let (shape, batch, target, y) =
            (value("shape"), value("batch"), value("target"), value("y"));
        let zero = g.add_value("zero", TensorType::new(DType::I64, vec![1]));
        let minus_one = g.add_value("minus_one", TensorType::new(DType::I64, vec![1]));
        g.initializers
            .insert(zero, Initializer::Tensor(i64_tensor(vec![0])));
        g.initializers
            .insert(minus_one, Initializer::Tensor(i64_tensor(vec![-1])));
        let mk = |op: &str, ins: Vec<kiln_ir::ValueId>, out, attrs: &[(&str, i64)]| Node {
            op: op.into(),
            inputs: ins.into_iter().map(Some).collect(),
            outputs: vec![Some(out)],
            ..node(attrs)
        };
        g.nodes = vec![
            mk("Shape", vec![x], shape, &[]),
            mk("Gather", vec![shape, zero], batch, &[]),
            mk("Concat", vec![batch, minus_one], target, &[("axis", 0)]),
            mk("Reshape", vec![x, target], y, &[]),
        ];
        g.inputs = vec![x];
        g.outputs = vec![y];
        crate::infer::infer_graph(&mut g, &|_| None).unwrap();
        assert_eq!(g.ty(y), &TensorType::new(DType::F32, vec![2, 12]));
    }

    /// Reshape's index maps: merges read the group's linear index, unit
    /// dims vanish, and splits are plain floordiv/mod.
    #[test]
    fn reshape_index_maps() {
        let show = |i: &[usize], o: &[usize]| {
            let te = moved(
                DType::F32,
                o.to_vec(),
                vec![Some(i.to_vec())],
                reshape_index(i, o),
            );
            te.accesses[0]
                .index
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        assert_eq!(
            show(&[2, 3, 4], &[2, 12]),
            "i0, (i1) floordiv 4, (i1) mod 4"
        );
        assert_eq!(show(&[3, 4], &[3, 1, 4]), "i0, i2");
        assert_eq!(show(&[3, 1, 4], &[12]), "(i0) floordiv 4, 0, (i0) mod 4");
        assert_eq!(show(&[6], &[2, 3]), "3*i0 + i1");
        assert_eq!(
            show(&[4, 6], &[6, 4]),
            "(4*i0 + i1) floordiv 6, (4*i0 + i1) mod 6"
        );
        assert_eq!(show(&[0, 3], &[3, 0]), "0, 0");
    }

    /// Reshape's copy-free kernel reads what its expression says.
    #[test]
    fn reshape_kernel_matches_its_expression() {
        use crate::ops::linalg::kernel_check::{both, random};
        let mut seed = 3;
        for (from, to) in [(&[2, 3, 4][..], &[4, -1][..]), (&[6, 1, 4], &[2, 3, 2, 2])] {
            let x = random(from, &mut seed);
            let (got, want) = both("Reshape", &[], &[&x, &i64_tensor(to.to_vec())]);
            assert_eq!(got, want, "{from:?} -> {to:?}");
        }
    }

    #[test]
    fn reshape_rules() {
        let t = |v: Vec<i64>| i64_tensor(v);
        let n = node(&[]);
        assert_eq!(
            Reshape::out_shape(&n, &[2, 3, 4], Some(&t(vec![0, -1]))).unwrap(),
            vec![2, 12]
        );
        assert!(Reshape::out_shape(&n, &[2, 3, 4], Some(&t(vec![-1, -1]))).is_err());
        assert!(Reshape::out_shape(&n, &[2, 3, 4], Some(&t(vec![5, -1]))).is_err());
        let z = node(&[("allowzero", 1)]);
        assert_eq!(
            Reshape::out_shape(&z, &[0, 3], Some(&t(vec![3, 0]))).unwrap(),
            vec![3, 0]
        );
        assert!(Reshape::out_shape(&z, &[0, 3], Some(&t(vec![0, -1]))).is_err());
    }
}

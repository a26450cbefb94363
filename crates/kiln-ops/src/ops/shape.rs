//! Ops that change or report a tensor's shape without reordering its
//! elements: Reshape, Flatten, Squeeze, Unsqueeze, Expand, Shape, Size, and
//! Dropout (identity at inference). Shape and Size fold to constants during
//! shape inference whenever their input's shape is static, so exporters'
//! shape computations (Shape → Gather → Concat → Reshape) resolve at
//! compile time.

use crate::ops::generate::Rng;
use crate::ops::movement::common::{
    affine_offsets, checked_numel, i64_tensor, int_values, normalize_axes, take, typed,
};
use crate::registry::Registry;
use crate::util::{broadcast_shapes, broadcast_strides};
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{
    bail, dispatch_num, ensure, DType, Data, Elem, Node, Num, Result, Tensor, TensorType,
};

pub fn register(r: &mut Registry) {
    r.add("Reshape", Reshape);
    r.add("Flatten", Flatten);
    r.add("Squeeze", Squeeze);
    r.add("Unsqueeze", Unsqueeze);
    r.add("Expand", Expand);
    r.add("Shape", ShapeOp);
    r.add("Size", Size);
    r.add("Dropout", Dropout);
}

/// Output type of an op whose output shape is `rule(data shape, values of
/// input 1)`: unknown unless the data shape is known and input 1 is constant
/// (or absent, when `optional`).
fn with_param(
    cx: &InferCx,
    optional: bool,
    rule: impl Fn(&[usize], Option<&Tensor>) -> Result<Vec<usize>>,
) -> Result<Vec<TensorType>> {
    let x = cx.input(0)?;
    let param_known = cx.value(1).is_some() || (optional && cx.opt_input(1).is_none());
    let shape = match (&x.ty.shape, param_known) {
        (Some(s), true) => Some(rule(s, cx.value(1))?),
        _ => None,
    };
    Ok(vec![typed(x.ty.dtype, shape)])
}

/// The data input with a new shape (same elements).
fn reshaped(
    inputs: &[Option<&Tensor>],
    rule: impl Fn(&[usize], Option<&Tensor>) -> Result<Vec<usize>>,
) -> Result<Vec<Tensor>> {
    let x = arg(inputs, 0)?;
    Ok(vec![x.reshaped(rule(&x.shape, opt_arg(inputs, 1))?)?])
}

fn required<'a>(t: Option<&'a Tensor>, what: &str) -> Result<&'a Tensor> {
    t.ok_or_else(|| kiln_ir::Error::new(format!("input '{what}' is required")))
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
                known != 0 && total % known == 0,
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

impl Op for Reshape {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        with_param(cx, false, |s, t| Reshape::out_shape(cx.node, s, t))
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        reshaped(inputs, |s, t| Reshape::out_shape(cx.node, s, t))
    }
}

struct Flatten;

impl Flatten {
    fn out_shape(node: &Node, input: &[usize]) -> Result<Vec<usize>> {
        // Axis is in [-r, r]; negative values count from the end of the input.
        let (axis, r) = (node.attr_int_or("axis", 1)?, input.len() as i64);
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
}

impl Op for Flatten {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        with_param(cx, true, |s, _| Flatten::out_shape(cx.node, s))
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        reshaped(inputs, |s, _| Flatten::out_shape(cx.node, s))
    }
}

struct Squeeze;

impl Squeeze {
    /// Removes the listed axes (each of size 1), or every size-1 axis when
    /// none are given. Before opset 13 axes were an attribute, where an empty
    /// list also meant "all".
    fn out_shape(opset: i64, input: &[usize], axes: Option<&Tensor>) -> Result<Vec<usize>> {
        let axes = axes
            .map(int_values)
            .transpose()?
            .filter(|a| opset >= 13 || !a.is_empty());
        let Some(axes) = axes else {
            return Ok(input.iter().copied().filter(|&d| d != 1).collect());
        };
        let axes = normalize_axes(&axes, input.len())?;
        if let Some(&a) = axes.iter().find(|&&a| input[a] != 1) {
            bail!(
                "cannot squeeze axis {a} of size {} (shape {input:?})",
                input[a]
            );
        }
        Ok(input
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect())
    }
}

impl Op for Squeeze {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        with_param(cx, true, |s, a| Squeeze::out_shape(cx.opset, s, a))
    }
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        reshaped(inputs, |s, a| Squeeze::out_shape(cx.opset, s, a))
    }
}

struct Unsqueeze;

impl Unsqueeze {
    /// Inserts size-1 axes at the listed positions of the output.
    fn out_shape(input: &[usize], axes: Option<&Tensor>) -> Result<Vec<usize>> {
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
}

impl Op for Unsqueeze {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        with_param(cx, false, Unsqueeze::out_shape)
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        reshaped(inputs, Unsqueeze::out_shape)
    }
}

struct Expand;

impl Expand {
    fn out_shape(input: &[usize], shape: Option<&Tensor>) -> Result<Vec<usize>> {
        let shape = required(shape, "shape")?;
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

impl Op for Expand {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        with_param(cx, false, Expand::out_shape)
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let out = Expand::out_shape(&x.shape, opt_arg(inputs, 1))?;
        let st: Vec<i64> = broadcast_strides(&x.shape, &out)
            .into_iter()
            .map(|s| s as i64)
            .collect();
        let idx = affine_offsets(&out, 0, &st);
        Ok(vec![take(x, out, idx)?])
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

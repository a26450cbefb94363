//! Normalizations that standardize groups of elements to zero mean and unit
//! variance, then scale and shift: LayerNormalization, RMSNormalization
//! (no centering), GroupNormalization, InstanceNormalization,
//! MeanVarianceNormalization and BatchNormalization (inference and
//! training). All are compounds: ReduceMean over the group axes (kept as
//! size 1), Sub, Mul, Add of epsilon, Sqrt, Reciprocal, then the affine
//! Mul/Add with the parameters reshaped to broadcast along their axes.
//! Groups that are not a set of axes (GroupNormalization) are made axes by
//! a Reshape.

use super::float_input_type;
use crate::compound::{Comp, Compound};
use crate::ops::compose::{
    cast, check_broadcasts_to, reduce_keep, reshape, trailing_axes, wants_output,
};
use crate::ops::reduce::{checked_axis, reduce_mask};
use crate::registry::Registry;
use crate::util::numel;
use crate::{inputs_id, Builder, InferCx};
use kiln_ir::{bail, DType, Node, Result, ValueId};

pub fn register(r: &mut Registry) {
    r.add("LayerNormalization", Comp(LayerNorm { center: true }));
    r.add("RMSNormalization", Comp(LayerNorm { center: false }));
    r.add("GroupNormalization", Comp(GroupNorm));
    r.add("InstanceNormalization", Comp(InstanceNorm));
    r.add("MeanVarianceNormalization", Comp(MeanVarianceNorm));
    r.add("BatchNormalization", Comp(BatchNorm));
}

/// A group standardization in progress: `centered` = x - mean (x itself
/// without centering), `inv_std` = 1 / sqrt(mean(centered²) + eps), both
/// broadcasting against x.
struct Standardized {
    mean: Option<ValueId>,
    centered: ValueId,
    inv_std: ValueId,
}

impl Standardized {
    /// Standardizes `x` over `axes`.
    fn new(b: &mut Builder, x: ValueId, axes: &[usize], eps: f64, center: bool) -> Result<Self> {
        let (mean, centered) = if center {
            let mean = reduce_keep(b, "ReduceMean", x, axes)?;
            (Some(mean), b.op("Sub", &[x, mean], &[])?)
        } else {
            (None, x)
        };
        let square = b.op("Mul", &[centered, centered], &[])?;
        let var = reduce_keep(b, "ReduceMean", square, axes)?;
        let eps = b.scalar(b.ty(x).dtype, eps)?;
        let var_eps = b.op("Add", &[var, eps], &[])?;
        let std = b.op("Sqrt", &[var_eps], &[])?;
        let inv_std = b.op("Reciprocal", &[std], &[])?;
        Ok(Standardized {
            mean,
            centered,
            inv_std,
        })
    }

    /// (x - mean) / sqrt(var + eps).
    fn normalized(&self, b: &mut Builder) -> Result<ValueId> {
        b.op("Mul", &[self.centered, self.inv_std], &[])
    }
}

fn epsilon(node: &Node) -> Result<f64> {
    Ok(node.attr_float_or("epsilon", 1e-5)? as f64)
}

/// The float type given by `stash_type`, in which LayerNormalization,
/// RMSNormalization and GroupNormalization (opset 21) compute.
fn stash_dtype(node: &Node) -> Result<DType> {
    let code = node.attr_int_or("stash_type", 1)?;
    match DType::from_onnx_code(code as i32) {
        Some(d) if d.is_float() => Ok(d),
        _ => bail!("stash_type {code} is not a float type"),
    }
}

/// `y * scale + bias` (bias optional).
fn affine(b: &mut Builder, y: ValueId, scale: ValueId, bias: Option<ValueId>) -> Result<ValueId> {
    let y = b.op("Mul", &[y, scale], &[])?;
    match bias {
        Some(bias) => b.op("Add", &[y, bias], &[]),
        None => Ok(y),
    }
}

/// LayerNormalization (`center`) and RMSNormalization: normalize over the
/// axes `axis..` in the stash type, convert back, apply a broadcast scale
/// (and bias). LayerNormalization's optional outputs are the mean and the
/// inverse standard deviation, in the stash type, with the normalized axes
/// kept as size 1.
struct LayerNorm {
    center: bool,
}

impl Compound for LayerNorm {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let dtype = float_input_type(cx, 0)?.dtype;
        let (x, scale) = (inputs_id(inputs, 0)?, inputs_id(inputs, 1)?);
        let bias = match self.center {
            true => inputs.get(2).copied().flatten(),
            false => None,
        };
        let shape = b.shape(x)?;
        for (v, what) in [(Some(scale), "scale"), (bias, "bias")] {
            if let Some(v) = v {
                check_broadcasts_to(b, v, &shape, what)?;
            }
        }
        let axis = checked_axis(cx.node.attr_int_or("axis", -1)?, shape.len())?;
        let xu = cast(b, x, stash_dtype(cx.node)?)?;
        let s = Standardized::new(
            b,
            xu,
            &trailing_axes(axis, shape.len()),
            epsilon(cx.node)?,
            self.center,
        )?;
        let normalized = s.normalized(b)?;
        let normalized = cast(b, normalized, dtype)?;
        let y = affine(b, normalized, scale, bias)?;
        if !self.center {
            return Ok(vec![Some(y)]);
        }
        Ok(vec![
            Some(y),
            wants_output(cx.node, 1).then_some(s.mean).flatten(),
            wants_output(cx.node, 2).then_some(s.inv_std),
        ])
    }

    fn dtypes(&self, cx: &InferCx) -> Result<Vec<DType>> {
        let x = cx.input(0)?.ty.dtype;
        let u = stash_dtype(cx.node)?;
        Ok(vec![x, u, u][..cx.node.outputs.len().clamp(1, 3)].to_vec())
    }
}

/// Checks an (N, C, ...) input and returns its shape.
fn channel_shape(b: &Builder, x: ValueId) -> Result<Vec<usize>> {
    let shape = b.shape(x)?;
    if shape.len() < 2 {
        bail!("input must have shape (N, C, ...), got {shape:?}");
    }
    Ok(shape)
}

/// `p` (scale, bias, mean or var) checked to hold `n` values and reshaped
/// to `shape`, in element type `dtype`.
fn param(
    b: &mut Builder,
    p: ValueId,
    n: usize,
    shape: &[usize],
    dtype: DType,
    what: &str,
) -> Result<ValueId> {
    let got = numel(&b.shape(p)?);
    if got != n {
        bail!("{what} must have {n} elements, got {got}");
    }
    let p = cast(b, p, dtype)?;
    reshape(b, p, shape)
}

/// GroupNormalization: statistics per instance per group of channels;
/// scale and bias per channel (opset 21) or per group (opset 18). X is
/// viewed as (N, groups, channels per group, spatial) so groups are axes.
struct GroupNorm;

impl Compound for GroupNorm {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let dtype = float_input_type(cx, 0)?.dtype;
        let x = inputs_id(inputs, 0)?;
        let (scale, bias) = (inputs_id(inputs, 1)?, inputs_id(inputs, 2)?);
        let shape = channel_shape(b, x)?;
        let channels = shape[1];
        let groups = match cx.node.attr_int("num_groups")? {
            Some(g) if g > 0 && channels % g as usize == 0 => g as usize,
            Some(g) => bail!("num_groups {g} must be positive and divide the {channels} channels"),
            None => bail!("attribute 'num_groups' is required"),
        };
        let per = channels / groups;
        let grouped = [shape[0], groups, per, numel(&shape[2..])];
        // Opset 18 computes in X's type; 21 in the stash type.
        let u = match cx.opset >= 21 {
            true => stash_dtype(cx.node)?,
            false => dtype,
        };
        let xg = reshape(b, x, &grouped)?;
        let xg = cast(b, xg, u)?;
        let s = Standardized::new(b, xg, &[2, 3], epsilon(cx.node)?, true)?;
        let normalized = s.normalized(b)?;
        let normalized = cast(b, normalized, dtype)?;
        let (n, pshape) = match cx.opset >= 21 {
            true => (channels, [groups, per, 1]),
            false => (groups, [groups, 1, 1]),
        };
        let scale = param(b, scale, n, &pshape, dtype, "scale")?;
        let bias = param(b, bias, n, &pshape, dtype, "bias")?;
        let y = affine(b, normalized, scale, Some(bias))?;
        Ok(vec![Some(reshape(b, y, &shape)?)])
    }
}

/// InstanceNormalization: statistics per instance per channel (over the
/// spatial axes); scale and bias per channel.
struct InstanceNorm;

impl Compound for InstanceNorm {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let dtype = float_input_type(cx, 0)?.dtype;
        let x = inputs_id(inputs, 0)?;
        let shape = channel_shape(b, x)?;
        let s = Standardized::new(
            b,
            x,
            &trailing_axes(2, shape.len()),
            epsilon(cx.node)?,
            true,
        )?;
        let normalized = s.normalized(b)?;
        let pshape = per_channel_shape(&shape);
        let scale = param(b, inputs_id(inputs, 1)?, shape[1], &pshape, dtype, "scale")?;
        let bias = param(b, inputs_id(inputs, 2)?, shape[1], &pshape, dtype, "bias")?;
        Ok(vec![Some(affine(b, normalized, scale, Some(bias))?)])
    }
}

/// The shape that makes a per-channel parameter broadcast along axis 1 of
/// an (N, C, ...) tensor: (C, 1, ...).
fn per_channel_shape(shape: &[usize]) -> Vec<usize> {
    let mut p = vec![1; shape.len() - 1];
    p[0] = shape[1];
    p
}

/// MeanVarianceNormalization: (X - E[X]) / (sqrt(Var[X]) + 1e-9) over
/// `axes` (default 0, 2, 3; empty means all).
struct MeanVarianceNorm;

impl Compound for MeanVarianceNorm {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let dtype = float_input_type(cx, 0)?.dtype;
        let x = inputs_id(inputs, 0)?;
        let rank = b.shape(x)?.len();
        let axes = cx.node.attr_ints("axes")?.unwrap_or(&[0, 2, 3]);
        let mask = reduce_mask(rank, Some(axes), false)?.unwrap_or_else(|| vec![true; rank]);
        let axes: Vec<usize> = (0..rank).filter(|&i| mask[i]).collect();
        let mean = reduce_keep(b, "ReduceMean", x, &axes)?;
        let centered = b.op("Sub", &[x, mean], &[])?;
        let square = b.op("Mul", &[centered, centered], &[])?;
        let var = reduce_keep(b, "ReduceMean", square, &axes)?;
        let std = b.op("Sqrt", &[var], &[])?;
        let eps = b.scalar(dtype, 1e-9)?;
        let std_eps = b.op("Add", &[std, eps], &[])?;
        Ok(vec![Some(b.op("Div", &[centered, std_eps], &[])?)])
    }
}

/// BatchNormalization. Inference uses the given mean and variance; training
/// (`training_mode` from opset 14, extra outputs requested before) uses the
/// batch statistics and also returns the updated running mean and variance
/// (and, before opset 14, the batch mean and variance).
/// With `spatial` = 0 (opset < 9) statistics are per activation, not per
/// channel. Parameters may have other float types than X (opset 15); Y
/// computes in X's type, the statistics outputs have the type of `mean`.
struct BatchNorm;

struct BatchNormParams {
    eps: f64,
    momentum: f64,
    training: bool,
    spatial: bool,
}

impl BatchNormParams {
    fn of(node: &Node, opset: i64) -> Result<BatchNormParams> {
        let training = if opset >= 14 {
            node.attr_int_or("training_mode", 0)? != 0
        } else {
            node.outputs.iter().skip(1).any(|o| o.is_some())
        };
        Ok(BatchNormParams {
            eps: epsilon(node)?,
            momentum: node.attr_float_or("momentum", 0.9)? as f64,
            training,
            spatial: opset >= 9 || node.attr_int_or("spatial", 1)? != 0,
        })
    }

    /// The axes the statistics reduce over.
    fn axes(&self, rank: usize) -> Vec<usize> {
        match self.spatial {
            true => (0..rank).filter(|&i| i != 1).collect(),
            false => vec![0],
        }
    }

    /// The shape the parameters broadcast with against X.
    fn param_shape(&self, shape: &[usize]) -> Vec<usize> {
        match self.spatial {
            true => per_channel_shape(shape),
            false => shape[1..].to_vec(),
        }
    }
}

impl Compound for BatchNorm {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let p = BatchNormParams::of(cx.node, cx.opset)?;
        let dtype = float_input_type(cx, 0)?.dtype;
        let x = inputs_id(inputs, 0)?;
        let shape = channel_shape(b, x)?;
        let ids = (1..5)
            .map(|i| inputs_id(inputs, i))
            .collect::<Result<Vec<_>>>()?;
        let (run_mean, run_var) = (ids[2], ids[3]);
        let pshape = p.param_shape(&shape);
        let n = numel(&pshape);
        let names = ["scale", "B", "mean", "var"];
        let mut params = Vec::new();
        for (id, what) in ids.iter().zip(names) {
            params.push(param(b, *id, n, &pshape, dtype, what)?);
        }
        let axes = p.axes(shape.len());
        let (mean, var) = match p.training {
            true => {
                let mean = reduce_keep(b, "ReduceMean", x, &axes)?;
                let centered = b.op("Sub", &[x, mean], &[])?;
                let square = b.op("Mul", &[centered, centered], &[])?;
                (mean, reduce_keep(b, "ReduceMean", square, &axes)?)
            }
            false => (params[2], params[3]),
        };
        // y = (x - mean) * (scale / sqrt(var + eps)) + B: the factor is
        // computed once per channel.
        let eps = b.scalar(dtype, p.eps)?;
        let var_eps = b.op("Add", &[var, eps], &[])?;
        let std = b.op("Sqrt", &[var_eps], &[])?;
        let factor = b.op("Div", &[params[0], std], &[])?;
        let centered = b.op("Sub", &[x, mean], &[])?;
        let y = affine(b, centered, factor, Some(params[1]))?;
        let mut outs = vec![Some(y)];
        let extra = match p.training {
            false => vec![run_mean, run_var],
            true => {
                let stats = |b: &mut Builder, v: ValueId| -> Result<ValueId> {
                    let (dtype, shape) = (b.ty(run_mean).dtype, b.shape(run_mean)?);
                    let v = cast(b, v, dtype)?;
                    reshape(b, v, &shape)
                };
                let (mean, var) = (stats(b, mean)?, stats(b, var)?);
                vec![
                    running(b, run_mean, mean, p.momentum)?,
                    running(b, run_var, var, p.momentum)?,
                    mean,
                    var,
                ]
            }
        };
        for (k, v) in extra.into_iter().enumerate() {
            outs.push(wants_output(cx.node, k + 1).then_some(v));
        }
        outs.truncate(cx.node.outputs.len().max(1));
        Ok(outs)
    }

    fn dtypes(&self, cx: &InferCx) -> Result<Vec<DType>> {
        let stats = cx.input(3)?.ty.dtype;
        let mut d = vec![stats; cx.node.outputs.len().max(1)];
        d[0] = cx.input(0)?.ty.dtype;
        Ok(d)
    }
}

/// The updated running statistic: run * momentum + now * (1 - momentum).
fn running(b: &mut Builder, run: ValueId, now: ValueId, momentum: f64) -> Result<ValueId> {
    let dtype = b.ty(run).dtype;
    let m = b.scalar(dtype, momentum)?;
    let rest = b.scalar(dtype, 1.0 - momentum)?;
    let old = b.op("Mul", &[run, m], &[])?;
    let new = b.op("Mul", &[now, rest], &[])?;
    b.op("Add", &[old, new], &[])
}

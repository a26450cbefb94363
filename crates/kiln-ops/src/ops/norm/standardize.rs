//! Normalizations that standardize groups of elements to zero mean and unit
//! variance, then scale and shift: LayerNormalization, RMSNormalization
//! (no centering), GroupNormalization, InstanceNormalization,
//! MeanVarianceNormalization and BatchNormalization (inference and training).
//! Groups are described by a [`ReducePlan`] over the normalized axes.

use super::{float_input_type, float_tensor, float_values};
use crate::ops::reduce::{checked_axis, ReducePlan};
use crate::registry::Registry;
use crate::util::{broadcast_shapes, broadcast_strides, for_each_offset, numel};
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, DType, Node, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("LayerNormalization", LayerNorm { center: true });
    r.add("RMSNormalization", LayerNorm { center: false });
    r.add("GroupNormalization", GroupNorm);
    r.add("InstanceNormalization", InstanceNorm);
    r.add("MeanVarianceNormalization", MeanVarianceNorm);
    r.add("BatchNormalization", BatchNorm);
}

/// Mean and (biased) variance of one group. Without centering the mean is
/// 0 and `var` is the mean square (RMS normalization).
#[derive(Clone, Copy)]
struct Moments {
    mean: f64,
    var: f64,
}

fn moments(v: &[f64], plan: &ReducePlan, center: bool) -> Vec<Moments> {
    let n = plan.reduced.len() as f64;
    plan.kept
        .iter()
        .map(|&base| {
            let group = plan.reduced.iter().map(|&o| v[base + o]);
            let mean = if center {
                group.clone().sum::<f64>() / n
            } else {
                0.0
            };
            let var = group.map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
            Moments { mean, var }
        })
        .collect()
}

/// Replaces each element by `f(group index, element)`.
fn map_groups(v: &mut [f64], plan: &ReducePlan, f: impl Fn(usize, f64) -> f64) {
    for (k, &base) in plan.kept.iter().enumerate() {
        for &o in &plan.reduced {
            v[base + o] = f(k, v[base + o]);
        }
    }
}

/// Standardizes every group in place: (x - mean) / sqrt(var + eps).
/// Returns each group's (mean, 1/sqrt(var + eps)).
fn standardize(v: &mut [f64], plan: &ReducePlan, eps: f64, center: bool) -> Vec<(f64, f64)> {
    let stats: Vec<(f64, f64)> = moments(v, plan, center)
        .iter()
        .map(|m| (m.mean, 1.0 / (m.var + eps).sqrt()))
        .collect();
    map_groups(v, plan, |k, x| (x - stats[k].0) * stats[k].1);
    stats
}

/// Mask selecting axes `from..rank`.
fn trailing_mask(rank: usize, from: usize) -> Vec<bool> {
    (0..rank).map(|i| i >= from).collect()
}

fn epsilon(node: &Node) -> Result<f64> {
    Ok(node.attr_float_or("epsilon", 1e-5)? as f64)
}

/// `y = y * scale + bias` with scale and bias broadcast unidirectionally to `shape`.
fn affine_broadcast(
    y: &mut [f64],
    shape: &[usize],
    scale: &Tensor,
    bias: Option<&Tensor>,
) -> Result<()> {
    let s = float_values(scale)?;
    let b = match bias {
        Some(t) => float_values(t)?,
        None => vec![0.0],
    };
    let b_shape = bias.map_or(&[][..], |t| &t.shape[..]);
    for p in [&scale.shape[..], b_shape] {
        if broadcast_shapes(&[shape, p])? != shape {
            bail!("scale/bias of shape {p:?} does not broadcast to the input shape {shape:?}");
        }
    }
    let (ss, bs) = (
        broadcast_strides(&scale.shape, shape),
        broadcast_strides(b_shape, shape),
    );
    for_each_offset(shape, [&ss, &bs], |o, [i, j]| y[o] = y[o] * s[i] + b[j]);
    Ok(())
}

/// `y = y * scale[p] + bias[p]` where `p` is the parameter of each element's
/// channel (axis 1): `params` values each cover `channels / params` adjacent
/// channels (1 per channel, or 1 per channel group).
fn affine_per_channel(
    y: &mut [f64],
    shape: &[usize],
    scale: &Tensor,
    bias: &Tensor,
    params: usize,
) -> Result<()> {
    let (s, b) = (float_values(scale)?, float_values(bias)?);
    if s.len() != params || b.len() != params {
        bail!(
            "scale and bias must have {params} elements, got {} and {}",
            s.len(),
            b.len()
        );
    }
    let channels = shape[1];
    if y.is_empty() {
        return Ok(());
    }
    let per = channels / params;
    let spatial = numel(&shape[2..]);
    for (o, x) in y.iter_mut().enumerate() {
        let p = (o / spatial) % channels / per;
        *x = *x * s[p] + b[p];
    }
    Ok(())
}

/// The element type of the Mean/InvStdDev outputs given by `stash_type`.
fn stash_dtype(node: &Node) -> Result<DType> {
    let code = node.attr_int_or("stash_type", 1)?;
    match DType::from_onnx_code(code as i32) {
        Some(d) if d.is_float() => Ok(d),
        _ => bail!("stash_type {code} is not a float type"),
    }
}

/// LayerNormalization (`center`) and RMSNormalization: normalize over the
/// axes `axis..` and apply a broadcast scale (and bias).
struct LayerNorm {
    center: bool,
}

impl LayerNorm {
    fn stats_shape(shape: &[usize], axis: usize) -> Vec<usize> {
        shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if i < axis { d } else { 1 })
            .collect()
    }
}

impl Op for LayerNorm {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let ty = float_input_type(cx, 0)?;
        let u = stash_dtype(cx.node)?;
        let stats = match &ty.shape {
            Some(s) => {
                let axis = checked_axis(cx.node.attr_int_or("axis", -1)?, s.len())?;
                TensorType::new(u, LayerNorm::stats_shape(s, axis))
            }
            None => TensorType::unknown_shape(u),
        };
        Ok(vec![ty, stats.clone(), stats])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, scale) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let bias = if self.center {
            opt_arg(inputs, 2)
        } else {
            None
        };
        let axis = checked_axis(cx.node.attr_int_or("axis", -1)?, x.rank())?;
        let plan = ReducePlan::new(&x.shape, &trailing_mask(x.rank(), axis));
        let mut y = float_values(x)?;
        let stats = standardize(&mut y, &plan, epsilon(cx.node)?, self.center);
        affine_broadcast(&mut y, &x.shape, scale, bias)?;
        let y = float_tensor(x.dtype(), x.shape.clone(), &y)?;
        if !self.center {
            return Ok(vec![y]);
        }
        let (u, shape) = (
            stash_dtype(cx.node)?,
            LayerNorm::stats_shape(&x.shape, axis),
        );
        let means: Vec<f64> = stats.iter().map(|s| s.0).collect();
        let inv: Vec<f64> = stats.iter().map(|s| s.1).collect();
        Ok(vec![
            y,
            float_tensor(u, shape.clone(), &means)?,
            float_tensor(u, shape, &inv)?,
        ])
    }
}

/// Checks a (N, C, ...) input and returns its shape.
fn channel_shape(x: &Tensor) -> Result<&[usize]> {
    if x.rank() < 2 {
        bail!("input must have shape (N, C, ...), got {:?}", x.shape);
    }
    Ok(&x.shape)
}

/// GroupNormalization: statistics per instance per group of channels;
/// scale and bias per channel (opset 21) or per group (opset 18).
struct GroupNorm;

impl Op for GroupNorm {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![float_input_type(cx, 0)?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, scale, bias) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        let shape = channel_shape(x)?;
        let groups = match cx.node.attr_int("num_groups")? {
            Some(g) if g > 0 && shape[1] % g as usize == 0 => g as usize,
            Some(g) => bail!(
                "num_groups {g} must be positive and divide the {} channels",
                shape[1]
            ),
            None => bail!("attribute 'num_groups' is required"),
        };
        // View X as (N, groups, rest) and normalize over the last axis.
        let grouped = [shape[0], groups, numel(&shape[1..]) / groups];
        let plan = ReducePlan::new(&grouped, &[false, false, true]);
        let mut y = float_values(x)?;
        standardize(&mut y, &plan, epsilon(cx.node)?, true);
        let params = if cx.opset >= 21 { shape[1] } else { groups };
        affine_per_channel(&mut y, shape, scale, bias, params)?;
        Ok(vec![float_tensor(x.dtype(), x.shape.clone(), &y)?])
    }
}

/// InstanceNormalization: statistics per instance per channel.
struct InstanceNorm;

impl Op for InstanceNorm {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![float_input_type(cx, 0)?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, scale, bias) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        let shape = channel_shape(x)?;
        let plan = ReducePlan::new(shape, &trailing_mask(shape.len(), 2));
        let mut y = float_values(x)?;
        standardize(&mut y, &plan, epsilon(cx.node)?, true);
        affine_per_channel(&mut y, shape, scale, bias, shape[1])?;
        Ok(vec![float_tensor(x.dtype(), x.shape.clone(), &y)?])
    }
}

/// MeanVarianceNormalization: (X - E[X]) / (sqrt(Var[X]) + 1e-9) over `axes`.
struct MeanVarianceNorm;

impl Op for MeanVarianceNorm {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![float_input_type(cx, 0)?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let axes = cx.node.attr_ints("axes")?.unwrap_or(&[0, 2, 3]);
        let mask = match crate::ops::reduce::reduce_mask(x.rank(), Some(axes), false)? {
            Some(m) => m,
            None => vec![true; x.rank()],
        };
        let plan = ReducePlan::new(&x.shape, &mask);
        let mut y = float_values(x)?;
        let inv: Vec<(f64, f64)> = moments(&y, &plan, true)
            .iter()
            .map(|m| (m.mean, 1.0 / (m.var.sqrt() + 1e-9)))
            .collect();
        map_groups(&mut y, &plan, |k, v| (v - inv[k].0) * inv[k].1);
        Ok(vec![float_tensor(x.dtype(), x.shape.clone(), &y)?])
    }
}

/// BatchNormalization. Inference uses the given mean and variance; training
/// (`training_mode` from opset 14, extra outputs requested before) uses the
/// batch statistics and also returns the updated running mean and variance
/// (and, before opset 14, the batch mean and variance).
/// With `spatial` = 0 (opset < 9) statistics are per activation, not per channel.
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

    /// Which axes the statistics reduce over.
    fn mask(&self, rank: usize) -> Vec<bool> {
        (0..rank)
            .map(|i| if self.spatial { i != 1 } else { i == 0 })
            .collect()
    }

    /// Outputs produced: Y, then the running mean and variance (updated in
    /// training, passed through when an inference node asks for them), then
    /// before opset 14 the batch mean and variance.
    fn output_count(&self, node: &Node, opset: i64) -> usize {
        match (self.training, opset >= 14) {
            (false, _) => node.outputs.len().clamp(1, 3),
            (true, true) => 3,
            (true, false) => 5,
        }
    }
}

impl Op for BatchNorm {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let p = BatchNormParams::of(cx.node, cx.opset)?;
        let y = float_input_type(cx, 0)?;
        let stats = cx.input(3)?.ty.clone();
        let mut out = vec![y];
        out.extend(std::iter::repeat_n(
            stats,
            p.output_count(cx.node, cx.opset) - 1,
        ));
        Ok(out)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let p = BatchNormParams::of(cx.node, cx.opset)?;
        let x = arg(inputs, 0)?;
        channel_shape(x)?;
        let params: Vec<Vec<f64>> = (1..5)
            .map(|i| float_values(arg(inputs, i)?))
            .collect::<Result<_>>()?;
        let (scale, bias, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
        let plan = ReducePlan::new(&x.shape, &p.mask(x.rank()));
        let groups = plan.kept.len();
        if params.iter().any(|v| v.len() != groups) {
            bail!("scale, B, mean and var must each have {groups} elements");
        }
        let mut y = float_values(x)?;
        let (use_mean, use_var): (Vec<f64>, Vec<f64>) = if p.training {
            moments(&y, &plan, true)
                .iter()
                .map(|m| (m.mean, m.var))
                .unzip()
        } else {
            (mean.clone(), var.clone())
        };
        map_groups(&mut y, &plan, |k, v| {
            (v - use_mean[k]) / (use_var[k] + p.eps).sqrt() * scale[k] + bias[k]
        });
        let mut out = vec![float_tensor(x.dtype(), x.shape.clone(), &y)?];
        let extra = if p.training {
            let blend = |run: &[f64], now: &[f64]| -> Vec<f64> {
                run.iter()
                    .zip(now)
                    .map(|(r, n)| r * p.momentum + n * (1.0 - p.momentum))
                    .collect()
            };
            vec![
                blend(mean, &use_mean),
                blend(var, &use_var),
                use_mean,
                use_var,
            ]
        } else {
            vec![mean.clone(), var.clone()]
        };
        let stats = arg(inputs, 3)?;
        for v in extra.iter().take(p.output_count(cx.node, cx.opset) - 1) {
            out.push(float_tensor(stats.dtype(), stats.shape.clone(), v)?);
        }
        Ok(out)
    }
}

//! Softmax, LogSoftmax and Hardmax. From opset 13 they work along one axis
//! (default -1); before, the input is coerced to 2-D at `axis` (default 1)
//! and the op runs over each row of the flattened trailing dims.

use super::{float_input_type, float_tensor, float_values, Lines};
use crate::registry::Registry;
use crate::util::normalize_axis;
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("Softmax", AxisOp(softmax_line));
    r.add("LogSoftmax", AxisOp(log_softmax_line));
    r.add("Hardmax", AxisOp(hardmax_line));
}

/// An op that transforms each line along its axis with the function.
struct AxisOp(fn(&mut [f64]));

/// The lines the op works on, by opset.
fn op_lines(axis: i64, opset: i64, shape: &[usize]) -> Result<Lines> {
    if shape.is_empty() {
        // A scalar is one line of one element.
        return Ok(Lines { outer: 1, len: 1, inner: 1 });
    }
    let a = normalize_axis(axis, shape.len())?;
    Ok(if opset >= 13 { Lines::along(shape, a) } else { Lines::flattened_from(shape, a) })
}

impl Op for AxisOp {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let ty = float_input_type(cx, 0)?;
        if let Some(s) = &ty.shape {
            op_lines(default_axis(cx.node, cx.opset)?, cx.opset, s)?;
        }
        Ok(vec![ty])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let lines = op_lines(default_axis(cx.node, cx.opset)?, cx.opset, &x.shape)?;
        let mut v = float_values(x)?;
        if !v.is_empty() {
            lines.for_each(&mut v, self.0);
        }
        Ok(vec![float_tensor(x.dtype(), x.shape.clone(), &v)?])
    }
}

fn default_axis(node: &kiln_ir::Node, opset: i64) -> Result<i64> {
    node.attr_int_or("axis", if opset >= 13 { -1 } else { 1 })
}

/// Largest value of a line, ignoring NaN (-inf when empty).
fn line_max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

pub(crate) fn softmax_line(v: &mut [f64]) {
    let m = line_max(v);
    // An all -inf line would give NaN from -inf - -inf; shifting by 0 keeps
    // it NaN-free (exp(-inf) = 0 and 0/0 then stays NaN as in the spec's formula).
    let m = if m.is_finite() { m } else { 0.0 };
    let mut sum = 0.0;
    for x in v.iter_mut() {
        *x = (*x - m).exp();
        sum += *x;
    }
    for x in v.iter_mut() {
        *x /= sum;
    }
}

pub(crate) fn log_softmax_line(v: &mut [f64]) {
    let m = line_max(v);
    let m = if m.is_finite() { m } else { 0.0 };
    let log_sum = v.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
    for x in v.iter_mut() {
        *x = *x - m - log_sum;
    }
}

/// 1 at the first largest element, 0 elsewhere.
fn hardmax_line(v: &mut [f64]) {
    let mut best = 0;
    for k in 1..v.len() {
        if v[k] > v[best] || (v[k].is_nan() && !v[best].is_nan()) {
            best = k;
        }
    }
    for (k, x) in v.iter_mut().enumerate() {
        *x = if k == best { 1.0 } else { 0.0 };
    }
}

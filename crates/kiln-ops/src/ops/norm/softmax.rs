//! Softmax, LogSoftmax and Hardmax. From opset 13 they work along one axis
//! (default -1); before, the input is coerced to 2-D at `axis` (default 1)
//! and the op runs over each row of the flattened trailing dims.
//!
//! Softmax and LogSoftmax are compounds: x - ReduceMax(x) (so large inputs
//! do not overflow), Exp, ReduceSum, then Div (or Sub of the Log). Every
//! intermediate has the element type, as in their ONNX function bodies.
//! Hardmax stays a library op. [`softmax_line`] and [`log_softmax_line`]
//! are the same functions on one line of f64 values, rounded per stage
//! ([`Stages`]), for the ops that run a softmax inside their own loop
//! (Attention, SoftmaxCrossEntropyLoss).

use super::{float_input_type, float_tensor, float_values, rounder, Lines};
use crate::compound::{Comp, Compound};
use crate::ops::compose::reduce_keep;
use crate::ops::unary::EXP_NONPOSITIVE;
use crate::registry::Registry;
use crate::util::normalize_axis;
use crate::{arg, inputs_id, Builder, EvalCx, InferCx, Op};
use kiln_ir::{Attr, DType, Result, Tensor, TensorType, ValueId};

pub fn register(r: &mut Registry) {
    r.add("Softmax", Comp(Softmax { log: false }));
    r.add("LogSoftmax", Comp(Softmax { log: true }));
    r.add("Hardmax", Hardmax);
}

/// How the stages of a softmax round in an element type.
#[derive(Clone, Copy)]
pub(crate) struct Stages {
    round: fn(f64) -> f64,
    /// bfloat16 sums accumulate one rounded addition at a time (as the
    /// reference implementation defines them); wider types accumulate exactly.
    sequential_sum: bool,
}

impl Stages {
    pub fn of(dtype: DType) -> Stages {
        Stages {
            round: rounder(dtype),
            sequential_sum: dtype == DType::BF16,
        }
    }

    fn sum(self, v: &[f64]) -> f64 {
        if self.sequential_sum {
            v.iter().fold(0.0, |a, x| (self.round)(a + x))
        } else {
            (self.round)(v.iter().sum())
        }
    }

    /// Replaces `v` by exp(v - max(v)) (rounded per stage) and returns the
    /// sum. An all -inf line is shifted by 0 so it stays NaN-free.
    fn shifted_exp(self, v: &mut [f64]) -> f64 {
        let r = self.round;
        let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let m = if m.is_finite() { m } else { 0.0 };
        for x in v.iter_mut() {
            *x = r(r(*x - m).exp());
        }
        self.sum(v)
    }
}

/// The axes one softmax line spans: `axis` from opset 13, the flattened
/// trailing dims `axis..` before. A scalar is one line of one element.
fn line_axes(node: &kiln_ir::Node, opset: i64, rank: usize) -> Result<Vec<usize>> {
    if rank == 0 {
        return Ok(Vec::new());
    }
    let a = normalize_axis(default_axis(node, opset)?, rank)?;
    Ok(if opset >= 13 {
        vec![a]
    } else {
        (a..rank).collect()
    })
}

/// The lines Hardmax works on, by opset.
fn op_lines(axis: i64, opset: i64, shape: &[usize]) -> Result<Lines> {
    if shape.is_empty() {
        return Ok(Lines {
            outer: 1,
            len: 1,
            inner: 1,
        });
    }
    let a = normalize_axis(axis, shape.len())?;
    Ok(if opset >= 13 {
        Lines::along(shape, a)
    } else {
        Lines::flattened_from(shape, a)
    })
}

fn default_axis(node: &kiln_ir::Node, opset: i64) -> Result<i64> {
    node.attr_int_or("axis", if opset >= 13 { -1 } else { 1 })
}

/// Softmax (`log`: LogSoftmax) over the line axes:
/// e = exp(x - max), y = e / sum(e) or (x - max) - log(sum(e)).
struct Softmax {
    log: bool,
}

impl Compound for Softmax {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        float_input_type(cx, 0)?;
        let x = inputs_id(inputs, 0)?;
        let axes = line_axes(cx.node, cx.opset, b.shape(x)?.len())?;
        let max = reduce_keep(b, "ReduceMax", x, &axes)?;
        let shifted = b.op("Sub", &[x, max], &[])?;
        // x <= max(x) along the line, so the shifted values are <= 0 (or NaN).
        let exp = b.op("Exp", &[shifted], &[(EXP_NONPOSITIVE, Attr::Int(1))])?;
        let sum = reduce_keep(b, "ReduceSum", exp, &axes)?;
        let y = if self.log {
            let log = b.op("Log", &[sum], &[])?;
            b.op("Sub", &[shifted, log], &[])?
        } else {
            b.op("Div", &[exp, sum], &[])?
        };
        Ok(vec![Some(y)])
    }
}

/// Hardmax: 1 at the first largest element of each line, 0 elsewhere.
struct Hardmax;

impl Op for Hardmax {
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
            lines.for_each(&mut v, hardmax_line);
        }
        Ok(vec![float_tensor(x.dtype(), x.shape.clone(), &v)?])
    }
}

/// exp(x - max) / sum.
pub(crate) fn softmax_line(v: &mut [f64], s: Stages) {
    let sum = s.shifted_exp(v);
    for x in v.iter_mut() {
        *x = (s.round)(*x / sum);
    }
}

/// (x - max) - log(sum(exp(x - max))).
pub(crate) fn log_softmax_line(v: &mut [f64], s: Stages) {
    let r = s.round;
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let m = if m.is_finite() { m } else { 0.0 };
    let shifted: Vec<f64> = v.iter().map(|&x| r(x - m)).collect();
    let mut e = shifted.clone();
    let log_sum = r(s.shifted_exp(&mut e).ln());
    for (x, t) in v.iter_mut().zip(shifted) {
        *x = r(t - log_sum);
    }
}

/// 1 at the first largest element (a NaN counts as largest), 0 elsewhere.
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

//! LpNormalization (divide by the L1 or L2 norm along an axis) and LRN
//! (local response normalization across neighbouring channels).

use super::{float_input_type, float_tensor, float_values, Lines};
use crate::ops::reduce::checked_axis;
use crate::registry::Registry;
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("LpNormalization", LpNorm);
    r.add("LRN", Lrn);
}

struct LpNorm;

impl Op for LpNorm {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![float_input_type(cx, 0)?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let p = cx.node.attr_int_or("p", 2)?;
        if p != 1 && p != 2 {
            bail!("p must be 1 or 2, got {p}");
        }
        let mut v = float_values(x)?;
        if x.rank() > 0 && !v.is_empty() {
            let axis = checked_axis(cx.node.attr_int_or("axis", -1)?, x.rank())?;
            Lines::along(&x.shape, axis).for_each(&mut v, |line| {
                let norm = if p == 1 {
                    line.iter().map(|x| x.abs()).sum::<f64>()
                } else {
                    line.iter().map(|x| x * x).sum::<f64>().sqrt()
                };
                // A zero norm gives zeros rather than 0/0.
                for x in line.iter_mut() {
                    *x = if norm == 0.0 { 0.0 } else { *x / norm };
                }
            });
        }
        Ok(vec![float_tensor(x.dtype(), x.shape.clone(), &v)?])
    }
}

/// LRN: y = x / (bias + alpha/size * sum of squares over the channel window)^beta.
struct Lrn;

impl Op for Lrn {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![float_input_type(cx, 0)?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let node = cx.node;
        let size = match node.attr_int("size")? {
            Some(s) if s > 0 => s as usize,
            Some(s) => bail!("size must be positive, got {s}"),
            None => bail!("attribute 'size' is required"),
        };
        let alpha = node.attr_float_or("alpha", 1e-4)? as f64;
        let beta = node.attr_float_or("beta", 0.75)? as f64;
        let bias = node.attr_float_or("bias", 1.0)? as f64;
        if x.rank() < 2 {
            bail!("input must have shape (N, C, ...), got {:?}", x.shape);
        }
        // Window of channel c: [c - floor((size-1)/2), c + ceil((size-1)/2)].
        let (before, after) = ((size - 1) / 2, size / 2);
        let mut v = float_values(x)?;
        if !v.is_empty() {
            Lines::along(&x.shape, 1).for_each(&mut v, |line| {
                let mut prefix = vec![0.0; line.len() + 1];
                for (c, x) in line.iter().enumerate() {
                    prefix[c + 1] = prefix[c] + x * x;
                }
                for c in 0..line.len() {
                    let (lo, hi) = (c.saturating_sub(before), (c + after + 1).min(line.len()));
                    let square_sum = prefix[hi] - prefix[lo];
                    line[c] /= (bias + alpha / size as f64 * square_sum).powf(beta);
                }
            });
        }
        Ok(vec![float_tensor(x.dtype(), x.shape.clone(), &v)?])
    }
}

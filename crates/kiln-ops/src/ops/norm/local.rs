//! LpNormalization (divide by the L1 or L2 norm along an axis; a compound
//! of ReduceL1/ReduceL2 and Div) and LRN (local response normalization
//! across neighbouring channels, a library op).

use super::{float_input_type, float_tensor, float_values, Lines};
use crate::compound::{Comp, Compound};
use crate::ops::compose::reduce_keep;
use crate::ops::reduce::checked_axis;
use crate::registry::Registry;
use crate::{arg, inputs_id, Builder, EvalCx, InferCx, Op};
use kiln_ir::{bail, Result, Tensor, TensorType, ValueId};

pub fn register(r: &mut Registry) {
    r.add("LpNormalization", Comp(LpNorm));
    r.add("LRN", Lrn);
}

/// LpNormalization: x / norm, the norm (p = 1 or 2) over `axis` kept as
/// size 1. A zero norm (an all-zero line) divides by 1, giving zeros rather
/// than 0/0. A scalar has no axis and stays as it is.
struct LpNorm;

impl Compound for LpNorm {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let dtype = float_input_type(cx, 0)?.dtype;
        let x = inputs_id(inputs, 0)?;
        let norm_op = match cx.node.attr_int_or("p", 2)? {
            1 => "ReduceL1",
            2 => "ReduceL2",
            p => bail!("p must be 1 or 2, got {p}"),
        };
        let rank = b.shape(x)?.len();
        if rank == 0 {
            return Ok(vec![Some(x)]);
        }
        let axis = checked_axis(cx.node.attr_int_or("axis", -1)?, rank)?;
        let norm = reduce_keep(b, norm_op, x, &[axis])?;
        let zero = b.scalar(dtype, 0.0)?;
        let one = b.scalar(dtype, 1.0)?;
        let is_zero = b.op("Equal", &[norm, zero], &[])?;
        let safe = b.op("Where", &[is_zero, one, norm], &[])?;
        Ok(vec![Some(b.op("Div", &[x, safe], &[])?)])
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

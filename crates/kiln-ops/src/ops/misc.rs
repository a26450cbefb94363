//! Assorted ops: Einsum (`einsum`), Attention (`attention`),
//! LinearAttention (`linear_attention`), FlexAttention (`flex_attention`,
//! ai.onnx.preview), RotaryEmbedding (`rotary`), Det (`det`) and SwiGLU (here).

mod attention;
mod det;
mod einsum;
mod flex_attention;
mod linear_attention;
mod rotary;

use crate::ops::norm::{float_input_type, float_tensor, float_values, rounder};
use crate::registry::Registry;
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("SwiGLU", SwiGlu);
    attention::register(r);
    det::register(r);
    einsum::register(r);
    flex_attention::register(r);
    linear_attention::register(r);
    rotary::register(r);
}

/// SwiGLU: Y = A * sigmoid(alpha * A) * B, for equal-shaped A and B.
struct SwiGlu;

impl Op for SwiGlu {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let (a, b) = (float_input_type(cx, 0)?, float_input_type(cx, 1)?);
        if a.dtype != b.dtype {
            bail!(
                "A and B must have the same type, got {} and {}",
                a.dtype,
                b.dtype
            );
        }
        if let (Some(sa), Some(sb)) = (&a.shape, &b.shape) {
            if sa != sb {
                bail!("A and B must have the same shape, got {sa:?} and {sb:?}");
            }
        }
        Ok(vec![a])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (a, b) = (arg(inputs, 0)?, arg(inputs, 1)?);
        if a.shape != b.shape || a.dtype() != b.dtype() {
            bail!(
                "A and B must have the same type and shape, got {} and {}",
                a.ty(),
                b.ty()
            );
        }
        let alpha = cx.node.attr_float_or("alpha", 1.0)? as f64;
        let round = rounder(a.dtype());
        let (va, vb) = (float_values(a)?, float_values(b)?);
        // The gate's sigmoid is rounded to the element type as Swish does.
        let y: Vec<f64> = va
            .iter()
            .zip(&vb)
            .map(|(&x, &g)| x * round(1.0 / (1.0 + (-alpha * x).exp())) * g)
            .collect();
        Ok(vec![float_tensor(a.dtype(), a.shape.clone(), &y)?])
    }
}

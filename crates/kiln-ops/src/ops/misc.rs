//! Assorted ops: Einsum (`einsum`), Attention (`attention`),
//! LinearAttention (`linear_attention`), FlexAttention (`flex_attention`,
//! ai.onnx.preview), RotaryEmbedding (`rotary`), Det (`det`) and SwiGLU
//! (here, a compound of Swish and Mul).

mod attention;
mod det;
mod einsum;
mod flex_attention;
mod linear_attention;
mod rotary;

use crate::compound::{Comp, Compound};
use crate::ops::norm::float_input_type;
use crate::registry::Registry;
use crate::{inputs_id, Builder, InferCx};
use kiln_ir::{bail, Attr, Result, ValueId};

pub fn register(r: &mut Registry) {
    r.add("SwiGLU", Comp(SwiGlu));
    attention::register(r);
    det::register(r);
    einsum::register(r);
    flex_attention::register(r);
    linear_attention::register(r);
    rotary::register(r);
}

/// SwiGLU: Y = Swish(A, alpha) * B = A * sigmoid(alpha * A) * B, for
/// equal-shaped A and B (its ONNX function body).
struct SwiGlu;

impl Compound for SwiGlu {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let (ta, tb) = (float_input_type(cx, 0)?, float_input_type(cx, 1)?);
        let (a, gate) = (inputs_id(inputs, 0)?, inputs_id(inputs, 1)?);
        if ta.dtype != tb.dtype || b.shape(a)? != b.shape(gate)? {
            bail!(
                "A and B must have the same type and shape, got {} and {}",
                b.ty(a),
                b.ty(gate)
            );
        }
        let alpha = cx.node.attr_float_or("alpha", 1.0)?;
        let swish = b.op("Swish", &[a], &[("alpha", Attr::Float(alpha))])?;
        Ok(vec![Some(b.op("Mul", &[swish, gate], &[])?)])
    }
}

//! RotaryEmbedding (opset 23): rotates the first `rotary_embedding_dim`
//! features of every head vector by position-dependent angles given as cos
//! and sin caches, pairing the two halves or (`interleaved`) adjacent
//! features. Input is (batch, heads, seq, head_size) or
//! (batch, seq, heads * head_size) with `num_heads`.

use crate::ops::norm::{float_input_type, float_tensor, float_values};
use crate::registry::Registry;
use crate::util::ints;
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, Node, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("RotaryEmbedding", Rotary);
}

struct Rotary;

impl Op for Rotary {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![float_input_type(cx, 0)?])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let (cos, sin) = (arg(inputs, 1)?, arg(inputs, 2)?);
        let layout = Layout::of(cx.node, &x.shape)?;
        let rot = match cx.node.attr_int_or("rotary_embedding_dim", 0)? {
            0 => layout.head_size,
            r if r > 0 && r as usize <= layout.head_size && r % 2 == 0 => r as usize,
            r => bail!(
                "rotary_embedding_dim {r} must be even and at most the head size {}",
                layout.head_size
            ),
        };
        let half = rot / 2;
        let positions = match opt_arg(inputs, 3) {
            Some(p) => Some(ints(p)?),
            None => None,
        };
        let rows = cache_rows(cos, sin, half, &layout, positions.as_deref())?;
        let (cv, sv) = (float_values(cos)?, float_values(sin)?);
        let interleaved = cx.node.attr_int_or("interleaved", 0)? != 0;
        let mut v = float_values(x)?;
        for b in 0..layout.batch {
            for s in 0..layout.seq {
                let row = rows[b * layout.seq + s] * half;
                let (c, sn) = (&cv[row..row + half], &sv[row..row + half]);
                for h in 0..layout.heads {
                    let head = &mut v[layout.head_offset(b, s, h)..][..rot];
                    rotate(head, c, sn, interleaved);
                }
            }
        }
        Ok(vec![float_tensor(x.dtype(), x.shape.clone(), &v)?])
    }
}

/// Where each (batch, seq, head) vector lives in the input.
struct Layout {
    batch: usize,
    seq: usize,
    heads: usize,
    head_size: usize,
    /// 4-D (batch, heads, seq, head_size) rather than 3-D (batch, seq, hidden).
    heads_first: bool,
}

impl Layout {
    fn of(node: &Node, shape: &[usize]) -> Result<Layout> {
        match *shape {
            [batch, heads, seq, head_size] => Ok(Layout {
                batch,
                seq,
                heads,
                head_size,
                heads_first: true,
            }),
            [batch, seq, hidden] => {
                let heads = match node.attr_int("num_heads")? {
                    Some(n) if n > 0 && hidden % n as usize == 0 => n as usize,
                    _ => bail!("3-D input needs a num_heads attribute that divides the hidden size {hidden}"),
                };
                Ok(Layout {
                    batch,
                    seq,
                    heads,
                    head_size: hidden / heads,
                    heads_first: false,
                })
            }
            _ => bail!("input must be 3-D or 4-D, got shape {shape:?}"),
        }
    }

    fn head_offset(&self, b: usize, s: usize, h: usize) -> usize {
        let vector = if self.heads_first {
            (b * self.heads + h) * self.seq + s
        } else {
            (b * self.seq + s) * self.heads + h
        };
        vector * self.head_size
    }
}

/// The cache row used by each (batch, seq) position: `position_ids` index
/// a (max_position, half) cache; without them the cache is (batch, seq, half).
fn cache_rows(
    cos: &Tensor,
    sin: &Tensor,
    half: usize,
    layout: &Layout,
    positions: Option<&[i64]>,
) -> Result<Vec<usize>> {
    if cos.shape != sin.shape || cos.shape.last() != Some(&half) {
        bail!(
            "cos and sin caches must have the same shape ending in {half}, got {:?} and {:?}",
            cos.shape,
            sin.shape
        );
    }
    let tokens = layout.batch * layout.seq;
    match positions {
        Some(p) => {
            if p.len() != tokens || cos.rank() != 2 {
                bail!("position_ids must be (batch, seq) and the caches (max_position, {half})");
            }
            let max = cos.shape[0];
            p.iter()
                .map(|&i| {
                    if i >= 0 && (i as usize) < max {
                        Ok(i as usize)
                    } else {
                        bail!("position id {i} is out of range for a cache of {max} rows")
                    }
                })
                .collect()
        }
        None => {
            if cos.shape != [layout.batch, layout.seq, half] {
                bail!(
                    "without position_ids the caches must be (batch, seq, {half}), got {:?}",
                    cos.shape
                );
            }
            Ok((0..tokens).collect())
        }
    }
}

/// Rotates pairs (x1, x2) of one head: (x1 cos - x2 sin, x1 sin + x2 cos).
fn rotate(head: &mut [f64], cos: &[f64], sin: &[f64], interleaved: bool) {
    let half = cos.len();
    for i in 0..half {
        let (a, b) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        let (x1, x2) = (head[a], head[b]);
        head[a] = cos[i] * x1 - sin[i] * x2;
        head[b] = sin[i] * x1 + cos[i] * x2;
    }
}

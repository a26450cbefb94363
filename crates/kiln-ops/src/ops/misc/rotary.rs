//! RotaryEmbedding (opset 23): rotates the first `rotary_embedding_dim`
//! features of every head vector by position-dependent angles given as cos
//! and sin caches, pairing the two halves or (`interleaved`) adjacent
//! features. Input is (batch, heads, seq, head_size) or
//! (batch, seq, heads * head_size) with `num_heads`.
//!
//! A compound: the caches are gathered at `position_ids` (Gather), the
//! input viewed 4-D (Reshape) and split into the pair halves (Slice, a
//! Reshape to pairs when interleaved); (x1 cos - x2 sin, x1 sin + x2 cos)
//! are element-wise Mul/Sub/Add; Concat puts the halves and the
//! unrotated features back together.

use crate::compound::{Comp, Compound};
use crate::ops::compose::reshape;
use crate::ops::norm::float_input_type;
use crate::registry::Registry;
use crate::{inputs_id, Builder, InferCx};
use kiln_ir::{bail, Attr, Node, Result, ValueId};

pub fn register(r: &mut Registry) {
    r.add("RotaryEmbedding", Comp(Rotary));
}

struct Rotary;

impl Compound for Rotary {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        float_input_type(cx, 0)?;
        let x = inputs_id(inputs, 0)?;
        let shape = b.shape(x)?;
        let layout = Layout::of(cx.node, &shape)?;
        let rot = match cx.node.attr_int_or("rotary_embedding_dim", 0)? {
            0 => layout.head_size,
            r if r > 0 && r as usize <= layout.head_size && r % 2 == 0 => r as usize,
            r => bail!(
                "rotary_embedding_dim {r} must be even and at most the head size {}",
                layout.head_size
            ),
        };
        let half = rot / 2;
        let positions = inputs.get(3).copied().flatten();
        let mut caches = Vec::new();
        for i in [1, 2] {
            let cache = cache_rows(b, inputs_id(inputs, i)?, positions, half, &layout)?;
            caches.push(reshape(b, cache, &layout.dims(half, true))?);
        }
        let (cos, sin) = (caches[0], caches[1]);
        let x4 = reshape(b, x, &layout.dims(layout.head_size, false))?;
        let interleaved = cx.node.attr_int_or("interleaved", 0)? != 0;
        let pairs = Pairs::split(b, &layout, x4, half, interleaved)?;
        let c1 = b.op("Mul", &[pairs.x1, cos], &[])?;
        let s2 = b.op("Mul", &[pairs.x2, sin], &[])?;
        let y1 = b.op("Sub", &[c1, s2], &[])?;
        let s1 = b.op("Mul", &[pairs.x1, sin], &[])?;
        let c2 = b.op("Mul", &[pairs.x2, cos], &[])?;
        let y2 = b.op("Add", &[s1, c2], &[])?;
        let mut parts = vec![pairs.join(b, &layout, y1, y2)?];
        if rot < layout.head_size {
            parts.push(slice_last(b, x4, rot, layout.head_size)?);
        }
        let y = concat_last(b, &parts)?;
        Ok(vec![Some(reshape(b, y, &shape)?)])
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

    /// The 4-D view with `last` features per vector: (batch, heads, seq,
    /// last) or (batch, seq, heads, last); `broadcast` makes the heads axis
    /// size 1 (for the caches, shared by all heads).
    fn dims(&self, last: usize, broadcast: bool) -> Vec<usize> {
        let heads = if broadcast { 1 } else { self.heads };
        match self.heads_first {
            true => vec![self.batch, heads, self.seq, last],
            false => vec![self.batch, self.seq, heads, last],
        }
    }
}

/// The (x1, x2) operands of the rotation, each (4-D view) with `half`
/// features: the two halves of the rotated features, or (`interleaved`)
/// their even and odd features.
struct Pairs {
    x1: ValueId,
    x2: ValueId,
    interleaved: bool,
}

impl Pairs {
    fn split(
        b: &mut Builder,
        layout: &Layout,
        x4: ValueId,
        half: usize,
        interleaved: bool,
    ) -> Result<Pairs> {
        let rotated = slice_last(b, x4, 0, 2 * half)?;
        let (x1, x2) = if interleaved {
            let mut dims = layout.dims(half, false);
            dims.push(2);
            let pairs = reshape(b, rotated, &dims)?;
            let even = slice_last(b, pairs, 0, 1)?;
            let odd = slice_last(b, pairs, 1, 2)?;
            let dims = layout.dims(half, false);
            (reshape(b, even, &dims)?, reshape(b, odd, &dims)?)
        } else {
            (
                slice_last(b, rotated, 0, half)?,
                slice_last(b, rotated, half, 2 * half)?,
            )
        };
        Ok(Pairs {
            x1,
            x2,
            interleaved,
        })
    }

    /// The rotated features from the rotated operands, in input order.
    fn join(&self, b: &mut Builder, layout: &Layout, y1: ValueId, y2: ValueId) -> Result<ValueId> {
        if !self.interleaved {
            return concat_last(b, &[y1, y2]);
        }
        let mut dims = b.shape(y1)?;
        let half = dims.pop().unwrap_or(0);
        let mut pair = dims.clone();
        pair.extend([half, 1]);
        let (y1, y2) = (reshape(b, y1, &pair)?, reshape(b, y2, &pair)?);
        let joined = concat_last(b, &[y1, y2])?;
        reshape(b, joined, &layout.dims(2 * half, false))
    }
}

/// Features `start..end` of the last axis.
fn slice_last(b: &mut Builder, x: ValueId, start: usize, end: usize) -> Result<ValueId> {
    let last = b.shape(x)?.len().saturating_sub(1);
    crate::ops::compose::slice(b, x, &[last], &[start], &[end], &[])
}

/// `parts` joined along their last axis.
fn concat_last(b: &mut Builder, parts: &[ValueId]) -> Result<ValueId> {
    match parts {
        [one] => Ok(*one),
        _ => b.op("Concat", parts, &[("axis", Attr::Int(-1))]),
    }
}

/// The cache rows of every (batch, seq) position, as (batch, seq, half):
/// `position_ids` (batch, seq) index a (max_position, half) cache; without
/// them the cache is (batch, seq, half) already.
fn cache_rows(
    b: &mut Builder,
    cache: ValueId,
    positions: Option<ValueId>,
    half: usize,
    layout: &Layout,
) -> Result<ValueId> {
    let shape = b.shape(cache)?;
    if shape.last() != Some(&half) {
        bail!("cos and sin caches must have shapes ending in {half}, got {shape:?}");
    }
    match positions {
        Some(p) => {
            let ps = b.shape(p)?;
            if ps != [layout.batch, layout.seq] || shape.len() != 2 {
                bail!(
                    "position_ids must be (batch, seq) and the caches (max_position, {half}), got {ps:?} and {shape:?}"
                );
            }
            b.op("Gather", &[cache, p], &[("axis", Attr::Int(0))])
        }
        None => {
            if shape != [layout.batch, layout.seq, half] {
                bail!(
                    "without position_ids the caches must be (batch, seq, {half}), got {shape:?}"
                );
            }
            Ok(cache)
        }
    }
}

//! Concat (joins tensors along an axis), a primitive, and Split (its
//! inverse), which opens into one Slice per output.

use super::common::{input_shapes, int_values};
use crate::compound::{Comp, Compound};
use crate::registry::Registry;
use crate::te::primitive::{Prim, Primitive};
use crate::te::{Access, Expr, IndexExpr, TensorExpr, Var};
use crate::util::normalize_axis;
use crate::{inputs_id, Builder, InferCx};
use kiln_ir::{bail, ensure, Node, Result, Tensor, ValueId};

pub fn register(r: &mut Registry) {
    r.add("Concat", Prim(Concat));
    r.add("Split", Comp(Split));
}

struct Concat;

impl Concat {
    /// The normalized axis and the output shape.
    fn plan(node: &Node, opset: i64, shapes: &[&[usize]]) -> Result<(usize, Vec<usize>)> {
        let Some(first) = shapes.first() else {
            bail!("Concat needs at least one input")
        };
        // Concat-1 defaulted the axis to 1; later versions require it.
        let axis = match node.attr_int("axis")? {
            Some(a) => a,
            None if opset < 4 => 1,
            None => bail!("attribute 'axis' is required"),
        };
        ensure!(!first.is_empty(), "Concat inputs must have rank >= 1");
        let axis = normalize_axis(axis, first.len())?;
        let mut out = first.to_vec();
        out[axis] = 0;
        for s in shapes {
            let same_rest = s.len() == first.len()
                && s.iter()
                    .zip(first.iter())
                    .enumerate()
                    .all(|(d, (a, b))| d == axis || a == b);
            ensure!(
                same_rest,
                "input shapes {shapes:?} differ outside axis {axis}"
            );
            out[axis] += s[axis];
        }
        Ok((axis, out))
    }
}

/// `out[…, i, …] = in_k[…, i - offset_k, …]` for the input `k` whose range
/// along the axis holds `i`: one shifted read per input, selected by
/// nested Wheres on whether each read is inside its input.
impl Primitive for Concat {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let dtype = cx.input(0)?.ty.dtype;
        for i in 0..cx.inputs.len() {
            let t = cx.input(i)?.ty.dtype;
            ensure!(t == dtype, "inputs have different types: {dtype} and {t}");
        }
        let Some(inputs) = input_shapes(cx) else {
            return Ok(None);
        };
        let shapes: Vec<&[usize]> = inputs.iter().flatten().map(|s| s.as_slice()).collect();
        let (axis, shape) = Concat::plan(cx.node, cx.opset, &shapes)?;
        let mut offset = 0;
        let mut accesses = Vec::with_capacity(shapes.len());
        for (k, s) in shapes.iter().enumerate() {
            let index = (0..shape.len())
                .map(|l| match l == axis {
                    true => IndexExpr::affine([(Var::Out(l), 1)], -offset),
                    false => IndexExpr::out(l),
                })
                .collect();
            accesses.push(Access { input: k, index });
            offset += s[axis] as i64;
        }
        let last = accesses.len() - 1;
        let body = (0..last).rev().fold(Expr::Load(last), |rest, k| {
            Expr::call("Where", vec![Expr::InBounds(k), Expr::Load(k), rest])
        });
        Ok(Some(
            TensorExpr {
                dtype,
                shape,
                inputs,
                accesses,
                reduction: None,
                body,
            }
            .simplified(),
        ))
    }
}

struct Split;

impl Split {
    /// The normalized axis and the size of each part along it.
    fn plan(node: &Node, shape: &[usize], split: Option<&Tensor>) -> Result<(usize, Vec<usize>)> {
        let axis = normalize_axis(node.attr_int_or("axis", 0)?, shape.len())?;
        ensure!(!shape.is_empty(), "cannot split a scalar");
        let dim = shape[axis];
        let n_out = node.outputs.len();
        if let Some(split) = split {
            ensure!(
                node.attr_int("num_outputs")?.is_none(),
                "both the 'split' input and 'num_outputs' are given"
            );
            let sizes = int_values(split)?;
            ensure!(
                sizes.len() == n_out,
                "split {sizes:?} has {} entries for {n_out} outputs",
                sizes.len()
            );
            let sizes = super::common::dims_from_i64(&sizes, "split")?;
            ensure!(
                sizes.iter().sum::<usize>() == dim,
                "split {sizes:?} does not sum to dimension {dim}"
            );
            return Ok((axis, sizes));
        }
        let n = match node.attr_int("num_outputs")? {
            Some(n) => {
                ensure!(
                    n as usize == n_out && n > 0,
                    "num_outputs is {n} but the node has {n_out} outputs"
                );
                n_out
            }
            None => n_out,
        };
        ensure!(n > 0, "Split needs at least one output");
        // Parts of ceil(dim / n); the last one takes what is left (opset 18).
        let chunk = dim.div_ceil(n);
        let last = dim.checked_sub(chunk * (n - 1));
        let Some(last) = last else {
            bail!("dimension {dim} cannot be split into {n} parts of {chunk}")
        };
        let mut sizes = vec![chunk; n - 1];
        sizes.push(last);
        Ok((axis, sizes))
    }
}

/// One Slice of the input along the axis per part.
impl Compound for Split {
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>> {
        let x = inputs_id(inputs, 0)?;
        let split = match inputs.get(1).copied().flatten() {
            Some(id) => Some(b.require_value(id)?),
            None => None,
        };
        let (axis, sizes) = Split::plan(cx.node, &b.shape(x)?, split.as_ref())?;
        let axes = b.ints(&[axis as i64]);
        let mut start = 0;
        let mut outs = Vec::with_capacity(sizes.len());
        for n in sizes {
            let (starts, ends) = (b.ints(&[start]), b.ints(&[start + n as i64]));
            outs.push(Some(b.op("Slice", &[x, starts, ends, axes], &[])?));
            start += n as i64;
        }
        Ok(outs)
    }
}

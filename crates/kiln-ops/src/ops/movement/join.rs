//! Concat (joins tensors along an axis) and Split (its inverse).

use super::common::{int_values, narrow, same_dtype, slices, typed};
use crate::registry::Registry;
use crate::util::normalize_axis;
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, dispatch_all, ensure, Elem, Node, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("Concat", Concat);
    r.add("Split", Split);
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

impl Op for Concat {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        let mut shapes = Vec::new();
        for i in 0..cx.inputs.len() {
            let x = cx.input(i)?;
            ensure!(
                x.ty.dtype == dtype,
                "inputs have different types: {dtype} and {}",
                x.ty.dtype
            );
            match x.ty.shape.as_deref() {
                Some(s) => shapes.push(s),
                None => return Ok(vec![TensorType::unknown_shape(dtype)]),
            }
        }
        Ok(vec![typed(
            dtype,
            Some(Concat::plan(cx.node, cx.opset, &shapes)?.1),
        )])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let ts = (0..inputs.len())
            .map(|i| arg(inputs, i))
            .collect::<Result<Vec<_>>>()?;
        same_dtype(&ts)?;
        let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape.as_slice()).collect();
        let (axis, shape) = Concat::plan(cx.node, cx.opset, &shapes)?;
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let data = dispatch_all!(&ts[0].data, |_v: T| {
            let parts = slices::<T>(&ts)?;
            let mut out: Vec<T> = Vec::with_capacity(shape.iter().product());
            for o in 0..outer {
                for (t, p) in ts.iter().zip(&parts) {
                    let chunk = t.shape[axis] * inner;
                    out.extend_from_slice(&p[o * chunk..(o + 1) * chunk]);
                }
            }
            T::wrap(out)
        });
        Ok(vec![Tensor::new(shape, data)?])
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

    fn part_shapes(shape: &[usize], axis: usize, sizes: &[usize]) -> Vec<Vec<usize>> {
        sizes
            .iter()
            .map(|&n| {
                let mut s = shape.to_vec();
                s[axis] = n;
                s
            })
            .collect()
    }
}

impl Op for Split {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = cx.input(0)?;
        let n = cx.node.outputs.len();
        let split_known = cx.opt_input(1).is_none() || cx.value(1).is_some();
        match (&x.ty.shape, split_known) {
            (Some(s), true) => {
                let (axis, sizes) = Split::plan(cx.node, s, cx.value(1))?;
                Ok(Split::part_shapes(s, axis, &sizes)
                    .into_iter()
                    .map(|s| TensorType::new(x.ty.dtype, s))
                    .collect())
            }
            _ => Ok(vec![TensorType::unknown_shape(x.ty.dtype); n]),
        }
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let (axis, sizes) = Split::plan(cx.node, &x.shape, opt_arg(inputs, 1))?;
        let mut start = 0;
        let mut outs = Vec::with_capacity(sizes.len());
        for n in sizes {
            outs.push(narrow(x, axis, start, n)?);
            start += n;
        }
        Ok(outs)
    }
}

//! TopK: the `k` largest (or smallest) elements along `axis` and their
//! indices. Ties keep the lower index first; NaN counts as larger than any
//! number. Results are always sorted (allowed when `sorted` = 0).

use super::checked_axis;
use crate::registry::Registry;
use crate::util::{ints, numel};
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, dispatch_num, DType, Elem, Node, Num, Result, Tensor, TensorType};
use std::cmp::Ordering;

pub fn register(r: &mut Registry) {
    r.add("TopK", TopK);
}

struct TopK;

/// The single value of the K input.
fn k_value(t: &Tensor) -> Result<usize> {
    let v = ints(t)?;
    let &[k] = v.as_slice() else {
        bail!("K must hold one value, got {}", v.len())
    };
    if k < 0 {
        bail!("K must not be negative, got {k}");
    }
    Ok(k as usize)
}

/// Output shape: `shape` with the axis dimension replaced by `k`.
fn topk_shape(node: &Node, shape: &[usize], k: usize) -> Result<(usize, Vec<usize>)> {
    let axis = checked_axis(node.attr_int_or("axis", -1)?, shape.len())?;
    if k > shape[axis] {
        bail!("K = {k} is larger than axis {axis} of shape {shape:?}");
    }
    let mut out = shape.to_vec();
    out[axis] = k;
    Ok((axis, out))
}

impl Op for TopK {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = cx.input(0)?.ty.dtype;
        match (cx.shape(0)?, cx.value(1)) {
            (Some(shape), Some(k)) => {
                let (_, out) = topk_shape(cx.node, shape, k_value(k)?)?;
                Ok(vec![
                    TensorType::new(dtype, out.clone()),
                    TensorType::new(DType::I64, out),
                ])
            }
            _ => Ok(vec![
                TensorType::unknown_shape(dtype),
                TensorType::unknown_shape(DType::I64),
            ]),
        }
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let k = k_value(arg(inputs, 1)?)?;
        let (axis, out_shape) = topk_shape(cx.node, &x.shape, k)?;
        let largest = cx.node.attr_int_or("largest", 1)? != 0;
        let lines = (
            numel(&x.shape[..axis]),
            x.shape[axis],
            numel(&x.shape[axis + 1..]),
        );
        let (values, indices) = dispatch_num!(
            &x.data,
            |v: T| {
                let (vals, idx) = top_k(v, lines, k, largest);
                (T::wrap(vals), idx)
            },
            bail!("TopK needs a numeric tensor, got strings")
        );
        Ok(vec![
            Tensor::new(out_shape.clone(), values)?,
            Tensor::from_vec(out_shape, indices)?,
        ])
    }
}

/// Ascending order with NaN after every number.
fn nan_last<T: Num>(a: T, b: T) -> Ordering {
    #[allow(clippy::eq_op)]
    match (a != a, b != b) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Selects the top `k` of each line of `(outer, len, inner)`.
fn top_k<T: Num>(
    v: &[T],
    (outer, len, inner): (usize, usize, usize),
    k: usize,
    largest: bool,
) -> (Vec<T>, Vec<i64>) {
    let mut vals = vec![T::default(); outer * k * inner];
    let mut idx = vec![0i64; outer * k * inner];
    let mut order: Vec<usize> = Vec::with_capacity(len);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| v[(o * len + j) * inner + i];
            order.clear();
            order.extend(0..len);
            // A stable sort keeps equal values in index order.
            if largest {
                order.sort_by(|&a, &b| nan_last(at(b), at(a)));
            } else {
                order.sort_by(|&a, &b| nan_last(at(a), at(b)));
            }
            for (r, &j) in order.iter().take(k).enumerate() {
                let dst = (o * k + r) * inner + i;
                vals[dst] = at(j);
                idx[dst] = j as i64;
            }
        }
    }
    (vals, idx)
}

#[cfg(test)]
mod tests {
    use super::top_k;

    #[test]
    fn nan_is_largest_and_ties_keep_index_order() {
        let v = [1.0f32, f32::NAN, 3.0, 3.0];
        let (vals, idx) = top_k(&v, (1, 4, 1), 3, true);
        assert!(vals[0].is_nan());
        assert_eq!(idx, vec![1, 2, 3]);
        let (_, idx) = top_k(&v, (1, 4, 1), 2, false);
        assert_eq!(idx, vec![0, 2]);
    }
}

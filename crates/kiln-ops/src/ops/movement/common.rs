//! Index and shape helpers shared by the data-movement, shape and generate
//! families: checked conversions of data-given sizes and indices, row-major
//! offset enumeration, copying elements by index with a fill value, and the
//! pieces of the tensor expressions of ops that only move elements.

use crate::te::{Access, Expr, IndexExpr, TensorExpr};
use crate::InferCx;
use kiln_ir::{
    bail, dispatch_all, dispatch_num, DType, Data, Elem, Num, Result, Tensor, TensorType,
};

/// A type whose shape is known when `shape` is `Some`.
pub(crate) fn typed(dtype: DType, shape: Option<Vec<usize>>) -> TensorType {
    match shape {
        Some(s) => TensorType::new(dtype, s),
        None => TensorType::unknown_shape(dtype),
    }
}

/// The shapes of a node's inputs as a tensor expression lists them (`None`
/// for omitted inputs), or `None` while a present input's shape is unknown.
pub(crate) fn input_shapes(cx: &InferCx) -> Option<Vec<Option<Vec<usize>>>> {
    cx.inputs
        .iter()
        .map(|i| match i {
            None => Some(None),
            Some(i) => i.ty.shape.clone().map(Some),
        })
        .collect()
}

/// `out[i] = in0[index(i)]`: the expression of an op that only moves the
/// elements of its first input.
pub(crate) fn moved(
    dtype: DType,
    shape: Vec<usize>,
    inputs: Vec<Option<Vec<usize>>>,
    index: Vec<IndexExpr>,
) -> TensorExpr {
    TensorExpr {
        dtype,
        shape,
        inputs,
        accesses: vec![Access { input: 0, index }],
        reduction: None,
        body: Expr::Load(0),
    }
    .simplified()
}

/// Element count of a shape, failing on overflow or beyond the memory budget.
pub(crate) use crate::ops::conv::window::checked_numel;

/// Dimensions given as data (shape inputs, repeats, ...): each must be >= 0.
pub(crate) fn dims_from_i64(v: &[i64], what: &str) -> Result<Vec<usize>> {
    let dims = v
        .iter()
        .map(|&d| match usize::try_from(d) {
            Ok(d) => Ok(d),
            Err(_) => bail!("{what} has a negative dimension {d}"),
        })
        .collect::<Result<Vec<usize>>>()?;
    checked_numel(&dims)?;
    Ok(dims)
}

/// Maps an index in `[-dim, dim)` to `0..dim` (negative counts from the end).
pub(crate) fn resolve_index(i: i64, dim: usize) -> Result<usize> {
    let d = dim as i64;
    if i < -d || i >= d {
        bail!("index {i} is out of range for a dimension of size {dim}");
    }
    Ok(if i < 0 { (i + d) as usize } else { i as usize })
}

/// Normalizes a list of axes for `rank`, rejecting duplicates.
pub(crate) fn normalize_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = crate::util::normalize_axis(a, rank)?;
        if out.contains(&n) {
            bail!("axis {a} is repeated in {axes:?}");
        }
        out.push(n);
    }
    Ok(out)
}

/// Calls `f` with every multi-index of `shape` in row-major order.
pub(crate) fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    loop {
        f(&idx);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Row-major strides as i64.
pub(crate) fn strides_i64(shape: &[usize]) -> Vec<i64> {
    crate::util::strides(shape)
        .into_iter()
        .map(|s| s as i64)
        .collect()
}

/// Copies `data[i]` for each `Some(i)` of `idx` and the dtype's zero
/// (false, "") for each `None`.
// `clone` is needed for strings; the other dtypes are Copy.
#[allow(clippy::clone_on_copy)]
pub(crate) fn gather_fill(data: &Data, idx: &[Option<usize>]) -> Result<Data> {
    Ok(dispatch_all!(data, |v: T| T::wrap(
        idx.iter()
            .map(|i| i.map_or_else(T::default, |i| v[i].clone()))
            .collect()
    )))
}

/// A tensor of `shape` from elements of `x` at flat offsets `idx`.
pub(crate) fn take(x: &Tensor, shape: Vec<usize>, idx: Vec<usize>) -> Result<Tensor> {
    Tensor::new(shape, x.data.gather(idx.into_iter()))
}

/// The i64 values of a constant integer tensor input (indices, axes, ...).
pub(crate) fn int_values(t: &Tensor) -> Result<Vec<i64>> {
    crate::util::ints(t)
}

/// A 1-D i64 tensor.
pub(crate) fn i64_tensor(v: Vec<i64>) -> Tensor {
    let n = v.len();
    Tensor {
        shape: vec![n],
        data: Data::I64(v.into()),
    }
}

/// A scalar of numeric `dtype` holding `v` (converted as a cast would).
pub(crate) fn scalar_of(dtype: DType, v: f64) -> Result<Tensor> {
    dispatch_num!(
        &Data::zeros(dtype, 1),
        |_z: T| Ok(Tensor::scalar(T::from_f64(v))),
        bail!("a number cannot be stored in a {dtype} tensor")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_resolution() {
        assert_eq!(resolve_index(-1, 3).unwrap(), 2);
        assert!(resolve_index(3, 3).is_err());
        assert!(resolve_index(-4, 3).is_err());
        assert!(dims_from_i64(&[2, -1], "shape").is_err());
    }
}

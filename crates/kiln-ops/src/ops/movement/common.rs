//! Index and shape helpers shared by the data-movement, shape and generate
//! families: checked conversions of data-given sizes and indices, row-major
//! offset enumeration, and copying elements by index with a fill value.

use kiln_ir::{
    bail, dispatch_all, dispatch_num, DType, Data, Elem, Num, Result, Tensor, TensorType,
};

/// Largest element count an op will allocate for a shape that comes from
/// data; beyond it the model is treated as malformed instead of aborting on
/// allocation failure.
const MAX_ELEMS: usize = 1 << 34;

/// A type whose shape is known when `shape` is `Some`.
pub(crate) fn typed(dtype: DType, shape: Option<Vec<usize>>) -> TensorType {
    match shape {
        Some(s) => TensorType::new(dtype, s),
        None => TensorType::unknown_shape(dtype),
    }
}

/// Element count of `shape`, failing on overflow or absurd sizes.
pub(crate) fn checked_numel(shape: &[usize]) -> Result<usize> {
    let mut n: usize = 1;
    for &d in shape {
        n = match n.checked_mul(d) {
            Some(v) => v,
            None => bail!("shape {shape:?} has too many elements"),
        };
    }
    if n > MAX_ELEMS {
        bail!("shape {shape:?} has too many elements ({n})");
    }
    Ok(n)
}

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

/// Flat offsets `base + sum(idx[d] * strides[d])` for every multi-index of
/// `shape` in row-major order. Strides may be negative (reversed slices) or
/// zero (broadcast); the caller guarantees every offset is in range.
pub(crate) fn affine_offsets(shape: &[usize], base: i64, strides: &[i64]) -> Vec<usize> {
    let mut out = Vec::with_capacity(shape.iter().product());
    for_each_index(shape, |idx| {
        let off: i64 = base
            + idx
                .iter()
                .zip(strides)
                .map(|(&i, &s)| i as i64 * s)
                .sum::<i64>();
        out.push(off as usize);
    });
    out
}

/// Row-major strides as i64 (for [`affine_offsets`]).
pub(crate) fn strides_i64(shape: &[usize]) -> Vec<i64> {
    crate::util::strides(shape)
        .into_iter()
        .map(|s| s as i64)
        .collect()
}

/// Copies `data[i]` for each `Some(i)` of `idx` and `fill` for each `None`.
/// `fill` must have `data`'s dtype and one element; without it the dtype's
/// zero (false, "") is used.
pub(crate) fn gather_fill(
    data: &Data,
    idx: &[Option<usize>],
    fill: Option<&Tensor>,
) -> Result<Data> {
    if let Some(f) = fill {
        if f.dtype() != data.dtype() {
            bail!(
                "fill value has type {} but the data has {}",
                f.dtype(),
                data.dtype()
            );
        }
        if f.len() != 1 {
            bail!("fill value must have one element, got {}", f.len());
        }
    }
    dispatch_all!(data, |v: T| fill_take(v, idx, fill))
}

fn fill_take<T: Elem + Default>(
    v: &[T],
    idx: &[Option<usize>],
    fill: Option<&Tensor>,
) -> Result<Data> {
    let fill = match fill {
        Some(f) => f.as_slice::<T>()?[0].clone(),
        None => T::default(),
    };
    Ok(T::wrap(
        idx.iter()
            .map(|i| i.map_or_else(|| fill.clone(), |i| v[i].clone()))
            .collect(),
    ))
}

/// A tensor of `shape` from elements of `x` at flat offsets `idx`.
pub(crate) fn take(x: &Tensor, shape: Vec<usize>, idx: Vec<usize>) -> Result<Tensor> {
    Tensor::new(shape, x.data.gather(idx.into_iter()))
}

/// The typed elements of every tensor in `ts`, which must share `T`'s dtype.
pub(crate) fn slices<'a, T: Elem>(ts: &[&'a Tensor]) -> Result<Vec<&'a [T]>> {
    ts.iter().map(|t| t.as_slice::<T>()).collect()
}

/// Ensures all inputs share the first one's dtype.
pub(crate) fn same_dtype(ts: &[&Tensor]) -> Result<DType> {
    let Some(first) = ts.first() else {
        bail!("no inputs")
    };
    let d = first.dtype();
    if let Some(t) = ts.iter().find(|t| t.dtype() != d) {
        bail!("inputs have different types: {d} and {}", t.dtype());
    }
    Ok(d)
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

/// The part `start..start + len` of `x` along `axis`.
pub(crate) fn narrow(x: &Tensor, axis: usize, start: usize, len: usize) -> Result<Tensor> {
    let dim = x.shape[axis];
    if start + len > dim {
        bail!(
            "range {start}..{} is outside dimension {axis} of size {dim}",
            start + len
        );
    }
    let inner: usize = x.shape[axis + 1..].iter().product();
    let outer: usize = x.shape[..axis].iter().product();
    let mut idx = Vec::with_capacity(outer * len * inner);
    for o in 0..outer {
        let base = (o * dim + start) * inner;
        idx.extend(base..base + len * inner);
    }
    let mut shape = x.shape.clone();
    shape[axis] = len;
    take(x, shape, idx)
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
    fn affine_offsets_reverse() {
        assert_eq!(affine_offsets(&[3], 2, &[-1]), vec![2, 1, 0]);
        assert_eq!(affine_offsets(&[2, 2], 0, &[0, 1]), vec![0, 1, 0, 1]);
        assert!(affine_offsets(&[0, 2], 0, &[1, 1]).is_empty());
        assert_eq!(affine_offsets(&[], 5, &[]), vec![5]);
    }

    #[test]
    fn index_resolution() {
        assert_eq!(resolve_index(-1, 3).unwrap(), 2);
        assert!(resolve_index(3, 3).is_err());
        assert!(resolve_index(-4, 3).is_err());
        assert!(dims_from_i64(&[2, -1], "shape").is_err());
    }
}

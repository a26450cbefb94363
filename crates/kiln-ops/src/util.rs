//! Helpers shared by op definitions: broadcasting, axes, strides, typed maps.

use kiln_ir::{bail, Data, Elem, Result, Tensor};

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Maps a possibly negative axis into `0..rank`.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r.max(1) && !(rank == 0 && axis == 0) {
        bail!("axis {axis} is out of range for rank {rank}");
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// Like [`normalize_axis`] but allows `rank` itself (insert positions).
pub fn normalize_axis_inclusive(axis: i64, rank: usize) -> Result<usize> {
    normalize_axis(axis, rank + 1)
}

/// Numpy-style multidirectional broadcast of several shapes.
pub fn broadcast_shapes(shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                bail!("shapes {:?} cannot be broadcast together", shapes);
            }
        }
    }
    Ok(out)
}

/// Strides to read an input of `in_shape` broadcast to `out_shape` (0 on
/// broadcast dimensions).
pub fn broadcast_strides(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let s = strides(in_shape);
    let off = out_shape.len() - in_shape.len();
    (0..out_shape.len())
        .map(|i| {
            if i < off || in_shape[i - off] == 1 {
                0
            } else {
                s[i - off]
            }
        })
        .collect()
}

/// Calls `f(out_index, [offset of each input])` for every element of
/// `out_shape`, in row-major order, with inputs read through `in_strides`.
pub fn for_each_offset<const N: usize>(
    out_shape: &[usize],
    in_strides: [&[usize]; N],
    mut f: impl FnMut(usize, [usize; N]),
) {
    let total = numel(out_shape);
    if total == 0 {
        return;
    }
    let rank = out_shape.len();
    if rank == 0 {
        f(0, [0; N]);
        return;
    }
    let mut idx = vec![0usize; rank];
    let mut offs = [0usize; N];
    let last = rank - 1;
    let inner = out_shape[last];
    let mut o = 0;
    loop {
        let mut cur = offs;
        for _ in 0..inner {
            f(o, cur);
            o += 1;
            for k in 0..N {
                cur[k] += in_strides[k][last];
            }
        }
        // advance the odometer over the outer dimensions
        let mut d = last;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            for k in 0..N {
                offs[k] += in_strides[k][d];
            }
            if idx[d] < out_shape[d] {
                break;
            }
            for k in 0..N {
                offs[k] -= in_strides[k][d] * idx[d];
            }
            idx[d] = 0;
        }
    }
}

/// Element-wise map of one tensor's elements into a new tensor of the same shape.
pub fn map<T: Elem, U: Elem>(x: &Tensor, f: impl Fn(&T) -> U) -> Result<Tensor> {
    let v = x.as_slice::<T>()?;
    Tensor::new(x.shape.clone(), U::wrap(v.iter().map(f).collect()))
}

/// Broadcasting binary map.
pub fn zip_map<A: Elem, B: Elem, O: Elem>(
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(&A, &B) -> O,
) -> Result<Tensor> {
    let (va, vb) = (a.as_slice::<A>()?, b.as_slice::<B>()?);
    if a.shape == b.shape {
        let out: Vec<O> = va.iter().zip(vb).map(|(x, y)| f(x, y)).collect();
        return Tensor::new(a.shape.clone(), O::wrap(out));
    }
    let shape = broadcast_shapes(&[&a.shape, &b.shape])?;
    if vb.len() == 1 {
        let y = &vb[0];
        let out: Vec<O> = if numel(&shape) == va.len() {
            va.iter().map(|x| f(x, y)).collect()
        } else {
            let sa = broadcast_strides(&a.shape, &shape);
            let mut out = Vec::with_capacity(numel(&shape));
            for_each_offset(&shape, [&sa], |_, [ia]| out.push(f(&va[ia], y)));
            out
        };
        return Tensor::new(shape, O::wrap(out));
    }
    let sa = broadcast_strides(&a.shape, &shape);
    let sb = broadcast_strides(&b.shape, &shape);
    let mut out = Vec::with_capacity(numel(&shape));
    for_each_offset(&shape, [&sa, &sb], |_, [ia, ib]| {
        out.push(f(&va[ia], &vb[ib]))
    });
    Tensor::new(shape, O::wrap(out))
}

/// Broadcasting ternary map (e.g. Where).
pub fn zip3_map<A: Elem, B: Elem, C: Elem, O: Elem>(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    f: impl Fn(&A, &B, &C) -> O,
) -> Result<Tensor> {
    let (va, vb, vc) = (a.as_slice::<A>()?, b.as_slice::<B>()?, c.as_slice::<C>()?);
    let shape = broadcast_shapes(&[&a.shape, &b.shape, &c.shape])?;
    let sa = broadcast_strides(&a.shape, &shape);
    let sb = broadcast_strides(&b.shape, &shape);
    let sc = broadcast_strides(&c.shape, &shape);
    let mut out = Vec::with_capacity(numel(&shape));
    for_each_offset(&shape, [&sa, &sb, &sc], |_, [ia, ib, ic]| {
        out.push(f(&va[ia], &vb[ib], &vc[ic]))
    });
    Tensor::new(shape, O::wrap(out))
}

/// The values of an integer tensor (shape, axes, pads, ... inputs).
pub fn ints(t: &Tensor) -> Result<Vec<i64>> {
    match &t.data {
        Data::I64(_)
        | Data::I32(_)
        | Data::I16(_)
        | Data::I8(_)
        | Data::U8(_)
        | Data::U16(_)
        | Data::U32(_)
        | Data::U64(_) => t.data.to_i64_vec(),
        _ => bail!("expected an integer tensor, got {}", t.dtype()),
    }
}

/// Transposes `x` by permutation `perm` (output dim i = input dim perm[i]).
pub fn transpose(x: &Tensor, perm: &[usize]) -> Result<Tensor> {
    if perm.len() != x.rank() {
        bail!("permutation {:?} does not match rank {}", perm, x.rank());
    }
    let in_strides = strides(&x.shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let read: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let mut idx = Vec::with_capacity(x.len());
    for_each_offset(&out_shape, [&read], |_, [i]| idx.push(i));
    Tensor::new(out_shape, x.data.gather(idx.into_iter()))
}

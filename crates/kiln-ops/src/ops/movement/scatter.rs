//! Index-driven writes: ScatterElements (and its deprecated name Scatter),
//! ScatterND and TensorScatter (KV-cache update). Each op computes a list of
//! (data offset, update offset) writes; one typed routine applies them with
//! the requested reduction. Writes happen in index order, so with duplicate
//! indices and no reduction the last one wins.

use super::common::{for_each_index, int_values, resolve_index};
use super::gather::nd_offsets;
use crate::registry::Registry;
use crate::util::{normalize_axis, strides};
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::tensor::{bf16, f16};
use kiln_ir::{
    bail, dispatch_all, dispatch_num, ensure, DType, Elem, Node, Result, Tensor, TensorType,
};

pub fn register(r: &mut Registry) {
    r.add("ScatterElements", ScatterElements);
    r.add("Scatter", ScatterElements);
    r.add("ScatterND", ScatterNd);
    r.add("TensorScatter", TensorScatter);
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl Reduction {
    fn of(node: &Node) -> Result<Reduction> {
        Ok(match node.attr_string_or("reduction", "none")? {
            "none" => Reduction::None,
            "add" => Reduction::Add,
            "mul" => Reduction::Mul,
            "max" => Reduction::Max,
            "min" => Reduction::Min,
            r => bail!("unsupported reduction '{r}'"),
        })
    }
}

/// How a scatter reduction combines an existing element with an update.
/// Integers wrap like the usual two's-complement kernels; f16/bf16 compute
/// in f32; bools treat add/max as "or" and mul/min as "and".
trait Combine: Elem + Copy {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
}

macro_rules! combine_int {
    ($($t:ty),*) => {$(
        impl Combine for $t {
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn max(self, o: Self) -> Self { Ord::max(self, o) }
            fn min(self, o: Self) -> Self { Ord::min(self, o) }
        }
    )*};
}
combine_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! combine_float {
    ($($t:ty),*) => {$(
        impl Combine for $t {
            fn add(self, o: Self) -> Self { self + o }
            fn mul(self, o: Self) -> Self { self * o }
            fn max(self, o: Self) -> Self { if self.is_nan() || o.is_nan() { <$t>::NAN } else { self.max(o) } }
            fn min(self, o: Self) -> Self { if self.is_nan() || o.is_nan() { <$t>::NAN } else { self.min(o) } }
        }
    )*};
}
combine_float!(f32, f64);

macro_rules! combine_half {
    ($($t:ty),*) => {$(
        impl Combine for $t {
            fn add(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() + o.to_f32()) }
            fn mul(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() * o.to_f32()) }
            fn max(self, o: Self) -> Self { <$t>::from_f32(Combine::max(self.to_f32(), o.to_f32())) }
            fn min(self, o: Self) -> Self { <$t>::from_f32(Combine::min(self.to_f32(), o.to_f32())) }
        }
    )*};
}
combine_half!(f16, bf16);

impl Combine for bool {
    fn add(self, o: Self) -> Self {
        self || o
    }
    fn mul(self, o: Self) -> Self {
        self && o
    }
    fn max(self, o: Self) -> Self {
        self || o
    }
    fn min(self, o: Self) -> Self {
        self && o
    }
}

fn reduce<T: Combine>(
    data: &[T],
    updates: &[T],
    writes: &[(usize, usize)],
    red: Reduction,
) -> Vec<T> {
    let f: fn(T, T) -> T = match red {
        Reduction::Add => T::add,
        Reduction::Mul => T::mul,
        Reduction::Max => T::max,
        Reduction::Min => T::min,
        Reduction::None => |_, u| u,
    };
    let mut out = data.to_vec();
    for &(d, u) in writes {
        out[d] = f(out[d], updates[u]);
    }
    out
}

fn assign<T: Elem>(data: &[T], updates: &[T], writes: &[(usize, usize)]) -> Vec<T> {
    let mut out = data.to_vec();
    for &(d, u) in writes {
        out[d] = updates[u].clone();
    }
    out
}

/// Applies `writes` (data offset, update offset) to a copy of `data`.
fn apply(
    data: &Tensor,
    updates: &Tensor,
    writes: &[(usize, usize)],
    red: Reduction,
) -> Result<Tensor> {
    ensure!(
        updates.dtype() == data.dtype(),
        "updates have type {} but data has {}",
        updates.dtype(),
        data.dtype()
    );
    let out = if red == Reduction::None {
        dispatch_all!(&data.data, |v: T| T::wrap(assign(
            v,
            updates.as_slice::<T>()?,
            writes
        )))
    } else {
        dispatch_num!(
            &data.data,
            |v: T| T::wrap(reduce(v, updates.as_slice::<T>()?, writes, red)),
            bail!("reduction {red:?} needs numeric data")
        )
    };
    Tensor::new(data.shape.clone(), out)
}

/// All three ops return a tensor of the data's type.
fn data_type(cx: &InferCx) -> Result<Vec<TensorType>> {
    Ok(vec![cx.input(0)?.ty.clone()])
}

fn check_index_type(dtype: DType) -> Result<()> {
    ensure!(
        matches!(dtype, DType::I32 | DType::I64),
        "indices must be int32 or int64, got {dtype}"
    );
    Ok(())
}

struct ScatterElements;

impl Op for ScatterElements {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        check_index_type(cx.input(1)?.ty.dtype)?;
        Reduction::of(cx.node)?;
        data_type(cx)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, indices, updates) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        check_index_type(indices.dtype())?;
        ensure!(
            indices.shape == updates.shape,
            "indices shape {:?} differs from updates shape {:?}",
            indices.shape,
            updates.shape
        );
        ensure!(
            x.rank() >= 1 && x.rank() == indices.rank(),
            "indices rank {} differs from data rank {}",
            indices.rank(),
            x.rank()
        );
        let axis = normalize_axis(cx.node.attr_int_or("axis", 0)?, x.rank())?;
        for (d, (&n, &m)) in x.shape.iter().zip(&indices.shape).enumerate() {
            ensure!(
                d == axis || m <= n,
                "indices shape {:?} exceeds data shape {:?} at axis {d}",
                indices.shape,
                x.shape
            );
        }
        let dim = x.shape[axis];
        let picks = int_values(indices)?
            .into_iter()
            .map(|i| resolve_index(i, dim))
            .collect::<Result<Vec<_>>>()?;
        let st = strides(&x.shape);
        let mut writes = Vec::with_capacity(picks.len());
        for_each_index(&indices.shape, |o| {
            let k = writes.len();
            let off = o
                .iter()
                .zip(&st)
                .enumerate()
                .map(|(d, (&i, &s))| if d == axis { picks[k] * s } else { i * s })
                .sum();
            writes.push((off, k));
        });
        Ok(vec![apply(x, updates, &writes, Reduction::of(cx.node)?)?])
    }
}

struct ScatterNd;

impl Op for ScatterNd {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        check_index_type(cx.input(1)?.ty.dtype)?;
        Reduction::of(cx.node)?;
        data_type(cx)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (x, indices, updates) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        check_index_type(indices.dtype())?;
        let Some(&k) = indices.shape.last() else {
            bail!("indices must have rank >= 1")
        };
        ensure!(
            k <= x.rank(),
            "index tuples of length {k} are too long for data of rank {}",
            x.rank()
        );
        let want = [&indices.shape[..indices.rank() - 1], &x.shape[k..]].concat();
        ensure!(
            updates.shape == want,
            "updates shape {:?} should be {want:?}",
            updates.shape
        );
        let offsets = nd_offsets(&x.shape, &indices.shape, 0, &int_values(indices)?)?;
        let slice: usize = x.shape[k..].iter().product();
        let writes: Vec<(usize, usize)> = offsets
            .iter()
            .enumerate()
            .flat_map(|(t, &base)| (0..slice).map(move |j| (base + j, t * slice + j)))
            .collect();
        Ok(vec![apply(x, updates, &writes, Reduction::of(cx.node)?)?])
    }
}

/// Writes `update` into `past_cache` along the sequence axis at per-batch
/// positions (`write_indices`, default 0); circular mode wraps around.
struct TensorScatter;

impl Op for TensorScatter {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        data_type(cx)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (cache, update) = (arg(inputs, 0)?, arg(inputs, 1)?);
        let circular = match cx.node.attr_string_or("mode", "linear")? {
            "linear" => false,
            "circular" => true,
            m => bail!("unsupported mode '{m}'"),
        };
        ensure!(
            cache.rank() >= 2,
            "past_cache must have rank >= 2, got {}",
            cache.rank()
        );
        let axis = normalize_axis(cx.node.attr_int_or("axis", -2)?, cache.rank())?;
        ensure!(axis > 0, "axis cannot be the batch axis 0");
        ensure!(
            update.rank() == cache.rank(),
            "update rank {} differs from past_cache rank {}",
            update.rank(),
            cache.rank()
        );
        for (d, (&c, &u)) in cache.shape.iter().zip(&update.shape).enumerate() {
            ensure!(
                if d == axis { u <= c } else { u == c },
                "update shape {:?} does not fit past_cache shape {:?}",
                update.shape,
                cache.shape
            );
        }
        let batch = cache.shape[0];
        let starts = match opt_arg(inputs, 2) {
            Some(w) => int_values(w)?,
            None => vec![0; batch],
        };
        ensure!(
            starts.len() == batch,
            "write_indices has {} entries for batch size {batch}",
            starts.len()
        );
        let max_len = cache.shape[axis] as i64;
        let st = strides(&cache.shape);
        let mut writes = Vec::with_capacity(update.len());
        let mut bad = None;
        for_each_index(&update.shape, |o| {
            let mut pos = starts[o[0]].saturating_add(o[axis] as i64);
            if circular && max_len > 0 {
                pos = pos.rem_euclid(max_len);
            }
            if !(0..max_len).contains(&pos) {
                bad.get_or_insert(pos);
                return;
            }
            let off = o
                .iter()
                .zip(&st)
                .enumerate()
                .map(|(d, (&i, &s))| if d == axis { pos as usize * s } else { i * s })
                .sum();
            writes.push((off, writes.len()));
        });
        if let Some(p) = bad {
            bail!("write position {p} is outside the cache length {max_len}");
        }
        Ok(vec![apply(cache, update, &writes, Reduction::None)?])
    }
}

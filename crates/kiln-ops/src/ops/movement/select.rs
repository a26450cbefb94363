//! Ops whose output size depends on the data: NonZero and Unique.

use super::common::{i64_tensor, take};
use crate::registry::Registry;
use crate::util::normalize_axis;
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{dispatch_all, dispatch_num, ensure, DType, Data, Num, Result, Tensor, TensorType};
use std::cmp::Ordering;

pub fn register(r: &mut Registry) {
    r.add("NonZero", NonZero);
    r.add("Unique", Unique);
}

struct NonZero;

/// Which elements count as non-zero (strings: the non-empty ones; NaN is non-zero).
fn nonzero_mask(d: &Data) -> Vec<bool> {
    match d {
        Data::Str(v) => v.iter().map(|s| !s.is_empty()).collect(),
        num => dispatch_num!(
            num,
            |v: T| v.iter().map(|x| x.to_f64() != 0.0).collect(),
            Vec::new()
        ),
    }
}

impl Op for NonZero {
    fn infer(&self, _cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![TensorType::unknown_shape(DType::I64)])
    }

    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let hits: Vec<usize> = nonzero_mask(&x.data)
            .iter()
            .enumerate()
            .filter(|(_, &b)| b)
            .map(|(i, _)| i)
            .collect();
        // A scalar is treated as a 1-element vector (as numpy and other
        // runtimes do), so it gives one row of zeros rather than no rows.
        let shape = if x.rank() == 0 {
            vec![1]
        } else {
            x.shape.clone()
        };
        let (rank, n) = (shape.len(), hits.len());
        let st = crate::util::strides(&shape);
        // Row d holds the d-th coordinate of every hit.
        let mut out = vec![0i64; rank * n];
        for (j, &flat) in hits.iter().enumerate() {
            for d in 0..rank {
                out[d * n + j] = ((flat / st[d]) % shape[d]) as i64;
            }
        }
        Ok(vec![Tensor::new(vec![rank, n], Data::I64(out.into()))?])
    }
}

struct Unique;

/// Total order used for sorting: NaN after everything and equal to itself.
fn total_cmp<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    match a.partial_cmp(b) {
        Some(o) => o,
        None => {
            #[allow(clippy::eq_op)]
            let (a_nan, b_nan) = (a != a, b != b);
            a_nan.cmp(&b_nan)
        }
    }
}

/// The distinct units (elements, or slices along an axis) of a tensor.
struct Groups {
    /// Index of the first occurrence of each distinct unit, in output order.
    first: Vec<usize>,
    /// For each unit, the position of its group in the output.
    inverse: Vec<usize>,
    counts: Vec<usize>,
}

/// Groups `n` units whose elements are `units(i)`, in sorted order or in
/// order of first occurrence.
fn group_units<T: PartialOrd>(n: usize, unit: impl Fn(usize) -> Vec<T>, sorted: bool) -> Groups {
    let keys: Vec<Vec<T>> = (0..n).map(unit).collect();
    let cmp = |a: &usize, b: &usize| {
        keys[*a]
            .iter()
            .zip(&keys[*b])
            .map(|(x, y)| total_cmp(x, y))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(cmp); // stable: the first of equal units stays first
    let mut group_of = vec![0; n];
    let mut first = Vec::new();
    let mut counts = Vec::new();
    for (k, &i) in order.iter().enumerate() {
        if k == 0 || cmp(&order[k - 1], &i).is_ne() {
            first.push(i);
            counts.push(0);
        }
        group_of[i] = first.len() - 1;
        *counts.last_mut().expect("a group was just opened") += 1;
    }
    // rank[g] = output position of sorted group g
    let mut rank: Vec<usize> = (0..first.len()).collect();
    if !sorted {
        let mut by_first: Vec<usize> = (0..first.len()).collect();
        by_first.sort_by_key(|&g| first[g]);
        for (pos, &g) in by_first.iter().enumerate() {
            rank[g] = pos;
        }
    }
    let mut out_first = vec![0; first.len()];
    let mut out_counts = vec![0; first.len()];
    for g in 0..first.len() {
        out_first[rank[g]] = first[g];
        out_counts[rank[g]] = counts[g];
    }
    Groups {
        first: out_first,
        inverse: group_of.iter().map(|&g| rank[g]).collect(),
        counts: out_counts,
    }
}

/// The elements of `v` at `offsets`.
fn pick<T: Clone>(v: &[T], offsets: impl Iterator<Item = usize>) -> Vec<T> {
    offsets.map(|k| v[k].clone()).collect()
}

impl Unique {
    fn axis(node: &kiln_ir::Node, rank: usize) -> Result<Option<usize>> {
        node.attr_int("axis")?
            .map(|a| normalize_axis(a, rank))
            .transpose()
    }
}

impl Op for Unique {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = cx.input(0)?;
        let units = match &x.ty.shape {
            Some(s) => Some(match Unique::axis(cx.node, s.len())? {
                Some(a) => s[a],
                None => s.iter().product(),
            }),
            None => None,
        };
        let inverse = match units {
            Some(n) => TensorType::new(DType::I64, vec![n]),
            None => TensorType::unknown_shape(DType::I64),
        };
        let unknown = TensorType::unknown_shape(DType::I64);
        Ok(vec![
            TensorType::unknown_shape(x.ty.dtype),
            unknown.clone(),
            inverse,
            unknown,
        ])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let sorted = cx.node.attr_int_or("sorted", 1)? != 0;
        let axis = Unique::axis(cx.node, x.rank())?;
        // A unit is one element, or one slice along `axis` read in row-major order.
        let (n, outer, inner) = match axis {
            Some(a) => (
                x.shape[a],
                x.shape[..a].iter().product::<usize>(),
                x.shape[a + 1..].iter().product::<usize>(),
            ),
            None => (x.len(), 1, 1),
        };
        let unit_offsets = |i: usize| {
            (0..outer).flat_map(move |o| (0..inner).map(move |j| (o * n + i) * inner + j))
        };
        let groups = dispatch_all!(&x.data, |v: T| group_units(
            n,
            |i| pick(v, unit_offsets(i)),
            sorted
        ));
        let u = groups.first.len();
        let y = match axis {
            None => take(x, vec![u], groups.first.clone())?,
            Some(a) => {
                let mut shape = x.shape.clone();
                shape[a] = u;
                let mut idx = Vec::with_capacity(outer * u * inner);
                for o in 0..outer {
                    for &g in &groups.first {
                        let base = (o * n + g) * inner;
                        idx.extend(base..base + inner);
                    }
                }
                take(x, shape, idx)?
            }
        };
        ensure!(
            y.len() == u * outer * inner,
            "internal: unique output size mismatch"
        );
        let as_i64 = |v: &[usize]| i64_tensor(v.iter().map(|&i| i as i64).collect());
        Ok(vec![
            y,
            as_i64(&groups.first),
            as_i64(&groups.inverse),
            as_i64(&groups.counts),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_unsorted_keeps_first_occurrence_order() {
        let v = [2.0f32, 1.0, 1.0, 3.0, 4.0, 3.0];
        let g = group_units(v.len(), |i| vec![v[i]], false);
        assert_eq!(g.first, vec![0, 1, 3, 4]);
        assert_eq!(g.inverse, vec![0, 1, 1, 2, 3, 2]);
        assert_eq!(g.counts, vec![1, 2, 2, 1]);
        let g = group_units(v.len(), |i| vec![v[i]], true);
        assert_eq!(g.first, vec![1, 0, 3, 4]);
        assert_eq!(g.inverse, vec![1, 0, 0, 2, 3, 2]);
    }

    #[test]
    fn nan_sorts_last_and_groups() {
        let v = [f32::NAN, 1.0, f32::NAN];
        let g = group_units(v.len(), |i| vec![v[i]], true);
        assert_eq!(g.first, vec![1, 0]);
        assert_eq!(g.counts, vec![1, 2]);
    }
}

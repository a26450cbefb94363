//! CumSum and CumProd: running sum/product along the axis given by the
//! second input, with `exclusive` (start from the identity) and `reverse`.
//! Floats accumulate in f64, integers exactly with wrapping.

use super::{checked_axis, Exact};
use crate::registry::Registry;
use crate::util::{ints, numel};
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, dispatch_num, Data, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("CumSum", Cumulative { product: false });
    r.add("CumProd", Cumulative { product: true });
}

struct Cumulative {
    product: bool,
}

/// The line structure of a scan along one axis: `outer` blocks of `len`
/// steps, each step `inner` elements apart.
#[derive(Clone, Copy)]
struct Lines {
    outer: usize,
    len: usize,
    inner: usize,
}

#[derive(Clone, Copy)]
struct ScanOrder {
    exclusive: bool,
    reverse: bool,
}

impl Op for Cumulative {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let ty = cx.input(0)?.ty.clone();
        if !ty.dtype.is_numeric() {
            bail!("expected a numeric tensor, got {}", ty.dtype);
        }
        Ok(vec![ty])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        let axis_values = ints(arg(inputs, 1)?)?;
        let &[axis] = axis_values.as_slice() else {
            bail!("axis must hold one value, got {}", axis_values.len())
        };
        let axis = checked_axis(axis, x.rank())?;
        let lines = Lines {
            outer: numel(&x.shape[..axis]),
            len: x.shape[axis],
            inner: numel(&x.shape[axis + 1..]),
        };
        let order = ScanOrder {
            exclusive: cx.node.attr_int_or("exclusive", 0)? != 0,
            reverse: cx.node.attr_int_or("reverse", 0)? != 0,
        };
        let product = self.product;
        let data = dispatch_num!(
            &x.data,
            |v: T| scan_typed::<T>(v, lines, order, product),
            bail!("expected a numeric tensor, got strings")
        );
        Ok(vec![Tensor::new(x.shape.clone(), data)?])
    }
}

fn scan_typed<T: Exact>(v: &[T], lines: Lines, order: ScanOrder, product: bool) -> Data {
    let out = if T::DTYPE.is_float() {
        let step = if product {
            |a: f64, x: f64| a * x
        } else {
            |a: f64, x: f64| a + x
        };
        scan(
            v,
            lines,
            order,
            if product { 1.0 } else { 0.0 },
            |a, x: &T| step(a, x.to_f64()),
            |a| T::from_f64(a),
        )
    } else {
        let step = if product {
            i128::wrapping_mul
        } else {
            i128::wrapping_add
        };
        scan(
            v,
            lines,
            order,
            if product { 1 } else { 0 },
            |a, x: &T| step(a, x.to_i128()),
            T::from_i128,
        )
    };
    T::wrap(out)
}

/// Generic running fold with accumulator `A` starting at `init`.
fn scan<T: Clone + Default, A: Copy>(
    v: &[T],
    lines: Lines,
    order: ScanOrder,
    init: A,
    step: impl Fn(A, &T) -> A,
    finish: impl Fn(A) -> T,
) -> Vec<T> {
    let mut out = vec![T::default(); v.len()];
    for o in 0..lines.outer {
        for i in 0..lines.inner {
            let mut acc = init;
            for s in 0..lines.len {
                let k = if order.reverse { lines.len - 1 - s } else { s };
                let at = (o * lines.len + k) * lines.inner + i;
                if order.exclusive {
                    out[at] = finish(acc);
                    acc = step(acc, &v[at]);
                } else {
                    acc = step(acc, &v[at]);
                    out[at] = finish(acc);
                }
            }
        }
    }
    out
}

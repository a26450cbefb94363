//! ArgMax and ArgMin: the index of the extreme value along one axis
//! (`axis`, `keepdims`, `select_last_index`). NaN counts as the extreme, as
//! in numpy.

use super::{checked_axis, reduced_shape, ReducePlan};
use crate::registry::Registry;
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, dispatch_num, DType, Node, Num, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("ArgMax", ArgExtreme { max: true });
    r.add("ArgMin", ArgExtreme { max: false });
}

struct ArgExtreme {
    max: bool,
}

struct ArgParams {
    axis: i64,
    keepdims: bool,
    last: bool,
}

impl ArgParams {
    fn of(node: &Node) -> Result<ArgParams> {
        Ok(ArgParams {
            axis: node.attr_int_or("axis", 0)?,
            keepdims: node.attr_int_or("keepdims", 1)? != 0,
            last: node.attr_int_or("select_last_index", 0)? != 0,
        })
    }

    fn output_shape(&self, shape: &[usize]) -> Result<Vec<usize>> {
        let axis = checked_axis(self.axis, shape.len())?;
        let mask: Vec<bool> = (0..shape.len()).map(|i| i == axis).collect();
        Ok(reduced_shape(shape, &mask, self.keepdims))
    }
}

impl Op for ArgExtreme {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let p = ArgParams::of(cx.node)?;
        Ok(vec![match cx.shape(0)? {
            Some(s) => TensorType::new(DType::I64, p.output_shape(s)?),
            None => TensorType::unknown_shape(DType::I64),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let p = ArgParams::of(cx.node)?;
        let x = arg(inputs, 0)?;
        let axis = checked_axis(p.axis, x.rank())?;
        if x.shape[axis] == 0 {
            bail!("cannot take the arg-extreme over axis {axis} of size 0");
        }
        let plan = ReducePlan::along(&x.shape, axis);
        let idx = dispatch_num!(
            &x.data,
            |v: T| arg_extreme(v, &plan, self.max, p.last),
            bail!("expected a numeric tensor, got strings")
        );
        Ok(vec![Tensor::from_vec(p.output_shape(&x.shape)?, idx)?])
    }
}

/// Index along the reduced axis of each group's extreme value.
fn arg_extreme<T: Num>(v: &[T], plan: &ReducePlan, max: bool, last: bool) -> Vec<i64> {
    #[allow(clippy::eq_op)]
    let is_nan = |x: T| x != x;
    let beats = |c: T, b: T| {
        if is_nan(b) {
            return last && is_nan(c);
        }
        if is_nan(c) {
            return true;
        }
        let better = if max { c > b } else { c < b };
        better || (last && c == b)
    };
    plan.kept
        .iter()
        .map(|&base| {
            let mut best = 0;
            for (j, &o) in plan.reduced.iter().enumerate().skip(1) {
                if beats(v[base + o], v[base + plan.reduced[best]]) {
                    best = j;
                }
            }
            best as i64
        })
        .collect()
}

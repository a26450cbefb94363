//! ArgMax and ArgMin: the index of the extreme value along one axis
//! (`axis`, `keepdims`, `select_last_index`), as a tensor expression: a Max or
//! Min arg-reduction over that axis (`te::ArgIndex`: NaN counts as the extreme,
//! as in numpy; ties go to the first index, or the last).

use super::{checked_axis, reduced_shape};
use crate::registry::Registry;
use crate::te::primitive::{Prim, Primitive};
use crate::te::{Access, ArgIndex, Combiner, Expr, IndexExpr, Reduction, TensorExpr};
use crate::InferCx;
use kiln_ir::{bail, DType, Result};
use std::cmp::Ordering;

pub fn register(r: &mut Registry) {
    r.add("ArgMax", Prim(ArgExtreme(Combiner::Max)));
    r.add("ArgMin", Prim(ArgExtreme(Combiner::Min)));
}

/// `out[kept dims] = arg-combine over the axis of in0[...]`.
struct ArgExtreme(Combiner);

impl Primitive for ArgExtreme {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let node = cx.node;
        let axis = node.attr_int_or("axis", 0)?;
        let keepdims = node.attr_int_or("keepdims", 1)? != 0;
        let last = node.attr_int_or("select_last_index", 0)? != 0;
        let ty = &cx.input(0)?.ty;
        if ty.dtype == DType::Str {
            bail!("{} needs a numeric tensor, got strings", node.op);
        }
        let Some(shape) = ty.shape.clone() else {
            return Ok(None);
        };
        let axis = checked_axis(axis, shape.len())?;
        if shape[axis] == 0 {
            bail!("cannot take the arg-extreme over axis {axis} of size 0");
        }
        let index = (0..shape.len())
            .map(|j| match j.cmp(&axis) {
                Ordering::Less => IndexExpr::out(j),
                Ordering::Equal => IndexExpr::red(0),
                Ordering::Greater => IndexExpr::out(if keepdims { j } else { j - 1 }),
            })
            .collect();
        let mask: Vec<bool> = (0..shape.len()).map(|j| j == axis).collect();
        let reduction = Reduction {
            extents: vec![shape[axis]],
            combiner: self.0,
            widened: false,
            arg: Some(ArgIndex {
                value: ty.dtype,
                last,
            }),
        };
        Ok(Some(
            TensorExpr {
                dtype: DType::I64,
                shape: reduced_shape(&shape, &mask, keepdims),
                inputs: vec![Some(shape)],
                accesses: vec![Access { input: 0, index }],
                reduction: Some(reduction),
                body: Expr::Load(0),
            }
            .simplified(),
        ))
    }

    fn dtype(&self, _cx: &InferCx) -> Result<DType> {
        Ok(DType::I64)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::compose::eval_op;
    use kiln_ir::{Attr, Tensor};

    fn arg(op: &str, x: Tensor, axis: i64, keepdims: i64, last: i64) -> Tensor {
        let attrs = vec![
            ("axis", Attr::Int(axis)),
            ("keepdims", Attr::Int(keepdims)),
            ("select_last_index", Attr::Int(last)),
        ];
        eval_op(op, 13, attrs, &[x], 1).unwrap().remove(0)
    }

    #[test]
    fn ties_pick_the_first_or_the_last_index() {
        let x = Tensor::from_vec(vec![2, 3], vec![1i32, 5, 5, 2, 2, 0]).unwrap();
        let y = arg("ArgMax", x.clone(), 1, 0, 0);
        assert_eq!(y.shape, vec![2]);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[1, 0]);
        let y = arg("ArgMax", x.clone(), 1, 1, 1);
        assert_eq!(y.shape, vec![2, 1]);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[2, 1]);
        let y = arg("ArgMin", x, 0, 1, 1);
        assert_eq!(y.shape, vec![1, 3]);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[0, 1, 1]);
    }

    #[test]
    fn nan_is_the_extreme_for_max_and_min() {
        let nan = f32::NAN;
        let x = Tensor::from_vec(vec![5], vec![1.0f32, nan, 3.0, nan, -1.0]).unwrap();
        for op in ["ArgMax", "ArgMin"] {
            let first = arg(op, x.clone(), 0, 0, 0);
            assert_eq!(first.as_slice::<i64>().unwrap(), &[1], "{op}");
            let last = arg(op, x.clone(), -1, 0, 1);
            assert_eq!(last.as_slice::<i64>().unwrap(), &[3], "{op}");
        }
    }

    #[test]
    fn extremes_of_the_type_are_found() {
        let x = Tensor::from_vec(vec![3], vec![u8::MAX, 0, u8::MAX]).unwrap();
        assert_eq!(
            arg("ArgMin", x.clone(), 0, 0, 0).as_slice::<i64>().unwrap(),
            &[1]
        );
        assert_eq!(
            arg("ArgMax", x.clone(), 0, 0, 0).as_slice::<i64>().unwrap(),
            &[0]
        );
        assert_eq!(arg("ArgMax", x, 0, 0, 1).as_slice::<i64>().unwrap(), &[2]);
        let inf = f64::NEG_INFINITY;
        let x = Tensor::from_vec(vec![2], vec![inf, inf]).unwrap();
        assert_eq!(
            arg("ArgMax", x.clone(), 0, 0, 0).as_slice::<i64>().unwrap(),
            &[0]
        );
        assert_eq!(arg("ArgMax", x, 0, 0, 1).as_slice::<i64>().unwrap(), &[1]);
    }

    #[test]
    fn an_empty_axis_is_an_error() {
        let x = Tensor::from_vec(vec![2, 0], Vec::<f32>::new()).unwrap();
        let attrs = vec![("axis", Attr::Int(1))];
        assert!(eval_op("ArgMax", 13, attrs, &[x], 1).is_err());
    }
}

//! Primitive ops: ops whose semantics is a [`TensorExpr`]. [`Prim`] turns
//! any [`Primitive`] into an [`Op`] whose shape inference and evaluation are
//! derived from the expression, so neither is written by hand.
//! [`Elementwise`] makes the expression of a broadcasting element-wise op
//! from its scalar rule.

use super::eval::evaluate;
use super::{Access, Expr, IndexExpr, Scalar, TensorExpr};
use crate::util::broadcast_shapes;
use crate::{EvalCx, InferCx, InputInfo, Op};
use kiln_ir::{bail, DType, Result, Tensor, TensorType};

/// An op defined by a tensor expression.
pub trait Primitive: Send + Sync {
    /// The expression for `cx.node`, given its inputs' types and whatever
    /// input values are known. `Ok(None)` when an input shape, or an input
    /// value the expression depends on (Reshape's target shape), is not
    /// known yet; errors are for invalid nodes.
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>>;

    /// The output dtype when [`Primitive::define`] cannot build the expression yet.
    fn dtype(&self, cx: &InferCx) -> Result<DType> {
        Ok(cx.input(0)?.ty.dtype)
    }

    /// A direct kernel that computes the same values as evaluating the
    /// expression (matmul and convolution, which the generic evaluator runs
    /// too slowly for whole models). Tests check the two agree.
    fn kernel(&self, _cx: &EvalCx, _inputs: &[Option<&Tensor>]) -> Option<Result<Tensor>> {
        None
    }

    /// For element-wise ops: the op whose `eval` is the scalar rule, applied
    /// to same-shaped operands.
    fn scalar_kernel(&self) -> Option<&dyn Op> {
        None
    }
}

/// Adapts a [`Primitive`] to the [`Op`] interface.
pub struct Prim<P>(pub P);

impl<P: Primitive> Op for Prim<P> {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![match self.0.define(cx)? {
            Some(te) => TensorType::new(te.dtype, te.shape),
            None => TensorType::unknown_shape(self.0.dtype(cx)?),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        if let Some(out) = self.0.kernel(cx, inputs) {
            return Ok(vec![out?]);
        }
        let te = define_for_inputs(&self.0, cx, inputs)?;
        Ok(vec![evaluate(&te, inputs)?])
    }

    fn primitive(&self) -> Option<&dyn Primitive> {
        Some(&self.0)
    }

    fn scalar_kernel(&self) -> Option<&dyn Op> {
        self.0.scalar_kernel()
    }
}

/// The expression of `p` for concrete input tensors (every value known).
pub fn define_for_inputs(
    p: &dyn Primitive,
    cx: &EvalCx,
    inputs: &[Option<&Tensor>],
) -> Result<TensorExpr> {
    match p.define(&InferCx::of_eval(cx, inputs))? {
        Some(te) => Ok(te),
        None => bail!("cannot build the tensor expression from concrete inputs"),
    }
}

/// Index map reading an input of `shape` broadcast (numpy rules) to `out`.
pub fn broadcast_index(shape: &[usize], out: &[usize]) -> Vec<IndexExpr> {
    let offset = out.len() - shape.len();
    shape
        .iter()
        .enumerate()
        .map(|(j, &d)| {
            if d == 1 {
                IndexExpr::constant(0)
            } else {
                IndexExpr::out(j + offset)
            }
        })
        .collect()
}

/// A broadcasting element-wise op: `out[i] = f(in0[b0(i)], in1[b1(i)], …)`
/// where `f` is the wrapped op's scalar rule (its `eval` on same-shaped
/// operands) and `bk` the broadcast index maps.
pub struct Elementwise<S>(pub S);

impl<S: Op> Primitive for Elementwise<S> {
    fn define(&self, cx: &InferCx) -> Result<Option<TensorExpr>> {
        let dtype = self.dtype(cx)?;
        let mut shapes = Vec::new();
        for input in &cx.inputs {
            match input {
                None => bail!("element-wise ops take no omitted inputs"),
                Some(InputInfo { ty, .. }) => match &ty.shape {
                    Some(s) => shapes.push(s.clone()),
                    None => return Ok(None),
                },
            }
        }
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let shape = broadcast_shapes(&refs)?;
        let accesses: Vec<Access> = shapes
            .iter()
            .enumerate()
            .map(|(input, s)| Access {
                input,
                index: broadcast_index(s, &shape),
            })
            .collect();
        let scalar = Scalar {
            op: cx.node.op.clone(),
            attrs: cx.node.attrs.clone(),
        };
        let body = Expr::Call(scalar, (0..accesses.len()).map(Expr::Load).collect());
        Ok(Some(
            TensorExpr {
                dtype,
                shape,
                inputs: shapes.into_iter().map(Some).collect(),
                accesses,
                reduction: None,
                body,
            }
            .simplified(),
        ))
    }

    /// The scalar rule's output type for the inputs' dtypes (it also checks them).
    fn dtype(&self, cx: &InferCx) -> Result<DType> {
        let scalars = cx
            .inputs
            .iter()
            .map(|i| {
                i.as_ref().map(|i| InputInfo {
                    ty: TensorType::new(i.ty.dtype, vec![]),
                    value: None,
                })
            })
            .collect();
        let scx = InferCx {
            node: cx.node,
            opset: cx.opset,
            inputs: scalars,
            scope: cx.scope,
        };
        match self.0.infer(&scx)?.first() {
            Some(t) => Ok(t.dtype),
            None => bail!("{}: scalar rule has no output", cx.node.op),
        }
    }

    fn scalar_kernel(&self) -> Option<&dyn Op> {
        Some(&self.0)
    }
}

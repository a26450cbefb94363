//! Identity and Constant: ops that pass or produce a tensor unchanged.

use crate::registry::Registry;
use crate::te::primitive::{Elementwise, Prim};
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, Attr, Data, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("Identity", Prim(Elementwise(Identity)));
    r.add("Constant", Constant);
}

struct Identity;

impl Op for Identity {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![cx.input(0)?.ty.clone()])
    }
    fn eval(&self, _cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![arg(inputs, 0)?.clone()])
    }
}

struct Constant;

impl Constant {
    /// The constant's value from whichever of its attribute forms is set.
    fn value(node: &kiln_ir::Node) -> Result<Tensor> {
        let Some((name, attr)) = node.attrs.iter().next() else {
            bail!("Constant has no value attribute")
        };
        if node.attrs.len() != 1 {
            bail!(
                "Constant must have exactly one value attribute, got {}",
                node.attrs.len()
            );
        }
        Ok(match (name.as_str(), attr) {
            ("value", Attr::Tensor(t)) => t.clone(),
            ("value_float", Attr::Float(v)) => Tensor::scalar(*v),
            ("value_floats", Attr::Floats(v)) => {
                Tensor::new(vec![v.len()], Data::F32(v.clone().into()))?
            }
            ("value_int", Attr::Int(v)) => Tensor::scalar(*v),
            ("value_ints", Attr::Ints(v)) => {
                Tensor::new(vec![v.len()], Data::I64(v.clone().into()))?
            }
            ("value_string", Attr::String(v)) => Tensor::scalar(v.clone()),
            ("value_strings", Attr::Strings(v)) => {
                Tensor::new(vec![v.len()], Data::Str(v.clone().into()))?
            }
            (other, a) => bail!(
                "unsupported Constant attribute '{other}' of kind {}",
                a.kind()
            ),
        })
    }
}

impl Op for Constant {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        Ok(vec![Constant::value(cx.node)?.ty()])
    }
    fn eval(&self, cx: &EvalCx, _inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        Ok(vec![Constant::value(cx.node)?])
    }
}

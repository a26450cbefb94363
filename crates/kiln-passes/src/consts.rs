//! Constants for passes: reading small initializers (scales, shapes, axes)
//! and computing new constants by evaluating ops through the op registry,
//! so a pass never re-implements an op's arithmetic or broadcasting.
//!
//! Large initializers (weights) are only decoded by a caller that asks
//! with a large enough cap; reshaping one keeps its bytes (no copy).

use kiln_ir::{bail, Error, Graph, Initializer, Node, Result, Tensor, ValueId};
use kiln_ops::{registry, EvalCx, SubgraphRunner};

/// Constants up to this many elements are read to decide a rewrite
/// (splat checks, scale vectors, shape and axes inputs).
pub const SMALL: usize = 1 << 16;

/// The opset version that applies to `node` in `g`.
pub fn opset(g: &Graph, node: &Node) -> i64 {
    let d = if node.domain == "ai.onnx" {
        ""
    } else {
        node.domain.as_str()
    };
    g.opsets.get(d).copied().unwrap_or(1)
}

/// The value of `v` when it is an initializer of at most `cap` elements.
pub fn value(g: &Graph, v: ValueId, cap: usize) -> Option<Tensor> {
    let init = g.initializers.get(&v)?;
    if init.ty().numel()? > cap {
        return None;
    }
    init.to_tensor().ok()
}

/// The one value every element of the numeric constant `v` has (at least
/// one element, at most [`SMALL`]).
pub fn splat(g: &Graph, v: ValueId) -> Option<f64> {
    let t = value(g, v, SMALL)?;
    let vals = t.data.to_f64_vec().ok()?;
    let first = *vals.first()?;
    vals.iter().all(|&x| x == first).then_some(first)
}

/// The elements of the integer constant `v` (shape, axes, perm inputs).
pub fn ints(g: &Graph, v: ValueId) -> Option<Vec<i64>> {
    let t = value(g, v, SMALL)?;
    if !t.dtype().is_int() {
        return None;
    }
    t.data.to_i64_vec().ok()
}

/// `init` viewed with another shape of the same size, sharing its storage.
pub fn reshaped(init: &Initializer, shape: Vec<usize>) -> Result<Initializer> {
    Ok(match init {
        Initializer::Raw { dtype, bytes, .. } => Initializer::Raw {
            dtype: *dtype,
            shape,
            bytes: bytes.clone(),
        },
        Initializer::Tensor(t) => Initializer::Tensor(t.reshaped(shape)?),
    })
}

/// Folding never runs subgraphs (ops with subgraphs are not folded).
struct NoSubgraphs;

impl SubgraphRunner for NoSubgraphs {
    fn run(&self, _g: &Graph, _inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        bail!("subgraphs are not evaluated at compile time")
    }
}

/// Evaluates `node` on constant inputs with its op's definition. A panic
/// in the definition becomes an error.
pub fn eval(node: &Node, opset: i64, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    let Some(op) = registry::lookup(&node.domain, &node.op) else {
        bail!("unsupported op '{}'", node.op)
    };
    let cx = EvalCx {
        node,
        opset,
        subgraphs: &NoSubgraphs,
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op.eval(&cx, inputs)))
        .unwrap_or_else(|_| Err(Error::new(format!("{} panicked", node.describe()))))
}

/// `op(inputs)` for an attribute-less single-output ONNX op (Mul, Add,
/// Neg, Reciprocal, ...).
pub fn apply(op: &str, opset: i64, inputs: &[&Tensor]) -> Result<Tensor> {
    let node = Node {
        name: String::new(),
        op: op.to_string(),
        domain: String::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        attrs: Default::default(),
    };
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    match eval(&node, opset, &ins)?.into_iter().next() {
        Some(t) => Ok(t),
        None => bail!("{op} computed no output"),
    }
}

//! kiln op definitions (layer 3 of DESIGN.md).
//!
//! Every supported ONNX operator is one [`Op`] value that knows how to infer
//! its output types and how to evaluate itself on concrete tensors. The
//! importer's shape inference ([`infer::infer_graph`]) and the reference
//! interpreter (`kiln-interp`) both go through this one definition, so an
//! op's semantics is written once. Ops are found by (domain, op type) in the
//! [`registry`].

pub mod builder;
pub mod compound;
pub mod infer;
pub mod ops;
pub mod registry;
pub mod te;
pub mod util;

pub use builder::Builder;
use kiln_ir::{Graph, Node, Result, Tensor, TensorType, ValueId};
use te::primitive::Primitive;

/// What shape inference knows about one input: its type, and its value when
/// it is a constant (initializer or folded from constants).
#[derive(Debug, Clone)]
pub struct InputInfo<'a> {
    pub ty: TensorType,
    pub value: Option<&'a Tensor>,
}

/// Context for [`Op::infer`].
pub struct InferCx<'a> {
    pub node: &'a Node,
    /// Version of the opset of the node's domain.
    pub opset: i64,
    /// One entry per node input; `None` for omitted optional inputs.
    pub inputs: Vec<Option<InputInfo<'a>>>,
    /// Types of every value visible to subgraphs (for If/Loop/Scan bodies).
    pub scope: &'a dyn Fn(&str) -> Option<TensorType>,
}

/// Runs a subgraph (If/Loop/Scan body). Captured outer values are resolved
/// by the runner from the environment it was created in.
pub trait SubgraphRunner {
    fn run(&self, g: &Graph, inputs: Vec<Tensor>) -> Result<Vec<Tensor>>;
}

/// Context for [`Op::eval`].
pub struct EvalCx<'a> {
    pub node: &'a Node,
    pub opset: i64,
    pub subgraphs: &'a dyn SubgraphRunner,
}

/// One operator's definition.
pub trait Op: Send + Sync {
    /// Output types (one per node output, including omitted optional ones).
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>>;

    /// Computes the outputs. `inputs[i]` is `None` for an omitted optional input.
    /// Returns one tensor per declared output position that it computes; the
    /// trailing outputs may be left off when the node does not request them.
    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>>;

    /// Output values that shape inference can compute from the inputs'
    /// types and known values even when not every input is constant (Shape
    /// or Size of a tensor with a static shape). Inference records them as
    /// constants so shape computations downstream resolve at compile time.
    fn fold(&self, _cx: &InferCx) -> Result<Option<Vec<Tensor>>> {
        Ok(None)
    }

    /// False for ops whose result changes between runs (random generators):
    /// they are never evaluated at compile time.
    fn deterministic(&self) -> bool {
        true
    }

    /// Control-flow ops: what the node's inputs say about the inputs of its
    /// subgraph attribute `attr` (e.g. a Loop body's carried values have the
    /// dtype of the Loop's initial values). One entry per subgraph input;
    /// shape inference takes the dtype from a `Some` entry and its shape where
    /// the subgraph declares none. `inputs` are the node's input types.
    fn subgraph_input_types(
        &self,
        _node: &Node,
        _opset: i64,
        _attr: &str,
        _inputs: &[Option<TensorType>],
    ) -> Result<Option<Vec<Option<TensorType>>>> {
        Ok(None)
    }

    /// Control-flow ops: false when subgraph attribute `attr` can never run
    /// given the node's constant inputs (`None`: not constant), e.g. the
    /// other branch of an If whose condition is known. Shape inference skips
    /// such subgraphs, which may not even be well-typed for these inputs.
    fn subgraph_is_live(&self, _node: &Node, _attr: &str, _inputs: &[Option<&Tensor>]) -> bool {
        true
    }

    /// Primitive ops: the tensor-expression definition their `infer` and
    /// `eval` derive from (see [`te::primitive::Prim`]).
    fn primitive(&self) -> Option<&dyn Primitive> {
        None
    }

    /// True for ops defined only by a decomposition (see [`compound::Comp`]).
    fn is_compound(&self) -> bool {
        false
    }

    /// Element-wise ops: the op whose `eval` is the scalar rule that tensor
    /// expression bodies call (see [`te::Expr::Call`]).
    fn scalar_kernel(&self) -> Option<&dyn Op> {
        None
    }

    /// Scalar rules: true when the rule is a transcendental function (a
    /// polynomial or library call per element, not an instruction or two),
    /// so where it is computed matters to fusion planners
    /// ([`te::classify::calls_transcendental`]).
    fn transcendental(&self) -> bool {
        false
    }

    /// Compound ops (APOLLO §3.2): builds the node's outputs from primitive
    /// ops with `b`, given the node's input values `inputs`, and returns one
    /// value per node output (`None` for outputs it does not compute, which
    /// must then be unused). `Ok(None)`: this node is not opened.
    fn decompose(
        &self,
        _cx: &InferCx,
        _b: &mut Builder,
        _inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        Ok(None)
    }
}

/// The scope of a context that sees no outer values.
fn no_scope(_: &str) -> Option<TensorType> {
    None
}

impl<'a> InferCx<'a> {
    /// The context of an eval call: every input's type and value known.
    pub fn of_eval(cx: &EvalCx<'a>, inputs: &[Option<&'a Tensor>]) -> InferCx<'a> {
        InferCx {
            node: cx.node,
            opset: cx.opset,
            inputs: inputs
                .iter()
                .map(|t| {
                    t.map(|t| InputInfo {
                        ty: t.ty(),
                        value: Some(t),
                    })
                })
                .collect(),
            scope: &no_scope,
        }
    }

    /// Input `i`, or an error naming it when it is missing.
    pub fn input(&self, i: usize) -> Result<&InputInfo<'_>> {
        match self.inputs.get(i) {
            Some(Some(x)) => Ok(x),
            _ => kiln_ir::bail!("input {i} is required"),
        }
    }

    pub fn opt_input(&self, i: usize) -> Option<&InputInfo<'_>> {
        self.inputs.get(i).and_then(|x| x.as_ref())
    }

    /// Input `i`'s shape, when known.
    pub fn shape(&self, i: usize) -> Result<Option<&[usize]>> {
        Ok(self.input(i)?.ty.shape.as_deref())
    }

    /// Constant value of input `i` if it is known at compile time.
    pub fn value(&self, i: usize) -> Option<&Tensor> {
        self.opt_input(i).and_then(|x| x.value)
    }
}

/// Required input `i` of an eval call, or an error naming it.
pub fn arg<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor> {
    match inputs.get(i) {
        Some(Some(t)) => Ok(t),
        _ => kiln_ir::bail!("input {i} is required"),
    }
}

/// Required input `i` of a decomposition, or an error naming it.
pub fn inputs_id(inputs: &[Option<ValueId>], i: usize) -> Result<ValueId> {
    match inputs.get(i) {
        Some(Some(v)) => Ok(*v),
        _ => kiln_ir::bail!("input {i} is required"),
    }
}

/// Optional input `i` of an eval call.
pub fn opt_arg<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).copied().flatten()
}

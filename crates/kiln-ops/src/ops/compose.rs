//! Building blocks that decompositions of compound ops (APOLLO §3.2)
//! share: casts and reshapes that vanish when the value already fits,
//! reductions that keep their axes so the result broadcasts back, and the
//! check that keeps a broadcast operand from growing a node's output.
//!
//! Needs: a [`Builder`] whose values have static shapes where asked for.
//! Guarantees: every helper adds only primitive or compound ops that are
//! registered, so the result opens further by `open_compounds`.

use crate::util::broadcast_shapes;
use crate::Builder;
use kiln_ir::{bail, Attr, DType, Node, Result, ValueId};

/// `x` cast to `to` (no node when it already has that type).
pub(crate) fn cast(b: &mut Builder, x: ValueId, to: DType) -> Result<ValueId> {
    if b.ty(x).dtype == to {
        return Ok(x);
    }
    b.op("Cast", &[x], &[("to", Attr::Int(to.onnx_code() as i64))])
}

/// `x` reshaped to `shape` (no node when it already has it). Zero dims are
/// taken literally (`allowzero`), not as "copy the input's dim".
pub(crate) fn reshape(b: &mut Builder, x: ValueId, shape: &[usize]) -> Result<ValueId> {
    if b.shape(x)? == shape {
        return Ok(x);
    }
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let target = b.ints(&dims);
    b.op("Reshape", &[x, target], &[("allowzero", Attr::Int(1))])
}

/// `x` sliced along `axes` from `starts` to `ends` (exclusive), every
/// `steps`-th element where given (one by one when `steps` is empty).
pub(crate) fn slice(
    b: &mut Builder,
    x: ValueId,
    axes: &[usize],
    starts: &[usize],
    ends: &[usize],
    steps: &[usize],
) -> Result<ValueId> {
    let ints = |v: &[usize]| v.iter().map(|&i| i as i64).collect::<Vec<_>>();
    let mut inputs = vec![
        x,
        b.ints(&ints(starts)),
        b.ints(&ints(ends)),
        b.ints(&ints(axes)),
    ];
    if !steps.is_empty() {
        inputs.push(b.ints(&ints(steps)));
    }
    b.op("Slice", &inputs, &[])
}

/// `op` (a Reduce* op) of `x` over `axes`, kept as size-1 dims so the
/// result broadcasts against `x`. Over no axes every group is one element,
/// so the result is `x` itself (a Reduce* node would reduce all axes).
pub(crate) fn reduce_keep(
    b: &mut Builder,
    op: &str,
    x: ValueId,
    axes: &[usize],
) -> Result<ValueId> {
    if axes.is_empty() {
        return Ok(x);
    }
    let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    let axes = b.ints(&axes);
    b.op(op, &[x, axes], &[("keepdims", Attr::Int(1))])
}

/// Fails unless `v` broadcasts to exactly `shape` (numpy's unidirectional
/// broadcast), so applying it element-wise keeps the output's shape.
pub(crate) fn check_broadcasts_to(
    b: &Builder,
    v: ValueId,
    shape: &[usize],
    what: &str,
) -> Result<()> {
    let vs = b.shape(v)?;
    if broadcast_shapes(&[shape, &vs]).ok().as_deref() != Some(shape) {
        bail!("{what} of shape {vs:?} does not broadcast to the input shape {shape:?}");
    }
    Ok(())
}

/// Whether the node uses its output `k`.
pub(crate) fn wants_output(node: &Node, k: usize) -> bool {
    matches!(node.outputs.get(k), Some(Some(_)))
}

/// The node's attributes, to pass on to the op it opens into.
pub(crate) fn attrs_of(node: &Node) -> Vec<(&str, Attr)> {
    node.attrs
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect()
}

/// The axes `from..rank`.
pub(crate) fn trailing_axes(from: usize, rank: usize) -> Vec<usize> {
    (from..rank).collect()
}

/// Runs a registered op on tensors, for unit tests of semantics the ONNX
/// node tests do not cover (older opsets, edge cases).
#[cfg(test)]
pub(crate) fn eval_op(
    op: &str,
    opset: i64,
    attrs: Vec<(&str, Attr)>,
    inputs: &[kiln_ir::Tensor],
    outputs: usize,
) -> Result<Vec<kiln_ir::Tensor>> {
    use kiln_ir::Tensor;
    struct NoSubgraphs;
    impl crate::SubgraphRunner for NoSubgraphs {
        fn run(&self, _g: &kiln_ir::Graph, _inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
            bail!("no subgraphs in unit tests")
        }
    }
    let node = Node {
        name: String::new(),
        op: op.to_string(),
        domain: String::new(),
        inputs: vec![None; inputs.len()],
        outputs: vec![Some(ValueId(0)); outputs],
        attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    };
    let Some(def) = crate::registry::lookup("", op) else {
        bail!("op {op} is not registered")
    };
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
    def.eval(
        &crate::EvalCx {
            node: &node,
            opset,
            subgraphs: &NoSubgraphs,
        },
        &ins,
    )
}

/// What [`eval_opened`] returns: the outputs, and each node's op and input count.
#[cfg(test)]
type Opened = (Vec<kiln_ir::Tensor>, Vec<(String, usize)>);

/// Builds a one-node graph (inputs at the positions in `constant` become
/// initializers, the rest graph inputs), infers it, opens its compounds
/// with `open_compounds` and runs the resulting primitive nodes. Returns
/// the node's outputs and the ops left in the graph with their input counts.
#[cfg(test)]
pub(crate) fn eval_opened(
    op: &str,
    opset: i64,
    attrs: Vec<(&str, Attr)>,
    inputs: &[kiln_ir::Tensor],
    constant: &[usize],
) -> Result<Opened> {
    use kiln_ir::{Graph, Initializer, Tensor, TensorType};
    use std::collections::HashMap;
    struct NoSubgraphs;
    impl crate::SubgraphRunner for NoSubgraphs {
        fn run(&self, _g: &Graph, _inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
            bail!("no subgraphs in unit tests")
        }
    }
    let mut g = Graph::new("test");
    g.opsets.insert(String::new(), opset);
    let mut env: HashMap<ValueId, Tensor> = HashMap::new();
    let mut ins = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        let id = g.add_value(format!("x{i}"), t.ty());
        if constant.contains(&i) {
            g.initializers.insert(id, Initializer::Tensor(t.clone()));
        } else {
            g.inputs.push(id);
        }
        env.insert(id, t.clone());
        ins.push(Some(id));
    }
    let y = g.add_value("y", TensorType::unknown_shape(DType::F32));
    g.outputs.push(y);
    g.nodes.push(Node {
        name: "n".into(),
        op: op.to_string(),
        domain: String::new(),
        inputs: ins,
        outputs: vec![Some(y)],
        attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    });
    crate::infer::infer_graph(&mut g, &|_| None)?;
    crate::compound::open_compounds(&mut g)?;
    for (id, init) in &g.initializers {
        env.insert(*id, init.to_tensor()?);
    }
    for node in &g.nodes {
        let Some(def) = crate::registry::lookup("", &node.op) else {
            bail!("op {} is not registered", node.op)
        };
        let args: Vec<Option<&Tensor>> = node
            .inputs
            .iter()
            .map(|i| i.and_then(|i| env.get(&i)))
            .collect();
        let cx = crate::EvalCx {
            node,
            opset,
            subgraphs: &NoSubgraphs,
        };
        let outs = def.eval(&cx, &args)?;
        for (o, t) in node.outputs.iter().zip(outs) {
            if let Some(o) = o {
                env.insert(*o, t);
            }
        }
    }
    let ops = g
        .nodes
        .iter()
        .map(|n| (n.op.clone(), n.inputs.len()))
        .collect();
    match env.remove(&y) {
        Some(t) => Ok((vec![t], ops)),
        None => bail!("the opened graph does not compute the output"),
    }
}

#[cfg(test)]
mod tests {
    use super::{eval_op, eval_opened};
    use kiln_ir::{Attr, Tensor};

    /// Deterministic values in [-3, 3) with a few exact zeros.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9) | 1;
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                if i % 7 == 3 {
                    0.0
                } else {
                    (s as f32 / u32::MAX as f32) * 6.0 - 3.0
                }
            })
            .collect()
    }

    fn t(shape: &[usize], seed: u32) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), values(n, seed)).unwrap()
    }

    fn ints(v: &[i64]) -> Tensor {
        Tensor::from_vec(vec![v.len()], v.to_vec()).unwrap()
    }

    /// Every compound opens fully (no compound op is left) into primitives
    /// that compute what the op's own evaluation computes.
    #[test]
    fn compounds_open_into_primitives_that_agree() {
        let f = |v: f32| Attr::Float(v);
        let i = |v: i64| Attr::Int(v);
        let x = t(&[2, 3, 4], 1);
        // (op, opset, attributes, inputs, positions of constant inputs)
        type Case<'a> = (&'a str, i64, Vec<(&'a str, Attr)>, Vec<Tensor>, Vec<usize>);
        let cases: Vec<Case> = vec![
            ("Softmax", 13, vec![("axis", i(1))], vec![x.clone()], vec![]),
            ("Softmax", 11, vec![("axis", i(1))], vec![x.clone()], vec![]),
            ("LogSoftmax", 13, vec![], vec![x.clone()], vec![]),
            (
                "LogSoftmax",
                1,
                vec![("axis", i(0))],
                vec![x.clone()],
                vec![],
            ),
            (
                "LayerNormalization",
                17,
                vec![("axis", i(1))],
                vec![x.clone(), t(&[3, 4], 2), t(&[4], 3)],
                vec![],
            ),
            (
                "RMSNormalization",
                23,
                vec![],
                vec![x.clone(), t(&[4], 2)],
                vec![],
            ),
            (
                "GroupNormalization",
                18,
                vec![("num_groups", i(3))],
                vec![t(&[2, 6, 2], 4), t(&[3], 5), t(&[3], 6)],
                vec![],
            ),
            (
                "GroupNormalization",
                21,
                vec![("num_groups", i(2))],
                vec![t(&[2, 6, 2], 4), t(&[6], 5), t(&[6], 6)],
                vec![],
            ),
            (
                "InstanceNormalization",
                6,
                vec![],
                vec![x.clone(), t(&[3], 2), t(&[3], 3)],
                vec![],
            ),
            (
                "MeanVarianceNormalization",
                13,
                vec![("axes", Attr::Ints(vec![0, 2]))],
                vec![x.clone()],
                vec![],
            ),
            (
                "BatchNormalization",
                15,
                vec![],
                vec![
                    x.clone(),
                    t(&[3], 2),
                    t(&[3], 3),
                    t(&[3], 4),
                    ints_f(&[1.0, 0.5, 2.0]),
                ],
                vec![],
            ),
            (
                "LpNormalization",
                1,
                vec![("p", i(1))],
                vec![x.clone()],
                vec![],
            ),
            (
                "LpNormalization",
                1,
                vec![("axis", i(0))],
                vec![x.clone()],
                vec![],
            ),
            ("Gelu", 20, vec![], vec![x.clone()], vec![]),
            (
                "Gelu",
                20,
                vec![("approximate", Attr::String("tanh".into()))],
                vec![x.clone()],
                vec![],
            ),
            ("HardSwish", 14, vec![], vec![x.clone()], vec![]),
            (
                "HardSigmoid",
                6,
                vec![("alpha", f(0.3))],
                vec![x.clone()],
                vec![],
            ),
            ("Mish", 18, vec![], vec![x.clone()], vec![]),
            ("Elu", 6, vec![("alpha", f(0.7))], vec![x.clone()], vec![]),
            ("Selu", 6, vec![], vec![x.clone()], vec![]),
            ("Celu", 12, vec![("alpha", f(2.0))], vec![x.clone()], vec![]),
            ("LeakyRelu", 6, vec![], vec![x.clone()], vec![]),
            (
                "ThresholdedRelu",
                10,
                vec![("alpha", f(0.5))],
                vec![x.clone()],
                vec![],
            ),
            (
                "Shrink",
                9,
                vec![("bias", f(0.25))],
                vec![x.clone()],
                vec![],
            ),
            ("Softsign", 1, vec![], vec![x.clone()], vec![]),
            (
                "Swish",
                24,
                vec![("alpha", f(1.5))],
                vec![x.clone()],
                vec![],
            ),
            ("PRelu", 16, vec![], vec![x.clone(), t(&[3, 1], 9)], vec![]),
            ("PRelu", 16, vec![], vec![x.clone(), t(&[3], 9)], vec![]),
            (
                "Clip",
                13,
                vec![],
                vec![x.clone(), scalar(-1.0), scalar(0.5)],
                vec![],
            ),
            (
                "Clip",
                13,
                vec![],
                vec![x.clone(), scalar(-1.0), scalar(0.5)],
                vec![1, 2],
            ),
            ("Clip", 6, vec![("max", f(0.5))], vec![x.clone()], vec![]),
            (
                "Sum",
                13,
                vec![],
                vec![x.clone(), t(&[4], 2), t(&[3, 1], 3)],
                vec![],
            ),
            (
                "Max",
                13,
                vec![],
                vec![x.clone(), t(&[4], 2), t(&[3, 1], 3)],
                vec![],
            ),
            (
                "Min",
                13,
                vec![],
                vec![x.clone(), t(&[4], 2), t(&[3, 1], 3), t(&[1], 4)],
                vec![],
            ),
            (
                "Mean",
                13,
                vec![],
                vec![x.clone(), t(&[4], 2), t(&[3, 1], 3)],
                vec![],
            ),
            ("CastLike", 15, vec![], vec![x.clone(), ints(&[1])], vec![]),
            (
                "Gemm",
                13,
                vec![
                    ("transA", i(1)),
                    ("transB", i(1)),
                    ("alpha", f(0.5)),
                    ("beta", f(2.0)),
                ],
                vec![t(&[4, 3], 1), t(&[5, 4], 2), t(&[5], 3)],
                vec![],
            ),
            (
                "Gemm",
                13,
                vec![],
                vec![t(&[3, 4], 1), t(&[4, 5], 2)],
                vec![],
            ),
            ("ReduceL1", 18, vec![], vec![x.clone(), ints(&[1])], vec![]),
            (
                "ReduceL2",
                18,
                vec![("keepdims", i(0))],
                vec![x.clone(), ints(&[0, 2])],
                vec![],
            ),
            (
                "ReduceLogSum",
                18,
                vec![],
                vec![positive(&[2, 3, 4]), ints(&[2])],
                vec![1],
            ),
            (
                "ReduceLogSumExp",
                18,
                vec![("keepdims", i(0))],
                vec![x.clone(), ints(&[1])],
                vec![],
            ),
            ("ReduceLogSumExp", 18, vec![], vec![x.clone()], vec![]),
            (
                "ReduceSumSquare",
                18,
                vec![("keepdims", i(0))],
                vec![x.clone()],
                vec![],
            ),
            (
                "ReduceMean",
                18,
                vec![],
                vec![x.clone(), ints(&[-1])],
                vec![1],
            ),
        ];
        let compounds = [
            "Softmax",
            "LogSoftmax",
            "LayerNormalization",
            "RMSNormalization",
            "GroupNormalization",
            "InstanceNormalization",
            "MeanVarianceNormalization",
            "BatchNormalization",
            "LpNormalization",
            "Gelu",
            "HardSwish",
            "HardSigmoid",
            "Mish",
            "Elu",
            "Selu",
            "Celu",
            "LeakyRelu",
            "ThresholdedRelu",
            "Shrink",
            "Softsign",
            "Swish",
            "PRelu",
            "Clip",
            "Mean",
            "CastLike",
            "Gemm",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceSumSquare",
            "ReduceMean",
        ];
        for (op, opset, attrs, inputs, constant) in cases {
            let want = eval_op(op, opset, attrs.clone(), &inputs, 1)
                .unwrap_or_else(|e| panic!("{op}: {e}"));
            let (got, ops) = eval_opened(op, opset, attrs, &inputs, &constant)
                .unwrap_or_else(|e| panic!("{op} opened: {e}"));
            assert_eq!(got[0], want[0], "{op} (opset {opset})");
            let left: Vec<_> = ops
                .iter()
                .filter(|(o, n)| compounds.contains(&o.as_str()) || *n > 3)
                .collect();
            assert!(left.is_empty(), "{op}: not opened: {left:?}");
        }
    }

    fn positive(shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        let v = values(n, 5).iter().map(|x| x.abs() + 0.1).collect();
        Tensor::from_vec(shape.to_vec(), v).unwrap()
    }

    fn scalar(v: f32) -> Tensor {
        Tensor::from_vec(vec![], vec![v]).unwrap()
    }

    fn ints_f(v: &[f32]) -> Tensor {
        Tensor::from_vec(vec![v.len()], v.to_vec()).unwrap()
    }
}

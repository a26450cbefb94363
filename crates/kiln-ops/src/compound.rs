//! Compound ops (APOLLO §3.2): ops whose one definition is a decomposition
//! into other ops. [`Comp`] derives shape inference and evaluation from the
//! decomposition (built in a scratch graph), so a compound's semantics is
//! written once; [`open_compounds`] replaces every compound node of a graph
//! by its primitives, so no op boundary is left for fusion to stop at.

use crate::builder::Builder;
use crate::{registry, EvalCx, InferCx, InputInfo, Op};
use kiln_ir::{bail, Attr, DType, Graph, Initializer, Node, Result, Tensor, TensorType, ValueId};
use std::collections::HashMap;

/// An op defined by a decomposition.
pub trait Compound: Send + Sync {
    /// Builds the node's outputs from other ops with `b`; one value per
    /// node output (`None` where the node does not request that output).
    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Vec<Option<ValueId>>>;

    /// Output dtypes when input shapes are unknown and the decomposition
    /// cannot be built yet (default: input 0's dtype for every output).
    fn dtypes(&self, cx: &InferCx) -> Result<Vec<DType>> {
        Ok(vec![cx.input(0)?.ty.dtype; cx.node.outputs.len().max(1)])
    }
}

/// Adapts a [`Compound`] to the [`Op`] interface.
pub struct Comp<C>(pub C);

impl<C: Compound> Op for Comp<C> {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let shapes_known = cx.inputs.iter().flatten().all(|i| i.ty.shape.is_some());
        if !shapes_known {
            let dtypes = self.0.dtypes(cx)?;
            return Ok(dtypes.into_iter().map(TensorType::unknown_shape).collect());
        }
        let (mut g, ids) = scratch_graph(cx);
        let built = self
            .0
            .decompose(cx, &mut Builder::new(&mut g, cx.opset, &cx.node.name), &ids);
        let outs = match built {
            Err(e) if e.is_not_static() => {
                let dtypes = self.0.dtypes(cx)?;
                return Ok(dtypes.into_iter().map(TensorType::unknown_shape).collect());
            }
            other => other?,
        };
        Ok(outs
            .iter()
            .map(|o| match o {
                Some(id) => g.ty(*id).clone(),
                None => TensorType::unknown_shape(DType::F32),
            })
            .collect())
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let icx = InferCx::of_eval(cx, inputs);
        let (mut g, ids) = scratch_graph(&icx);
        let (outs, nodes) = {
            let mut b = Builder::new(&mut g, cx.opset, &cx.node.name);
            let outs = self.0.decompose(&icx, &mut b, &ids)?;
            (outs, std::mem::take(&mut b.nodes))
        };
        let mut env: HashMap<ValueId, Tensor> = HashMap::new();
        for (id, init) in &g.initializers {
            env.insert(*id, init.to_tensor()?);
        }
        for node in &nodes {
            run_node(node, cx, &mut env)?;
        }
        outs.iter()
            .map(|o| match o {
                Some(id) => env
                    .get(id)
                    .cloned()
                    .ok_or_else(|| kiln_ir::Error::new("decomposition left an output unset")),
                None => Ok(Tensor::zeros(DType::F32, vec![0])),
            })
            .collect()
    }

    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        self.0.decompose(cx, b, inputs).map(Some)
    }

    fn is_compound(&self) -> bool {
        true
    }
}

/// A graph holding the node's inputs: known values as initializers, the
/// rest as graph inputs.
fn scratch_graph(cx: &InferCx) -> (Graph, Vec<Option<ValueId>>) {
    let mut g = Graph::new("decomposition");
    let ids = cx
        .inputs
        .iter()
        .enumerate()
        .map(|(i, info)| {
            info.as_ref().map(|info| {
                let id = g.add_value(format!("in{i}"), info.ty.clone());
                match info.value {
                    Some(t) => {
                        g.initializers.insert(id, Initializer::Tensor(t.clone()));
                    }
                    None => g.inputs.push(id),
                }
                id
            })
        })
        .collect();
    (g, ids)
}

/// Evaluates one node of a decomposition into `env`.
fn run_node(node: &Node, cx: &EvalCx, env: &mut HashMap<ValueId, Tensor>) -> Result<()> {
    let Some(op) = registry::lookup(&node.domain, &node.op) else {
        bail!("decomposition uses unknown op '{}'", node.op);
    };
    let ins: Vec<Option<&Tensor>> = node
        .inputs
        .iter()
        .map(|i| i.and_then(|i| env.get(&i)))
        .collect();
    let ncx = EvalCx {
        node,
        opset: cx.opset,
        subgraphs: cx.subgraphs,
    };
    let outs = op
        .eval(&ncx, &ins)
        .map_err(|e| e.context(node.describe()))?;
    for (o, t) in node.outputs.iter().zip(outs) {
        if let Some(o) = o {
            env.insert(*o, t);
        }
    }
    Ok(())
}

/// Replaces every node of `g` (and of its subgraphs) whose op decomposes by
/// the nodes of its decomposition, until none is left. Returns how many
/// nodes were opened.
///
/// Needs: a typed graph (shape inference has run).
/// Guarantees: the same outputs; output values keep their ids and names.
pub fn open_compounds(g: &mut Graph) -> Result<usize> {
    open_rounds(g, false)
}

/// `in_subgraph`: nodes of If/Loop/Scan bodies whose decomposition fails
/// stay as they are: a branch that never runs for these inputs may not
/// even be well-typed (its errors surface if it ever runs).
fn open_rounds(g: &mut Graph, in_subgraph: bool) -> Result<usize> {
    let mut opened = 0;
    // Each round opens one level; decompositions that emit compounds are
    // opened by the next round.
    for _ in 0..16 {
        let n = open_once(g, in_subgraph)?;
        if n == 0 {
            return Ok(opened);
        }
        opened += n;
    }
    bail!("compound ops still left after 16 rounds of opening: a decomposition emits itself")
}

fn open_once(g: &mut Graph, in_subgraph: bool) -> Result<usize> {
    let mut opened = 0;
    let old = std::mem::take(&mut g.nodes);
    for mut node in old {
        for attr in node.attrs.values_mut() {
            if let Attr::Graph(sub) = attr {
                opened += open_rounds(sub, true)?;
            }
        }
        let replaced = match open_node(g, &node) {
            Err(_) if in_subgraph => None,
            other => other.map_err(|e| e.context(node.describe()))?,
        };
        match replaced {
            Some(nodes) => {
                g.nodes.extend(nodes);
                opened += 1;
            }
            None => g.nodes.push(node),
        }
    }
    Ok(opened)
}

/// The nodes replacing `node`, or `None` when it stays.
fn open_node(g: &mut Graph, node: &Node) -> Result<Option<Vec<Node>>> {
    let Some(op) = registry::lookup(&node.domain, &node.op) else {
        return Ok(None);
    };
    // The builder borrows `g` mutably, so the context's input types and
    // values are copied out of it first (tensors share their storage).
    let (cx_inputs, opset) = crate::infer::with_node_cx(g, node, |cx| {
        let owned: Vec<Option<(TensorType, Option<Tensor>)>> = cx
            .inputs
            .iter()
            .map(|i| i.as_ref().map(|i| (i.ty.clone(), i.value.cloned())))
            .collect();
        Ok((owned, cx.opset))
    })?;
    let infos = cx_inputs
        .iter()
        .map(|i| {
            i.as_ref().map(|(ty, v)| InputInfo {
                ty: ty.clone(),
                value: v.as_ref(),
            })
        })
        .collect();
    let cx = InferCx {
        node,
        opset,
        inputs: infos,
        scope: &|_| None,
    };
    let mut b = Builder::new(g, opset, &node.name);
    // A node whose decomposition needs what is only known at run time (an
    // axes input computed in a loop body) stays as it is.
    let outs = match op.decompose(&cx, &mut b, &node.inputs) {
        Ok(Some(outs)) => outs,
        Ok(None) => return Ok(None),
        Err(e) if e.is_not_static() => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut nodes = std::mem::take(&mut b.nodes);
    bind_outputs(g, node, &outs, &mut nodes)?;
    Ok(Some(nodes))
}

/// Makes the decomposition write the node's own output values, so users
/// and graph outputs need no rewiring.
fn bind_outputs(
    g: &mut Graph,
    node: &Node,
    outs: &[Option<ValueId>],
    nodes: &mut Vec<Node>,
) -> Result<()> {
    for (k, orig) in node.outputs.iter().enumerate() {
        let Some(orig) = *orig else { continue };
        let Some(Some(new)) = outs.get(k).copied() else {
            bail!("decomposition does not compute output {k}");
        };
        let produced_here = nodes.iter().any(|n| n.outputs.contains(&Some(new)));
        let already_bound = outs[..k].contains(&Some(new));
        if produced_here && !already_bound {
            for n in nodes.iter_mut() {
                for v in n.inputs.iter_mut().chain(n.outputs.iter_mut()) {
                    if *v == Some(new) {
                        *v = Some(orig);
                    }
                }
            }
        } else {
            nodes.push(Node {
                name: format!("{}/out{k}", node.name),
                op: "Identity".into(),
                domain: String::new(),
                inputs: vec![Some(new)],
                outputs: vec![Some(orig)],
                attrs: Default::default(),
            });
        }
        g.values[orig.index()].ty = g.ty(new).clone();
    }
    Ok(())
}

/// An op with two definitions, chosen per node: `other` for the nodes
/// `uses_other` accepts, `main` for the rest. Conv is a primitive without a
/// bias and a compound with one; MaxPool is a primitive unless it also
/// returns indices. [`Op::primitive`] has no node to choose by and gives
/// `main`'s, whose `define` rejects the nodes `other` handles.
pub struct PerNode<A, B> {
    pub main: A,
    pub other: B,
    pub uses_other: fn(&Node) -> bool,
}

impl<A: Op, B: Op> PerNode<A, B> {
    fn pick(&self, node: &Node) -> &dyn Op {
        if (self.uses_other)(node) {
            &self.other
        } else {
            &self.main
        }
    }
}

impl<A: Op, B: Op> Op for PerNode<A, B> {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        self.pick(cx.node).infer(cx)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        self.pick(cx.node).eval(cx, inputs)
    }

    fn fold(&self, cx: &InferCx) -> Result<Option<Vec<Tensor>>> {
        self.pick(cx.node).fold(cx)
    }

    fn primitive(&self) -> Option<&dyn crate::te::primitive::Primitive> {
        self.main.primitive()
    }

    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        self.pick(cx.node).decompose(cx, b, inputs)
    }
}

//! The view of a kiln graph that GraphTurbo's scheduler (§3) reads: per
//! node its tensor expression and what each output axis split means for
//! its inputs ([`crate::propagate::OpSplit`]), its producer and consumer
//! nodes, and the bytes of every value.
//!
//! Needs: a graph with static shapes (`kiln_ops::infer` run); compound
//! ops opened (kiln's graph passes) where splitting should see through
//! them; a node without a tensor expression is scheduled but never split.
//! Guarantees: edges follow values between nodes; value bytes are the
//! model's types', or the device's floating-point size where the
//! description sets one ([`OpGraph::for_device`]); initializers are
//! weights, kept out of working sets as §2.2 does ("a small, fixed size of
//! buffers in LB" promotes them per layer).

use crate::desc::DsaDesc;
use crate::propagate::OpSplit;
use kiln_ir::{bail, Graph, Result, ValueId};
use kiln_ops::te::classify::node_expr;
use kiln_ops::te::TensorExpr;
use std::collections::BTreeSet;

/// One node as the scheduler sees it.
#[derive(Debug, Clone)]
pub struct OpNode {
    pub name: String,
    pub op: String,
    /// The node's present inputs and outputs.
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Which output axes split cleanly and where each lands in the inputs.
    pub split: OpSplit,
    /// Holds parameters learned by gradients (§1.1's definition of a
    /// layer): a reduction that reads a weight (convolution, matmul).
    pub parametric: bool,
    /// Nodes producing this node's inputs, ascending, deduplicated.
    pub producers: Vec<usize>,
    /// Nodes reading this node's outputs, ascending, deduplicated.
    pub consumers: Vec<usize>,
    /// Arithmetic of the whole node ([`node_work`]).
    pub flops: u64,
    /// A reduction over the product of two operands (convolution, matrix
    /// product): what a matrix unit runs; everything else is vector work.
    pub contraction: bool,
}

/// A graph ready for scheduling.
#[derive(Debug, Clone)]
pub struct OpGraph {
    pub nodes: Vec<OpNode>,
    /// Bytes of every value (index = `ValueId::index`).
    pub bytes: Vec<u64>,
    /// Static shape of every value.
    pub shapes: Vec<Vec<usize>>,
    /// Values that are initializers.
    pub weights: BTreeSet<ValueId>,
    /// Values that are graph outputs.
    pub graph_outputs: BTreeSet<ValueId>,
    /// The node producing each value, if any.
    pub producer: Vec<Option<usize>>,
    /// The first dimension of the first graph input with a shape: the
    /// batch per cluster (§2.1); 1 when there is none.
    pub batch: usize,
}

impl OpGraph {
    /// Builds the view; every value must have a static shape.
    pub fn new(g: &Graph) -> Result<OpGraph> {
        OpGraph::with_float_bytes(g, None)
    }

    /// The view for `desc`: floating-point values take its `float_bytes`
    /// per element when it sets them (the device's precision).
    pub fn for_device(g: &Graph, desc: &DsaDesc) -> Result<OpGraph> {
        OpGraph::with_float_bytes(g, desc.float_bytes)
    }

    fn with_float_bytes(g: &Graph, float_bytes: Option<u32>) -> Result<OpGraph> {
        let mut shapes = Vec::with_capacity(g.values.len());
        let mut bytes = Vec::with_capacity(g.values.len());
        for v in &g.values {
            let Some(shape) = &v.ty.shape else {
                bail!("GraphTurbo needs static shapes: '{}' has none", v.name);
            };
            let element = match float_bytes {
                Some(b) if v.ty.dtype.is_float() => b as usize,
                _ => v.ty.dtype.size(),
            };
            bytes.push((shape.iter().product::<usize>() * element) as u64);
            shapes.push(shape.clone());
        }
        let producer = g.producers();
        let mut nodes = Vec::with_capacity(g.nodes.len());
        for node in &g.nodes {
            let te = node_expr(g, node)?;
            let (flops, contraction) = node_work(g, node, te.as_ref());
            let weights_read = node
                .inputs
                .iter()
                .flatten()
                .any(|v| g.initializers.contains_key(v));
            nodes.push(OpNode {
                name: node.name.clone(),
                op: node.op.clone(),
                inputs: node.inputs.iter().flatten().copied().collect(),
                outputs: node.outputs.iter().flatten().copied().collect(),
                parametric: weights_read && te.as_ref().is_some_and(|t| t.reduction.is_some()),
                split: OpSplit::from_expr(te.as_ref(), node),
                producers: Vec::new(),
                consumers: Vec::new(),
                flops,
                contraction,
            });
        }
        link(&mut nodes, &producer);
        Ok(OpGraph {
            nodes,
            bytes,
            shapes,
            weights: g.initializers.keys().copied().collect(),
            graph_outputs: g.outputs.iter().copied().collect(),
            producer,
            batch: g
                .inputs
                .iter()
                .find_map(|&v| g.ty(v).shape.as_ref()?.first().copied())
                .unwrap_or(1),
        })
    }

    /// Bytes of `v`.
    pub fn value_bytes(&self, v: ValueId) -> u64 {
        self.bytes[v.index()]
    }

    /// Shape of `v`.
    pub fn shape(&self, v: ValueId) -> &[usize] {
        &self.shapes[v.index()]
    }

    /// Whether `v` is an activation (not a weight): what working sets hold.
    pub fn is_activation(&self, v: ValueId) -> bool {
        !self.weights.contains(&v)
    }
}

/// FLOPs of a node and whether it is a contraction: one operation per
/// output element and reduction step, two (multiply and add) when the
/// reduction combines two operands. A node without a tensor expression
/// counts one per output element (a copy).
fn node_work(g: &Graph, node: &kiln_ir::Node, te: Option<&TensorExpr>) -> (u64, bool) {
    let Some(te) = te else {
        let elems = node
            .outputs
            .iter()
            .flatten()
            .filter_map(|&v| g.ty(v).numel())
            .sum::<usize>();
        return (elems as u64, false);
    };
    let elems = te.shape.iter().product::<usize>() as u64;
    let steps = te
        .reduction
        .as_ref()
        .map_or(1, |r| r.extents.iter().product::<usize>() as u64);
    let contraction = te.reduction.is_some() && te.accesses.len() >= 2;
    let per_step = if contraction { 2 } else { 1 };
    (elems * steps.max(1) * per_step, contraction)
}

/// Fills producers and consumers from the values.
fn link(nodes: &mut [OpNode], producer: &[Option<usize>]) {
    for n in 0..nodes.len() {
        let producers: BTreeSet<usize> = nodes[n]
            .inputs
            .iter()
            .filter_map(|v| producer[v.index()])
            .collect();
        for &p in &producers {
            if !nodes[p].consumers.contains(&n) {
                nodes[p].consumers.push(n);
            }
        }
        nodes[n].producers = producers.into_iter().collect();
    }
    for node in nodes.iter_mut() {
        node.consumers.sort_unstable();
    }
}

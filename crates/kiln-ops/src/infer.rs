//! Shape inference over a whole graph. Walks the nodes in order and asks each
//! op's definition for its output types. Values computable from constants
//! (initializers, Constant nodes, Shape of a static tensor, ...) are
//! evaluated on the way, so exporters' shape-computation chains resolve and
//! every tensor whose shape is determined by the graph gets a static shape.
//! Needs: a structurally valid graph whose ops are registered.
//! Guarantees: every value's type is set; shapes are `None` only when they
//! depend on run-time data.

use crate::{registry, EvalCx, InferCx, InputInfo, SubgraphRunner};
use kiln_ir::{bail, Attr, Error, Graph, Result, Tensor, TensorType, ValueId};
use std::collections::HashMap;

/// Inputs larger than this many elements are not evaluated at compile time.
const MAX_CONST_EVAL_ELEMS: usize = 1 << 20;

/// Infers the types of all node outputs of `g` (and of its subgraphs).
/// `outer` gives the types of values visible from enclosing graphs.
pub fn infer_graph(g: &mut Graph, outer: &dyn Fn(&str) -> Option<TensorType>) -> Result<()> {
    // Captures were typed when the importer saw them, before the enclosing
    // graph's node outputs had types: take the enclosing scope's types now.
    for c in g.captures.clone() {
        if let Some(t) = outer(g.name(c)) {
            g.values[c.index()].ty = t;
        }
    }
    for &v in &g.inputs {
        check_budget(g, v, &format!("graph input '{}'", g.name(v)))?;
    }
    let mut consts: HashMap<ValueId, Tensor> = HashMap::new();
    for i in 0..g.nodes.len() {
        let opset = node_opset(g, i);
        // Subgraph attributes first: their outputs' types feed the op's rule.
        infer_subgraphs(g, i, outer, &consts).map_err(|e| e.context(g.nodes[i].describe()))?;
        let node = g.nodes[i].clone();
        let types = infer_node(g, &node, opset, &mut consts, outer)
            .map_err(|e| e.context(format!("{} (opset {opset})", node.describe())))?;
        for (k, o) in node.outputs.iter().enumerate() {
            if let Some(o) = o {
                match types.get(k) {
                    Some(t) => {
                        g.values[o.index()].ty = t.clone();
                        let what = format!("{} output '{}'", node.describe(), g.name(*o));
                        check_budget(g, *o, &what)?;
                    }
                    None => bail!(
                        "{}: op did not produce a type for output {k}",
                        node.describe()
                    ),
                }
            }
        }
    }
    Ok(())
}

/// Value `v` of a static shape within the memory budget.
fn check_budget(g: &Graph, v: ValueId, what: &str) -> Result<()> {
    match &g.ty(v).shape {
        Some(shape) => kiln_ir::limits::check_tensor(&what, g.ty(v).dtype, shape),
        None => Ok(()),
    }
}

fn node_opset(g: &Graph, i: usize) -> i64 {
    opset_of(g, &g.nodes[i])
}

/// The version of `node`'s domain's opset in `g`.
pub fn opset_of(g: &Graph, node: &kiln_ir::Node) -> i64 {
    let d = node.domain.as_str();
    let d = if d == "ai.onnx" { "" } else { d };
    g.opsets.get(d).copied().unwrap_or(1)
}

/// Initializers up to this many elements are shown to ops as known values
/// outside inference (axes, shapes, scalars, per-channel vectors); larger
/// ones are weights, which no definition reads and decoding would cost.
pub const MAX_KNOWN_ELEMS: usize = 1 << 16;

/// Calls `f` with the [`InferCx`] of `node` (a node of `g`, or one about to
/// be put in it): input types from `g`, small initializers as known values.
pub fn with_node_cx<T>(
    g: &Graph,
    node: &kiln_ir::Node,
    f: impl FnOnce(&InferCx) -> Result<T>,
) -> Result<T> {
    let mut values: HashMap<ValueId, Tensor> = HashMap::new();
    for id in node.inputs.iter().flatten() {
        if let Some(init) = g.initializers.get(id) {
            if init.ty().numel().unwrap_or(usize::MAX) <= MAX_KNOWN_ELEMS {
                values.insert(*id, init.to_tensor()?);
            }
        }
    }
    let inputs = node
        .inputs
        .iter()
        .map(|i| {
            i.map(|i| InputInfo {
                ty: g.ty(i).clone(),
                value: values.get(&i),
            })
        })
        .collect();
    let cx = InferCx {
        node,
        opset: opset_of(g, node),
        inputs,
        scope: &|_| None,
    };
    f(&cx)
}

/// Subgraphs are not run during inference; control-flow ops fall back to
/// their type rules.
struct NoSubgraphs;
impl SubgraphRunner for NoSubgraphs {
    fn run(&self, _g: &Graph, _inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        bail!("subgraphs are not evaluated during shape inference")
    }
}

fn infer_node(
    g: &Graph,
    node: &kiln_ir::Node,
    opset: i64,
    consts: &mut HashMap<ValueId, Tensor>,
    outer: &dyn Fn(&str) -> Option<TensorType>,
) -> Result<Vec<TensorType>> {
    let op = registry::lookup(&node.domain, &node.op).ok_or_else(|| {
        let domain = if node.domain.is_empty() {
            "ai.onnx"
        } else {
            &node.domain
        };
        Error::unsupported(format!("unsupported op '{}' (domain {domain})", node.op))
    })?;
    // Initializers are decoded (and kept for later nodes) up to MAX_CONST_EVAL_ELEMS when the
    // node can be evaluated, else only small ones, which type rules and folds read as
    // values: a model's weights are not decoded by inference (BERT-base's 48 projections of
    // 768 x 768 were, at every start).
    let init_elems = |i: &ValueId| {
        g.initializers
            .get(i)
            .map(|init| init.ty().numel().unwrap_or(usize::MAX))
    };
    let all_const = node.inputs.iter().flatten().all(|i| {
        consts.contains_key(i) || init_elems(i).is_some_and(|n| n <= MAX_CONST_EVAL_ELEMS)
    });
    let decoded_up_to = if all_const {
        MAX_CONST_EVAL_ELEMS
    } else {
        MAX_KNOWN_ELEMS
    };
    let mut const_elems = 0usize;
    for i in node.inputs.iter().flatten() {
        if !consts.contains_key(i) && init_elems(i).is_some_and(|n| n <= decoded_up_to) {
            consts.insert(*i, g.initializers[i].to_tensor()?);
        }
        if let Some(t) = consts.get(i) {
            const_elems += t.len();
        }
    }
    let has_subgraph = node.attrs.values().any(|a| matches!(a, Attr::Graph(_)));
    if all_const && op.deterministic() && !has_subgraph && const_elems <= MAX_CONST_EVAL_ELEMS {
        let ins: Vec<Option<&Tensor>> =
            node.inputs.iter().map(|i| i.map(|i| &consts[&i])).collect();
        let cx = EvalCx {
            node,
            opset,
            subgraphs: &NoSubgraphs,
        };
        let outs = guard(|| op.eval(&cx, &ins))?;
        let types: Vec<TensorType> = outs.iter().map(|t| t.ty()).collect();
        for (o, t) in node.outputs.iter().zip(outs) {
            if let Some(o) = o {
                consts.insert(*o, t);
            }
        }
        if types.len()
            >= node
                .outputs
                .iter()
                .rposition(|o| o.is_some())
                .map_or(0, |p| p + 1)
        {
            return Ok(types);
        }
    }
    // Only control-flow ops look names up, so search on demand instead of
    // building a name map for every node.
    let scope = |name: &str| {
        g.find(name)
            .map(|id| g.ty(id).clone())
            .or_else(|| outer(name))
    };
    let inputs = node
        .inputs
        .iter()
        .map(|i| {
            i.map(|i| InputInfo {
                ty: g.ty(i).clone(),
                value: consts.get(&i),
            })
        })
        .collect();
    let cx = InferCx {
        node,
        opset,
        inputs,
        scope: &scope,
    };
    if let Some(outs) = guard(|| op.fold(&cx))? {
        let types = outs.iter().map(|t| t.ty()).collect();
        for (o, t) in node.outputs.iter().zip(outs) {
            if let Some(o) = o {
                consts.insert(*o, t);
            }
        }
        return Ok(types);
    }
    guard(|| op.infer(&cx))
}

/// Turns a panic inside an op definition into an error, so bad input can
/// never crash the importer (ops are expected to validate and not panic;
/// this is the safety net).
fn guard<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned());
        Err(Error::new(format!(
            "internal error (panic): {}",
            msg.unwrap_or_else(|| "unknown".into())
        )))
    })
}

/// Runs inference inside the node's subgraph attributes, with the current
/// graph's values as the outer scope.
fn infer_subgraphs(
    g: &mut Graph,
    idx: usize,
    outer: &dyn Fn(&str) -> Option<TensorType>,
    consts: &HashMap<ValueId, Tensor>,
) -> Result<()> {
    if !g.nodes[idx]
        .attrs
        .values()
        .any(|a| matches!(a, Attr::Graph(_)))
    {
        return Ok(());
    }
    // Constant inputs decide which subgraphs can run at all.
    let mut decoded = Vec::new();
    for i in &g.nodes[idx].inputs {
        decoded.push(match i {
            Some(i) if !consts.contains_key(i) => g
                .initializers
                .get(i)
                .map(|init| init.to_tensor())
                .transpose()?,
            _ => None,
        });
    }
    let values: Vec<Option<&Tensor>> = g.nodes[idx]
        .inputs
        .iter()
        .zip(&decoded)
        .map(|(i, d)| d.as_ref().or_else(|| i.and_then(|i| consts.get(&i))))
        .collect();
    let input_types: Vec<Option<TensorType>> = g.nodes[idx]
        .inputs
        .iter()
        .map(|i| i.map(|i| g.ty(i).clone()))
        .collect();
    let op = registry::lookup(&g.nodes[idx].domain, &g.nodes[idx].op);
    let opset = node_opset(g, idx);
    let mut attrs = std::mem::take(&mut g.nodes[idx].attrs);
    // The node as the op's hook sees it: its plain attributes, no subgraphs.
    let mut plain = g.nodes[idx].clone();
    plain.attrs = attrs
        .iter()
        .filter(|(_, a)| !matches!(a, Attr::Graph(_)))
        .map(|(k, a)| (k.clone(), a.clone()))
        .collect();
    let res = (|| {
        for (name, a) in attrs.iter_mut() {
            if let Attr::Graph(sub) = a {
                if op.is_some_and(|op| !op.subgraph_is_live(&plain, name, &values)) {
                    continue;
                }
                if let Some(op) = op {
                    let known = op.subgraph_input_types(&plain, opset, name, &input_types)?;
                    refine_subgraph_inputs(sub, known)
                        .map_err(|e| e.context(format!("subgraph attribute '{name}'")))?;
                }
                let names = g.names();
                let scope = |n: &str| {
                    names
                        .get(n)
                        .map(|id| g.ty(*id).clone())
                        .or_else(|| outer(n))
                };
                infer_graph(sub, &scope)
                    .map_err(|e| e.context(format!("subgraph attribute '{name}'")))?;
            }
        }
        Ok(())
    })();
    g.nodes[idx].attrs = attrs;
    res
}

/// Merges what the node knows about its subgraph's inputs into their declared
/// types: the dtype comes from the node, the shape from the declaration when
/// it has one (a Loop's carried values may change shape between iterations,
/// so the declaration is the authority), else from the node.
fn refine_subgraph_inputs(sub: &mut Graph, known: Option<Vec<Option<TensorType>>>) -> Result<()> {
    let Some(known) = known else { return Ok(()) };
    if known.len() != sub.inputs.len() {
        bail!(
            "the subgraph has {} inputs but the node provides {}",
            sub.inputs.len(),
            known.len()
        );
    }
    for (&id, k) in sub.inputs.iter().zip(known) {
        let Some(k) = k else { continue };
        let declared = &mut sub.values[id.index()].ty;
        declared.dtype = k.dtype;
        if declared.shape.is_none() {
            declared.shape = k.shape;
        }
    }
    Ok(())
}

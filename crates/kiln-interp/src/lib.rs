//! Reference interpreter (layer 8's oracle): executes a graph node by node
//! with each op's definition in `kiln-ops`. Correctness first; it is the
//! oracle every backend and planner is compared against.
//! Needs: a verified, type-inferred graph. Guarantees: outputs in graph
//! output order, each checked against its inferred type; errors (never
//! panics) name the failing node, op and opset.

use kiln_ir::{bail, DType, Error, Graph, Result, Tensor, TensorType};
use kiln_ops::{registry, EvalCx, SubgraphRunner};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// Time spent per op type in one run.
pub type Profile = Vec<(String, Duration)>;

/// Runs `g` on `inputs` (one per graph input, in order).
pub fn run(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    check_inputs(g, inputs)?;
    let bound: Vec<Tensor> = inputs.to_vec();
    Env {
        outer: &HashMap::new(),
    }
    .execute(g, bound, None)
}

/// Like [`run`], also returning the time spent in each op type.
pub fn run_profiled(g: &Graph, inputs: &[Tensor]) -> Result<(Vec<Tensor>, Profile)> {
    check_inputs(g, inputs)?;
    let mut prof = HashMap::new();
    let outs = Env {
        outer: &HashMap::new(),
    }
    .execute(g, inputs.to_vec(), Some(&mut prof))?;
    let mut p: Profile = prof.into_iter().collect();
    p.sort_by(|a, b| b.1.cmp(&a.1));
    Ok((outs, p))
}

/// Checks that the inputs match the graph's declared input types.
pub fn check_inputs(g: &Graph, inputs: &[Tensor]) -> Result<()> {
    check_input_types(g, inputs.iter().map(|t| (t.dtype(), &t.shape[..])))
}

/// [`check_inputs`] on the inputs' types alone: (element type, shape) of
/// each, in order.
pub fn check_input_types<'a>(
    g: &Graph,
    inputs: impl ExactSizeIterator<Item = (DType, &'a [usize])>,
) -> Result<()> {
    if inputs.len() != g.inputs.len() {
        bail!(
            "the model has {} inputs but {} were given",
            g.inputs.len(),
            inputs.len()
        );
    }
    for ((dtype, shape), &id) in inputs.zip(&g.inputs) {
        let want = g.ty(id);
        if !accepts(want, dtype, shape) {
            let got = TensorType::new(dtype, shape.to_vec());
            bail!("input '{}' must be {} but got {}", g.name(id), want, got);
        }
    }
    Ok(())
}

fn type_matches(want: &TensorType, t: &Tensor) -> bool {
    accepts(want, t.dtype(), &t.shape)
}

/// Whether a value declared `want` accepts a tensor of `dtype` and `shape`
/// (an unknown declared shape accepts any).
pub fn accepts(want: &TensorType, dtype: DType, shape: &[usize]) -> bool {
    want.dtype == dtype && want.shape.as_deref().is_none_or(|s| s == shape)
}

/// Values of the enclosing scopes, visible to subgraphs by name.
struct Env<'a> {
    outer: &'a HashMap<String, Tensor>,
}

impl SubgraphRunner for Env<'_> {
    fn run(&self, g: &Graph, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        if inputs.len() != g.inputs.len() {
            bail!(
                "subgraph '{}' takes {} inputs but got {}",
                g.name,
                g.inputs.len(),
                inputs.len()
            );
        }
        for (t, &id) in inputs.iter().zip(&g.inputs) {
            let want = g.ty(id);
            if !type_matches(want, t) {
                bail!(
                    "subgraph '{}': input '{}' is declared {} but got {}",
                    g.name,
                    g.name(id),
                    want,
                    t.ty()
                );
            }
        }
        self.execute(g, inputs, None)
    }
}

impl Env<'_> {
    fn execute(
        &self,
        g: &Graph,
        inputs: Vec<Tensor>,
        mut prof: Option<&mut HashMap<String, Duration>>,
    ) -> Result<Vec<Tensor>> {
        let mut vals: Vec<Option<Tensor>> = vec![None; g.values.len()];
        let mut uses = g.use_counts();
        // Values of this graph that each node's subgraphs read by name; they
        // count as uses so they stay alive until that node has run.
        let names = g.names();
        let captured: Vec<Vec<(String, Option<kiln_ir::ValueId>)>> = g
            .nodes
            .iter()
            .map(|n| {
                n.subgraph_reads()
                    .into_iter()
                    .map(|name| {
                        let id = names.get(name.as_str()).copied();
                        (name, id)
                    })
                    .collect()
            })
            .collect();
        for id in captured.iter().flatten().filter_map(|(_, id)| *id) {
            uses[id.index()] += 1;
        }
        for (&id, t) in g.inputs.iter().zip(inputs) {
            vals[id.index()] = Some(t);
        }
        for &id in &g.captures {
            let name = g.name(id);
            let t = self
                .outer
                .get(name)
                .ok_or_else(|| Error::new(format!("captured value '{name}' is not available")))?;
            vals[id.index()] = Some(t.clone());
        }
        for (&id, init) in &g.initializers {
            vals[id.index()] = Some(init.to_tensor()?);
        }
        for (node, captured) in g.nodes.iter().zip(&captured) {
            let ins: Vec<Option<&Tensor>> = node
                .inputs
                .iter()
                .map(|i| i.and_then(|i| vals[i.index()].as_ref()))
                .collect();
            // Subgraphs see the values they name, from this scope or outer ones.
            let mut scope = HashMap::new();
            for (name, id) in captured {
                let t = id
                    .and_then(|id| vals[id.index()].as_ref())
                    .or_else(|| self.outer.get(name));
                if let Some(t) = t {
                    scope.insert(name.clone(), t.clone());
                }
            }
            let start = Instant::now();
            let outs = eval_node(g, node, &ins, &scope)?;
            if let Some(p) = prof.as_deref_mut() {
                *p.entry(node.op.clone()).or_default() += start.elapsed();
            }
            for (o, t) in node.outputs.iter().zip(outs) {
                if let Some(o) = o {
                    vals[o.index()] = Some(t);
                }
            }
            for i in node
                .inputs
                .iter()
                .flatten()
                .chain(captured.iter().filter_map(|(_, id)| id.as_ref()))
            {
                uses[i.index()] -= 1;
                if uses[i.index()] == 0 {
                    vals[i.index()] = None;
                }
            }
        }
        g.outputs
            .iter()
            .map(|o| {
                vals[o.index()]
                    .clone()
                    .ok_or_else(|| Error::new(format!("output '{}' was not computed", g.name(*o))))
            })
            .collect()
    }
}

/// Evaluates `node` of `g` taking its inputs, and the values its subgraphs
/// read by name, from `read` (an executor's own storage); returns each
/// computed output with its value.
pub fn eval_node_reading(
    g: &Graph,
    node: &kiln_ir::Node,
    read: &mut dyn FnMut(kiln_ir::ValueId) -> Result<Tensor>,
) -> Result<Vec<(kiln_ir::ValueId, Tensor)>> {
    let ins: Vec<Option<Tensor>> = node
        .inputs
        .iter()
        .map(|v| v.map(&mut *read).transpose())
        .collect::<Result<_>>()?;
    let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
    let mut scope = HashMap::new();
    for name in node.subgraph_reads() {
        if let Some(id) = g.find(&name) {
            scope.insert(name, read(id)?);
        }
    }
    let outs = eval_node(g, node, &refs, &scope)?;
    Ok(node
        .outputs
        .iter()
        .zip(outs)
        .filter_map(|(o, t)| o.map(|o| (o, t)))
        .collect())
}

/// Evaluates one node of `g` on its input values; `scope` holds the values
/// its subgraphs read by name ([`subgraph_reads`]). Returns one tensor per
/// node output position it computes (trailing omitted outputs may be left
/// off), each checked against its inferred type. Errors name the node, op and opset.
pub fn eval_node(
    g: &Graph,
    node: &kiln_ir::Node,
    ins: &[Option<&Tensor>],
    scope: &HashMap<String, Tensor>,
) -> Result<Vec<Tensor>> {
    let opset = kiln_ops::infer::opset_of(g, node);
    let ctx = || format!("{} (opset {opset})", node.describe());
    let op = registry::lookup(&node.domain, &node.op).ok_or_else(|| {
        Error::unsupported(format!("unsupported op '{}'", node.op)).context(ctx())
    })?;
    let env = Env { outer: scope };
    let cx = EvalCx {
        node,
        opset,
        subgraphs: &env,
    };
    let outs = catch_unwind(AssertUnwindSafe(|| op.eval(&cx, ins)))
        .unwrap_or_else(|p| {
            Err(Error::new(format!(
                "internal error (panic): {}",
                panic_text(&p)
            )))
        })
        .map_err(|e| e.context(ctx()))?;
    for (k, o) in node.outputs.iter().enumerate() {
        let Some(o) = o else { continue };
        let Some(t) = outs.get(k) else {
            bail!("{}: output {k} was not computed", ctx())
        };
        let want = g.ty(*o);
        if !type_matches(want, t) {
            bail!(
                "{}: output '{}' was computed as {} but inferred as {}",
                ctx(),
                g.name(*o),
                t.ty(),
                want
            );
        }
    }
    Ok(outs)
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown".into())
}

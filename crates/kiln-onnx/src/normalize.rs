//! Rewrites opset-dependent attribute forms into the canonical (latest)
//! input forms, so each op definition handles one form. For example
//! Reshape-1's `shape` attribute, Squeeze/Unsqueeze-1..11's `axes`,
//! Split-2..11's `split`, Slice-1..9's `starts/ends/axes`, Pad-2..10's
//! `pads`, TopK-1..9's `k` and ReduceX's `axes` (before 13/18) become
//! int64 constant inputs at the positions the latest opset uses.
//! Needs: a converted graph. Guarantees: none of the listed attributes remain,
//! in the graph or its subgraphs.

use kiln_ir::{Attr, Graph, Initializer, Node, Result, Tensor, ValueId};

/// (op types, attribute, input position) of each attribute-to-input move.
const MOVES: &[(&[&str], &str, usize)] = &[
    (&["Reshape"], "shape", 1),
    (&["Squeeze", "Unsqueeze"], "axes", 1),
    (&["Split"], "split", 1),
    (&["Slice"], "starts", 1),
    (&["Slice"], "ends", 2),
    (&["Slice"], "axes", 3),
    (&["Pad"], "pads", 1),
    (&["Pad"], "paddings", 1),
    (&["TopK"], "k", 1),
    (
        &[
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceSumSquare",
        ],
        "axes",
        1,
    ),
];

pub fn normalize(g: &mut Graph) -> Result<()> {
    for node in &mut g.nodes {
        for a in node.attrs.values_mut() {
            if let Attr::Graph(sub) = a {
                normalize(sub)?;
            }
        }
    }
    for i in 0..g.nodes.len() {
        if !g.nodes[i].domain.is_empty() && g.nodes[i].domain != "ai.onnx" {
            continue;
        }
        for (ops, attr, pos) in MOVES {
            if !ops.contains(&g.nodes[i].op.as_str()) {
                continue;
            }
            let Some(value) = g.nodes[i].attrs.remove(*attr) else {
                continue;
            };
            let values: Vec<i64> = match value {
                Attr::Ints(v) => v,
                Attr::Int(v) => vec![v],
                other => kiln_ir::bail!(
                    "{}: attribute '{attr}' must be ints, got {}",
                    g.nodes[i].describe(),
                    other.kind()
                ),
            };
            let t = if *attr == "k" {
                Tensor::from_vec(vec![1], values)?
            } else {
                Tensor::from_vec(vec![values.len()], values)?
            };
            let id = add_constant(g, &g.nodes[i].clone(), attr, t);
            set_input(&mut g.nodes[i], *pos, id);
        }
    }
    Ok(())
}

fn add_constant(g: &mut Graph, node: &Node, attr: &str, t: Tensor) -> ValueId {
    let base = format!(
        "{}__{}",
        if node.name.is_empty() {
            &node.op
        } else {
            &node.name
        },
        attr
    );
    let mut name = base.clone();
    let mut k = 1;
    while g.find(&name).is_some() {
        name = format!("{base}_{k}");
        k += 1;
    }
    let id = g.add_value(name, t.ty());
    g.initializers.insert(id, Initializer::Tensor(t));
    id
}

fn set_input(node: &mut Node, pos: usize, id: ValueId) {
    if node.inputs.len() <= pos {
        node.inputs.resize(pos + 1, None);
    }
    node.inputs[pos] = Some(id);
}

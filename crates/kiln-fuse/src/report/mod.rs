//! `kiln explain`: what a fusion plan does to a graph, as JSON
//! ([`json`]), text ([`text`], [`feedback_text`]) and a drawing
//! ([`html`]) (issue 5, item 6).
//!
//! Needs: a graph and its [`Planned`] result.
//! Guarantees: the JSON object has the keys `planner`,
//! `primitive_nodes`, `kernels`, `fusion_ratio`, `intermediate_bytes`
//! (from `metrics.rs`), plus `groups` (per kernel: `kind`, `nodes` by
//! name, `ops` pattern, `bytes_in`, `bytes_out`, and `time_ms` when
//! profiled), `feedback` (the groups the backend refused: `pattern`,
//! `reason`, `nodes`, `split`) and `planning_s`.

mod html;
mod layout;
mod summary;
mod text;

pub use html::html;
pub use summary::{summarize, GroupSummary};
pub use text::{feedback_text, text};

use crate::metrics::metrics;
use crate::Planned;
use kiln_ir::Graph;
use serde_json::{json, Value};

/// The JSON report of `planned`, without times.
pub fn json(g: &Graph, planned: &Planned) -> Value {
    json_profiled(g, planned, &[])
}

/// The JSON report; `profile` gives (group index, milliseconds) pairs.
pub fn json_profiled(g: &Graph, planned: &Planned, profile: &[(usize, f64)]) -> Value {
    let m = metrics(g, &planned.plan);
    let groups: Vec<Value> = summarize(g, &planned.plan, profile)
        .iter()
        .map(|s| group_json(g, s))
        .collect();
    let feedback: Vec<Value> = planned
        .feedback
        .iter()
        .map(|f| {
            json!({
                "pattern": f.pattern,
                "reason": f.reason,
                "nodes": names(g, &f.nodes),
                "split": f.split.iter().map(|p| names(g, p)).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "planner": planned.plan.planner,
        "primitive_nodes": m.primitive_nodes,
        "kernels": m.kernels,
        "fusion_ratio": m.fusion_ratio,
        "intermediate_bytes": m.intermediate_bytes,
        "groups": groups,
        "feedback": feedback,
        "planning_s": planned.seconds,
    })
}

fn group_json(g: &Graph, s: &GroupSummary) -> Value {
    let mut v = json!({
        "kind": s.kind,
        "nodes": names(g, &s.nodes),
        "ops": s.ops,
        "bytes_in": s.bytes_in,
        "bytes_out": s.bytes_out,
    });
    if let Some(ms) = s.time_ms {
        v["time_ms"] = json!(ms);
    }
    v
}

/// Node names of `nodes`.
fn names(g: &Graph, nodes: &[usize]) -> Vec<String> {
    nodes
        .iter()
        .filter_map(|&n| g.nodes.get(n))
        .map(|node| node.name.clone())
        .collect()
}

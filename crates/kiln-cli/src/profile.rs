//! `--profile`: each node's time (the median of a few runs, robust to a run
//! another process interrupted) and, where the backend gives one, how many
//! times its roofline bound that is ([`crate::roofline`]).

use kiln_cpu::jit::NodeTime;
use kiln_ir::Result;
use std::collections::BTreeMap;

/// Runs per profile.
const REPS: usize = 11;

/// One node's profile.
#[derive(Debug, Clone)]
pub struct NodeProfile {
    pub node: String,
    pub op: String,
    pub compiled: bool,
    /// Median milliseconds over the profiled runs.
    pub ms: f64,
    /// The roofline bound in milliseconds, when known.
    pub bound_ms: Option<f64>,
}

impl NodeProfile {
    /// The profile as JSON (`bench --profile --json`).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "node": self.node,
            "op": self.op,
            "compiled": self.compiled,
            "ms": self.ms,
            "bound_ms": self.bound_ms,
        })
    }

    /// How many times its roofline bound the node took.
    pub fn times_bound(&self) -> Option<f64> {
        self.bound_ms.filter(|b| *b > 0.0).map(|b| self.ms / b)
    }
}

/// Runs the model [`REPS`] times through `run` (which returns each node's
/// time, nodes in graph order) and gives each node's median time and
/// `bound(index)`.
pub fn node_profile(
    mut run: impl FnMut() -> Result<Vec<NodeTime>>,
    bound: &dyn Fn(usize) -> Option<f64>,
) -> Result<Vec<NodeProfile>> {
    let mut samples: Vec<Vec<f64>> = Vec::new();
    let mut rows: Vec<NodeProfile> = Vec::new();
    for _ in 0..REPS {
        let times = run()?;
        if rows.is_empty() {
            rows = times
                .iter()
                .enumerate()
                .map(|(i, t)| row(i, t, bound))
                .collect();
            samples = vec![Vec::with_capacity(REPS); times.len()];
        }
        for (acc, t) in samples.iter_mut().zip(&times) {
            acc.push(t.time.as_secs_f64() * 1e3);
        }
    }
    for (r, mut ms) in rows.iter_mut().zip(samples) {
        r.ms = crate::bench::median(&mut ms);
    }
    Ok(rows)
}

fn row(index: usize, t: &NodeTime, bound: &dyn Fn(usize) -> Option<f64>) -> NodeProfile {
    NodeProfile {
        node: t.node.clone(),
        op: t.op.clone(),
        compiled: t.compiled,
        ms: 0.0,
        bound_ms: bound(index),
    }
}

/// Prints the profile: time per op type, then the slowest nodes (the first
/// 15, or `$KILN_PROFILE_TOP`) with their distance from the roofline.
pub fn print_node_profile(rows: &[NodeProfile]) {
    let all: f64 = rows.iter().map(|r| r.ms).sum();
    let mut by_op: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for r in rows {
        let e = by_op.entry(&r.op).or_default();
        e.0 += r.ms;
        e.1 += 1;
    }
    let mut ops: Vec<_> = by_op.into_iter().collect();
    ops.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    println!("profile (per-node median of {REPS} runs, {all:.3} ms in kernels):");
    println!("{:>10} {:>6} {:>6}  op", "ms", "%", "nodes");
    for (op, (ms, n)) in ops {
        println!("{ms:>10.3} {:>6.1} {n:>6}  {op}", 100.0 * ms / all);
    }
    let mut slowest: Vec<&NodeProfile> = rows.iter().collect();
    slowest.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    println!("slowest nodes (x bound: time over the roofline bound):");
    let shown = std::env::var("KILN_PROFILE_TOP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    for r in slowest.into_iter().take(shown) {
        let how = if r.compiled { "kernel" } else { "interpreter" };
        let times = r
            .times_bound()
            .map_or_else(|| "-".to_string(), |x| format!("{x:.1}x"));
        println!(
            "{:>10.3} {:>6.1} {times:>8}  {} {} ({how})",
            r.ms,
            100.0 * r.ms / all,
            r.op,
            r.node
        );
    }
}

//! Prints the groups one planner makes on ONNX models, as op patterns
//! with counts (most frequent first), and its parallel sets.
//!
//! `cargo run --release -p kiln-fuse --example plan_groups -- apollo models/bert/model.onnx ...`

use kiln_fuse::feedback::pattern;
use kiln_fuse::{plan, AcceptAll, FusionGraph, PlanOptions, PlannerKind};
use std::collections::BTreeMap;
use std::path::Path;

fn main() -> kiln_ir::Result<()> {
    let mut args = std::env::args().skip(1);
    let kind: PlannerKind = args
        .next()
        .unwrap_or_default()
        .parse()
        .map_err(kiln_ir::Error::new)?;
    for path in args {
        let model = kiln_onnx::load(Path::new(&path), &Default::default())?;
        let mut g = model.graph;
        kiln_passes::optimize(&mut g, &Default::default())?;
        let fg = FusionGraph::new(&g)?;
        let planned = plan(&g, kind, &AcceptAll, &PlanOptions::default())?;
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for group in &planned.plan.groups {
            let key = format!("{}: {}", group.kind, pattern(&fg, &group.nodes));
            *counts.entry(key).or_default() += 1;
        }
        let mut rows: Vec<(String, usize)> = counts.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        println!("{path} {kind}: {} kernels", planned.plan.kernels());
        for (key, count) in rows {
            println!("{count:>5}  {key}");
        }
        for set in &planned.plan.parallel {
            let kinds: Vec<&str> = set
                .iter()
                .map(|&i| planned.plan.groups[i].kind.as_str())
                .collect();
            println!("parallel: {}", kinds.join(" | "));
        }
    }
    Ok(())
}

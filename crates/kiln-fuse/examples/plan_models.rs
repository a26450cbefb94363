//! Runs every planner on ONNX models (no lowering feedback) and prints
//! kernels, fusion ratio, intermediate bytes and planning time.
//!
//! `cargo run --release -p kiln-fuse --example plan_models -- models/bert/model.onnx ...`

use kiln_fuse::{metrics::metrics, plan, AcceptAll, PlanOptions, PlannerKind};
use std::path::Path;

fn main() -> kiln_ir::Result<()> {
    for path in std::env::args().skip(1) {
        let model = kiln_onnx::load(Path::new(&path), &Default::default())?;
        let mut g = model.graph;
        kiln_passes::optimize(&mut g, &Default::default())?;
        for kind in PlannerKind::ALL {
            let planned = plan(&g, kind, &AcceptAll, &PlanOptions::default())?;
            let m = metrics(&g, &planned.plan);
            println!(
                "{path} {kind:>6}: {} nodes -> {} kernels (ratio {:.2}), {:.1} MB between kernels, {:.3} s {:?}",
                m.primitive_nodes,
                m.kernels,
                m.fusion_ratio,
                m.intermediate_bytes as f64 / 1e6,
                planned.seconds,
                planned.notes
            );
        }
    }
    Ok(())
}

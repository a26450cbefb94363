//! Differential test of the CUDA backend: the CPU backend's random graphs
//! (`kiln-cpu/tests/common/random_graph.rs`) under every fusion planner on
//! the GPU, against the reference interpreter. Needs a GPU: runs only with
//! `KILN_CUDA_TESTS=1` (`scripts/gpu/check.sh` sets it), a no-op elsewhere.
//! `KILN_RANDOM_GRAPHS=N` changes the number of graphs (default 24); a
//! failure prints the graph's text.

#[path = "../../kiln-cpu/tests/common/mod.rs"]
mod common;

use common::random_graph;
use kiln_cuda::{CudaModel, CudaOptions};
use kiln_fuse::PlannerKind;

#[test]
fn every_planner_matches_the_interpreter_on_random_graphs_on_the_gpu() {
    if std::env::var("KILN_CUDA_TESTS").is_err() {
        println!("skipped: set KILN_CUDA_TESTS=1 on a machine with an NVIDIA GPU");
        return;
    }
    for case in random_graph::cases() {
        for fusion in PlannerKind::ALL {
            let name = format!("graph {} under {fusion} on the GPU", case.seed);
            let opts = CudaOptions {
                fusion,
                ..Default::default()
            };
            let fail = |e: kiln_ir::Error| -> ! { panic!("{name}: {e}\n{}", case.text) };
            let model = CudaModel::compile(&case.graph, &opts).unwrap_or_else(|e| fail(e));
            let got = model.run(&case.inputs).unwrap_or_else(|e| fail(e));
            random_graph::check(&case, &got, &name);
        }
    }
}

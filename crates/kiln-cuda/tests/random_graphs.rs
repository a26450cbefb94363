//! Differential test of the CUDA backend: the CPU backend's random graphs
//! (`kiln-cpu/tests/common/random_graph.rs`) under every fusion planner on
//! the GPU, against the reference interpreter. Needs a GPU: runs only with
//! `KILN_CUDA_TESTS=1` (`scripts/gpu/check.sh` sets it), a no-op elsewhere.
//! `KILN_RANDOM_GRAPHS=N` changes the number of graphs (default 24); a
//! failure prints the graph's text.

#[path = "../../kiln-cpu/tests/common/mod.rs"]
mod common;

use common::random_graph::random_graph;
use common::{assert_close, inputs, load};
use kiln_cuda::{CudaModel, CudaOptions};
use kiln_fuse::PlannerKind;

#[test]
fn every_planner_matches_the_interpreter_on_random_graphs_on_the_gpu() {
    if std::env::var("KILN_CUDA_TESTS").is_err() {
        println!("skipped: set KILN_CUDA_TESTS=1 on a machine with an NVIDIA GPU");
        return;
    }
    let count: u64 = std::env::var("KILN_RANDOM_GRAPHS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    for seed in 0..count {
        let text = random_graph(seed);
        let original = load(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let ins = inputs(&original).expect("inputs");
        let want = kiln_interp::run(&original, &ins).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut g = original.clone();
        kiln_passes::optimize(&mut g, &Default::default()).expect("passes");
        for fusion in PlannerKind::ALL {
            let name = format!("graph {seed} under {fusion} on the GPU");
            let opts = CudaOptions {
                fusion,
                ..Default::default()
            };
            let model =
                CudaModel::compile(&g, &opts).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            let got = model
                .run(&ins)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            if let Err(e) = std::panic::catch_unwind(|| assert_close(&got, &want, &name)) {
                eprintln!("{text}");
                std::panic::resume_unwind(e);
            }
        }
    }
}

//! Differential test of every fusion planner: random graphs of
//! element-wise, broadcast, reduction, matmul, convolution, reshape and
//! transpose ops in multi-branch DAGs (plus Softmax and LayerNorm, which
//! the graph passes open into reductions and broadcasts) run on the CPU
//! backend under `none`, `tvm`, `apollo` and `dp`, and must equal the
//! reference interpreter. `KILN_RANDOM_GRAPHS=N` changes the number of
//! graphs (default 24); a failure prints the graph's text.

mod common;

use common::random_graph;
use common::{assert_close, inputs, load};
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_fuse::PlannerKind;

#[test]
fn every_planner_matches_the_interpreter_on_random_graphs() {
    let (mut count, mut fused_groups, mut prologues, mut concurrent_blocks) = (0, 0, 0, 0);
    for case in random_graph::cases() {
        count += 1;
        let (g, text, seed) = (&case.graph, &case.text, case.seed);
        for fusion in PlannerKind::ALL {
            let opts = CpuOptions {
                threads: 2,
                fusion,
                ..Default::default()
            };
            let name = format!("graph {seed} under {fusion}");
            let model =
                CompiledModel::compile(g, &opts).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            fused_groups += model
                .report
                .fusion
                .plan
                .groups
                .iter()
                .filter(|g| g.nodes.len() > 1)
                .count();
            prologues += prologue_groups(g, &model.report.fusion.plan);
            concurrent_blocks += model.report.concurrent_blocks;
            let got = model
                .run(&case.inputs)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            random_graph::check(&case, &got, &name);
        }
    }
    // The test must exercise fusion, not only single-node kernels.
    eprintln!(
        "{count} graphs, {fused_groups} fused groups ({prologues} with a prologue) and {concurrent_blocks} concurrent blocks over all planners"
    );
    assert!(fused_groups > count, "only {fused_groups} fused groups");
    assert!(
        prologues > 0,
        "no group fused a prologue into a matmul/convolution"
    );
}

/// Groups in which a matmul or convolution reads a value another member
/// computes (a prologue).
fn prologue_groups(g: &kiln_ir::Graph, plan: &kiln_fuse::Plan) -> usize {
    let producers = g.producers();
    let contraction =
        |n: usize| matches!(g.nodes[n].op.as_str(), "MatMul" | "Conv" | "ChannelsLast");
    plan.groups
        .iter()
        .filter(|group| {
            group.nodes.iter().any(|&n| {
                contraction(n)
                    && g.nodes[n]
                        .inputs
                        .iter()
                        .flatten()
                        .any(|v| producers[v.index()].is_some_and(|p| group.nodes.contains(&p)))
            })
        })
        .count()
}

/// APOLLO's parallelism stitching on the CPU: the independent transposes
/// of a multi-head pattern run as one concurrent block, with the same
/// results as the interpreter.
#[test]
fn parallel_branches_run_concurrently() {
    let text = r#"graph "heads" opsets [""=18] {
  input %x: f32[8,16,32]
  node "t1" %a: f32[32,16,8] = Transpose(%x) {perm=[2,1,0]}
  node "t2" %b: f32[16,8,32] = Transpose(%x) {perm=[1,0,2]}
  node "t3" %c: f32[8,32,16] = Transpose(%x) {perm=[0,2,1]}
  output %a, %b, %c
}"#;
    let g = load(text).unwrap();
    let ins = inputs(&g).unwrap();
    let want = kiln_interp::run(&g, &ins).unwrap();
    let opts = CpuOptions {
        threads: 2,
        fusion: PlannerKind::Apollo,
        ..Default::default()
    };
    let model = CompiledModel::compile(&g, &opts).unwrap();
    assert_eq!(
        model.report.concurrent_blocks, 1,
        "{:?}",
        model.report.fusion.plan
    );
    let got = model.run(&ins).unwrap();
    assert_close(&got, &want, "heads").unwrap();
}

//! The full default pipeline keeps every graph's results: each case graph
//! under `tests/cases` and the CLI's embedded MobileNetV2 run on the
//! reference interpreter before and after optimization, on the same
//! pseudo-random inputs, and must agree (to float reassociation).

mod common;

use kiln_ir::Graph;
use kiln_passes::{optimize, Options};
use std::path::Path;

fn deterministic(g: &Graph) -> bool {
    g.nodes
        .iter()
        .all(|n| kiln_ops::registry::lookup(&n.domain, &n.op).is_some_and(|op| op.deterministic()))
}

fn check_same_results(mut g: Graph, what: &str) {
    let inputs = common::random_inputs(&g, what.len() as u64).expect("inputs");
    let before = kiln_interp::run(&g, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    let opts = Options {
        verify_each: true,
        ..Options::default()
    };
    let report = optimize(&mut g, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(report.converged, "{what}: no fixed point\n{report}");
    let after = kiln_interp::run(&g, &inputs).unwrap_or_else(|e| panic!("{what}: after: {e}"));
    common::assert_close(&before, &after, what);
}

#[test]
fn pipeline_keeps_case_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut checked = 0;
    for dir in std::fs::read_dir(&root).expect("cases dir") {
        for case in std::fs::read_dir(dir.expect("entry").path()).expect("pass dir") {
            let path = case.expect("entry").path();
            if path.extension().is_none_or(|e| e != "kiln") {
                continue;
            }
            let src = std::fs::read_to_string(&path).expect("read case");
            let g = common::load(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if deterministic(&g) {
                check_same_results(g, &path.display().to_string());
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} cases checked");
}

#[test]
fn pipeline_keeps_mobilenet_results() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-cli/assets/default.onnx");
    let model = kiln_onnx::load(&path, &Default::default()).expect("load default model");
    check_same_results(model.graph, "default.onnx");
}

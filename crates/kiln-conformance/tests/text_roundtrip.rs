//! Every node-test model that imports prints in kiln's textual IR and parses
//! back to a graph that prints identically and still verifies: the text form
//! covers everything the importer produces (subgraphs, captures, attribute
//! kinds, dtypes).

use kiln_conformance::{cases, data_sets, test_dir};
use kiln_ir::text::{parse, print};

#[test]
fn imported_node_test_models_round_trip_through_text() {
    let dir = test_dir();
    let mut checked = 0;
    for case in cases(&dir).expect("ONNX node tests not found; set KILN_ONNX_NODE_TESTS") {
        let case_dir = dir.join(&case);
        let model = case_dir.join("model.onnx");
        let Ok(sets) = data_sets(&case_dir) else {
            continue;
        };
        let Ok(proto) = kiln_onnx::decode_proto(&model) else {
            continue;
        };
        let mut opts = kiln_onnx::ImportOptions::default();
        if let Some(set) = sets.first() {
            for (n, t) in kiln_onnx::graph_input_names(&proto).iter().zip(&set.inputs) {
                opts.input_shapes.insert(n.clone(), t.shape.clone());
            }
        }
        let Ok(m) = kiln_onnx::load(&model, &opts) else {
            continue;
        };
        let text = print(&m.graph);
        let back = parse(&text).unwrap_or_else(|e| panic!("{case}: {e}\n{text}"));
        assert_eq!(print(&back), text, "{case} does not round-trip");
        kiln_ir::verify::verify(&back)
            .unwrap_or_else(|e| panic!("{case}: parsed graph does not verify: {e}"));
        checked += 1;
    }
    assert!(checked > 1500, "only {checked} models imported");
}

//! Models the fuzzers found (`fuzz/regressions/onnx_import/`), each once a
//! panic in import: now an error or a verified graph.

use std::path::Path;

#[test]
fn onnx_import_regressions_import_or_fail_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/onnx_import");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let bytes = bytes::Bytes::from(std::fs::read(entry.path()).unwrap());
        // Either answer is fine; a panic fails the test, also one an op's
        // definition raised and inference turned into an error (under the
        // fuzzer a panic aborts).
        if let Err(e) = kiln_onnx::load_bytes(bytes, None, &kiln_onnx::ImportOptions::default()) {
            let message = e.to_string();
            assert!(
                !message.contains("(panic)"),
                "{}: {message}",
                entry.path().display()
            );
        }
        seen += 1;
    }
    assert!(seen > 0, "no regression inputs in {}", dir.display());
}

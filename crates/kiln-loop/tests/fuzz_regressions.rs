//! Inputs the fuzzers found (`fuzz/regressions/<target>/`), each once a
//! crash: the parsers now answer them with a result, and what parses
//! prints and parses back the same.

use std::path::Path;

fn regressions(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn loop_text_regressions_parse_or_fail_cleanly() {
    for (name, bytes) in regressions("loop_text") {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        if let Ok(k) = kiln_loop::parse_kernel(text) {
            let printed = k.to_string();
            let again = kiln_loop::parse_kernel(&printed).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(again.to_string(), printed, "{name}");
        }
    }
}

#[test]
fn graph_text_regressions_parse_or_fail_cleanly() {
    for (name, bytes) in regressions("graph_text") {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        if let Ok(g) = kiln_ir::text::parse(text) {
            let printed = kiln_ir::text::print(&g);
            let again = kiln_ir::text::parse(&printed).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(kiln_ir::text::print(&again), printed, "{name}");
        }
    }
}

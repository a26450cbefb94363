//! Text in, text out: every `tests/graphs/<name>.kiln` is scheduled by
//! GraphTurbo and by the per-layer baseline on `stcp920`, and the two
//! schedules' text must equal `<name>.expected`. `KILN_BLESS=1` rewrites
//! the expected files; `KILN_CASE=part` runs the cases whose name
//! contains `part`.

mod common;

use kiln_dsa::{graphturbo, per_layer, DsaDesc};

#[test]
fn schedule_cases() {
    let bless = std::env::var("KILN_BLESS").is_ok_and(|v| v == "1");
    let filter = std::env::var("KILN_CASE").unwrap_or_default();
    let desc = DsaDesc::preset("stcp920").unwrap();
    let mut failures = Vec::new();
    for case in common::cases() {
        let name = case.file_stem().unwrap().to_string_lossy().to_string();
        if !name.contains(&filter) {
            continue;
        }
        let g = common::graph(&name);
        let turbo = graphturbo(&g, &desc).unwrap_or_else(|e| panic!("{name}: {e}"));
        let layers = per_layer(&g, &desc).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = format!("{turbo}\n{layers}");
        let expected_path = case.with_extension("expected");
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != want {
            failures.push(format!("--- {name}: got\n{got}"));
        }
    }
    assert!(
        failures.is_empty(),
        "schedules differ from the expected text (KILN_BLESS=1 to accept):\n{}",
        failures.join("\n")
    );
}

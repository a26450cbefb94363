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

/// Table 3 in kind on the paper's examples (printed with
/// `--nocapture`): the per-layer baseline keeps every kernel output in
/// DDR; GraphTurbo only the graph's outputs, everything else on-chip.
#[test]
fn table3_in_kind_on_the_paper_examples() {
    let desc = DsaDesc::preset("stcp920").unwrap();
    println!("| graph | per-layer DDR / GB / LB | graphturbo DDR / GB / LB |");
    for case in common::cases() {
        let name = case.file_stem().unwrap().to_string_lossy().to_string();
        let g = common::graph(&name);
        let (base, turbo) = (
            per_layer(&g, &desc).unwrap(),
            graphturbo(&g, &desc).unwrap(),
        );
        let (b, t) = (base.output_counts(), turbo.output_counts());
        println!(
            "| {name} | {} / {} / {} | {} / {} / {} |",
            b.ddr, b.gb, b.lb, t.ddr, t.gb, t.lb
        );
        assert_eq!(
            b.ddr,
            base.instances.len(),
            "{name}: per-layer outputs all in DDR"
        );
        assert_eq!(t.ddr, g.outputs.len(), "{name}: only graph outputs in DDR");
    }
}

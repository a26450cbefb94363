//! The differential fuzzer as a property test (issue 24): random graphs
//! from `kiln_conformance::random_graph` (seeds `0..N`,
//! `$KILN_DIFFERENTIAL_CASES`, default 300) run on the reference
//! interpreter and on the CPU backend, and every outcome must be agreement
//! or a skip (the interpreter rejected the case). To stay fast each seed
//! runs two planners: `apollo` (the default) and one of `none`, `tvm`,
//! `dp` in rotation; every tenth seed runs with two threads (OpenMP).
//! A failure prints the minimised reproducer. At least 70% of the cases
//! must not be skipped, so a generator that drifts into invalid graphs
//! fails here rather than testing nothing.
//!
//! The long campaign over all planners is
//! `cargo run --release -p kiln-conformance --example differential`.
//! Reproducers of fixed bugs live in `tests/differential_regressions/`
//! and are replayed under every planner.

use kiln_conformance::differential::{self, CheckOptions, Outcome};
use kiln_conformance::random_graph::GenOptions;
use kiln_fuse::PlannerKind;
use std::path::Path;

/// The planners and threads of seed `seed`.
fn options(seed: u64) -> CheckOptions {
    let other = [PlannerKind::None, PlannerKind::Tvm, PlannerKind::Dp][seed as usize % 3];
    CheckOptions {
        planners: vec![PlannerKind::Apollo, other],
        threads: if seed % 10 == 9 { 2 } else { 1 },
    }
}

#[test]
fn random_graphs_agree_with_the_interpreter() {
    let count: u64 = std::env::var("KILN_DIFFERENTIAL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let gen = GenOptions::default();
    let (mut skipped, mut failures) = (0, Vec::new());
    for seed in 0..count {
        let opts = options(seed);
        let (g, _, outcome) = differential::run_seed(seed, &gen, &opts);
        match &outcome {
            Outcome::Agree => {}
            Outcome::Skipped(_) => skipped += 1,
            finding => {
                let text = differential::reproducer(&g, seed, &opts, finding);
                eprintln!("seed {seed}: {finding}\n{text}");
                failures.push(seed);
            }
        }
    }
    eprintln!(
        "{count} cases, {skipped} skipped, {} findings",
        failures.len()
    );
    assert!(failures.is_empty(), "findings at seeds {failures:?}");
    assert!(
        skipped * 10 <= count * 3,
        "{skipped} of {count} cases skipped: the generator makes graphs the interpreter rejects"
    );
}

#[test]
fn fixed_findings_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential_regressions");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "kiln"));
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let opts = CheckOptions {
            planners: PlannerKind::ALL.to_vec(),
            threads: 2,
        };
        let outcome = differential::replay(&text, &opts)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(outcome, Outcome::Agree, "{}\n{text}", path.display());
    }
}

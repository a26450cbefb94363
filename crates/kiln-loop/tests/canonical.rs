//! PANAMERA §3.1's canonical forms (`kiln_loop::canonical`), text in, text
//! out: each `tests/canonical/*.loops` kernel (the paper's Figure 4a and
//! reductions of its Table 2 in each form) canonicalized with both
//! coalescings, printed with its form, schedule and resulting kernel, and
//! compared with the `.expected` file beside it (`KILN_BLESS=1` rewrites
//! them; `KILN_CASE=substring` runs matching cases).

use kiln_loop::canonical::{canonicalize, Coalescing};
use kiln_loop::{apply, parse_kernel};
use std::path::Path;

fn canonical_text(source: &str) -> String {
    let text: String = source
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let k = parse_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut out = String::new();
    for coalescing in [Coalescing::Consecutive, Coalescing::Full] {
        let c = canonicalize(&k, coalescing);
        let form = c
            .form
            .map_or("no consecutive form".to_string(), |f| f.to_string());
        let schedule: Vec<String> = c.schedule.0.iter().map(|d| d.to_string()).collect();
        let kernel = apply(&k, &c.schedule).unwrap_or_else(|e| panic!("{e}"));
        out.push_str(&format!(
            "# {coalescing:?}: {form}\nschedule: [{}]\n{kernel}\n",
            schedule.join(", ")
        ));
    }
    out
}

#[test]
fn canonical_forms() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/canonical");
    let bless = std::env::var("KILN_BLESS").is_ok_and(|v| v == "1");
    let filter = std::env::var("KILN_CASE").unwrap_or_default();
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/canonical")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "loops"))
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no cases in {}", dir.display());
    let mut failures = Vec::new();
    for case in cases {
        let name = case.display().to_string();
        if !name.contains(&filter) {
            continue;
        }
        let got = canonical_text(&std::fs::read_to_string(&case).expect("read case"));
        let expected = case.with_extension("expected");
        if bless {
            std::fs::write(&expected, &got).expect("write expected");
        } else if std::fs::read_to_string(&expected).unwrap_or_default() != got {
            failures.push(format!("{name}:\n{got}"));
        }
    }
    assert!(
        failures.is_empty(),
        "differs from .expected (KILN_BLESS=1 to accept):\n{}",
        failures.join("\n")
    );
}

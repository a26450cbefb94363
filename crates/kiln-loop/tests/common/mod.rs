//! Text-in, text-out case runner shared by the loop IR's pass tests.

use std::path::Path;

/// Renders every `tests/DIR/*.loops` case with `render` (given the case's
/// text) and compares it with the `.expected` file beside it:
/// `KILN_BLESS=1` rewrites them, `KILN_CASE=substring` runs matching cases.
pub fn check_cases(dir: &str, render: &dyn Fn(&str) -> String) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir);
    let bless = std::env::var("KILN_BLESS").is_ok_and(|v| v == "1");
    let filter = std::env::var("KILN_CASE").unwrap_or_default();
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
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
        let got = render(&std::fs::read_to_string(&case).expect("read case"));
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

/// The case's kernel text: its lines without the `#` comments.
pub fn kernel_text(source: &str) -> String {
    source
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

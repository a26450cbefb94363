//! Text-in/text-out tests of the passes. `tests/cases/<pass>/<name>.kiln`
//! holds an input graph in kiln's textual IR; `<name>.expected` holds the
//! graph printed after running `<pass>` on it to a fixed point, verified
//! after every run. A first line `# passes: a, b` runs those passes
//! instead. `KILN_BLESS=1 cargo test -p kiln-passes` rewrites every
//! expected file; `KILN_CASE=substring` runs only matching cases.

mod common;

use kiln_passes::{optimize, passes, Options};
use std::path::{Path, PathBuf};

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    v.sort();
    v
}

/// The passes a case runs: its `# passes:` header, else its directory's.
fn case_passes(src: &str, dir_pass: &str) -> Vec<String> {
    match src.lines().next().and_then(|l| l.strip_prefix("# passes:")) {
        Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
        None => vec![dir_pass.to_string()],
    }
}

fn run_case(path: &Path, dir_pass: &str) -> kiln_ir::Result<String> {
    let src = std::fs::read_to_string(path)?;
    let mut g = common::load(&src)?;
    let opts = Options {
        passes: Some(case_passes(&src, dir_pass)),
        verify_each: true,
        ..Options::default()
    };
    let report = optimize(&mut g, &opts)?;
    assert!(report.converged, "{}: no fixed point", path.display());
    Ok(kiln_ir::text::print(&g))
}

#[test]
fn pass_cases() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let bless = std::env::var("KILN_BLESS").is_ok_and(|v| v == "1");
    let filter = std::env::var("KILN_CASE").unwrap_or_default();
    let mut failures = Vec::new();
    for dir in sorted_entries(&root) {
        let pass = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        assert!(
            passes::by_name(&pass).is_ok(),
            "{}: not a pass",
            dir.display()
        );
        let cases: Vec<PathBuf> = sorted_entries(&dir)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "kiln"))
            .collect();
        assert!(cases.len() >= 2, "{pass}: needs at least 2 cases");
        for case in cases
            .iter()
            .filter(|c| c.to_string_lossy().contains(&filter))
        {
            let expected_path = case.with_extension("expected");
            let got = match run_case(case, &pass) {
                Ok(text) => text,
                Err(e) => {
                    failures.push(format!("{}: {e}", case.display()));
                    continue;
                }
            };
            if bless {
                std::fs::write(&expected_path, &got).expect("write expected file");
                continue;
            }
            let want = std::fs::read_to_string(&expected_path).unwrap_or_default();
            if got != want {
                failures.push(format!(
                    "{}: output differs from {}\n--- got ---\n{got}--- expected ---\n{want}",
                    case.display(),
                    expected_path.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

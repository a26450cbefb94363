//! Outputs written as parts of a larger tensor (`kiln_loop::write_as_part`),
//! text in, text out: each `tests/write_as_part/*.loops` kernel, with its
//! part given on a `# part: buf=B whole=[..] axis=A offset=O` line, is
//! rewritten and printed (or `refused`), and compared with the
//! `.expected` file beside it (`KILN_BLESS=1` rewrites them;
//! `KILN_CASE=substring` runs matching cases).

use kiln_loop::parse_kernel;
use kiln_loop::write_as_part::{write_as_part, Part};
use std::path::Path;

/// The `# part:` line's buffer and part.
fn part_of(source: &str) -> (usize, Part) {
    let line = source
        .lines()
        .find_map(|l| l.strip_prefix("# part: "))
        .expect("a '# part:' line");
    let field = |name: &str| -> &str {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name}= in '{line}'"))
    };
    let number = |name: &str| field(name).parse::<usize>().expect("a number");
    let whole = field("whole")
        .trim_matches(['[', ']'])
        .split(',')
        .map(|d| d.parse().expect("a dimension"))
        .collect();
    let part = Part {
        whole,
        axis: number("axis"),
        offset: number("offset"),
    };
    (number("buf"), part)
}

fn rewritten(source: &str) -> String {
    let (buf, part) = part_of(source);
    let text: String = source
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let k = parse_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    match write_as_part(&k, buf, &part) {
        Some(k) => format!("{k}\n"),
        None => "refused\n".to_string(),
    }
}

#[test]
fn outputs_written_as_parts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/write_as_part");
    let bless = std::env::var("KILN_BLESS").is_ok_and(|v| v == "1");
    let filter = std::env::var("KILN_CASE").unwrap_or_default();
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/write_as_part")
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
        let got = rewritten(&std::fs::read_to_string(&case).expect("read case"));
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

//! Outputs written as parts of a larger tensor (`kiln_loop::write_as_part`),
//! text in, text out: each `tests/write_as_part/*.loops` kernel, with its
//! part given on a `# part: buf=B whole=[..] axis=A offset=O` line, is
//! rewritten and printed (or `refused`), and compared with the
//! `.expected` file beside it (`KILN_BLESS=1` rewrites them;
//! `KILN_CASE=substring` runs matching cases).

mod common;

use kiln_loop::parse_kernel;
use kiln_loop::write_as_part::{write_as_part, Part};

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
    let text = common::kernel_text(source);
    let k = parse_kernel(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    match write_as_part(&k, buf, &part) {
        Some(k) => format!("{k}\n"),
        None => "refused\n".to_string(),
    }
}

#[test]
fn outputs_written_as_parts() {
    common::check_cases("write_as_part", &rewritten);
}

//! PANAMERA §3.1's canonical forms (`kiln_loop::canonical`), text in, text
//! out: each `tests/canonical/*.loops` kernel (the paper's Figure 4a and
//! reductions of its Table 2 in each form) canonicalized with both
//! coalescings, printed with its form, schedule and resulting kernel, and
//! compared with the `.expected` file beside it (`KILN_BLESS=1` rewrites
//! them; `KILN_CASE=substring` runs matching cases).

mod common;

use kiln_loop::canonical::{canonicalize, Coalescing};
use kiln_loop::{apply, parse_kernel};

fn canonical_text(source: &str) -> String {
    let text = common::kernel_text(source);
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
    common::check_cases("canonical", &canonical_text);
}

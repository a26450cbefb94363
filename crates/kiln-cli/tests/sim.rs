//! `kiln sim`: the embedded default model on `stcp920` under GraphTurbo
//! and the per-layer baseline (JSON fields and what they must show), the
//! text summary and HTML timeline, and clear errors for bad input.

mod common;

use common::{kiln, tmp};
use serde_json::Value;

/// `kiln sim` on the default model with `extra` arguments, as JSON.
fn sim_json(extra: &[&str]) -> Value {
    let mut args = vec!["sim", "--backend", "dsa:stcp920", "--json"];
    args.extend_from_slice(extra);
    let o = kiln(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn number(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} missing in {v}"))
}

#[test]
fn json_has_the_model_totals_and_per_kernel_entries() {
    let turbo = sim_json(&[]);
    let base = sim_json(&["--schedule", "per-layer"]);
    for v in [&turbo, &base] {
        let kernels = number(v, "kernels");
        let per_kernel = v["per_kernel"].as_array().unwrap();
        assert_eq!(per_kernel.len() as u64, kernels);
        let counted: u64 = ["outputs_in_ddr", "outputs_in_gb", "outputs_in_lb"]
            .iter()
            .map(|f| number(v, f))
            .sum();
        assert_eq!(counted, kernels);
        let ddr: u64 = per_kernel.iter().map(|k| number(k, "ddr_bytes")).sum();
        assert_eq!(ddr, number(v, "ddr_bytes"));
        assert!(number(v, "ddr_bytes") >= number(v, "compulsory_ddr_bytes"));
        assert!(number(v, "gb_bytes") > 0 || v["schedule"] == "per-layer");
        assert!(number(v, "lb_bytes") > 0 && number(v, "cycles") > 0);
    }
    assert_eq!(base["schedule"], "per-layer");
    assert_eq!(number(&base, "outputs_in_ddr"), number(&base, "kernels"));
    // GraphTurbo keeps all but the graph's output on chip.
    assert_eq!(number(&turbo, "outputs_in_ddr"), 1);
    assert!(number(&turbo, "ddr_bytes") < number(&base, "ddr_bytes"));
    assert!(number(&turbo, "cycles") < number(&base, "cycles"));
    assert_eq!(turbo["across_layer"], true);
    assert_eq!(base["across_layer"], false);
}

#[test]
fn summary_and_html_timeline() {
    let html = tmp("sim").join("report.html");
    let o = kiln(&[
        "sim",
        "--schedule",
        "astitch-like",
        "-o",
        html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("sim astitch-like on stcp920") && stdout.contains("compulsory"),
        "{stdout}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<svg") && page.contains("<rect") && !page.contains("http://www.w3.org/1999")
    );
    assert!(!page.contains("<script src") && !page.contains("<link"));
}

#[test]
fn bad_input_is_a_clear_error() {
    let cases: [(&[&str], &str); 4] = [
        (&["sim", "--backend", "dsa:tpu"], "unknown DSA preset 'tpu'"),
        (&["sim", "--backend", "dsa:/no/such.toml"], "/no/such.toml"),
        (&["sim", "--schedule", "tvm"], "unknown schedule 'tvm'"),
        (&["sim", "/no/model.onnx"], "/no/model.onnx"),
    ];
    for (args, message) in cases {
        let o = kiln(args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            stderr.contains(message) && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
    }
}

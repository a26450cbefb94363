//! End-to-end tests of the `kiln` binary: the embedded default model against
//! onnxruntime's output (saved by scripts/models/make_default_model.py),
//! `info --json`, and one-line errors with a non-zero exit status.

mod common;

use common::{assets, kiln, tmp};
use kiln_cli::npy;
use std::process::Command;

/// max |kiln - ort| <= 1e-3 * max |ort| + 1e-5 (the model-suite criterion).
fn assert_matches(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        err <= 1e-3 * scale + 1e-5,
        "max error {err} vs output scale {scale}"
    );
}

#[test]
fn default_model_matches_onnxruntime() {
    let out = tmp("default");
    let input = assets().join("default_input.npy");
    let o = kiln(&[
        "run",
        "-i",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("embedded default model") && stdout.contains("output 0"),
        "{stdout}"
    );
    let got = npy::read(&out.join("output_0.npy")).unwrap();
    let want = npy::read(&assets().join("default_output.npy")).unwrap();
    assert_eq!(got.shape, want.shape);
    assert_matches(
        got.as_slice::<f32>().unwrap(),
        want.as_slice::<f32>().unwrap(),
    );
}

#[test]
fn run_without_inputs_uses_random_ones() {
    let model = assets().join("default.onnx");
    let o = kiln(&["run", model.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn info_json_reports_shapes_and_flops() {
    let model = assets().join("default.onnx");
    let o = kiln(&["info", model.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["inputs"][0]["shape"], serde_json::json!([1, 3, 96, 96]));
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([1, 10]));
    // initializer elements, as counted by the onnx package
    assert_eq!(v["parameters"], 401_898);
    let gflops = v["gflops"].as_f64().unwrap();
    assert!((gflops - 0.021).abs() < 0.002, "{gflops}");
    assert!(v["op_histogram"]["Conv"].as_u64().unwrap() > 40);
    // After the passes every node is primitive: no compound (Clip, Flatten,
    // Gemm, GlobalAveragePool) or shape computation is left.
    assert_eq!(v["nodes_after_passes"], v["primitive_nodes"]);
    assert!(v["nodes_imported"].as_u64().unwrap() > 0);
    for op in ["Clip", "Gemm", "Flatten", "GlobalAveragePool", "Shape"] {
        assert!(
            v["op_histogram"].get(op).is_none(),
            "{op} left after passes"
        );
    }
}

#[test]
fn errors_are_one_line_with_nonzero_status() {
    for args in [
        vec!["run", "/no/such/model.onnx"],
        vec!["info", "/no/such/model.onnx"],
        vec!["run", "-i", "/no/such/input.npy"],
        vec!["run", "-i", "x.txt"],
        vec!["explain", "/no/such/model.onnx"],
        vec!["bench", "--backend", "reference", "--versus", "none"],
    ] {
        let o = kiln(&args);
        assert!(!o.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.starts_with("error: ") && err.trim_end().lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    let bad = tmp("bad").join("bad.onnx");
    std::fs::write(&bad, b"this is not onnx").unwrap();
    let o = kiln(&["info", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("bad.onnx"), "{err}");
}

#[test]
fn bench_versus_alternates_two_plans() {
    let o = kiln(&[
        "bench", "--versus", "none", "--runs", "6", "--warmup", "1", "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(
        (j["fusion"].as_str(), j["versus"].as_str()),
        (Some("apollo"), Some("none"))
    );
    assert_eq!(j["pairs"], 6);
    assert!(j["faster_pairs"].as_u64().is_some_and(|f| f <= 6), "{j}");
    for key in ["median_ms", "versus_median_ms", "ratio_median"] {
        assert!(j[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {j}");
    }
}

#[test]
fn explain_reports_consistent_json_and_draws_the_graph() {
    let model = assets().join("default.onnx");
    let html = tmp("explain").join("report.html");
    for planner in ["tvm", "apollo"] {
        let o = kiln(&[
            "explain",
            model.to_str().unwrap(),
            "--fusion",
            planner,
            "--json",
            "-o",
            html.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for key in [
            "planner",
            "primitive_nodes",
            "kernels",
            "fusion_ratio",
            "intermediate_bytes",
            "groups",
            "feedback",
            "planning_s",
        ] {
            assert!(v.get(key).is_some(), "missing {key}: {v}");
        }
        assert_eq!(v["planner"], planner);
        let primitive = v["primitive_nodes"].as_u64().unwrap();
        let kernels = v["kernels"].as_u64().unwrap();
        assert!(kernels >= 1 && kernels <= primitive, "{v}");
        let ratio = v["fusion_ratio"].as_f64().unwrap();
        assert!((ratio - primitive as f64 / kernels as f64).abs() < 1e-9);
        let groups = v["groups"].as_array().unwrap();
        assert_eq!(groups.len() as u64, kernels);
        let grouped: usize = groups
            .iter()
            .map(|g| g["nodes"].as_array().unwrap().len())
            .sum();
        assert_eq!(grouped as u64, primitive);
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(page.contains("<svg") && page.contains("</html>"));
    }
    // tvm fuses the conv epilogues of MobileNetV2.
    let o = kiln(&[
        "explain",
        model.to_str().unwrap(),
        "--fusion",
        "tvm",
        "--explain-feedback",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.starts_with("planner tvm: "),
        "{text}"
    );
    assert!(
        text.contains("conv") && text.contains("feedback:"),
        "{text}"
    );
}

#[test]
fn explain_to_an_unwritable_path_is_an_error() {
    let model = assets().join("default.onnx");
    let o = kiln(&[
        "explain",
        model.to_str().unwrap(),
        "-o",
        "/no/such/dir/report.html",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "should fail");
    assert!(
        err.starts_with("error: cannot write /no/such/dir/report.html"),
        "{err}"
    );
}

#[test]
fn compile_emits_a_plan_that_parses_back_and_an_aot_directory() {
    let model = assets().join("default.onnx");
    let model = model.to_str().unwrap();
    let dir = tmp("emit");
    let d = dir.to_str().unwrap();
    let out = kiln(&["compile", model, "--emit", "plan", "-o", d]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.join("model.plan")).unwrap();
    let plan = kiln_exec::parse_plan(&text).unwrap();
    assert_eq!(plan.to_string(), text);
    assert!(plan.kernels().count() > 10 && plan.arena_bytes >= plan.arena_bound);
    let aot = dir.join("aot");
    let out = kiln(&[
        "compile",
        model,
        "--emit",
        "aot",
        "-o",
        aot.to_str().unwrap(),
        "--name",
        "mnv2",
        "--cpu",
        "x86-64-v3",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header = std::fs::read_to_string(aot.join("mnv2.h")).unwrap();
    assert!(header.contains("#define MNV2_VECTOR_BYTES 32"), "{header}");
    assert!(
        header.contains("#define MNV2_INPUT_0_SHAPE {1, 3, 96, 96}"),
        "{header}"
    );
    for file in ["mnv2.c", "mnv2.weights.bin", "main.c", "Makefile"] {
        assert!(aot.join(file).exists(), "{file} missing");
    }
    let bad = kiln(&[
        "compile", model, "--emit", "aot", "-o", d, "--cpu", "pentium",
    ]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("unknown CPU preset 'pentium'"),
        "{err}"
    );
    let bad = kiln(&[
        "compile", model, "--emit", "aot", "-o", d, "--name", "9lives",
    ]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("not a C identifier"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sizes_over_the_memory_budget_are_one_line_errors() {
    let model = assets().join("default.onnx");
    let out = kiln(&["run", model.to_str().unwrap(), "--max-memory", "64K"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("graph input 'input' needs 110592 bytes") && err.contains("65536"),
        "{err}"
    );
    let bad = kiln(&["run", model.to_str().unwrap(), "--max-memory", "lots"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("'lots' is not a size"));
}

#[test]
fn peak_reports_compute_and_memory_bandwidth() {
    let out = kiln(&["peak", "--json", "--threads", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON object");
    for key in ["gflops", "triad_gbps"] {
        let x = v[key].as_f64().unwrap_or(0.0);
        // A C compiler is needed for either figure; without one `peak` fails above.
        assert!(x > 0.1, "{key} = {x} in {text}");
    }
}

#[test]
fn tune_files_a_choice_for_every_gemm_kernel_that_later_compiles_read() {
    let cache = tmp("tune-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(args)
            .env("KILN_CACHE_DIR", &cache)
            .output()
            .expect("kiln runs")
    };
    // A zero budget measures the default only: every kernel files `default`.
    let out = run(&["tune", "--budget", "0", "--runs", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kernels: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("tuning ")?.split(' ').next()?.parse().ok())
        .expect("a 'tuning N distinct gemm kernels' line");
    let file = std::fs::read_dir(cache.join("tuning"))
        .expect("a tuning directory")
        .flatten()
        .next()
        .expect("a tuning file")
        .path();
    let filed = std::fs::read_to_string(&file).expect("readable");
    let lines: Vec<&str> = filed.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(
        kernels > 0 && lines.len() == kernels,
        "{kernels} kernels, file:\n{filed}"
    );
    assert!(lines.iter().all(|l| l.ends_with(" default")));
    assert!(
        run(&["run"]).status.success(),
        "a compile reading the tunings runs"
    );
    let bad = run(&["tune", "--budget", "soon"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not a duration"));
    let _ = std::fs::remove_dir_all(&cache);
}

//! `--backend dsa:…`: the embedded default model through the DSA emulator
//! matches the interpreter (and onnxruntime), `bench` reports DMA counts,
//! a description file works, and bad target strings are clear errors.

mod common;

use common::{assets, kiln, tmp};
use kiln_cli::npy;
use std::path::Path;

/// The default model's output on `backend`.
fn default_output(backend: &str) -> (Vec<f32>, String) {
    let out = tmp(&backend.replace([':', '/', '.'], "_"));
    let input = assets().join("default_input.npy");
    let o = kiln(&[
        "run",
        "--backend",
        backend,
        "-i",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = npy::read(&out.join("output_0.npy")).unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    (t.as_slice::<f32>().unwrap().to_vec(), stdout)
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(want) {
        assert!((a - b).abs() <= 1e-4 + 1e-4 * b.abs(), "{a} vs {b}");
    }
}

#[test]
fn the_default_model_on_stcp920_matches_the_interpreter() {
    let (want, _) = default_output("reference");
    let (got, stdout) = default_output("dsa:stcp920");
    assert_close(&got, &want);
    assert!(
        stdout.contains("0 on the interpreter") && stdout.contains("DDR->LB"),
        "{stdout}"
    );
    let ort = npy::read(&assets().join("default_output.npy")).unwrap();
    assert_close(&got, ort.as_slice::<f32>().unwrap());
}

#[test]
fn a_description_file_is_a_target_and_bench_counts_dma() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-dsa/presets/sunway-cg.toml"),
    )
    .unwrap()
    .replace("bytes = 65536", "bytes = 16384");
    let file = tmp("desc").join("small.toml");
    std::fs::write(&file, text).unwrap();
    let target = format!("dsa:{}", file.display());
    let o = kiln(&["bench", "--backend", &target, "--runs", "2", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(j["backend"].as_str(), Some(target.as_str()));
    let dma = &j["dma"];
    for kind in ["ddr_to_lb", "lb_to_ddr"] {
        assert!(dma[kind]["bytes"].as_u64().is_some_and(|b| b > 0), "{j}");
    }
    // Sunway has no GB.
    assert_eq!(dma["ddr_to_gb"]["bytes"].as_u64(), Some(0), "{j}");
}

#[test]
fn bad_targets_are_clear_errors() {
    for (backend, says) in [
        (
            "dsa:nope",
            "unknown DSA preset 'nope' (known: stcp920, goya-like, sunway-cg)",
        ),
        ("dsa:/no/such.toml", "/no/such.toml: cannot read"),
        ("gpu", "unknown backend 'gpu'"),
    ] {
        let o = kiln(&["run", "--backend", backend]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(says),
            "{backend}: {err}"
        );
    }
}

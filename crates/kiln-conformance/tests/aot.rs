//! Ahead-of-time exports, built by the system C compiler and run by their
//! example program: a spread of node-test models against their expected
//! outputs, the embedded default model against the reference interpreter
//! (also cross-compiled for aarch64 and run under qemu), the model code
//! free of allocation, loading and file I/O, and hostile names kept out of
//! the C.

use kiln_conformance::aot::Aot;
use kiln_conformance::{cases, compare, run_case, test_dir};
use kiln_ir::{npy, Tensor};
use std::path::{Path, PathBuf};
use std::process::Command;

/// How many node-test models must export, build, run and match.
const MIN_NODE_MODELS: usize = 50;

fn has_compiler() -> bool {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let found = Command::new(&cc).arg("--version").output().is_ok()
        && Command::new("make").arg("--version").output().is_ok();
    if !found {
        eprintln!("note: no C compiler `{cc}` or make; AOT tests skipped");
    }
    found
}

#[test]
fn node_test_models_export_build_and_match() {
    if !has_compiler() {
        return;
    }
    let dir = test_dir();
    let listed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("expected/reference.txt"),
    )
    .expect("expected/reference.txt");
    let passing: std::collections::BTreeSet<&str> = listed.lines().map(str::trim).collect();
    let all: Vec<String> = cases(&dir)
        .expect("node tests")
        .into_iter()
        .filter(|c| passing.contains(c.as_str()))
        .collect();
    // A spread over the whole list (every op family), not its first letters;
    // `KILN_AOT_ALL=1` takes every case (about 10 minutes on 2 cores).
    let stride = match std::env::var_os("KILN_AOT_ALL") {
        Some(_) => 1,
        None => (all.len() / 120).max(1),
    };
    let picked: Vec<&String> = all.iter().step_by(stride).collect();
    let aot = Aot::host();
    let results: Vec<(String, Result<(), String>)> = picked
        .iter()
        .map(|case| (case.to_string(), run_case(&aot, &dir.join(case))))
        .collect();
    let mut matched = 0;
    let mut failures = Vec::new();
    for (case, r) in &results {
        match r {
            Ok(()) => matched += 1,
            // Models with nodes the C backend leaves to the interpreter
            // cannot be exported: that refusal is the expected answer.
            Err(e) if e.contains("cannot export ahead of time") => {}
            Err(e) => failures.push(format!("{case}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "AOT failures:\n{}",
        failures.join("\n")
    );
    assert!(
        matched >= MIN_NODE_MODELS,
        "only {matched} of {} node-test models exported and matched",
        picked.len()
    );
    eprintln!(
        "{matched} of {} node-test models exported, built and matched",
        picked.len()
    );
}

fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-cli/assets")
}

/// The default model, optimized, its input and the interpreter's outputs.
fn default_model() -> (kiln_ir::Graph, Vec<Tensor>, Vec<Tensor>) {
    let model = kiln_onnx::load(&assets().join("default.onnx"), &Default::default())
        .expect("default model");
    let mut g = model.graph;
    kiln_passes::optimize(&mut g, &Default::default()).expect("passes");
    let input = npy::read(&assets().join("default_input.npy")).expect("input");
    let want = kiln_interp::run(&g, std::slice::from_ref(&input)).expect("interpreter");
    (g, vec![input], want)
}

fn export_run_and_compare(aot: &Aot, what: &str) {
    let (g, inputs, want) = default_model();
    let dir = tempfile::tempdir().unwrap();
    let name = aot
        .export_and_build(&g, dir.path())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = aot
        .run_built(dir.path(), &name, &inputs, want.len())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    for (k, (got, want)) in got.iter().zip(&want).enumerate() {
        compare(got, want).unwrap_or_else(|e| panic!("{what}: output {k}: {e}"));
    }
    scan_model_code(dir.path());
}

#[test]
fn default_model_exports_and_matches_the_interpreter() {
    if !has_compiler() {
        return;
    }
    export_run_and_compare(&Aot::host(), "default model (OpenMP)");
    let single = Aot {
        openmp: false,
        weights: kiln_cpu::aot::WeightsMode::Embed,
        ..Aot::host()
    };
    export_run_and_compare(&single, "default model (no OpenMP, embedded weights)");
}

#[test]
fn default_model_builds_warning_free_with_clang() {
    if !has_compiler() || !tool_present("clang", "clang") {
        return;
    }
    for openmp in [true, false] {
        let aot = Aot {
            cc: "clang".into(),
            openmp,
            ..Aot::host()
        };
        export_run_and_compare(&aot, &format!("default model (clang, OpenMP {openmp})"));
    }
}

#[test]
fn default_model_is_clean_under_asan_and_ubsan() {
    if !has_compiler() {
        return;
    }
    let sanitize = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer";
    let aot = Aot {
        cflags: format!("-O1 -g {} -std=c11 {sanitize}", aot_march()),
        ldflags: sanitize.into(),
        ..Aot::host()
    };
    if !sanitizers_build(&aot) {
        eprintln!("note: the C compiler cannot build sanitized programs; test skipped");
        return;
    }
    export_run_and_compare(
        &aot,
        "default model (AddressSanitizer + UndefinedBehaviorSanitizer)",
    );
}

/// The host preset's `-march` flags.
fn aot_march() -> String {
    kiln_cpu::aot::host_preset().desc(1).cflags.join(" ")
}

/// Whether `aot`'s compiler links a sanitized program.
fn sanitizers_build(aot: &Aot) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("probe.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    Command::new(&aot.cc)
        .args(aot.cflags.split_whitespace())
        .arg(&src)
        .arg("-o")
        .arg(dir.path().join("probe"))
        .args(aot.ldflags.split_whitespace())
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether `program` runs; in CI (`CI` set) `.ci/run` installs `package`,
/// so its absence fails there.
fn tool_present(program: &str, package: &str) -> bool {
    let present = Command::new(program).arg("--version").output().is_ok();
    if !present {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs {program} (.ci/run installs {package})"
        );
        eprintln!("note: {program} missing; its test skipped");
    }
    present
}

/// The cross toolchain and emulator.
fn cross_tools() -> bool {
    let present = Command::new("aarch64-linux-gnu-gcc")
        .arg("--version")
        .output()
        .is_ok()
        && Command::new("qemu-aarch64")
            .arg("--version")
            .output()
            .is_ok();
    if !present {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs aarch64-linux-gnu-gcc and qemu-aarch64 (.ci/run installs them)"
        );
        eprintln!("note: aarch64-linux-gnu-gcc or qemu-aarch64 missing; cross test skipped");
    }
    present
}

#[test]
fn default_model_cross_compiles_for_aarch64_and_matches_under_qemu() {
    if !has_compiler() || !cross_tools() {
        return;
    }
    let preset = kiln_target::CpuPreset::Aarch64Neon;
    let aot = Aot {
        preset,
        cc: "aarch64-linux-gnu-gcc".into(),
        cflags: format!(
            "-O2 {} -std=c11 -Wall -Wextra -Werror",
            preset.desc(1).cflags.join(" ")
        ),
        ldflags: "-static".into(),
        runner: vec!["qemu-aarch64".into()],
        ..Aot::host()
    };
    export_run_and_compare(&aot, "default model (aarch64 under qemu)");
}

/// The model code of an export calls no allocator, loader, file or print
/// function (the example program may).
fn scan_model_code(dir: &Path) {
    const FORBIDDEN: [&str; 9] = [
        "malloc",
        "calloc",
        "realloc",
        "free",
        "aligned_alloc",
        "dlopen",
        "fopen",
        "printf",
        "puts",
    ];
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".c") || name == "main.c" {
            continue;
        }
        let text = without_comments(&std::fs::read_to_string(entry.path()).unwrap());
        for word in identifiers(&text) {
            assert!(!FORBIDDEN.contains(&word), "{name} calls {word}");
        }
    }
}

/// `text` without its `/* */` and `//` comments.
fn without_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    loop {
        let block = rest.find("/*");
        let line = rest.find("//");
        match (block, line) {
            (Some(b), l) if l.is_none_or(|l| b < l) => {
                out.push_str(&rest[..b]);
                rest = rest[b..].find("*/").map_or("", |e| &rest[b + e + 2..]);
            }
            (_, Some(l)) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |e| &rest[l + e..]);
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

#[test]
fn hostile_names_stay_out_of_the_c() {
    if !has_compiler() {
        return;
    }
    let hostile = "x\"*/ #include <evil.h>\n/*\\";
    let out = format!("{hostile}out");
    let src = format!(
        "graph {hostile:?} opsets [\"\"=17] {{\n  input %{hostile:?}: f32[2,3]\n  node {hostile:?} %{out:?}: f32[2,3] = Relu(%{hostile:?})\n  output %{out:?}\n}}\n"
    );
    let g = kiln_ir::text::parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let dir = tempfile::tempdir().unwrap();
    let aot = Aot::host();
    let name = aot.export_and_build(&g, dir.path()).expect("export");
    for entry in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        assert!(
            file.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._".contains(c)),
            "{file}"
        );
        if file.ends_with(".c") || file.ends_with(".h") {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            // The name may appear only as an escaped string literal.
            assert!(
                !text.contains("#include <evil") && !text.contains("x\"*/"),
                "{file} holds the model's name unescaped"
            );
        }
    }
    let x = Tensor::from_vec(vec![2, 3], vec![-1.0f32, 2.0, -3.0, 4.0, -5.0, 6.0]).unwrap();
    let got = aot.run_built(dir.path(), &name, &[x], 1).expect("run");
    assert_eq!(
        got[0].as_slice::<f32>().unwrap(),
        &[0.0, 2.0, 0.0, 4.0, 0.0, 6.0]
    );
    assert_eq!(
        kiln_cpu::aot::default_name(Path::new("/m/9 a\"b*.onnx")),
        "model_9_a_b_"
    );
    assert_eq!(
        kiln_cpu::aot::default_name(Path::new("main.onnx")),
        "model_main"
    );
}

#[test]
fn a_model_without_kernels_exports_and_runs() {
    if !has_compiler() {
        return;
    }
    // The output is the input reshaped: a view, so no kernel at all.
    let src = "graph \"g\" opsets [\"\"=17] {\n  input %x: f32[2,3]\n  init %s: i64[1] = [6]\n  node \"r\" %y: f32[6] = Reshape(%x, %s)\n  output %y\n}\n";
    let mut g = kiln_ir::text::parse(src).unwrap();
    kiln_passes::optimize(&mut g, &Default::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let aot = Aot::host();
    let name = aot.export_and_build(&g, dir.path()).expect("export");
    let x = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let got = aot.run_built(dir.path(), &name, &[x], 1).expect("run");
    assert_eq!(got[0].shape, vec![6]);
    assert_eq!(
        got[0].as_slice::<f32>().unwrap(),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
}

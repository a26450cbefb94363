//! The CUDA backend's check without a GPU: every kernel the node tests
//! make (cases the reference interpreter passes) compiles with NVRTC for
//! sm_80 and sm_90. NVRTC comes from pip (`nvidia-cuda-nvrtc-cu12`, which
//! `.ci/run` installs and points `KILN_NVRTC` at); without it the test is
//! skipped, unless `CI` or `KILN_NVRTC` is set, where it must be there.

use kiln_conformance::{cuda::case_kernels, data_sets, test_dir};
use kiln_cuda::ffi::nvrtc::{Arch, Nvrtc};
use kiln_target::GpuPreset;
use std::path::Path;

/// Cases compiled in one NVRTC program (one prelude per program).
const CASES_PER_UNIT: usize = 64;

fn nvrtc() -> Option<&'static Nvrtc> {
    match Nvrtc::global() {
        Ok(n) => Some(n),
        Err(e) if std::env::var("CI").is_err() && std::env::var("KILN_NVRTC").is_err() => {
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("NVRTC is required here: {e}"),
    }
}

fn listed_cases() -> Vec<String> {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("expected/reference.txt");
    let filter = std::env::var("KILN_CASE").ok();
    std::fs::read_to_string(list)
        .expect("expected/reference.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|c| filter.as_ref().is_none_or(|f| c.contains(f.as_str())))
        .map(str::to_string)
        .collect()
}

/// The kernels of `case` for `preset`, or `None` when the case makes none
/// (its inputs cannot be read, or nothing lowers).
fn kernels(case: &str, preset: GpuPreset, n: usize) -> Option<String> {
    let dir = test_dir().join(case);
    let set = data_sets(&dir).ok()?.into_iter().next()?;
    case_kernels(
        &dir.join("model.onnx"),
        &set.inputs,
        &preset.desc(),
        &format!("c{n}"),
    )
    .ok()
}

#[test]
fn node_test_kernels_compile_with_nvrtc() {
    let Some(nvrtc) = nvrtc() else { return };
    let cases = listed_cases();
    let prelude = kiln_codegen::cuda::prelude::prelude();
    let mut failures = Vec::new();
    let mut compiled = 0;
    for preset in GpuPreset::ALL {
        let arch = Arch::Compute(preset.desc().gpu.expect("GPU").compute_capability);
        for (u, unit) in cases.chunks(CASES_PER_UNIT).enumerate() {
            let sources: Vec<(&String, String)> = unit
                .iter()
                .enumerate()
                .filter_map(|(i, c)| Some((c, kernels(c, preset, u * CASES_PER_UNIT + i)?)))
                .collect();
            compiled += sources.len();
            let all: String = sources.iter().map(|(_, s)| s.as_str()).collect();
            if nvrtc
                .compile(&(prelude.clone() + &all), "unit.cu", &arch, &[])
                .is_ok()
            {
                continue;
            }
            // Find the cases at fault, one program each.
            for (case, s) in &sources {
                if let Err(e) = nvrtc.compile(&(prelude.clone() + s), case, &arch, &[]) {
                    failures.push(format!("{case} ({arch}): {e}"));
                }
            }
        }
    }
    println!(
        "{compiled} case programs compiled with NVRTC {:?}",
        nvrtc.version()
    );
    assert!(
        failures.is_empty(),
        "{} cases failed to compile:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(compiled > 1000, "only {compiled} cases made CUDA kernels");
}

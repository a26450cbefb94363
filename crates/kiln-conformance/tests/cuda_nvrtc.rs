//! The CUDA backend's check without a GPU: every kernel the node tests
//! make (cases the reference interpreter passes) compiles with NVRTC for
//! sm_80 and sm_90. NVRTC comes from pip (`nvidia-cuda-nvrtc-cu12`, which
//! `.ci/run` installs and points `KILN_NVRTC` at); without it the test is
//! skipped, unless `CI` or `KILN_NVRTC` is set, where it must be there.

use kiln_conformance::cuda::{case_kernels, graph_kernels};
use kiln_conformance::{data_sets, products, test_dir};
use kiln_cuda::ffi::nvrtc::{Arch, Nvrtc};
use kiln_target::{GpuPreset, TargetDesc};
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

/// The kernels of `case` for `target`, or `None` when the case makes none
/// (its inputs cannot be read, or nothing lowers).
fn kernels(case: &str, target: &TargetDesc, n: usize) -> Option<String> {
    let dir = test_dir().join(case);
    let set = data_sets(&dir).ok()?.into_iter().next()?;
    case_kernels(
        &dir.join("model.onnx"),
        &set.inputs,
        target,
        &format!("c{n}"),
    )
    .ok()
}

/// What compiling some cases' kernels gave: how many case programs and
/// the failures (case, arch, log).
struct Compiled {
    programs: usize,
    failures: Vec<String>,
}

/// Compiles `cases`' kernels for every target, `CASES_PER_UNIT` cases per
/// NVRTC program (a failing program is retried case by case to name them).
fn compile_cases(nvrtc: &Nvrtc, cases: &[String], targets: &[TargetDesc]) -> Compiled {
    let prelude = kiln_codegen::cuda::prelude::prelude();
    let mut out = Compiled {
        programs: 0,
        failures: Vec::new(),
    };
    for target in targets {
        let arch = Arch::Compute(target.gpu.as_ref().expect("GPU").compute_capability);
        for (u, unit) in cases.chunks(CASES_PER_UNIT).enumerate() {
            let sources: Vec<(&String, String)> = unit
                .iter()
                .enumerate()
                .filter_map(|(i, c)| Some((c, kernels(c, target, u * CASES_PER_UNIT + i)?)))
                .collect();
            out.programs += sources.len();
            let all: String = sources.iter().map(|(_, s)| s.as_str()).collect();
            if nvrtc
                .compile(&(prelude.clone() + &all), "unit.cu", &arch, &[])
                .is_ok()
            {
                continue;
            }
            for (case, s) in &sources {
                if let Err(e) = nvrtc.compile(&(prelude.clone() + s), case, &arch, &[]) {
                    out.failures.push(format!("{case} ({arch}): {e}"));
                }
            }
        }
    }
    out
}

fn assert_no_failures(c: &Compiled) {
    assert!(
        c.failures.is_empty(),
        "{} cases failed to compile:\n{}",
        c.failures.len(),
        c.failures.join("\n")
    );
}

#[test]
fn node_test_kernels_compile_with_nvrtc() {
    let Some(nvrtc) = nvrtc() else { return };
    let targets: Vec<TargetDesc> = GpuPreset::ALL.iter().map(|p| p.desc()).collect();
    let c = compile_cases(nvrtc, &listed_cases(), &targets);
    println!(
        "{} case programs compiled with NVRTC {:?}",
        c.programs,
        nvrtc.version()
    );
    assert_no_failures(&c);
    assert!(
        c.programs > 1000,
        "only {} cases made CUDA kernels",
        c.programs
    );
}

/// The product cases (`kiln_conformance::products`) for sm_80 and sm_90,
/// with and without TF32: every gemm takes the template (CUDA cores, or
/// `mma.sync` on tensor cores with TF32), and all of it compiles.
#[test]
fn product_kernels_compile_with_nvrtc_on_both_units() {
    let Some(nvrtc) = nvrtc() else { return };
    let prelude = kiln_codegen::cuda::prelude::prelude();
    for tf32 in [false, true] {
        for preset in GpuPreset::ALL {
            let mut target = preset.desc();
            let gpu = target.gpu.as_mut().expect("GPU");
            gpu.tf32 = tf32;
            let arch = Arch::Compute(gpu.compute_capability);
            for (n, case) in products::cases().iter().enumerate() {
                let mut g = products::graph(&case.text).expect(case.name);
                kiln_passes::optimize(&mut g, &Default::default()).expect(case.name);
                let source = graph_kernels(&g, &target, &format!("p{n}")).expect(case.name);
                assert!(
                    source.contains("kiln_mma_tf32(") == tf32,
                    "{}: tensor cores used {} with tf32 {tf32}",
                    case.name,
                    !tf32
                );
                if let Err(e) = nvrtc.compile(&(prelude.clone() + &source), case.name, &arch, &[]) {
                    panic!("{} ({arch}, tf32 {tf32}): {e}", case.name);
                }
            }
        }
    }
}

//! Runs the ONNX backend node tests on the reference interpreter. Fails when
//! a case listed in `expected/reference.txt` no longer passes. Set
//! `KILN_BLESS=1` to record the current passing set and regenerate
//! `docs/conformance.md`; `KILN_CASE=substring` runs only matching cases and
//! prints why each fails.

use kiln_conformance::{case_op, cases, run_case, test_dir, Backend, Cpu, Optimized, Reference};
use kiln_fuse::PlannerKind;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Outcome {
    case: String,
    op: String,
    result: Result<(), String>,
    time: Duration,
}

fn run_all(backend: &dyn Backend, dir: &Path, names: &[String]) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let out = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = names.get(i) else { break };
                let case_dir = dir.join(case);
                let ops: Vec<String> = kiln_onnx::decode_proto(&case_dir.join("model.onnx"))
                    .ok()
                    .and_then(|m| m.graph)
                    .map(|g| g.node.iter().map(|n| n.op_type.clone()).collect())
                    .unwrap_or_default();
                let start = Instant::now();
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_case(backend, &case_dir)
                }))
                .unwrap_or_else(|_| Err("panicked".into()));
                let o = Outcome {
                    op: case_op(case, &ops),
                    case: case.clone(),
                    result,
                    time: start.elapsed(),
                };
                out.lock().unwrap().push(o);
            });
        }
    });
    let mut v = out.into_inner().unwrap();
    v.sort_by(|a, b| a.case.cmp(&b.case));
    v
}

fn per_op_table(outcomes: &[Outcome]) -> String {
    let mut by_op: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for o in outcomes {
        let e = by_op.entry(&o.op).or_default();
        e.1 += 1;
        if o.result.is_ok() {
            e.0 += 1;
        }
    }
    let mut s = String::from("| op | passing | cases |\n|---|---:|---:|\n");
    for (op, (p, t)) in by_op {
        s.push_str(&format!("| {op} | {p} | {t} |\n"));
    }
    s
}

#[test]
fn onnx_node_tests_reference() {
    check(&Reference, true);
}

/// Every case the reference interpreter passes must pass after the graph
/// passes too (same expected list): the passes preserve semantics.
#[test]
fn onnx_node_tests_after_passes() {
    check(&Optimized, false);
}

/// Every case the reference interpreter passes must pass on the CPU
/// backend, with the default fusion planner (apollo).
#[test]
fn onnx_node_tests_cpu() {
    let cpu = Cpu::default();
    check(&cpu, false);
    let interpreted = cpu.interpreted.into_inner().unwrap();
    let compiled = cpu.compiled.into_inner();
    print_reasons(&interpreted);
    println!(
        "{compiled} nodes compiled to C kernels, {} interpreted",
        interpreted.len()
    );
    // f16 and bf16 nodes compute in float in generated C (issue 20): none may fall back.
    let half: Vec<&(String, String)> = interpreted
        .iter()
        .filter(|(_, reason)| reason.contains("f16"))
        .collect();
    assert!(
        half.is_empty(),
        "f16/bf16 nodes left to the interpreter: {half:?}"
    );
    // ArgMax and ArgMin are arg-reductions in generated C (issue 20): none may fall back.
    let arg: Vec<&(String, String)> = interpreted
        .iter()
        .filter(|(node, _)| node.ends_with("(ArgMax)") || node.ends_with("(ArgMin)"))
        .collect();
    assert!(
        arg.is_empty(),
        "ArgMax/ArgMin nodes left to the interpreter: {arg:?}"
    );
    if std::env::var("KILN_CASE").is_err() {
        assert!(
            compiled >= MIN_COMPILED_NODES,
            "only {compiled} nodes became C kernels (at least {MIN_COMPILED_NODES} did before): \
             the CPU backend is falling back to the interpreter more"
        );
    }
}

/// Prints how many nodes were left to the interpreter for each reason.
fn print_reasons(interpreted: &[(String, String)]) {
    let mut why: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, reason) in interpreted {
        *why.entry(reason).or_default() += 1;
    }
    println!("nodes left to the interpreter, by reason:");
    for (reason, n) in &why {
        println!("  {n:5}  {reason}");
    }
}

/// ... and with every other fusion planner.
#[test]
fn onnx_node_tests_cpu_other_planners() {
    for fusion in [PlannerKind::None, PlannerKind::Tvm, PlannerKind::Dp] {
        check(&Cpu::with_fusion(fusion), false);
    }
}

/// ... and with convolutions and pooling forced channels-last: the layout
/// pass and the NHWC kernels (windows read through row pointers, window
/// loops) on every convolution and pooling case.
#[test]
fn onnx_node_tests_cpu_channels_last() {
    let cpu = Cpu {
        channels_last: true,
        ..Cpu::default()
    };
    check_cases(&cpu, false, &|case| {
        case.contains("conv") || case.contains("pool")
    });
}

/// Every case the reference interpreter passes must pass on the CUDA
/// backend. Needs a GPU: runs only with `KILN_CUDA_TESTS=1` (the device
/// check script sets it), and is a no-op elsewhere.
#[test]
fn onnx_node_tests_cuda() {
    if std::env::var("KILN_CUDA_TESTS").is_err() {
        println!("skipped: set KILN_CUDA_TESTS=1 on a machine with an NVIDIA GPU");
        return;
    }
    check(&kiln_conformance::cuda::Cuda::default(), false);
}

/// Nodes of the node tests the CPU backend compiled when this was last
/// raised (5718 on 2026-11-26, with ArgMax/ArgMin kernels: 32 more); fewer means
/// kernels silently fell back.
const MIN_COMPILED_NODES: usize = 5712;

/// Runs the node tests on `backend` and fails on any regression of a case
/// in expected/reference.txt; `blessable` backends record their passing set
/// (and docs/conformance.md) under KILN_BLESS=1.
fn check(backend: &dyn Backend, blessable: bool) {
    check_cases(backend, blessable, &|_| true);
}

/// `check` on the cases `selected` accepts (blessing needs all of them).
fn check_cases(backend: &dyn Backend, blessable: bool, selected: &dyn Fn(&str) -> bool) {
    let dir = test_dir();
    let all = cases(&dir)
        .unwrap_or_else(|e| panic!("ONNX node tests not found ({e}); set KILN_ONNX_NODE_TESTS"));
    assert!(!all.is_empty(), "no ONNX node tests in {}", dir.display());
    let filter = std::env::var("KILN_CASE").ok();
    let names: Vec<String> = all
        .iter()
        .filter(|c| selected(c) && filter.as_ref().is_none_or(|f| c.contains(f.as_str())))
        .cloned()
        .collect();
    let outcomes = run_all(backend, &dir, &names);

    let expected_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("expected/reference.txt");
    let expected: BTreeSet<String> = std::fs::read_to_string(&expected_path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let passing: BTreeSet<String> = outcomes
        .iter()
        .filter(|o| o.result.is_ok())
        .map(|o| o.case.clone())
        .collect();

    if filter.is_some() {
        for o in &outcomes {
            match &o.result {
                Ok(()) => println!("PASS {} ({:?})", o.case, o.time),
                Err(e) => println!("FAIL {}: {e}", o.case),
            }
        }
    }
    let mut slow: Vec<&Outcome> = outcomes.iter().collect();
    slow.sort_by(|a, b| b.time.cmp(&a.time));
    println!("slowest cases:");
    for o in slow.iter().take(5) {
        println!("  {} {:?}", o.case, o.time);
    }
    println!("{}", per_op_table(&outcomes));
    println!(
        "{} of {} node tests pass on the {} backend",
        passing.len(),
        outcomes.len(),
        backend.name()
    );

    if std::env::var("KILN_BLESS").is_ok()
        && filter.is_none()
        && blessable
        && names.len() == all.len()
    {
        let mut text = format!("# ONNX node tests passing on the {} backend (KILN_BLESS=1 cargo test -p kiln-conformance)\n", backend.name());
        for c in &passing {
            text.push_str(c);
            text.push('\n');
        }
        std::fs::write(&expected_path, text).unwrap();
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/conformance.md");
        let body = format!(
            "# ONNX conformance\n\nGenerated by `KILN_BLESS=1 cargo test -p kiln-conformance` from the ONNX backend node tests \
             (onnx 1.23.2, {} cases).\n\n**{} of {} pass on the {} backend.** Cases whose inputs or outputs are sequences, maps or \
             optionals, or that use element types kiln does not have (float8, int4, complex), cannot pass.\n\n{}",
            outcomes.len(),
            passing.len(),
            outcomes.len(),
            backend.name(),
            per_op_table(&outcomes)
        );
        std::fs::write(doc, body).unwrap();
        return;
    }
    let regressions: Vec<String> = outcomes
        .iter()
        .filter(|o| expected.contains(&o.case))
        .filter_map(|o| o.result.as_ref().err().map(|e| format!("{}: {e}", o.case)))
        .collect();
    let new = passing.difference(&expected).count();
    if new > 0 {
        println!(
            "{new} cases pass that are not in {} (run with KILN_BLESS=1 to record them)",
            expected_path.display()
        );
    }
    assert!(
        regressions.is_empty(),
        "{} listed cases regressed:\n{}",
        regressions.len(),
        regressions.join("\n")
    );
}

/// Nodes of the node tests the DSA backend compiled when this was last
/// raised (5633 on stcp920, gathers the only DSA-specific fallback);
/// fewer means kernels silently fell back to the interpreter.
const MIN_DSA_COMPILED_NODES: usize = 5660;

/// Every case the reference interpreter passes must pass on the DSA
/// backend: DSA C run by the functional emulator on `stcp920` (DDR, GB
/// and every LB separate memories, counted DMA), nodes that cannot be
/// tiled (gathers, LB overflow) left to the interpreter.
#[test]
fn onnx_node_tests_dsa() {
    let dsa = kiln_conformance::dsa::Dsa::new(kiln_dsa::DsaDesc::preset("stcp920").unwrap());
    check(&dsa, false);
    let interpreted = dsa.interpreted.into_inner().unwrap();
    let compiled = dsa.compiled.into_inner();
    print_reasons(&interpreted);
    println!(
        "{compiled} nodes compiled to DSA kernels, {} interpreted; {} bytes between DDR and the chip",
        interpreted.len(),
        dsa.ddr_bytes.into_inner()
    );
    if std::env::var("KILN_CASE").is_err() {
        assert!(
            compiled >= MIN_DSA_COMPILED_NODES,
            "only {compiled} nodes became DSA kernels (at least {MIN_DSA_COMPILED_NODES} did before)"
        );
    }
}

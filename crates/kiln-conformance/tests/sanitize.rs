//! The generated C of every node-test kernel (each node's, and each fused
//! group's under the default planner) under AddressSanitizer and
//! UndefinedBehaviorSanitizer: each kernel is called from a C driver with
//! every buffer in its own exactly-sized heap block (so a read or write
//! one element outside is caught) holding random values (random integers
//! also exercise the out-of-range checks of data-dependent indices).
//! Any sanitizer report fails the test. Skipped, with a note, where the C
//! compiler cannot build sanitized programs. Kernels are scheduled for the
//! host, which runs them.

use kiln_conformance::{cases, test_dir};
use kiln_cpu::select::{node_kernel, NodeKernel};
use kiln_ir::DType;
use std::fmt::Write;
use std::path::Path;
use std::process::Command;

/// How many kernels go into one sanitized program.
const PER_PROGRAM: usize = 600;

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// The kernels (and their C) of every node-test model that compiles for
/// the CPU.
fn all_kernels() -> Vec<NodeKernel> {
    let dir = test_dir();
    let target = kiln_target::host();
    let mut out = Vec::new();
    for (c, case) in cases(&dir).unwrap_or_default().iter().enumerate() {
        let model = dir.join(case).join("model.onnx");
        let Ok(m) = kiln_onnx::load(&model, &Default::default()) else {
            continue;
        };
        let mut g = m.graph;
        if kiln_passes::optimize(&mut g, &Default::default()).is_err() {
            continue;
        }
        for (i, node) in g.nodes.iter().enumerate() {
            if let Ok(k) = node_kernel(&g, node, &format!("c{c}_k{i}"), &target) {
                out.push(k);
            }
        }
        for (i, node) in fused_nodes(&g, &target).iter().enumerate() {
            if let Ok(k) = node_kernel(&g, node, &format!("c{c}_f{i}"), &target) {
                out.push(k);
            }
        }
    }
    // Kernels reading a packed weight need their packing first: the model
    // tests run those.
    out.retain(|k| k.packs.is_none());
    out
}

/// The fused nodes of `g` under the default planner (apollo) for `target`.
fn fused_nodes(g: &kiln_ir::Graph, target: &kiln_target::TargetDesc) -> Vec<kiln_ir::Node> {
    let planned = kiln_fuse::plan(
        g,
        kiln_fuse::PlannerKind::Apollo,
        &kiln_cpu::select::CpuGroupCheck { target },
        &kiln_fuse::PlanOptions::for_target(target.clone()),
    );
    let Ok(fused) = planned.and_then(|p| kiln_fuse::apply::apply(g, &p.plan)) else {
        return Vec::new();
    };
    fused
        .nodes
        .into_iter()
        .filter(|n| n.op == kiln_ops::ops::control::FUSED_OP)
        .collect()
}

/// Threads the kernels' workspaces are sized for.
const THREADS: usize = 2;

/// A C program calling each kernel on fresh random buffers (and a
/// workspace of its own, exactly sized, where it takes one).
fn driver(kernels: &[NodeKernel]) -> String {
    let mut s = kiln_cpu::program::config_defines(THREADS, None) + &kiln_codegen::c::prelude();
    s.push_str("#include <stdio.h>\n");
    for k in kernels {
        s.push_str(&k.c);
        s.push('\n');
    }
    s.push_str(
        "static unsigned long long kiln_rng = 88172645463325252ULL;\n\
         static double kiln_rand(void) { kiln_rng ^= kiln_rng << 13; kiln_rng ^= kiln_rng >> 7; kiln_rng ^= kiln_rng << 17; return (double)(kiln_rng >> 11) / 9007199254740992.0; }\n\
         int main(void) {\n  int failures = 0;\n",
    );
    for nk in kernels {
        let k = &nk.kernel;
        let name = &k.name;
        writeln!(s, "  {{\n    void* args[{}];", k.buffers.len() + 2).ok();
        for (i, b) in k.buffers.iter().enumerate() {
            let ty = kiln_codegen::scalar_c::storage_type(b.dtype).unwrap_or("uint8_t");
            let n = b.numel().max(1);
            let value = match b.dtype {
                DType::F32 | DType::F64 => "kiln_rand() * 4.0 - 2.0".to_string(),
                DType::Bool => "kiln_rand() < 0.5".to_string(),
                _ => "(long long)(kiln_rand() * 13.0) - 3".to_string(),
            };
            writeln!(
                s,
                "    {ty}* b{i} = ({ty}*)malloc({n} * sizeof({ty}));\n    for (long j = 0; j < {n}; ++j) b{i}[j] = ({ty})({value});\n    args[{i}] = b{i};"
            )
            .ok();
        }
        let ws = nk.workspace.floats(THREADS);
        writeln!(
            s,
            "    float* ws = (float*)aligned_alloc(64, {});\n    args[{}] = ws;",
            (ws * 4).div_ceil(64).max(1) * 64,
            k.buffers.len()
        )
        .ok();
        writeln!(s, "    failures += {name}(args) != 0;\n    free(ws);").ok();
        for i in 0..k.buffers.len() {
            writeln!(s, "    free(b{i});").ok();
        }
        s.push_str("  }\n");
    }
    s.push_str(
        "  printf(\"%d kernels reported an index out of range\\n\", failures);\n  return 0;\n}\n",
    );
    s
}

/// Builds and runs one sanitized program; `Err` holds the report.
fn run_sanitized(dir: &Path, k: usize, src: &str) -> Result<(), String> {
    let c = dir.join(format!("sanitize_{k}.c"));
    let exe = dir.join(format!("sanitize_{k}"));
    std::fs::write(&c, src).map_err(|e| e.to_string())?;
    let build = Command::new(cc())
        .args([
            "-std=c11",
            "-O1",
            "-g",
            "-fopenmp",
            "-fsanitize=address,undefined",
        ])
        .args(["-fno-sanitize-recover=all", "-fno-omit-frame-pointer"])
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .arg("-lm")
        .output()
        .map_err(|e| e.to_string())?;
    if !build.status.success() {
        return Err(format!(
            "build of {} failed:\n{}",
            c.display(),
            String::from_utf8_lossy(&build.stderr)
        ));
    }
    let run = Command::new(&exe)
        .env("OMP_NUM_THREADS", "1")
        .output()
        .map_err(|e| e.to_string())?;
    if !run.status.success() {
        let err = String::from_utf8_lossy(&run.stderr);
        return Err(format!("{}:\n{}", c.display(), &err[..err.len().min(4000)]));
    }
    Ok(())
}

fn sanitizers_work(dir: &Path) -> bool {
    let c = dir.join("probe.c");
    std::fs::write(&c, "int main(void) { return 0; }\n").ok();
    Command::new(cc())
        .args(["-fsanitize=address,undefined"])
        .arg(&c)
        .arg("-o")
        .arg(dir.join("probe"))
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn generated_c_is_clean_under_asan_and_ubsan() {
    let dir = std::env::temp_dir().join(format!("kiln-sanitize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    if !sanitizers_work(&dir) {
        eprintln!("note: {} cannot build sanitized programs; skipped", cc());
        return;
    }
    let kernels = all_kernels();
    assert!(kernels.len() > 1000, "only {} kernels", kernels.len());
    let chunks: Vec<&[NodeKernel]> = kernels.chunks(PER_PROGRAM).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(chunk) = chunks.get(k) else { break };
                if let Err(e) = run_sanitized(&dir, k, &driver(chunk)) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    println!("{} kernels checked under ASan+UBSan", kernels.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

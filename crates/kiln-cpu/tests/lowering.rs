//! Text-in/text-out tests of lowering and default scheduling, plus a
//! differential check of each case on the CPU backend.
//!
//! `tests/cases/<name>.kiln` holds a graph in kiln's textual IR;
//! `<name>.expected` holds, for every node, the scheduled loop IR with its
//! schedule (or why the node runs on the interpreter). The graph is also
//! compiled and run on random inputs and compared with the reference
//! interpreter. `KILN_BLESS=1 cargo test -p kiln-cpu --test lowering`
//! rewrites the expected files; `KILN_CASE=substring` filters.
//!
//! `tests/fused/<name>.kiln` are fusion cases: the graph (compounds opened
//! by the graph passes) is fused into one group, and `<name>.expected`
//! holds that kernel's form and scheduled loop IR; the fused model is run
//! against the interpreter the same way.
//!
//! Everything here is lowered for the x86-64-v4 preset ([`target`]), never
//! the host, so the expected text is the same on every machine.

mod common;

use common::{assert_close, inputs, load};
use kiln_cpu::{select::node_kernel, CompiledModel, CpuOptions};
use kiln_fuse::{Group, Plan};
use kiln_ir::{Graph, Result};
use kiln_target::{CpuPreset, TargetDesc};
use std::path::{Path, PathBuf};

/// The CPU the tests lower for: AVX-512 (16 f32 lanes), 2 cores.
fn target() -> TargetDesc {
    CpuPreset::X86_64V4.desc(2)
}

fn lowered_text(g: &Graph) -> String {
    let mut out = String::new();
    let target = target();
    for (i, node) in g.nodes.iter().enumerate() {
        out.push_str(&format!("# node {i}: {}\n", node.describe()));
        match node_kernel(g, node, &format!("k{i}"), &target) {
            Ok(k) => {
                out.push_str(&format!("{}\n", k.kernel));
                let s: Vec<String> = k.schedule.0.iter().map(|d| d.to_string()).collect();
                out.push_str(&format!("schedule: [{}]\n", s.join(", ")));
                if let Some(p) = k.in_place {
                    out.push_str(&format!("in place of input {p}\n"));
                }
            }
            Err(e) => out.push_str(&format!("interpreted: {e}\n")),
        }
        out.push('\n');
    }
    out
}

fn check_against_interpreter(g: &Graph, name: &str, plan: Option<Plan>) -> Result<()> {
    let ins = inputs(g)?;
    let want = kiln_interp::run(g, &ins)?;
    let opts = CpuOptions {
        threads: 2,
        target: target(),
        ..Default::default()
    };
    let model = match plan {
        Some(plan) => CompiledModel::compile_with_plan(g, plan, &opts)?,
        None => CompiledModel::compile(g, &opts)?,
    };
    // Every group must compile to kernels: a refused group (split by the feedback step) or a
    // node left to the interpreter would pass unnoticed.
    if let Some((node, why)) = model.report.interpreted.first() {
        kiln_ir::bail!("{name}: {node} runs on the interpreter: {why}");
    }
    if let Some(refused) = model.report.fusion.feedback.first() {
        kiln_ir::bail!("{name}: the backend refused a group: {refused:?}");
    }
    let got = model.run(&ins)?;
    assert_close(&got, &want, name)?;
    Ok(())
}

fn cases(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/cases")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "kiln"))
        .collect();
    v.sort();
    v
}

#[test]
fn lowering_cases() {
    text_cases("tests/cases", &|g, name| {
        check_against_interpreter(g, name, None)?;
        Ok(lowered_text(g))
    });
}

/// The whole graph as one group.
fn one_group(g: &Graph) -> Plan {
    Plan {
        planner: "test".into(),
        groups: vec![Group::new("test", (0..g.nodes.len()).collect())],
        parallel: Vec::new(),
    }
}

#[test]
fn fused_cases() {
    text_cases("tests/fused", &|g, name| {
        let mut g = g.clone();
        kiln_passes::optimize(&mut g, &Default::default())?;
        check_against_interpreter(&g, name, Some(one_group(&g)))?;
        let node = kiln_fuse::apply::group_node(&g, &one_group(&g).groups[0].nodes)?;
        let name = format!("fused_{name}");
        let Some(body) = node.attr_graph("body")? else {
            return Ok("no body".into());
        };
        let ops: Vec<&str> = body.nodes.iter().map(|n| n.op.as_str()).collect();
        let k = kiln_cpu::select::fused_kernel(&node, &name, &[], &target())?;
        let s: Vec<String> = k.schedule.0.iter().map(|d| d.to_string()).collect();
        Ok(format!(
            "# group: {}\n{}\nschedule: [{}]\n",
            ops.join("+"),
            k.kernel,
            s.join(", ")
        ))
    });
}

/// Runs `text` on every `.kiln` file of `dir` and compares with the
/// `.expected` file beside it (`KILN_BLESS=1` rewrites them).
fn text_cases(dir: &str, text: &dyn Fn(&Graph, &str) -> Result<String>) {
    let bless = std::env::var("KILN_BLESS").is_ok_and(|v| v == "1");
    let filter = std::env::var("KILN_CASE").unwrap_or_default();
    let mut failures = Vec::new();
    for case in cases(dir) {
        let name = case.file_stem().unwrap().to_string_lossy().to_string();
        if !name.contains(&filter) {
            continue;
        }
        let g = load(&std::fs::read_to_string(&case).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = text(&g, &name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected_path = case.with_extension("expected");
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != want {
            failures.push(format!("--- {name}: got\n{got}"));
        }
    }
    assert!(
        failures.is_empty(),
        "lowering differs from the expected text (KILN_BLESS=1 to accept):\n{}",
        failures.join("\n")
    );
}

/// A prologue over a padded convolution window is refused (the padding
/// must read zero, not the prologue of zero), with the reason, and the
/// default planner's feedback then splits the group: the model still
/// computes what the interpreter does.
#[test]
fn padded_window_refuses_prologue() -> Result<()> {
    let g = load(
        r#"graph "g" opsets [""=17] {
  input %x: f32[1,16,14,14]
  input %w: f32[32,16,3,3]
  node "act" %a: f32[1,16,14,14] = Sigmoid(%x)
  node "conv" %o: f32[1,32,14,14] = Conv(%a, %w) {pads=[1,1,1,1]}
  output %o
}"#,
    )?;
    let target = target();
    let cpu = kiln_cpu::select::CpuGroupCheck { target: &target };
    let check = kiln_fuse::GroupCheck::check(&cpu, &g, &[0, 1]);
    let why = check.expect_err("a prologue over a padded window must be refused");
    assert!(why.contains("padded window"), "{why}");
    let ins = inputs(&g)?;
    let want = kiln_interp::run(&g, &ins)?;
    let model = CompiledModel::compile(&g, &CpuOptions::default())?;
    assert_close(&model.run(&ins)?, &want, "padded_window_refuses_prologue")
}

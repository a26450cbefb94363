//! `kiln compile --emit c|loops|plan|aot`: what the CPU pipeline
//! (`kiln_cpu::CpuProgram`) generates for a model, written to a directory.

use kiln_cpu::aot::{self, AotOptions};
use kiln_cpu::program::{config_defines, Naming};
use kiln_cpu::{CpuOptions, CpuProgram};
use kiln_fuse::PlannerKind;
use kiln_ir::{Error, Graph, Result};
use std::path::Path;

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emit {
    /// The C of every kernel (`model.c`).
    C,
    /// The scheduled loop IR of every kernel (`model.loops`).
    Loops,
    /// The execution plan's text form (`model.plan`).
    Plan,
    /// A standalone C library and example program (`kiln_cpu::aot`).
    Aot,
    /// The CUDA of every kernel for an H100/H200 (sm_90), with each
    /// kernel's launches as comments (`model.cu`).
    Cuda,
}

impl std::str::FromStr for Emit {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Emit, String> {
        match s {
            "c" => Ok(Emit::C),
            "loops" => Ok(Emit::Loops),
            "plan" => Ok(Emit::Plan),
            "aot" => Ok(Emit::Aot),
            "cuda" => Ok(Emit::Cuda),
            _ => Err(format!("'{s}' is not one of c, loops, plan, aot, cuda")),
        }
    }
}

/// Writes `what` for `g` into `dir`; `aot` applies to `Emit::Aot`, `tf32`
/// (f32 products on TF32 tensor cores) to `Emit::Cuda` only.
pub fn emit(
    g: &Graph,
    cpu: &CpuOptions,
    what: Emit,
    aot: &AotOptions,
    tf32: bool,
    dir: &Path,
) -> Result<()> {
    if tf32 && what != Emit::Cuda {
        return Err(Error::new("--tf32 applies to --emit cuda only"));
    }
    if what == Emit::Aot {
        let report = aot::export(g, cpu, aot, dir)?;
        println!(
            "wrote {} files to {} ({} kernels; weights {} B, arena {} B (lower bound {} B), workspace {} B)",
            report.files.len(),
            dir.display(),
            report.kernels,
            report.weights_bytes,
            report.arena_bytes,
            report.arena_bound,
            report.workspace_bytes
        );
        println!("build: make -C {}", dir.display());
        return Ok(());
    }
    if what == Emit::Cuda {
        return emit_cuda(g, cpu.fusion, tf32, dir);
    }
    let naming = Naming {
        prefix: "kiln".into(),
        threads: cpu.threads,
    };
    let program = CpuProgram::build(g, cpu, &naming)?;
    let (file, text) = match what {
        Emit::C => ("model.c", c_text(&program, cpu.threads)),
        Emit::Loops => ("model.loops", loops_text(&program)),
        _ => ("model.plan", program.plan.to_string()),
    };
    let what = format!("wrote {} kernels to", program.plan.kernels().count());
    write_file(dir, file, &text, &what)
}

/// Writes `text` to `dir/file` and says so after `what`.
fn write_file(dir: &Path, file: &str, text: &str, what: &str) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join(file);
    std::fs::write(&path, text)
        .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
    println!("{what} {}", path.display());
    Ok(())
}

/// Writes `model.cu` for an sm_90 GPU into `dir`, its f32 products on
/// TF32 tensor cores when `tf32`.
fn emit_cuda(g: &Graph, fusion: PlannerKind, tf32: bool, dir: &Path) -> Result<()> {
    let text = cuda_text(g, fusion, tf32)?;
    write_file(dir, "model.cu", &text, "wrote CUDA to")
}

/// The CUDA program for an sm_90 GPU: the prelude, then per node its
/// launches (as a comment) and functions, or why it has none.
fn cuda_text(g: &Graph, fusion: PlannerKind, tf32: bool) -> Result<String> {
    let mut target = kiln_target::GpuPreset::Sm90.desc();
    if let Some(gpu) = target.gpu.as_mut() {
        gpu.tf32 = tf32;
    }
    let program = kiln_cuda::program::CudaProgram::build(g, fusion, &target, "kiln")?;
    let mut s = kiln_codegen::cuda::prelude::prelude();
    for (node, k) in program.graph.nodes.iter().zip(&program.kernels) {
        let Some(k) = k else { continue };
        s += &format!("\n/* {}: {} */\n", node.describe(), k.source.mapping);
        for l in &k.source.launches {
            s += &format!(
                "/* launch {} grid {:?} block {:?}{} */\n",
                l.function,
                l.grid,
                l.block,
                match l.shared_bytes {
                    0 => String::new(),
                    n => format!(" shared {n} bytes"),
                }
            );
        }
        s += &k.source.cuda;
    }
    for (node, why) in program.interpreted() {
        s += &format!(
            "/* {node} runs on the interpreter: {} */\n",
            why.replace("*/", "* /")
        );
    }
    Ok(s)
}

/// Every kernel's C in one file, after the prelude; nodes without a kernel
/// as comments saying why.
fn c_text(program: &CpuProgram, threads: usize) -> String {
    let mut text = config_defines(threads, None) + &kiln_codegen::c::prelude();
    for_each_node(program, &mut text, |k, text| text.push_str(&k.c));
    text.push_str(&program.blocks_c());
    text
}

/// Every kernel's loop IR and schedule.
fn loops_text(program: &CpuProgram) -> String {
    let mut text = String::new();
    for_each_node(program, &mut text, |k, text| {
        text.push_str(&format!("{}\nschedule:", k.kernel));
        for d in &k.schedule.0 {
            text.push_str(&format!(" {d}"));
        }
        text.push('\n');
    });
    text
}

fn for_each_node(
    program: &CpuProgram,
    text: &mut String,
    mut kernel: impl FnMut(&kiln_cpu::select::NodeKernel, &mut String),
) {
    for (i, (node, k)) in program.graph.nodes.iter().zip(&program.kernels).enumerate() {
        match (k, &program.plan.steps[i]) {
            (Some(k), _) => {
                text.push_str(&format!("/* node {i}: {} */\n", comment(&node.describe())));
                kernel(k, text);
                text.push('\n');
            }
            (None, kiln_exec::Step::Interp { reason, .. }) => text.push_str(&format!(
                "/* node {i}: {} runs on the interpreter: {} */\n\n",
                comment(&node.describe()),
                comment(reason)
            )),
            (None, _) => {}
        }
    }
}

/// `s` safe inside a C comment.
fn comment(s: &str) -> String {
    s.replace("*/", "* /").replace('\n', " ")
}

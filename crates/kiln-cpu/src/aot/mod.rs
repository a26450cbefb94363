//! Ahead-of-time export of a model as a standalone C library (swTVM §4:
//! code generated ahead of time that needs no dynamic loading and no
//! allocation at run time, with one memory plan computed at compile time).
//!
//! Needs: an optimized, verified graph whose every node compiles to C (a
//! node left to the interpreter is an error naming every such node).
//! Guarantees: a directory with `NAME.h` (the API, and as `#define`s the
//! sizes of the weights, arena and workspace and every input/output's
//! name, dtype and shape), `NAME.c` (the run function) and
//! `NAME_kernels_<j>.c` (the kernels and concurrent blocks), the weights — already
//! packed for the generated matmuls, for the vector width of the chosen
//! CPU preset — as `NAME.weights.bin` or as a C array (`NAME_weights.c`),
//! an example program `main.c` and a `Makefile` building it. The model
//! code calls no allocator, loads nothing, opens no file and prints
//! nothing; names from the model reach the C only as escaped string
//! literals.

mod c_text;
mod example;
mod header;
mod run_c;
mod weights;

use crate::program::{config_defines, CpuOptions, CpuProgram, Naming};
use kiln_exec::Step;
use kiln_ir::{bail, Error, Graph, Result};
use kiln_target::CpuPreset;
use std::path::{Path, PathBuf};

pub use weights::WeightsMode;

/// How many files the kernels are spread over (`make -j` builds them at once).
const KERNEL_FILES: usize = 4;

/// How to export.
#[derive(Debug, Clone)]
pub struct AotOptions {
    /// Prefix of every C symbol and file: a C identifier.
    pub name: String,
    pub preset: CpuPreset,
    /// Threads the workspace holds; the model never runs on more.
    pub threads: usize,
    pub openmp: bool,
    pub weights: WeightsMode,
}

/// What an export wrote.
#[derive(Debug, Clone)]
pub struct AotReport {
    pub files: Vec<PathBuf>,
    pub kernels: usize,
    pub weights_bytes: usize,
    pub arena_bytes: usize,
    pub arena_bound: usize,
    pub workspace_bytes: usize,
}

/// The name a model file's export gets by default: its stem as a C
/// identifier.
pub fn default_name(model: &Path) -> String {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) || name == "main" {
        name.insert_str(0, "model_");
    }
    name
}

/// The CPU preset matching the host (the default target of an export).
pub fn host_preset() -> CpuPreset {
    let host = kiln_target::host();
    match (host.arch, host.vector_bytes) {
        (kiln_target::Arch::Aarch64, _) => CpuPreset::Aarch64Neon,
        (_, 64) => CpuPreset::X86_64V4,
        (_, 32) => CpuPreset::X86_64V3,
        _ => CpuPreset::X86_64,
    }
}

/// Writes `graph`'s export into `dir` (created if missing), fused and
/// scheduled for `aot.preset` (`cpu` gives the planner, the host compiler
/// that packs the weights and its threads).
pub fn export(graph: &Graph, cpu: &CpuOptions, aot: &AotOptions, dir: &Path) -> Result<AotReport> {
    check_name(&aot.name)?;
    let threads = if aot.openmp { aot.threads.max(1) } else { 1 };
    let naming = Naming {
        prefix: aot.name.clone(),
        threads,
    };
    // Planned and scheduled for the preset, whatever `cpu.target` says.
    let cpu = &CpuOptions {
        target: aot.preset.desc(threads),
        ..cpu.clone()
    };
    let mut program = CpuProgram::build(graph, cpu, &naming)?;
    refuse_interpreted(&program)?;
    let vector_bytes = aot.preset.desc(threads).vector_bytes;
    let defines = config_defines(threads, Some(vector_bytes));
    let image = weights::pack(&mut program, cpu, &defines)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
    let mut files = Vec::new();
    let mut write = |file: String, text: &[u8]| -> Result<()> {
        let path = dir.join(file);
        std::fs::write(&path, text)
            .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
        files.push(path);
        Ok(())
    };
    let name = &aot.name;
    write(
        format!("{name}.h"),
        header::header(&program, aot, threads, &image).as_bytes(),
    )?;
    write(
        format!("{name}.c"),
        run_c::run_c(&program, aot, &defines, &image)?.as_bytes(),
    )?;
    let mut kernel_files = Vec::new();
    for (j, unit) in program
        .c_units(KERNEL_FILES, &defines, "")
        .into_iter()
        .enumerate()
    {
        kernel_files.push(format!("{name}_kernels_{j}.c"));
        write(format!("{name}_kernels_{j}.c"), unit.as_bytes())?;
    }
    let weight_files = image.write(name, aot.weights, &mut write)?;
    let sources: Vec<String> = [format!("{name}.c")]
        .into_iter()
        .chain(kernel_files)
        .chain(weight_files)
        .collect();
    write("main.c".into(), example::main_c(&program, aot).as_bytes())?;
    write(
        "Makefile".into(),
        example::makefile(aot, &sources).as_bytes(),
    )?;
    Ok(AotReport {
        files,
        kernels: program.plan.kernels().count(),
        weights_bytes: image.bytes.len(),
        arena_bytes: program.plan.arena_bytes,
        arena_bound: program.plan.arena_bound,
        workspace_bytes: program.plan.workspace_bytes,
    })
}

/// A C identifier that leaves room for kiln's suffixes.
pub fn check_name(name: &str) -> Result<()> {
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64;
    if !ok {
        bail!("export name '{name}' is not a C identifier (letters, digits, '_', starting with a letter, at most 64)");
    }
    if name == "main" {
        bail!("export name 'main' would overwrite the example program's main.c");
    }
    Ok(())
}

/// An AOT export has no interpreter: every node must be a kernel or a view.
fn refuse_interpreted(program: &CpuProgram) -> Result<()> {
    let refused: Vec<String> = program
        .plan
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Interp { node, reason } => Some(format!(
                "  {}: {reason}",
                program.graph.nodes[*node].describe()
            )),
            _ => None,
        })
        .collect();
    if !refused.is_empty() {
        bail!(
            "cannot export ahead of time: {} node(s) have no C kernel (an export has no interpreter):\n{}",
            refused.len(),
            refused.join("\n")
        );
    }
    Ok(())
}

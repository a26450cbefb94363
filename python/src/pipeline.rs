//! From a model (file or bytes) to an engine that runs it: import, graph
//! passes, compilation for the chosen backend, each stage reported to the
//! caller's progress callback.

use crate::errors::{at, Stage, Staged};
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_cuda::{CudaModel, CudaOptions};
use kiln_fuse::PlannerKind;
use kiln_ir::{bail, Error, ErrorKind, Graph, Result};
use pyo3::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

/// Where the model comes from.
pub enum Source {
    File(PathBuf),
    /// A serialized model (shared: reading it again copies nothing).
    Bytes(bytes::Bytes),
}

/// What the caller asked for.
pub struct Request {
    pub source: Source,
    pub backend: Backend,
    pub fusion: PlannerKind,
    pub threads: Option<usize>,
    pub input_shapes: HashMap<String, Vec<usize>>,
    pub cache_dir: Option<PathBuf>,
    /// `progress(stage, message)`, called as each stage ends.
    pub progress: Option<Py<PyAny>>,
    /// CUDA: f32 products on TF32 tensor cores.
    pub tf32: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    Cuda,
    Reference,
}

impl Backend {
    pub fn parse(s: &str) -> Result<Backend> {
        Ok(match s {
            "cpu" => Backend::Cpu,
            "cuda" => Backend::Cuda,
            "reference" => Backend::Reference,
            other => bail!("unknown backend '{other}' (expected cpu, cuda or reference)"),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
            Backend::Reference => "reference",
        }
    }
}

/// How a compiled model runs.
pub enum Engine {
    Cpu(CompiledModel),
    Cuda(CudaModel),
    /// The reference interpreter on the optimized graph.
    Reference,
}

/// The result of [`build`]: the optimized graph and its engine.
pub struct Built {
    pub graph: Graph,
    pub engine: Engine,
    pub summary: String,
}

impl Request {
    fn report(&self, stage: &str, message: &str) {
        if let Some(cb) = &self.progress {
            // A failing callback must not fail the compile: Python prints
            // it as unraisable and kiln goes on.
            Python::attach(|py| {
                if let Err(e) = cb.call1(py, (stage, message)) {
                    e.write_unraisable(py, Some(cb.bind(py)));
                }
            });
        }
    }

    /// Imports and optimizes the model as `kiln run` does for the backend.
    fn graph(&self) -> Result<Graph> {
        let start = Instant::now();
        let opts = kiln_onnx::ImportOptions {
            input_shapes: self.input_shapes.clone(),
        };
        let mut g = match &self.source {
            Source::File(p) => {
                let why = if p.is_dir() {
                    "is a directory, not a model file"
                } else {
                    "model file does not exist"
                };
                if !p.is_file() {
                    return Err(Error::new(why).in_file(p.display().to_string()));
                }
                kiln_onnx::load(p, &opts)?.graph
            }
            Source::Bytes(b) => {
                kiln_onnx::load_bytes(b.clone(), None, &opts)
                    .map_err(|e| e.in_file("<model bytes>"))?
                    .graph
            }
        };
        let imported = g.nodes.len();
        let layout = match self.backend {
            Backend::Reference => kiln_passes::Layout::ChannelsFirst,
            _ => kiln_passes::Layout::Auto,
        };
        let passes = kiln_passes::Options {
            layout,
            // The transforms' loop form is the CPU code generator's.
            winograd: matches!(self.backend, Backend::Cpu).then(kiln_target::host),
            ..Default::default()
        };
        kiln_passes::optimize(&mut g, &passes)?;
        self.report(
            "import",
            &format!(
                "imported {imported} nodes, {} after graph passes ({:.0} ms)",
                g.nodes.len(),
                start.elapsed().as_secs_f64() * 1e3
            ),
        );
        Ok(g)
    }

    fn cpu_options(&self) -> CpuOptions {
        let mut o = CpuOptions::default();
        if let Some(t) = self.threads {
            o.threads = t.max(1);
        }
        if let Some(dir) = &self.cache_dir {
            o.compiler.cache_dir = dir.clone();
        }
        o.fusion = self.fusion;
        o
    }
}

/// Imports, optimizes and compiles `req`'s model; errors carry the class
/// of the stage that failed.
pub fn build(req: &Request) -> std::result::Result<Built, Staged> {
    let graph = req.graph().map_err(at(Stage::Model))?;
    let start = Instant::now();
    let (engine, summary) = match req.backend {
        Backend::Reference => (Engine::Reference, "reference interpreter".to_string()),
        Backend::Cpu => {
            let m =
                CompiledModel::compile(&graph, &req.cpu_options()).map_err(at(Stage::Compile))?;
            let s = cpu_summary(&m);
            (Engine::Cpu(m), s)
        }
        Backend::Cuda => {
            let opts = CudaOptions {
                fusion: req.fusion,
                cache_dir: req.cache_dir.clone(),
                tf32: req.tf32,
                ..Default::default()
            };
            let m = CudaModel::compile(&graph, &opts).map_err(|e| (cuda_stage(&e), e))?;
            let s = format!(
                "cuda: {} kernels on {}",
                m.summary().kernels,
                m.summary().device
            );
            (Engine::Cuda(m), s)
        }
    };
    req.report(
        "compile",
        &format!("{summary} ({:.2} s)", start.elapsed().as_secs_f64()),
    );
    Ok(Built {
        graph,
        engine,
        summary,
    })
}

/// Imports and optimizes `req`'s model and writes its standalone C library
/// into `dir` for the host CPU.
pub fn export_c(
    req: &Request,
    name: &str,
    openmp: bool,
    weights: kiln_cpu::aot::WeightsMode,
    dir: &std::path::Path,
) -> std::result::Result<Vec<PathBuf>, Staged> {
    let graph = req.graph().map_err(at(Stage::Model))?;
    let cpu = req.cpu_options();
    let aot = kiln_cpu::aot::AotOptions {
        name: name.to_string(),
        preset: kiln_cpu::aot::host_preset(),
        threads: cpu.threads,
        openmp,
        weights,
    };
    let report = kiln_cpu::aot::export(&graph, &cpu, &aot, dir).map_err(at(Stage::Compile))?;
    Ok(report.files)
}

/// A missing driver, library or GPU is the machine's lack, not the
/// model's fault.
fn cuda_stage(e: &Error) -> Stage {
    if e.kind() == ErrorKind::Unavailable {
        Stage::Backend
    } else {
        Stage::Compile
    }
}

fn cpu_summary(m: &CompiledModel) -> String {
    let r = &m.report;
    let how = match &r.compile {
        Some(c) if c.cached => "loaded from cache",
        Some(_) => "compiled",
        None => "no kernels",
    };
    format!(
        "cpu: {} kernels, {} nodes on the interpreter, {how}",
        r.kernels,
        r.interpreted.len()
    )
}

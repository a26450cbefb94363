//! `kiln._kiln`: the compiled part of the Python package. The public API
//! is the Python package `kiln` (python/kiln), which checks arguments,
//! converts numpy arrays and documents everything; this module compiles,
//! runs and exports models.

mod buffer;
mod errors;
mod model;
mod pipeline;

use errors::{at, guarded, Stage};
use kiln_fuse::PlannerKind;
use kiln_ir::{Error, Result};
use pipeline::{Backend, Request, Source};
use pyo3::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;

fn planner(name: &str) -> Result<PlannerKind> {
    name.parse().map_err(Error::new)
}

fn source(path: Option<PathBuf>, data: Option<Vec<u8>>) -> Result<Source> {
    match (path, data) {
        (Some(p), None) => Ok(Source::File(p)),
        (None, Some(b)) => Ok(Source::Bytes(bytes::Bytes::from(b))),
        _ => kiln_ir::bail!("give the model as a path or as bytes, not both"),
    }
}

fn compile_args(
    backend: &str,
    fusion: &str,
    path: Option<PathBuf>,
    data: Option<Vec<u8>>,
) -> Result<(Backend, PlannerKind, Source)> {
    Ok((
        Backend::parse(backend)?,
        planner(fusion)?,
        source(path, data)?,
    ))
}

fn export_args(
    name: &str,
    fusion: &str,
    weights: &str,
    path: Option<PathBuf>,
    data: Option<Vec<u8>>,
) -> Result<(PlannerKind, kiln_cpu::aot::WeightsMode, Source)> {
    kiln_cpu::aot::check_name(name)?;
    Ok((
        planner(fusion)?,
        kiln_cpu::aot::WeightsMode::parse(weights)?,
        source(path, data)?,
    ))
}

/// Compiles a model given as a file path or as serialized ONNX bytes.
#[pyfunction]
#[pyo3(signature = (path, data, backend, fusion, threads, input_shapes, cache_dir, progress, tf32))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    path: Option<PathBuf>,
    data: Option<Vec<u8>>,
    backend: &str,
    fusion: &str,
    threads: Option<usize>,
    input_shapes: HashMap<String, Vec<usize>>,
    cache_dir: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
    tf32: bool,
) -> PyResult<model::Model> {
    let (backend, fusion, source) =
        guarded(|| compile_args(backend, fusion, path, data).map_err(at(Stage::Argument)))?;
    let req = Request {
        source,
        backend,
        fusion,
        threads,
        input_shapes,
        cache_dir,
        progress,
        tf32,
    };
    let built = py.detach(|| guarded(|| pipeline::build(&req)))?;
    let input_shapes = built
        .graph
        .inputs
        .iter()
        .map(|&id| built.graph.ty(id).shape.clone().unwrap_or_default())
        .collect();
    Ok(model::Model {
        input_shapes,
        graph: built.graph,
        engine: built.engine,
        backend,
        fusion,
        summary: built.summary,
    })
}

/// Writes a standalone C library of the model into `out_dir` (what `kiln
/// compile --emit aot` writes); returns the files written.
#[pyfunction]
#[pyo3(signature = (path, data, out_dir, name, fusion, threads, openmp, weights, input_shapes))]
#[allow(clippy::too_many_arguments)]
fn export_c(
    py: Python<'_>,
    path: Option<PathBuf>,
    data: Option<Vec<u8>>,
    out_dir: PathBuf,
    name: Option<String>,
    fusion: &str,
    threads: Option<usize>,
    openmp: bool,
    weights: &str,
    input_shapes: HashMap<String, Vec<usize>>,
) -> PyResult<Vec<PathBuf>> {
    let name = name.unwrap_or_else(|| match &path {
        Some(p) => kiln_cpu::aot::default_name(p),
        None => "model".to_string(),
    });
    let (fusion, weights, source) =
        guarded(|| export_args(&name, fusion, weights, path, data).map_err(at(Stage::Argument)))?;
    let req = Request {
        source,
        backend: Backend::Cpu,
        fusion,
        threads,
        input_shapes,
        cache_dir: None,
        progress: None,
        tf32: false,
    };
    py.detach(|| guarded(|| pipeline::export_c(&req, &name, openmp, weights, &out_dir)))
}

/// Where compiled code is cached by default (`$KILN_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`).
#[pyfunction]
fn default_cache_dir() -> PathBuf {
    kiln_runtime::jit::default_cache_dir()
}

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(export_c, m)?)?;
    m.add_function(wrap_pyfunction!(default_cache_dir, m)?)?;
    m.add_class::<model::Model>()?;
    m.add_class::<buffer::Buffer>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

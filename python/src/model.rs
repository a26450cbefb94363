//! `kiln._kiln.Model`: a compiled model. The Python class `kiln.Model`
//! wraps it, checks inputs against its signature and turns its output
//! buffers into numpy arrays.

use crate::buffer::{numpy_name, Buffer};
use crate::errors::{at, guarded, Stage};
use crate::pipeline::{Backend, Engine};
use kiln_cpu::{BorrowedTensor, Input};
use kiln_fuse::PlannerKind;
use kiln_ir::{bail, Graph, Result, Tensor, ValueId};
use pyo3::prelude::*;

#[pyclass(frozen, module = "kiln._kiln")]
pub struct Model {
    pub(crate) graph: Graph,
    pub(crate) engine: Engine,
    pub(crate) backend: Backend,
    pub(crate) fusion: PlannerKind,
    pub(crate) summary: String,
    /// The graph inputs' declared shapes (static), which runs borrow.
    pub(crate) input_shapes: Vec<Vec<usize>>,
}

/// (name, numpy type name, shape) of each value.
fn signature(g: &Graph, ids: &[ValueId]) -> PyResult<Vec<(String, String, Vec<usize>)>> {
    ids.iter()
        .map(|&id| {
            let ty = g.ty(id);
            let dtype = numpy_name(ty.dtype)
                .map(str::to_string)
                .unwrap_or_else(|_| ty.dtype.to_string());
            Ok((
                g.name(id).to_string(),
                dtype,
                ty.shape.clone().unwrap_or_default(),
            ))
        })
        .collect()
}

impl Model {
    /// Runs on the caller's memory, one address per graph input: kernels
    /// of the CPU backend read it in place, the other backends take
    /// copies.
    fn run_raw(&self, addresses: &[usize]) -> Result<Vec<Tensor>> {
        if addresses.len() != self.graph.inputs.len() {
            bail!(
                "the model has {} inputs but {} were given",
                self.graph.inputs.len(),
                addresses.len()
            );
        }
        let mut views = Vec::with_capacity(addresses.len());
        for ((&ptr, &id), shape) in addresses
            .iter()
            .zip(&self.graph.inputs)
            .zip(&self.input_shapes)
        {
            // SAFETY: `kiln.Model.run` (Python) passes the address of a
            // C-contiguous, aligned numpy array of each input's declared
            // type and shape, and holds the arrays for the whole call.
            views.push(Input::Borrowed(unsafe {
                BorrowedTensor::new(self.graph.ty(id).dtype, shape, ptr as *const u8)?
            }));
        }
        match &self.engine {
            Engine::Cpu(m) => m.run_inputs(&views),
            Engine::Cuda(m) => m.run(&owned(&views)?),
            Engine::Reference => kiln_interp::run(&self.graph, &owned(&views)?),
        }
    }
}

fn owned(views: &[Input]) -> Result<Vec<Tensor>> {
    views.iter().map(|v| v.to_tensor()).collect()
}

#[pymethods]
impl Model {
    /// Runs the model on the elements at `addresses` (one per input, of
    /// its declared type and shape, C-contiguous and aligned: the caller
    /// checks); returns one buffer per output. The GIL is released while
    /// the model runs.
    fn run(&self, py: Python<'_>, addresses: Vec<usize>) -> PyResult<Vec<Buffer>> {
        let outputs = py.detach(|| guarded(|| self.run_raw(&addresses).map_err(at(Stage::Run))))?;
        outputs
            .into_iter()
            .map(|t| Buffer::new(t).map_err(crate::errors::run_error))
            .collect()
    }

    /// `[(name, dtype, shape)]` of the graph inputs.
    #[getter]
    fn inputs(&self) -> PyResult<Vec<(String, String, Vec<usize>)>> {
        signature(&self.graph, &self.graph.inputs)
    }

    /// `[(name, dtype, shape)]` of the graph outputs.
    #[getter]
    fn outputs(&self) -> PyResult<Vec<(String, String, Vec<usize>)>> {
        signature(&self.graph, &self.graph.outputs)
    }

    #[getter]
    fn backend(&self) -> &'static str {
        self.backend.name()
    }

    #[getter]
    fn fusion(&self) -> &'static str {
        self.fusion.name()
    }

    /// One line on how the model was compiled.
    #[getter]
    fn summary(&self) -> &str {
        &self.summary
    }

    /// The fusion report as HTML: the CPU backend's own plan, or for the
    /// other backends the plan the CPU backend would make.
    fn explain_html(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| guarded(|| self.fusion_html().map_err(at(Stage::Model))))
    }
}

impl Model {
    fn fusion_html(&self) -> Result<String> {
        let planned = match &self.engine {
            Engine::Cpu(m) => m.report.fusion.clone(),
            _ => kiln_cpu::program::plan_fusion(&self.graph, self.fusion, &kiln_target::host())?,
        };
        Ok(kiln_fuse::report::html(&self.graph, &planned, &[]))
    }
}

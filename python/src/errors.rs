//! kiln's errors as the Python package's exceptions (`kiln.errors`): the
//! class says what failed (the model, an unsupported feature, compilation,
//! a run), the attributes where (file, node, op, opset). Panics become
//! `kiln.KilnError` too: none reaches Python as a crash.

use kiln_ir::{Error, ErrorKind};
use pyo3::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The stage an error comes from, which picks its class unless the error
/// itself says the input is unsupported.
#[derive(Debug, Clone, Copy)]
pub enum Stage {
    /// Import, graph passes, planning: the model is at fault.
    Model,
    /// Generating and compiling code.
    Compile,
    /// Running a compiled model.
    Run,
    /// A backend that cannot start here (no GPU, no driver).
    Backend,
    /// A bad argument: Python's own `ValueError`.
    Argument,
}

impl Stage {
    fn class(self, e: &Error) -> &'static str {
        if e.kind() == ErrorKind::Unsupported {
            return "UnsupportedError";
        }
        match self {
            Stage::Model => "ModelError",
            Stage::Compile => "CompileError",
            Stage::Run => "RunError",
            Stage::Backend => "BackendUnavailableError",
            Stage::Argument => "ValueError",
        }
    }
}

/// The Python exception for `e` raised at `stage`.
pub fn to_py(stage: Stage, e: Error) -> PyErr {
    if let Stage::Argument = stage {
        return pyo3::exceptions::PyValueError::new_err(e.to_string());
    }
    Python::attach(|py| match exception(py, stage.class(&e), &e) {
        Ok(err) => err,
        Err(import_failed) => import_failed,
    })
}

fn exception(py: Python<'_>, class: &str, e: &Error) -> PyResult<PyErr> {
    let loc = e.location();
    let cls = py.import("kiln.errors")?.getattr(class)?;
    let value = cls.call1((e.to_string(), loc.file, loc.node, loc.op, loc.opset))?;
    Ok(PyErr::from_value(value))
}

/// A failure while running (for `map_err`).
pub fn run_error(e: Error) -> PyErr {
    to_py(Stage::Run, e)
}

/// An error with the stage it comes from.
pub type Staged = (Stage, Error);

/// Tags errors with `stage` (for `map_err`).
pub fn at(stage: Stage) -> impl Fn(Error) -> Staged {
    move |e| (stage, e)
}

/// Runs `f`, turning its error into the exception of its stage and a
/// panic into `kiln.KilnError` ("internal error").
pub fn guarded<T>(f: impl FnOnce() -> Result<T, Staged>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|(stage, e)| to_py(stage, e)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            let e = Error::new(format!(
                "internal error (please report it with the model): {what}"
            ));
            Err(Python::attach(|py| {
                exception(py, "KilnError", &e).unwrap_or_else(|import_failed| import_failed)
            }))
        }
    }
}

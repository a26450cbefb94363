//! Output tensors handed to numpy without a copy: a [`Buffer`] owns the
//! tensor and exposes its elements through numpy's array interface, so the
//! array numpy makes keeps the buffer (and the memory) alive.

use kiln_ir::{DType, Error, Result, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::sync::Arc;

/// One output tensor. Python reads it with `numpy.asarray(buffer)`.
#[pyclass(frozen, module = "kiln._kiln")]
pub struct Buffer {
    /// Owns the memory `ptr` points into; never read through again.
    _tensor: Tensor,
    ptr: usize,
    dtype: DType,
    shape: Vec<usize>,
}

impl Buffer {
    /// Takes `t`, copying its elements first when they are shared (a
    /// weight or an input returned as an output), so the array numpy makes
    /// is the only user of its memory and may be written.
    pub fn new(mut t: Tensor) -> Result<Buffer> {
        let ptr = unique_ptr(&mut t.data)? as usize;
        Ok(Buffer {
            dtype: t.dtype(),
            shape: t.shape.clone(),
            ptr,
            _tensor: t,
        })
    }
}

/// The address of `data`'s elements, made unique first.
fn unique_ptr(data: &mut kiln_ir::Data) -> Result<*mut u8> {
    kiln_ir::dispatch_num!(
        data,
        |v: T| {
            if Arc::get_mut(v).is_none() {
                *v = v.to_vec().into();
            }
            Arc::get_mut(v)
                .map(|s| s.as_mut_ptr() as *mut u8)
                .ok_or_else(|| Error::new("internal error: a fresh output copy is shared"))
        },
        Err(Error::new("string tensors cannot be returned to numpy"))
    )
}

/// Each numeric kiln type with its numpy name and numpy type string
/// (bfloat16 travels as its 16 bits; the Python side views it as
/// `ml_dtypes.bfloat16`).
const NUMPY_TYPES: [(DType, &str, &str); 13] = [
    (DType::F32, "float32", "<f4"),
    (DType::F64, "float64", "<f8"),
    (DType::F16, "float16", "<f2"),
    (DType::BF16, "bfloat16", "<u2"),
    (DType::I8, "int8", "|i1"),
    (DType::I16, "int16", "<i2"),
    (DType::I32, "int32", "<i4"),
    (DType::I64, "int64", "<i8"),
    (DType::U8, "uint8", "|u1"),
    (DType::U16, "uint16", "<u2"),
    (DType::U32, "uint32", "<u4"),
    (DType::U64, "uint64", "<u8"),
    (DType::Bool, "bool", "|b1"),
];

fn numpy_entry(dtype: DType) -> Result<(DType, &'static str, &'static str)> {
    NUMPY_TYPES
        .into_iter()
        .find(|e| e.0 == dtype)
        .ok_or_else(|| Error::new(format!("{dtype} tensors have no numpy type")))
}

/// numpy's name of a kiln element type (`float32`, ...).
pub fn numpy_name(dtype: DType) -> Result<&'static str> {
    Ok(numpy_entry(dtype)?.1)
}

#[pymethods]
impl Buffer {
    /// numpy's array interface (version 3) over the tensor's elements.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item(
            "typestr",
            numpy_entry(self.dtype).map_err(crate::errors::run_error)?.2,
        )?;
        d.set_item("data", (self.ptr, false))?;
        Ok(d)
    }

    /// The element type's numpy name (`float32`, `bfloat16`, ...).
    #[getter]
    fn dtype(&self) -> PyResult<&'static str> {
        numpy_name(self.dtype).map_err(crate::errors::run_error)
    }
}

// SAFETY: the buffer only holds the tensor to keep its memory alive and
// never touches the elements itself; numpy reads and writes them through
// `ptr` under the rules of any numpy array.
unsafe impl Send for Buffer {}
unsafe impl Sync for Buffer {}

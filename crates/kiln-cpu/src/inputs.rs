//! Graph inputs as a run receives them: kiln tensors, or memory the caller
//! owns and kiln reads in place (the Python package's numpy arrays).
//!
//! Guarantees: kernels read a borrowed input where it lies (no copy); a
//! node left to the interpreter gets a copy of it as a [`Tensor`].

use crate::memory::{data_ptr, from_bytes};
use kiln_ir::{bail, DType, Result, Tensor};
use std::marker::PhantomData;

/// Dense, row-major elements of one numeric or bool type in memory the
/// caller owns for `'a`.
#[derive(Debug, Clone, Copy)]
pub struct BorrowedTensor<'a> {
    dtype: DType,
    shape: &'a [usize],
    ptr: *const u8,
    _memory: PhantomData<&'a [u8]>,
}

impl<'a> BorrowedTensor<'a> {
    /// # Safety
    /// `ptr` must point to `shape.iter().product()` initialised elements of
    /// `dtype`, aligned for it, that stay valid and unchanged for `'a`.
    pub unsafe fn new(dtype: DType, shape: &'a [usize], ptr: *const u8) -> Result<Self> {
        if dtype == DType::Str {
            bail!("string tensors cannot be passed as raw memory");
        }
        Ok(BorrowedTensor {
            dtype,
            shape,
            ptr,
            _memory: PhantomData,
        })
    }
}

/// One graph input of a run.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    Tensor(&'a Tensor),
    Borrowed(BorrowedTensor<'a>),
}

impl Input<'_> {
    pub fn dtype(&self) -> DType {
        match self {
            Input::Tensor(t) => t.dtype(),
            Input::Borrowed(b) => b.dtype,
        }
    }

    pub fn shape(&self) -> &[usize] {
        match self {
            Input::Tensor(t) => &t.shape,
            Input::Borrowed(b) => b.shape,
        }
    }

    /// Where a kernel reads the elements (kernels never write inputs).
    pub(crate) fn ptr(&self) -> Result<*mut u8> {
        match self {
            Input::Tensor(t) => data_ptr(t),
            Input::Borrowed(b) => Ok(b.ptr as *mut u8),
        }
    }

    /// The input as a tensor: shared for a tensor, copied for borrowed
    /// memory.
    pub fn to_tensor(self) -> Result<Tensor> {
        match self {
            Input::Tensor(t) => Ok(t.clone()),
            Input::Borrowed(b) => from_bytes(b.dtype, b.shape.to_vec(), b.ptr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_memory_reads_back_as_the_same_tensor() {
        let v = [1.5f32, -2.0, 3.25, 0.0, 7.0, 8.5];
        let shape = [2, 3];
        // SAFETY: `v` holds 6 f32s and outlives the borrow.
        let b = unsafe { BorrowedTensor::new(DType::F32, &shape, v.as_ptr() as *const u8) }
            .expect("f32 borrows");
        let input = Input::Borrowed(b);
        assert_eq!((input.dtype(), input.shape()), (DType::F32, &shape[..]));
        assert_eq!(input.ptr().expect("a pointer") as *const f32, v.as_ptr());
        let t = input.to_tensor().expect("a copy");
        assert_eq!(t, Tensor::from_vec(vec![2, 3], v.to_vec()).expect("tensor"));
        // SAFETY: never read (strings are refused).
        assert!(unsafe { BorrowedTensor::new(DType::Str, &shape, std::ptr::null()) }.is_err());
    }
}

//! Raw memory for the executors: aligned buffers, tensors' element
//! addresses, tensors copied out of raw memory.

use kiln_ir::{bail, with_dtype, DType, Elem, Result, Tensor};

/// A zeroed, 64-byte aligned byte buffer.
pub struct AlignedBytes {
    words: Vec<Align64>,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Align64([u8; 64]);

impl AlignedBytes {
    pub fn new(n: usize) -> AlignedBytes {
        AlignedBytes {
            words: vec![Align64([0; 64]); n.div_ceil(64)],
        }
    }

    pub fn len(&self) -> usize {
        self.words.len() * 64
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    pub fn ptr(&mut self, off: usize) -> *mut u8 {
        // SAFETY: offsets come from the plan, inside the buffer.
        unsafe { (self.words.as_mut_ptr() as *mut u8).add(off) }
    }

    pub fn ptr_const(&self, off: usize) -> *const u8 {
        // SAFETY: as above.
        unsafe { (self.words.as_ptr() as *const u8).add(off) }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the words are plain initialised bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len()) }
    }
}

/// The address of a tensor's elements (numeric types).
pub fn data_ptr(t: &Tensor) -> Result<*mut u8> {
    kiln_ir::dispatch_num!(
        &t.data,
        |v: T| Ok(v.as_ptr() as *mut u8),
        bail!("string tensors have no C representation")
    )
}

/// A tensor copied from `n` elements of raw memory.
pub fn from_bytes(dtype: DType, shape: Vec<usize>, p: *const u8) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let data = with_dtype!(dtype, |T| {
        // SAFETY: the caller's memory holds `n` initialised elements of `T`
        // written by a kernel or by the executor.
        let s = unsafe { std::slice::from_raw_parts(p as *const T, n) };
        T::wrap(s.to_vec())
    });
    Tensor::new(shape, data)
}

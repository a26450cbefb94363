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
    /// `n` zero bytes (rounded up to whole 64-byte words). Allocated
    /// zeroed, not written: a large buffer's pages are the system's zero
    /// pages until first written, so packing 340 MB of weights touches each
    /// page once.
    pub fn new(n: usize) -> AlignedBytes {
        let words = n.div_ceil(64);
        if words == 0 {
            return AlignedBytes { words: Vec::new() };
        }
        let layout = std::alloc::Layout::array::<Align64>(words).unwrap_or_else(|_| {
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<Align64>())
        });
        // SAFETY: the layout is non-zero sized; zero bytes are a valid
        // `Align64`; the vector owns the allocation with the layout
        // `Vec<Align64>` of capacity `words` frees with.
        let words = unsafe {
            let ptr = std::alloc::alloc_zeroed(layout) as *mut Align64;
            if ptr.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Vec::from_raw_parts(ptr, words, words)
        };
        AlignedBytes { words }
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

/// `t` with value `v`'s declared shape in `g` (a view of an input or weight
/// shares its storage but has its own shape).
pub fn as_declared(g: &kiln_ir::Graph, v: kiln_ir::ValueId, t: Tensor) -> Result<Tensor> {
    match &g.ty(v).shape {
        Some(shape) if *shape != t.shape => t.reshaped(shape.clone()),
        _ => Ok(t),
    }
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

/// Storage for a graph output that kernels write in place, becoming the
/// returned tensor without a copy out of the arena.
pub trait OutputStorage {
    /// Where kernels write the elements.
    fn ptr(&mut self) -> Result<*mut u8>;
    /// The tensor of the elements written.
    fn into_tensor(self: Box<Self>, shape: Vec<usize>) -> Result<Tensor>;
}

/// Shared storage of `T`s that a kernel writes in full before it becomes
/// a tensor (`direct_outputs` in jit.rs: only a kernel's own outputs).
/// Left uninitialised: clearing a fresh output at every run cost a
/// Softmax over 9.4 MB about a third of its run (BENCHMARKS.md, session
/// 21). Debug builds (the tests) fill it with all-ones bytes instead, so
/// a kernel that left an element unwritten gives NaN or -1 there, not a
/// plausible zero.
struct Written<T>(std::sync::Arc<[std::mem::MaybeUninit<T>]>);

impl<T: Elem> OutputStorage for Written<T> {
    fn ptr(&mut self) -> Result<*mut u8> {
        match std::sync::Arc::get_mut(&mut self.0) {
            Some(s) => Ok(s.as_mut_ptr() as *mut u8),
            None => bail!("internal error: output storage is shared before its run ends"),
        }
    }

    fn into_tensor(self: Box<Self>, shape: Vec<usize>) -> Result<Tensor> {
        // SAFETY: the kernel that computes this output has written every
        // element with a `T` (see `Written`).
        let data = unsafe { self.0.assume_init() };
        Tensor::new(shape, T::wrap_shared(data))
    }
}

/// Storage for `n` elements of `T`, written in full by a kernel (see [`Written`]).
fn written<T: Elem>(n: usize) -> Box<dyn OutputStorage> {
    let mut s = std::sync::Arc::<[T]>::new_uninit_slice(n);
    if cfg!(debug_assertions) {
        // All-ones bytes: NaN in every float type, -1 or the maximum in
        // integers; `true` for bool, whose other bytes are no value.
        let poison = if T::DTYPE == DType::Bool { 1 } else { 0xff };
        if let Some(s) = std::sync::Arc::get_mut(&mut s) {
            // SAFETY: writes the slice's own `n` elements' bytes.
            unsafe {
                std::ptr::write_bytes(s.as_mut_ptr() as *mut u8, poison, std::mem::size_of_val(s))
            };
        }
    }
    Box::new(Written(s))
}

/// Storage for `n` elements of `dtype` (a numeric type or bool) that a kernel writes in
/// full (see [`Written`]).
pub fn output_storage(dtype: DType, n: usize) -> Result<Box<dyn OutputStorage>> {
    use kiln_ir::tensor::{bf16, f16};
    Ok(match dtype {
        DType::F32 => written::<f32>(n),
        DType::F64 => written::<f64>(n),
        DType::F16 => written::<f16>(n),
        DType::BF16 => written::<bf16>(n),
        DType::I8 => written::<i8>(n),
        DType::I16 => written::<i16>(n),
        DType::I32 => written::<i32>(n),
        DType::I64 => written::<i64>(n),
        DType::U8 => written::<u8>(n),
        DType::U16 => written::<u16>(n),
        DType::U32 => written::<u32>(n),
        DType::U64 => written::<u64>(n),
        DType::Bool => written::<bool>(n),
        other => bail!("no output storage for {other} tensors"),
    })
}

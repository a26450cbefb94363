//! kiln's CUDA backend: the driver API and NVRTC bound at run time
//! (`ffi/`), the pipeline from a graph to CUDA source (`program.rs`,
//! `select.rs`; the printer is `kiln_codegen::cuda`), the device
//! description (`target.rs`), the module cache (`cache.rs`) and the runtime
//! that runs an execution plan on one stream (`runtime.rs`).

pub mod cache;
pub mod ffi;
pub mod program;
pub mod runtime;
pub mod select;
pub mod target;

pub use runtime::{CudaModel, CudaOptions, CudaSummary};

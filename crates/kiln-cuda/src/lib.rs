//! kiln's CUDA backend.

pub mod ffi;

//! kiln code generators (DESIGN.md layer 7): C source for CPUs, CUDA C,
//! and DSA C (device and host code for a scratchpad accelerator).

pub mod bandwidth;
pub mod c;
pub mod cuda;
pub mod dsa;
pub mod gemm;
pub mod peak;
pub mod scalar_c;

//! kiln code generators (DESIGN.md layer 7): C source for CPUs.

pub mod gemm;
pub mod peak;

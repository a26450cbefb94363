//! kiln code generators (DESIGN.md layer 7): C source for CPUs.

pub mod bandwidth;
pub mod c;
pub mod cuda;
pub mod gemm;
pub mod peak;
pub mod scalar_c;

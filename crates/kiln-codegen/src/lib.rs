//! kiln code generators (DESIGN.md layer 7): C source for CPUs.

pub mod c;
pub mod scalar_c;

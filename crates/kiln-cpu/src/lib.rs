//! kiln CPU backend (DESIGN.md layers 6-8 for the CPU): every node with a
//! tensor expression becomes a C kernel lowered and scheduled by kiln-loop
//! and printed by kiln-codegen; the model is compiled once by the JIT and
//! run by the executor over one planned arena.

pub mod model;
pub mod select;

pub use model::{CompiledModel, CpuOptions, NodeTime};

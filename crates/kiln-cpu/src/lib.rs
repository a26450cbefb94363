//! kiln CPU backend (DESIGN.md layers 6-8 for the CPU): every node with a
//! tensor expression becomes a C kernel lowered and scheduled by kiln-loop
//! and printed by kiln-codegen (`select.rs`); `program.rs` builds the whole
//! pipeline's result for the CPU target (fusion, kernels, execution plan,
//! concatenations assembled in place by their producers:
//! `concat_in_place.rs`);
//! `jit.rs` compiles it once and runs it over one planned arena, keeping
//! each weight once, decoded or packed (`weights.rs`).

pub mod aot;
pub mod concat_in_place;
pub mod inputs;
pub mod jit;
pub mod memory;
pub mod packed_cache;
pub mod program;
pub mod select;
pub mod shared_kernels;
pub mod tuning;
pub mod weights;

pub use inputs::{BorrowedTensor, Input};
pub use jit::{CompileSummary, CompiledModel, NodeTime};
pub use program::{CpuOptions, CpuProgram};

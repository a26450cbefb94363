//! Execution plans (DESIGN.md "Targets"): a compiled model as data.
//!
//! An [`ExecPlan`] is target-neutral: the ordered steps of a compiled model
//! (kernel calls with their buffer bindings, concurrent blocks, views that
//! alias their input, concatenations assembled in place by their parts'
//! producers, nodes left outside generated code), where every value
//! lives (graph input, weight, arena offset, executor-held), the weight
//! packings made before the first run, and the sizes of the arena and the
//! shared workspace. The JIT executes it, the AOT exporter prints it as C;
//! it prints and parses back (`text.rs`, `parse.rs`).

pub mod assemble;
pub mod build;
pub mod memplan;
mod parse;
mod plan;
mod text;

pub use build::{build, KernelInfo, PlanRequest, WorkspaceNeed};
pub use parse::parse_plan;
pub use plan::*;

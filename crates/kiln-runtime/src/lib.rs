//! kiln runtime (DESIGN.md layer 8).

pub mod cache_limit;
pub mod cpu;
pub mod jit;

pub use cpu::{available_threads, cpu_model_name};
pub use jit::{compile, CompileReport, CompilerConfig, Library};

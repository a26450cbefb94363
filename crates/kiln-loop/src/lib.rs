//! kiln loop IR (DESIGN.md layer 6): loop nests over flat buffers, lowered
//! from tensor expressions, rewritten by schedules given as data.

mod arg_passes;
pub mod auto_schedule;
pub mod cache;
pub mod canonical;
pub mod combine;
pub mod contraction;
mod distribute;
pub mod fused;
pub mod gpu_map;
pub mod group;
pub mod grouped;
pub mod guards;
pub mod inline_constants;
pub mod ir;
pub mod jam;
mod lane_partials;
pub mod lower;
pub mod operand_scale;
mod parse;
mod partial_sums;
pub mod reciprocal;
pub mod row_values;
mod rows_across;
pub mod schedule;
mod text;
pub mod window;
pub mod winograd;
pub mod write_as_part;

pub use auto_schedule::default_schedule;
pub use ir::{
    ArgStep, Atom, Buffer, Combine, CombineMode, ConvWindow, Extent, Gemm, GemmInput, GemmOperand,
    Idx, Kernel, Loop, LoopKind, Scope, Stmt, Val, WindowLayout,
};
pub use lower::lower;
pub use parse::parse as parse_kernel;
pub use schedule::{apply, Directive, Schedule};

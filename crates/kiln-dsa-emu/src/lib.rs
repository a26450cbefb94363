//! kiln's DSA backend (issue 21, code generation and emulation): every
//! kernel lowered for a scratchpad accelerator, tiled for its local
//! buffers (`kiln_dsa::tiling`), printed as DSA C (`kiln_codegen::dsa`),
//! and run on the host by a functional emulator in which DDR, each
//! cluster's GB and each core's LB are separate memories joined only by
//! counted DMA.
//!
//! - [`select`]: per node, its DSA kernel or why it is interpreted; the
//!   planners' feedback.
//! - [`emulator`]: the emulator's C unit (`emulator.c`) and its counters.
//! - [`model`]: the program (fusion, kernels, execution plan) compiled with
//!   the emulator through the CPU JIT and run by its executor.

pub mod emulator;
pub mod model;
pub mod select;

pub use emulator::{DmaCounts, Transfers};
pub use model::{DsaModel, DsaOptions};
pub use select::DsaTarget;

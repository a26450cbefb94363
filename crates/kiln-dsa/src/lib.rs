//! kiln's scratchpad accelerator (DSA) target.
//!
//! - [`desc`]: hardware descriptions (GraphTurbo §1's clusters × cores ×
//!   units with local and global buffers, swTVM's Sunway core group) and
//!   the presets (`presets/*.toml`), `dsa:NAME` / `dsa:PATH.toml` targets.
//! - [`nest`], [`text`]: the loop nests swTVM's local-memory algorithms
//!   (§5) read, and their text form.
//! - swTVM §5, one algorithm per module: [`correlation`] (Algorithm 4),
//!   [`classify`] (Algorithm 5), [`ldm`] (Algorithm 1, buffer sizes),
//!   [`reorder`] (Algorithm 2, loop order), [`dma`] (Algorithm 3, DMA
//!   placement); [`tile`] (what a buffer holds, contiguous runs) and
//!   [`count`] (transfers and bytes) serve them.
//! - [`plan`]: the three algorithms run in order for one kernel.
//! - GraphTurbo §3, one algorithm per module: [`split_info`] (Algorithm
//!   1, eq. 1), [`grouping`] (Algorithm 2, and §1.1's layers);
//!   [`opgraph`] is the graph they read.

pub mod classify;
pub mod correlation;
pub mod count;
pub mod desc;
pub mod dma;
pub mod grouping;
pub mod ldm;
pub mod nest;
pub mod opgraph;
pub mod plan;
pub mod reorder;
pub mod split_info;
pub mod text;
pub mod tile;

pub use desc::{parse_target, DsaDesc};
pub use nest::{Access, Affine, Loop, Nest, Term};
pub use plan::{plan_kernel, KernelPlan};
pub use text::parse_nest;

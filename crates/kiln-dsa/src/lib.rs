//! kiln's scratchpad accelerator (DSA) target.
//!
//! - [`desc`]: hardware descriptions (GraphTurbo §1's clusters × cores ×
//!   units with local and global buffers, swTVM's Sunway core group) and
//!   the presets.
//! - [`nest`], [`text`]: the loop nests swTVM's local-memory algorithms
//!   (§5) read, and their text form.

pub mod classify;
pub mod correlation;
pub mod count;
pub mod desc;
pub mod dma;
pub mod ldm;
pub mod nest;
pub mod reorder;
pub mod text;
pub mod tile;

pub use desc::{parse_target, DsaDesc};
pub use nest::{Access, Affine, Loop, Nest, Term};
pub use text::parse_nest;

//! kiln's scratchpad accelerator (DSA) target.
//!
//! - [`desc`]: hardware descriptions (GraphTurbo §1's clusters × cores ×
//!   units with local and global buffers, swTVM's Sunway core group) and
//!   the presets.

pub mod desc;

pub use desc::{parse_target, DsaDesc};

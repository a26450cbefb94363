//! Library part of the `kiln` CLI: tensor file formats and model statistics
//! shared by the binary and its tests.

pub mod bench;
pub mod classes_doc;
pub mod cuda;
pub mod dsa;
pub mod emit;
pub mod flops;
pub mod profile;
pub mod progress;
pub mod roofline;
pub mod sim;
pub mod sim_html;
pub mod tune;
pub use kiln_ir::npy;

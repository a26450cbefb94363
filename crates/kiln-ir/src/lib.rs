//! kiln graph IR (layer 1 of DESIGN.md).
//!
//! Tensors with a dtype and a static shape, nodes, graph inputs/outputs and
//! initializers, a textual form that prints and parses back exactly, and a
//! structural verifier. This crate knows nothing of op semantics, loops or
//! targets: op-specific checks live in `kiln-ops`.

pub mod dtype;
pub mod error;
pub mod graph;
pub mod limits;
pub mod mapped;
pub mod npy;
pub mod tensor;
pub mod text;
pub mod verify;

pub use dtype::DType;
pub use error::{Error, ErrorKind, Location, Result};
pub use graph::{unique_name, Attr, Graph, Initializer, Node, TensorType, ValueId, ValueInfo};
pub use tensor::{Data, Elem, Num, Tensor};

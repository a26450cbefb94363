//! kiln graph passes (layer 4 of DESIGN.md): APOLLO §3's pre-processing of
//! the computational graph before partitioning — opening compound ops
//! (§3.2), algebraic simplification, data-flow optimization (constant
//! folding, CSE), control-flow optimization (dead code elimination) and
//! data-layout canonicalization.
//!
//! One pass per file under [`passes`], each with its contract (what it
//! needs, what it guarantees). The [`manager`] runs a pipeline of passes to
//! a fixed point and can verify the graph, time each pass and print the
//! graph after a named pass. [`edit`] is the graph-editing toolkit the
//! passes share (use counts, rewiring, fresh values), [`consts`] reads and
//! computes constants through the op registry, so no pass re-implements an
//! op's semantics, and [`patterns`] names the node shapes passes match.
//!
//! Every pass works on whatever ops the graph holds, by op name, attributes
//! and constant values; it recurses into subgraphs (If/Loop/Scan bodies)
//! and never renames a graph's inputs or outputs.

pub mod consts;
pub mod edit;
pub mod manager;
pub mod pass;
pub mod passes;
pub mod patterns;
pub mod report;

pub use manager::{optimize, optimize_to, Options, PassManager};
pub use pass::Pass;
pub use passes::channels_last::Layout;
pub use report::{PassStats, Report};

//! Opening compound ops (APOLLO §3.2): every node whose op is defined as a
//! decomposition (Softmax, LayerNorm, ReduceMean, Conv with a bias, ...)
//! is replaced by the primitive ops of that decomposition, so fusion never
//! stops at an op boundary. A thin wrapper over
//! [`kiln_ops::compound::open_compounds`], which also recurses into
//! subgraphs.
//!
//! Needs: a type-inferred graph. Guarantees: no node left whose op
//! decomposes; the opened nodes write the original output values, so
//! names and users are unchanged. Runs first in the default pipeline and
//! only once (no later pass creates compound ops).

use crate::pass::Pass;
use kiln_ir::{Graph, Result};

pub struct OpenCompounds;

impl Pass for OpenCompounds {
    fn name(&self) -> &'static str {
        "open_compounds"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        Ok(kiln_ops::compound::open_compounds(g)? > 0)
    }
}

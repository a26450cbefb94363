//! The passes, one per file, and the default pipeline.
//!
//! Default pipeline, to a fixed point: `open_compounds` (so the passes after
//! it see primitives; it runs every round because a decomposition may need
//! a value that only becomes constant by folding, e.g. Split sizes from a
//! Constant node), `fold_shapes`, `fold_constants`, `simplify`,
//! `canonicalize_layout`, `fold_affine`, `trim_conv_taps`, `cse`, `dce`:
//! shape facts become constants, constants fold, the algebra and layout
//! rules expose more folding and merging, convolution taps that read only
//! padding go, and dead code goes last so each round leaves a
//! compact graph.

use crate::pass::Pass;
use kiln_ir::{bail, Result};

pub mod canonicalize_layout;
pub mod channels_last;
pub mod cse;
pub mod dce;
pub mod fold_affine;
pub mod fold_constants;
pub mod fold_shapes;
pub mod open_compounds;
pub mod simplify;
pub mod trim_conv_taps;
pub mod winograd;

/// Every pass, in default pipeline order.
pub fn all() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(open_compounds::OpenCompounds),
        Box::new(fold_shapes::FoldShapes),
        Box::new(fold_constants::FoldConstants),
        Box::new(simplify::Simplify),
        Box::new(canonicalize_layout::CanonicalizeLayout),
        Box::new(fold_affine::FoldAffine),
        Box::new(trim_conv_taps::TrimConvTaps),
        Box::new(cse::Cse),
        Box::new(dce::Dce),
    ]
}

/// Names of all passes, in default pipeline order.
pub fn names() -> Vec<&'static str> {
    all().iter().map(|p| p.name()).collect()
}

/// The pass called `name`; the error lists the valid names.
pub fn by_name(name: &str) -> Result<Box<dyn Pass>> {
    match all().into_iter().find(|p| p.name() == name) {
        Some(p) => Ok(p),
        None => bail!("unknown pass '{name}'; passes are: {}", names().join(", ")),
    }
}

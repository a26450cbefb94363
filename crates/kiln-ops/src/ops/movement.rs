//! Data movement ops: the ones that copy, reorder, select or scatter
//! elements without arithmetic on them (Transpose, Concat, Split, Slice, Pad,
//! Tile, the Gather/Scatter families, NonZero, Unique, ...). They are split
//! into submodules by kind; `common` holds the index helpers they share with
//! the shape and generate families. Transpose, Tile, Trilu, Slice,
//! constant-mode Pad, Concat, Gather and GatherElements are primitives
//! (tensor expressions); DepthToSpace, SpaceToDepth, Split and the other Pad
//! modes open into them; the rest (scatter, select, ReverseSequence,
//! CenterCropPad, Compress, GatherND) are library ops.

use crate::registry::Registry;

pub(crate) mod common;
mod crop;
mod gather;
mod join;
mod layout;
mod scatter;
mod select;

pub fn register(r: &mut Registry) {
    layout::register(r);
    join::register(r);
    crop::register(r);
    gather::register(r);
    scatter::register(r);
    select::register(r);
}

#[cfg(test)]
mod classes;
#[cfg(test)]
mod robustness;

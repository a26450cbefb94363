//! Data movement ops: the ones that copy, reorder, select or scatter
//! elements without arithmetic on them (Transpose, Concat, Split, Slice, Pad,
//! Tile, the Gather/Scatter families, NonZero, Unique, ...). They are split
//! into submodules by kind; `common` holds the index helpers they share with
//! the shape and generate families.

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

//! Parts of the `kiln` binary: its arguments and the `explain` command.

pub(crate) mod args;
pub(crate) mod explain;

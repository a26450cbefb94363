//! placeholder
use crate::registry::Registry;
pub fn register(_r: &mut Registry) {}

//! The interchangeable planners; each returns a [`crate::Plan`].

pub mod apollo;
pub mod dp;
pub mod none;
pub mod tvm;

use crate::graph::NodeInfo;
use kiln_ops::te::classify::ApolloType;

/// A one-word kind for a group of one node, for reports.
pub fn node_kind(info: &NodeInfo) -> String {
    type_kind(info.apollo())
}

/// A one-word kind for a group of APOLLO type `ty`: the type, or an opaque
/// op's kind (`matmul`, `conv`, `transpose`, …).
pub fn type_kind(ty: ApolloType) -> String {
    match ty {
        ApolloType::Opaque(k) => k.to_string(),
        t => t.to_string(),
    }
}

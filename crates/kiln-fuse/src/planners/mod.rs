//! The interchangeable planners; each returns a [`crate::Plan`].

pub mod apollo;
pub mod dp;
pub mod none;
pub mod tvm;

use crate::graph::NodeInfo;

/// A one-word kind for a group of one node, for reports.
pub fn node_kind(info: &NodeInfo) -> String {
    use kiln_ops::te::classify::ApolloType;
    match info.apollo() {
        ApolloType::Opaque(k) => k.to_string(),
        t => t.to_string(),
    }
}

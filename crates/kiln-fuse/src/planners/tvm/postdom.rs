//! The post-dominator tree TVM's FuseOps grows groups along (relay
//! `DominatorTree::PostDom`).
//!
//! Needs: a [`FusionGraph`] (nodes in topological order).
//! Guarantees: `parent[n]` is `n`'s immediate post-dominator, the first
//! node every path from `n` to the graph's end passes through, or `None`
//! when that is the virtual sink: graph outputs (TVM's `extern_ref`: their
//! value is needed outside, so they never fuse into a consumer), nodes
//! without consumers, and nodes whose paths only meet at the end.
//! `pattern[n]` combines the edge patterns on every path from `n` to its
//! post-dominator and the patterns of the tree nodes passed on the way
//! (TVM's `LeastCommonAncestor`), so it is the most complex op kind any
//! path from `n` crosses before it reaches `parent[n]`.

use super::pattern::{edge_pattern, Pattern};
use crate::graph::FusionGraph;

#[derive(Debug, Clone)]
pub struct PostDomTree {
    /// Immediate post-dominator; `None` is the virtual sink.
    pub parent: Vec<Option<usize>>,
    /// Depth below the virtual sink (its children have depth 1).
    depth: Vec<usize>,
    /// Combined pattern of the paths from the node to its parent.
    pub pattern: Vec<Pattern>,
}

impl PostDomTree {
    pub fn new(fg: &FusionGraph) -> PostDomTree {
        let n = fg.len();
        let mut tree = PostDomTree {
            parent: vec![None; n],
            depth: vec![1; n],
            pattern: vec![Pattern::ElemWise; n],
        };
        for node in (0..n).rev() {
            tree.attach(fg, node);
        }
        tree
    }

    /// Sets `node`'s parent, depth and pattern; its consumers (later in
    /// topological order) are already in the tree.
    fn attach(&mut self, fg: &FusionGraph, node: usize) {
        let info = &fg.nodes[node];
        if info.graph_output {
            self.pattern[node] = Pattern::Opaque;
            return;
        }
        let mut pattern = Pattern::ElemWise;
        let mut consumers = info.consumers.iter().copied();
        let Some(first) = consumers.next() else {
            return;
        };
        pattern = pattern.combine(edge_pattern(fg, node, first));
        let mut parent = Some(first);
        for c in consumers {
            parent = self.common_ancestor(parent, Some(c), &mut pattern);
            pattern = pattern.combine(edge_pattern(fg, node, c));
        }
        self.parent[node] = parent;
        self.depth[node] = parent.map_or(1, |p| self.depth[p] + 1);
        self.pattern[node] = pattern;
    }

    /// The least common ancestor of `a` and `b` (`None`: the sink),
    /// combining into `pattern` the patterns of the nodes walked past.
    fn common_ancestor(
        &self,
        mut a: Option<usize>,
        mut b: Option<usize>,
        pattern: &mut Pattern,
    ) -> Option<usize> {
        while a != b {
            let (x, y) = (a?, b?);
            if self.depth[x] >= self.depth[y] {
                *pattern = pattern.combine(self.pattern[x]);
                a = self.parent[x];
            }
            if self.depth[y] >= self.depth[x] {
                *pattern = pattern.combine(self.pattern[y]);
                b = self.parent[y];
            }
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A diamond: `a` feeds `b` and a reduction `s`, which meet in `d`.
    const DIAMOND: &str = r#"input %x: f32[4,8]
        init %axes: i64[1] = [1]
        node "a" %a: f32[4,8] = Exp(%x)
        node "b" %b: f32[4,8] = Neg(%a)
        node "s" %s: f32[4,1] = ReduceSum(%a, %axes)
        node "d" %d: f32[4,8] = Sub(%b, %s)"#;

    fn tree(body: &str) -> PostDomTree {
        let src = format!("graph \"g\" opsets [\"\"=18] {{\n{body}\n}}");
        let g = kiln_ir::text::parse(&src).unwrap();
        PostDomTree::new(&FusionGraph::new(&g).unwrap())
    }

    #[test]
    fn diamond_is_post_dominated_by_its_join_and_outputs_by_the_sink() {
        let t = tree(&format!("{DIAMOND}\noutput %d, %b"));
        // b is a graph output: only the sink post-dominates it, so a's
        // paths meet at the sink too.
        assert_eq!(t.parent, vec![None, None, Some(3), None]);
        assert_eq!(t.pattern[1], Pattern::Opaque);
        assert_eq!(t.pattern[2], Pattern::Broadcast);
    }

    #[test]
    fn path_pattern_is_the_most_complex_op_crossed() {
        let t = tree(&format!("{DIAMOND}\noutput %d"));
        assert_eq!(t.parent, vec![Some(3), Some(3), Some(3), None]);
        assert_eq!(t.pattern[0], Pattern::CommReduce);
        assert_eq!(t.pattern[1], Pattern::ElemWise);
    }
}

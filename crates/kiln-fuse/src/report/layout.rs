//! The layered layout of `kiln explain`'s drawing: every group is a
//! block of node boxes, blocks are stacked in bands from top to bottom.
//!
//! Needs: node producers (nodes in topological order) and groups that
//! partition the nodes with an acyclic group graph (every plan's).
//! Guarantees: a group's band is the longest path to it in the group
//! graph, so every edge between groups points down to a later band;
//! inside a block (at least [`MIN_BLOCK_W`] wide) a node's row is the longest path to it within its
//! group, so edges inside a group point down too. Blocks never overlap,
//! and each group's rectangle bounds exactly its own nodes' boxes, so
//! fused groups can be outlined. Bands wider than [`MAX_WIDTH`] wrap.

pub const BOX_W: f64 = 112.0;
pub const BOX_H: f64 = 24.0;
/// Space above a block's first row for its label.
pub const HEADER: f64 = 18.0;
const GAP_X: f64 = 12.0;
const GAP_Y: f64 = 22.0;
const PAD: f64 = 8.0;
const MARGIN: f64 = 16.0;
/// Narrowest block: room for its label (kind, bytes in/out, time).
const MIN_BLOCK_W: f64 = 280.0;
/// Bands wrap to a new line of blocks beyond this width.
pub const MAX_WIDTH: f64 = 1400.0;

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

#[derive(Debug, Clone)]
pub struct Layout {
    /// One box per node.
    pub nodes: Vec<Rect>,
    /// One rectangle per group, around its nodes' boxes.
    pub groups: Vec<Rect>,
    pub width: f64,
    pub height: f64,
}

/// Lays out `groups` (node lists) of a graph whose node `n` reads the
/// nodes `producers[n]`.
pub fn layout(producers: &[Vec<usize>], groups: &[Vec<usize>]) -> Layout {
    let mut group_of = vec![0; producers.len()];
    for (i, members) in groups.iter().enumerate() {
        for &n in members {
            group_of[n] = i;
        }
    }
    let bands = group_bands(producers, groups, &group_of);
    let rows = node_rows(producers, &group_of);
    let mut out = Layout {
        nodes: vec![Rect::default(); producers.len()],
        groups: vec![Rect::default(); groups.len()],
        width: 0.0,
        height: MARGIN,
    };
    let band_count = bands.iter().copied().max().map_or(0, |b| b + 1);
    for band in 0..band_count {
        let (mut x, mut line_h) = (MARGIN, 0.0f64);
        for (i, members) in groups.iter().enumerate().filter(|(i, _)| bands[*i] == band) {
            let (w, h) = block_size(members, &rows);
            if x > MARGIN && x + w > MAX_WIDTH {
                out.height += line_h + GAP_Y;
                (x, line_h) = (MARGIN, 0.0);
            }
            let y = out.height;
            place_block(&mut out, i, members, &rows, x, y);
            x += w + GAP_X;
            line_h = line_h.max(h);
            out.width = out.width.max(x - GAP_X + MARGIN);
        }
        out.height += line_h + GAP_Y;
    }
    out.height += MARGIN;
    out
}

/// Longest path to each group in the group graph (groups taken in
/// topological order of that graph).
fn group_bands(producers: &[Vec<usize>], groups: &[Vec<usize>], group_of: &[usize]) -> Vec<usize> {
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); groups.len()];
    for (n, ps) in producers.iter().enumerate() {
        for &p in ps {
            if group_of[p] != group_of[n] {
                preds[group_of[n]].push(group_of[p]);
            }
        }
    }
    let mut band: Vec<Option<usize>> = vec![None; groups.len()];
    // Each round places the groups whose predecessors are all placed; an
    // acyclic group graph needs at most one round per group.
    for _ in 0..groups.len() {
        let mut changed = false;
        for i in 0..groups.len() {
            if band[i].is_some() {
                continue;
            }
            let pb: Option<Vec<usize>> = preds[i].iter().map(|&p| band[p]).collect();
            if let Some(pb) = pb {
                band[i] = Some(pb.iter().map(|b| b + 1).max().unwrap_or(0));
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    band.into_iter().map(|b| b.unwrap_or(0)).collect()
}

/// Longest path to each node from its group's entry nodes.
fn node_rows(producers: &[Vec<usize>], group_of: &[usize]) -> Vec<usize> {
    let mut row = vec![0; producers.len()];
    for (n, ps) in producers.iter().enumerate() {
        row[n] = ps
            .iter()
            .filter(|&&p| group_of[p] == group_of[n])
            .map(|&p| row[p] + 1)
            .max()
            .unwrap_or(0);
    }
    row
}

/// Width and height of a block holding `members`.
fn block_size(members: &[usize], rows: &[usize]) -> (f64, f64) {
    let row_count = members.iter().map(|&n| rows[n] + 1).max().unwrap_or(1);
    let widest = (0..row_count)
        .map(|r| members.iter().filter(|&&n| rows[n] == r).count())
        .max()
        .unwrap_or(1);
    let w = (2.0 * PAD + widest as f64 * (BOX_W + GAP_X) - GAP_X).max(MIN_BLOCK_W);
    let h = HEADER + PAD + row_count as f64 * (BOX_H + GAP_Y) - GAP_Y + PAD;
    (w, h)
}

/// Places group `i`'s block with its top-left corner at (`x`, `y`).
fn place_block(out: &mut Layout, i: usize, members: &[usize], rows: &[usize], x: f64, y: f64) {
    let (w, h) = block_size(members, rows);
    out.groups[i] = Rect { x, y, w, h };
    let mut used = vec![0usize; members.len()];
    for &n in members {
        let r = rows[n];
        let col = used.get(r).copied().unwrap_or(0);
        if let Some(u) = used.get_mut(r) {
            *u += 1;
        }
        out.nodes[n] = Rect {
            x: x + PAD + col as f64 * (BOX_W + GAP_X),
            y: y + HEADER + PAD + r as f64 * (BOX_H + GAP_Y),
            w: BOX_W,
            h: BOX_H,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inside(inner: Rect, outer: Rect) -> bool {
        inner.x >= outer.x
            && inner.y >= outer.y
            && inner.x + inner.w <= outer.x + outer.w
            && inner.y + inner.h <= outer.y + outer.h
    }

    fn overlap(a: Rect, b: Rect) -> bool {
        a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h
    }

    #[test]
    fn groups_bound_their_nodes_and_edges_point_down() {
        // 0 -> {1, 2} -> 3 -> 4; groups {0}, {1, 2, 3}, {4}.
        let producers = vec![vec![], vec![0], vec![0], vec![1, 2], vec![3]];
        let groups = vec![vec![0], vec![1, 2, 3], vec![4]];
        let l = layout(&producers, &groups);
        for (i, members) in groups.iter().enumerate() {
            for &n in members {
                assert!(
                    inside(l.nodes[n], l.groups[i]),
                    "node {n} outside group {i}"
                );
            }
        }
        for (a, b) in [(0, 1), (0, 2), (1, 2)] {
            assert!(!overlap(l.groups[a], l.groups[b]) || a == b);
        }
        for (n, ps) in producers.iter().enumerate() {
            for &p in ps {
                assert!(l.nodes[p].y < l.nodes[n].y, "edge {p}->{n} points up");
            }
        }
        // 1 and 2 share a row inside their block.
        assert_eq!(l.nodes[1].y, l.nodes[2].y);
        assert!(l.height > l.nodes[4].y && l.width >= l.groups[1].x + l.groups[1].w);
    }

    #[test]
    fn wide_bands_wrap() {
        let producers = vec![Vec::new(); 40];
        let groups: Vec<Vec<usize>> = (0..40).map(|n| vec![n]).collect();
        let l = layout(&producers, &groups);
        assert!(l.width <= MAX_WIDTH + 2.0 * MARGIN);
        assert!(l.nodes[39].y > l.nodes[0].y);
    }
}

//! Algorithm 1 and eq. (1): which output axes of an op split cleanly
//! (from its tensor expression's accesses), and the best split of a
//! sub-graph.

mod common;

use common::{graph, load};
use kiln_dsa::opgraph::OpGraph;
use kiln_dsa::split_info::{best_split, split_info, SplitCandidate};
use kiln_dsa::DsaDesc;

fn op_graph(body: &str) -> OpGraph {
    let src = format!("graph \"g\" opsets [\"\"=17] {{\n{body}\n}}\n");
    OpGraph::new(&load(&src).unwrap()).unwrap()
}

/// Splittable output axes of node `n`.
fn axes(og: &OpGraph, n: usize) -> Vec<usize> {
    (0..og.nodes[n].split.axes.len())
        .filter(|&a| og.nodes[n].split.axis(a).is_some())
        .collect()
}

/// A padded 3×3 convolution splits over images and output channels, not
/// rows or columns (a halo); a 1×1 one splits everywhere; channels read
/// the input whole, images slice it.
#[test]
fn convolution_axes_follow_the_window() {
    let og = op_graph(
        "  input %x: f32[2,8,6,6]
  input %w3: f32[4,8,3,3]
  input %w1: f32[4,8,1,1]
  node \"c3\" %a: f32[2,4,6,6] = Conv(%x, %w3) {pads=[1,1,1,1]}
  node \"c1\" %b: f32[2,4,6,6] = Conv(%x, %w1)
  output %a, %b",
    );
    assert_eq!(axes(&og, 0), [0, 1]);
    assert_eq!(axes(&og, 1), [0, 1, 2, 3]);
    let x = og.nodes[0].inputs[0];
    assert_eq!(
        og.nodes[0].split.axis(0).unwrap()[&x],
        Some(0),
        "images slice the input"
    );
    assert_eq!(
        og.nodes[0].split.axis(1).unwrap()[&x],
        None,
        "channels read it whole"
    );
}

/// A broadcast input (per-channel bias) is read whole along the axes it
/// does not have; a reshape's merged axis does not split.
#[test]
fn broadcast_and_reshape() {
    let og = op_graph(
        "  input %x: f32[2,8,6,6]
  input %wb: f32[8,1,1]
  init %shape: i64[2] = [2, 288]
  node \"bias\" %a: f32[2,8,6,6] = Add(%x, %wb)
  node \"flat\" %b: f32[2,288] = Reshape(%a, %shape)
  output %b",
    );
    assert_eq!(axes(&og, 0), [0, 1, 2, 3]);
    let bias = og.nodes[0].inputs[1];
    assert_eq!(og.nodes[0].split.axis(2).unwrap()[&bias], None);
    assert_eq!(axes(&og, 1), [0]);
}

/// Eq. (1): more nodes split first, then the smaller factor, then the
/// outer axis.
#[test]
fn eq1_is_a_lexicographic_maximum() {
    let c = |split_ops, factor, axis| SplitCandidate {
        split_ops,
        factor,
        axis,
        per_core_bytes: 0,
    };
    assert_eq!(best_split(&[c(2, 1, 0), c(3, 8, 1)]), Some(c(3, 8, 1)));
    assert_eq!(best_split(&[c(3, 4, 0), c(3, 2, 1)]), Some(c(3, 2, 1)));
    assert_eq!(best_split(&[c(3, 2, 1), c(3, 2, 0)]), Some(c(3, 2, 0)));
    assert_eq!(best_split(&[]), None);
}

/// Fig. 3a's stage 1 (one image is 192 KB, 384 KB live at its peak): on
/// eight 64 KB cores the batch must split eight ways; splitting channels
/// leaves the convolution's input whole and never fits.
#[test]
fn fig3_stage1_splits_the_batch_eight_ways() {
    let og = OpGraph::new(&graph("fig3_stages")).unwrap();
    let desc = DsaDesc::preset("stcp920").unwrap();
    let info = split_info(&og, &[0, 1, 2], &desc);
    let best = best_split(&info).unwrap();
    assert_eq!((best.axis, best.factor, best.split_ops), (0, 8, 3));
    assert_eq!(best.per_core_bytes, 2 * 48 * 32 * 32 * 4 / 8);
    assert!(info.iter().all(|c| c.axis != 1), "{info:?}");
}

//! Algorithm 1 and eq. (1): which output axes of an op split cleanly
//! (from its tensor expression's accesses), and the best split of a
//! sub-graph.

mod common;

use common::{graph, load};
use kiln_dsa::opgraph::OpGraph;
use kiln_dsa::propagate::{propagate, DimMap};
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

/// A padded 3×3 convolution splits over images, output channels and,
/// through a halo, rows and columns: output row `i` reads input rows
/// `i - 1 ..= i + 1`; a 2×2 stride-2 one reads rows `2i ..= 2i + 1`; a
/// 1×1 one splits everywhere cleanly; channels read the input whole,
/// images slice it.
#[test]
fn convolution_axes_follow_the_window() {
    let og = op_graph(
        "  input %x: f32[2,8,6,6]
  input %w3: f32[4,8,3,3]
  input %w1: f32[4,8,1,1]
  input %w2: f32[4,8,2,2]
  node \"c3\" %a: f32[2,4,6,6] = Conv(%x, %w3) {pads=[1,1,1,1]}
  node \"c1\" %b: f32[2,4,6,6] = Conv(%x, %w1)
  node \"s2\" %c: f32[2,4,3,3] = Conv(%x, %w2) {strides=[2,2]}
  output %a, %b, %c",
    );
    assert_eq!(axes(&og, 0), [0, 1, 2, 3]);
    assert_eq!(axes(&og, 1), [0, 1, 2, 3]);
    let x = og.nodes[0].inputs[0];
    let map = |n: usize, axis: usize| og.nodes[n].split.axis(axis).unwrap()[&x];
    let dim = |dim, stride, lo, hi| {
        Some(DimMap {
            dim,
            stride,
            lo,
            hi,
        })
    };
    assert_eq!(map(0, 0), dim(0, 1, 0, 0), "images slice the input");
    assert_eq!(map(0, 1), None, "channels read it whole");
    assert_eq!(map(0, 2), dim(2, 1, -1, 1), "rows read a halo");
    assert_eq!(map(1, 2), dim(2, 1, 0, 0));
    assert_eq!(map(2, 3), dim(3, 2, 0, 1));
}

/// Two 3×3 convolutions in a row, cut into 3 pieces of 4 rows: the
/// second reads rows 4k-1 .. 4k+5 of the first's output (6 rows, clipped
/// at the edges), the first reads 8 rows of the input; the bytes of a
/// piece are the clipped extent's.
#[test]
fn halos_grow_through_a_chain_of_windows() {
    let og = op_graph(
        "  input %x: f32[1,4,12,12]
  input %wa: f32[4,4,3,3]
  input %wb: f32[4,4,3,3]
  node \"a\" %a: f32[1,4,12,12] = Conv(%x, %wa) {pads=[1,1,1,1]}
  node \"b\" %b: f32[1,4,12,12] = Conv(%a, %wb) {pads=[1,1,1,1]}
  output %b",
    );
    let prop = propagate(&og, &[0, 1], &[1, 1, 3, 1]);
    let (x, a) = (og.nodes[0].inputs[0], og.nodes[0].outputs[0]);
    let rows = |v| prop.regions[&v].dims[2].unwrap();
    assert_eq!((rows(a).step, rows(a).extent, rows(a).offset), (4, 6, -1));
    assert_eq!((rows(x).step, rows(x).extent, rows(x).offset), (4, 8, -2));
    assert_eq!(rows(a).interval(0, 12), (0, 5));
    assert_eq!(rows(a).interval(2, 12), (7, 12));
    assert_eq!(prop.split_nodes, [0, 1]);
    // 6 of 12 rows of a 4×12×12 f32 tensor.
    assert_eq!(prop.bytes(&og, a), 4 * 6 * 12 * 4);
    // Pieces of 1 row would need 5 rows of %a: over MAX_RECOMPUTE, so the
    // first convolution is computed whole (along rows) in every instance.
    let fine = propagate(&og, &[0, 1], &[1, 1, 12, 1]);
    assert_eq!(fine.split_nodes, [1]);
    assert!(fine.regions[&a].is_whole(og.shape(a)));
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

/// Eq. (1): more nodes split first, then (kiln) a split of the batch,
/// then the smaller factor, then the outer axis, then (kiln) the inner
/// axes cut.
#[test]
fn eq1_is_a_lexicographic_maximum() {
    let c = |split_ops, factor, axis: usize| {
        let mut factors = vec![1; 4];
        factors[axis] = factor;
        SplitCandidate {
            split_ops,
            batch: axis == 0 && factor > 1,
            weight_slices: false,
            factors,
            per_core_bytes: 0,
        }
    };
    assert_eq!(best_split(&[c(2, 1, 0), c(3, 8, 1)]), Some(c(3, 8, 1)));
    assert_eq!(best_split(&[c(3, 4, 0), c(3, 2, 1)]), Some(c(3, 4, 0)));
    assert_eq!(best_split(&[c(3, 4, 2), c(3, 2, 1)]), Some(c(3, 2, 1)));
    assert_eq!(best_split(&[c(3, 2, 2), c(3, 2, 1)]), Some(c(3, 2, 1)));
    assert_eq!(best_split(&[c(2, 2, 0), c(3, 8, 1)]), Some(c(3, 8, 1)));
    let two = |a: usize, b: usize| SplitCandidate {
        split_ops: 3,
        factors: (0..4)
            .map(|x| {
                if x == 0 {
                    4
                } else if x == a {
                    b
                } else {
                    1
                }
            })
            .collect(),
        per_core_bytes: 0,
        batch: true,
        weight_slices: false,
    };
    assert_eq!(best_split(&[two(3, 2), two(2, 2)]), Some(two(3, 2)));
    // A batch split whose instances share weight slices runs slice by
    // slice: it loses the batch's precedence.
    let sliced = SplitCandidate {
        weight_slices: true,
        ..two(1, 2)
    };
    assert_eq!(best_split(&[sliced.clone(), c(3, 4, 2)]), Some(c(3, 4, 2)));
    assert_eq!(best_split(&[sliced.clone(), c(2, 2, 1)]), Some(sliced));
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
    assert_eq!((best.axis(), best.factor(), best.split_ops), (0, 8, 3));
    assert_eq!(best.per_core_bytes, 2 * 48 * 32 * 32 * 4 / 8);
    assert!(info.iter().all(|c| c.axis() != 1), "{info:?}");
}

/// One image of 64 channels × 64 × 64 (1 MB in f32) does not fit eight
/// 64 KB LBs, so the batch of 4 is cut whole and an axis inward: four
/// pieces of 16 columns (rows would do as well; eq. (1) takes the inner
/// axis on a tie) read 18 input columns each (the 3×3 halo), 288 KB live.
#[test]
fn images_then_columns_when_an_image_does_not_fit() {
    let og = op_graph(
        "  input %x: f32[4,64,64,64]
  input %w: f32[1,64,3,3]
  node \"c\" %a: f32[4,1,64,64] = Conv(%x, %w) {pads=[1,1,1,1]}
  node \"r\" %b: f32[4,1,64,64] = Relu(%a)
  output %b",
    );
    let desc = DsaDesc::preset("stcp920").unwrap();
    let best = best_split(&split_info(&og, &[0, 1], &desc)).unwrap();
    assert_eq!(best.factors, [4, 1, 1, 4]);
    assert_eq!((best.factor(), best.split_ops), (16, 2));
    let x = (18 * 64 * 64 * 4) as u64;
    let a = (16 * 64 * 4) as u64;
    assert_eq!(best.per_core_bytes, (x + a).div_ceil(8));
}

/// The cost model: cutting the rows of `x · W` with a 16 MB weight (more
/// than GB holds) would have every instance read W from DDR: refused, on
/// every cut of the rows alone. Cutting the columns too gives slices of W
/// that GB holds one at a time (rows are the batch here), shared by the
/// row instances: offered, but cutting the columns alone reads a slice
/// of W each once and `x` (128 KB, hoisted from GB) whole: chosen.
#[test]
fn a_split_rereading_a_large_weight_is_refused() {
    let og = op_graph(
        "  input %x: f32[64,512]
  input %w: f32[512,8192]
  node \"mm\" %y: f32[64,8192] = MatMul(%x, %w)
  output %y",
    );
    let desc = DsaDesc::preset("stcp920").unwrap();
    let info = split_info(&og, &[0], &desc);
    let rows_alone = |c: &SplitCandidate| c.factors[0] > 1 && c.factors[1] == 1;
    assert!(!info.iter().any(rows_alone), "{info:?}");
    let sliced = info.iter().find(|c| c.factors[0] > 1).unwrap();
    assert!(sliced.weight_slices && sliced.factors[1] > 1, "{sliced:?}");
    let best = best_split(&info).unwrap();
    assert_eq!(
        (best.factors.as_slice(), best.weight_slices),
        (&[1, 8][..], false)
    );
}

/// Line 4's values need not divide the axis: 197 tokens cut 4 ways are
/// pieces of 50, the last one 47 long; 196 ways would leave a piece
/// empty and is not offered.
#[test]
fn pieces_need_not_divide_the_axis() {
    let og = op_graph(
        "  input %x: f32[1,197,768]
  node \"r\" %y: f32[1,197,768] = Relu(%x)
  output %y",
    );
    let prop = propagate(&og, &[0], &[1, 4, 1]);
    let x = og.nodes[0].inputs[0];
    let rows = prop.regions[&x].dims[1].unwrap();
    assert_eq!(rows.interval(0, 197), (0, 50));
    assert_eq!(rows.interval(3, 197), (150, 197));
    assert_eq!(prop.bytes(&og, x), 50 * 768 * 4);
    let desc = DsaDesc::preset("stcp920").unwrap();
    let best = best_split(&split_info(&og, &[0], &desc)).unwrap();
    // 197 × 768 × 4 × 2 = 1.2 MB live: 4 pieces of 50 tokens fit 512 KB.
    assert_eq!(best.factors, [1, 4, 1]);
}

//! FLOP counts of the compute-bound ops: 2 × multiply-accumulates of
//! MatMul, Gemm, Conv and ConvTranspose (and their integer forms, and the
//! channels-last convolution the CPU backend's layout pass makes).

use kiln_ir::{Graph, Node};

fn shape<'a>(g: &'a Graph, node: &Node, i: usize) -> Option<&'a [usize]> {
    node.inputs
        .get(i)
        .copied()
        .flatten()
        .and_then(|v| g.ty(v).shape.as_deref())
}

fn out_elems(g: &Graph, node: &Node) -> Option<u64> {
    let o = node.outputs.first().copied().flatten()?;
    g.ty(o).numel().map(|n| n as u64)
}

/// FLOPs of one node (0 for ops that are not counted or whose shapes are unknown).
pub fn node_flops(g: &Graph, node: &Node) -> u64 {
    let macs = || -> Option<u64> {
        match node.op.as_str() {
            "MatMul" | "MatMulInteger" | "QLinearMatMul" => {
                let a = shape(g, node, 0)?;
                Some(out_elems(g, node)? * *a.last()? as u64)
            }
            "Gemm" => {
                let a = shape(g, node, 0)?;
                let trans_a = node.attr_int_or("transA", 0).ok()? != 0;
                let k = if trans_a { a.first()? } else { a.last()? };
                Some(out_elems(g, node)? * *k as u64)
            }
            // The CPU layout pass's channels-last convolution: HWIO weights.
            "ChannelsLast" if node.attr_string("op").ok()?? == "Conv" => {
                let w = shape(g, node, 1)?;
                let per_out: usize = w.iter().rev().skip(1).product();
                Some(out_elems(g, node)? * per_out as u64)
            }
            "Conv" | "ConvInteger" | "QLinearConv" => {
                let wi = if node.op == "QLinearConv" { 3 } else { 1 };
                let w = shape(g, node, wi)?;
                let per_out: usize = w.iter().skip(1).product();
                Some(out_elems(g, node)? * per_out as u64)
            }
            "ConvTranspose" => {
                let x: u64 = shape(g, node, 0)?.iter().product::<usize>() as u64;
                let w = shape(g, node, 1)?;
                let per_in: usize = w.iter().skip(1).product();
                Some(x * per_in as u64)
            }
            _ => None,
        }
    };
    macs().map_or(0, |m| 2 * m)
}

pub fn graph_flops(g: &Graph) -> u64 {
    g.nodes.iter().map(|n| node_flops(g, n)).sum()
}

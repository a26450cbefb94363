//! swTVM §5.3, Algorithm 3 (DMA auto-insertion): where each tensor's
//! transfers go in the tiled nest, and how many transfers move one tile.
//!
//! The tiled nest: every loop whose buffer is smaller than its extent has
//! an outer loop over its tiles (in `order`), and all buffered values are
//! iterated innermost, on local memory. A tensor depends on the outer
//! loops of the variables its indices use (`ItersSet − SubItersSet`:
//! Algorithm 4's correlation with every loop, minus the loops its buffer
//! covers whole). Walking the outer loops from outermost, a tensor's DMA
//! goes in the first loop body where none of its outer loops is left
//! undetermined: inside the innermost one it depends on, outside every
//! loop inside that, so those loops reuse the tile. Tiles move as
//! contiguous runs; inner dimensions covered whole merge with the next one
//! (the paper's combining of continuous transfers, `tile.rs`).
//!
//! Reads of input tiles are gets. Output tiles are put back; they are also
//! got first when a reduction loop (one the output does not depend on)
//! runs outside the transfer, since each visit then adds to partial sums.
//!
//! Readings: line 16's `iter ∈ SubTensorIters && iter ∉ SubTensorIters`
//! is taken as `iter ∈ TensorIters && iter ∉ SubTensorIters`; a tensor
//! still waiting after the last outer loop goes innermost.
//!
//! Needs a valid nest, sizes from 1 to each extent, and `order` holding
//! each loop with `size < extent` exactly once (each checked: errors).
//! Guarantees: exactly one placement per tensor, in tensor order, at a
//! depth from 0 (before every loop) to `order.len()`.

use crate::correlation::{analyze_correlation, LoopSet};
use crate::nest::Nest;
use crate::tile::{contiguous_runs, tile_dims};
use kiln_ir::{bail, ensure, Result};

/// Where and how one tensor's tile moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub tensor: usize,
    /// Outer loops around the transfer: 0 is before every loop, `d` is
    /// inside `order[d - 1]`.
    pub depth: usize,
    /// The tile is read into local memory at each visit.
    pub get: bool,
    /// The tile is written back at each visit.
    pub put: bool,
    /// Contiguous transfers per tile, and the bytes of each.
    pub runs_per_tile: u64,
    pub run_bytes: u64,
}

/// The loops that get an outer tile loop (buffer smaller than the extent),
/// in nest order.
pub fn outer_loops(nest: &Nest, sizes: &[u64]) -> Vec<usize> {
    (0..nest.loops.len())
        .filter(|&i| sizes[i] < nest.loops[i].extent)
        .collect()
}

/// Runs Algorithm 3: one placement per tensor.
pub fn insert_dma(nest: &Nest, sizes: &[u64], order: &[usize]) -> Result<Vec<Placement>> {
    check_order(nest, sizes, order)?;
    let all: LoopSet = (0..nest.loops.len()).collect();
    let whole: LoopSet = all
        .iter()
        .copied()
        .filter(|&i| sizes[i] == nest.loops[i].extent)
        .collect();
    let mut iters = analyze_correlation(nest, &all);
    let sub_iters = analyze_correlation(nest, &whole);
    let mut depth_of: Vec<Option<usize>> = vec![None; nest.tensors.len()];
    for (depth, &var) in order.iter().enumerate() {
        place_determined(&mut depth_of, &iters, &sub_iters, depth);
        for tensor in 0..nest.tensors.len() {
            if depth_of[tensor].is_some() || !iters[tensor].contains(&var) {
                continue;
            }
            if sub_iters[tensor].contains(&var) {
                bail!(
                    "loop '{}' is buffered whole but has an outer loop",
                    nest.loops[var].var
                );
            }
            iters[tensor].remove(&var);
        }
    }
    place_determined(&mut depth_of, &iters, &sub_iters, order.len());
    let placements = depth_of
        .into_iter()
        .enumerate()
        .map(|(tensor, depth)| placement(nest, sizes, order, tensor, depth.unwrap_or(order.len())))
        .collect();
    Ok(placements)
}

/// Lines 8–11: tensors whose outer loops are all determined get their DMA
/// at `depth`.
fn place_determined(
    depth_of: &mut [Option<usize>],
    iters: &[LoopSet],
    sub_iters: &[LoopSet],
    depth: usize,
) {
    for (tensor, slot) in depth_of.iter_mut().enumerate() {
        if slot.is_none() && iters[tensor].is_subset(&sub_iters[tensor]) {
            *slot = Some(depth);
        }
    }
}

fn placement(
    nest: &Nest,
    sizes: &[u64],
    order: &[usize],
    tensor: usize,
    depth: usize,
) -> Placement {
    let access = &nest.tensors[tensor];
    let (runs_per_tile, run_elems) =
        contiguous_runs(&access.shape(nest), &tile_dims(access, sizes));
    let reduced_outside = order[..depth]
        .iter()
        .any(|&var| !access.dims.iter().any(|d| d.uses(var)));
    Placement {
        tensor,
        depth,
        get: !access.is_output || reduced_outside,
        put: access.is_output,
        runs_per_tile,
        run_bytes: run_elems.saturating_mul(access.elem_bytes),
    }
}

/// The nest must be valid, each size within its loop, and `order` must
/// list each loop with an outer tile loop exactly once.
fn check_order(nest: &Nest, sizes: &[u64], order: &[usize]) -> Result<()> {
    nest.validate()?;
    ensure!(
        sizes.len() == nest.loops.len(),
        "{} buffer sizes for {} loops",
        sizes.len(),
        nest.loops.len()
    );
    for (l, &size) in nest.loops.iter().zip(sizes) {
        ensure!(
            (1..=l.extent).contains(&size),
            "loop '{}': buffer {size} outside 1..={}",
            l.var,
            l.extent
        );
    }
    let mut sorted = order.to_vec();
    sorted.sort_unstable();
    ensure!(
        sorted == outer_loops(nest, sizes),
        "the loop order must list exactly the loops buffered in part, once each"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matmul() -> Nest {
        crate::text::matmul_1024()
    }

    #[test]
    fn matmul_transfers_sit_inside_their_innermost_loop() {
        let nest = matmul();
        let sizes = [1, 128, 64];
        let placements = insert_dma(&nest, &sizes, &[0, 1, 2]).unwrap();
        let summary: Vec<(usize, bool, bool, u64, u64)> = placements
            .iter()
            .map(|p| (p.depth, p.get, p.put, p.runs_per_tile, p.run_bytes))
            .collect();
        // A and B inside k; C inside y (around the k loop, accumulated in
        // local memory, only put). B: 64 rows of 128 floats.
        assert_eq!(
            summary,
            [
                (3, true, false, 1, 256),
                (3, true, false, 64, 512),
                (2, false, true, 1, 512)
            ]
        );
        // k outermost: C is visited once per k tile, so it is also got.
        let placements = insert_dma(&nest, &sizes, &[2, 0, 1]).unwrap();
        assert_eq!(placements[2].depth, 3);
        assert!(placements[2].get && placements[2].put);
        assert_eq!(placements[0].depth, 2);
    }

    #[test]
    fn whole_buffers_need_no_loop_and_bad_orders_are_errors() {
        let nest = matmul();
        let placements = insert_dma(&nest, &[1, 1024, 1024], &[0]).unwrap();
        assert_eq!(
            placements.iter().map(|p| p.depth).collect::<Vec<_>>(),
            [1, 0, 1]
        );
        assert_eq!(placements[1].runs_per_tile, 1);
        assert!(insert_dma(&nest, &[1, 128, 64], &[0, 1]).is_err());
        assert!(insert_dma(&nest, &[1, 128, 64], &[0, 1, 1]).is_err());
        assert!(insert_dma(&nest, &[1, 1024, 1024], &[0, 1]).is_err());
        assert!(insert_dma(&nest, &[0, 128, 64], &[0, 1, 2]).is_err());
    }
}

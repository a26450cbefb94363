//! How many DMA transfers, and how many bytes, a tiled nest makes: the
//! quantity swTVM's Algorithm 2 minimises (§5.2), for a buffer choice
//! (Algorithm 1) and an order of the outer loops, with the transfers
//! where Algorithm 3 puts them.
//!
//! A transfer at depth `d` runs once per iteration of the `d` outer loops
//! around it (`ceil(extent / buffer)` each). An output that is got as
//! well as put (a reduction loop outside it) is not got on its first
//! visit of each tile, whose partial sums start in local memory.
//!
//! Needs what [`insert_dma`] needs. Guarantees: the totals are the sums
//! per tensor. Bytes count whole tiles, an upper bound when an extent is
//! not a multiple of its buffer; counts saturate instead of overflowing.

use crate::dma::{insert_dma, Placement};
use crate::nest::Nest;
use kiln_ir::Result;

/// One tensor's traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorTraffic {
    pub placement: Placement,
    pub gets: u64,
    pub puts: u64,
    pub bytes: u64,
}

/// The nest's traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmaCount {
    pub transfers: u64,
    pub bytes: u64,
    pub per_tensor: Vec<TensorTraffic>,
}

/// Counts the transfers of `nest` with buffers `sizes` and outer loops in
/// `order` (outermost first).
pub fn count_dma(nest: &Nest, sizes: &[u64], order: &[usize]) -> Result<DmaCount> {
    let tiles = |var: usize| nest.loops[var].extent.div_ceil(sizes[var]);
    let mut count = DmaCount {
        transfers: 0,
        bytes: 0,
        per_tensor: Vec::new(),
    };
    for placement in insert_dma(nest, sizes, order)? {
        let around = &order[..placement.depth];
        let visits = around
            .iter()
            .map(|&v| tiles(v))
            .fold(1, u64::saturating_mul);
        let access = &nest.tensors[placement.tensor];
        let distinct = around
            .iter()
            .filter(|&&v| access.dims.iter().any(|d| d.uses(v)))
            .map(|&v| tiles(v))
            .fold(1, u64::saturating_mul);
        let runs = placement.runs_per_tile;
        let gets = match (placement.get, placement.put) {
            (false, _) => 0,
            (true, false) => visits.saturating_mul(runs),
            (true, true) => visits.saturating_sub(distinct).saturating_mul(runs),
        };
        let puts = if placement.put {
            visits.saturating_mul(runs)
        } else {
            0
        };
        let bytes = gets
            .saturating_add(puts)
            .saturating_mul(placement.run_bytes);
        count.transfers = count.transfers.saturating_add(gets).saturating_add(puts);
        count.bytes = count.bytes.saturating_add(bytes);
        count.per_tensor.push(TensorTraffic {
            placement,
            gets,
            puts,
            bytes,
        });
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_counts_follow_the_loop_order() {
        let nest = crate::text::matmul_1024();
        let sizes = [1, 128, 64];
        // x, y tiles, k tiles: 1024 × 8 × 16 visits of A and B, 1024 × 8 of C.
        let count = count_dma(&nest, &sizes, &[0, 1, 2]).unwrap();
        let per: Vec<(u64, u64)> = count.per_tensor.iter().map(|t| (t.gets, t.puts)).collect();
        assert_eq!(per, [(131_072, 0), (131_072 * 64, 0), (0, 8192)]);
        assert_eq!(count.transfers, 131_072 * 65 + 8192);
        assert_eq!(count.bytes, 131_072 * 256 + 131_072 * 64 * 512 + 8192 * 512);
        // k outermost: every C tile is visited 16 times, got on 15 of them.
        let count = count_dma(&nest, &sizes, &[2, 0, 1]).unwrap();
        assert_eq!(
            (count.per_tensor[2].gets, count.per_tensor[2].puts),
            (15 * 8192, 16 * 8192)
        );
        assert_eq!(count.per_tensor[0].gets, 16 * 1024);
    }
}

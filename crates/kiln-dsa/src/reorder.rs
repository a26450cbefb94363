//! swTVM §5.2, Algorithm 2 (loop reordering): the order of the outer tile
//! loops that needs the fewest DMA transfers.
//!
//! The buffered loops stay innermost (`varorder.add(buffervars)`); the
//! outer loops are then chosen from the inside out: for each loop still
//! unplaced, the nest's transfers are counted (`count.rs`) with it
//! directly outside the loops placed so far and the other unplaced loops
//! outside it in their given order, and the loop with the fewest transfers
//! is placed (`SELECT`). Ties keep the given order.
//!
//! Readings: line 8's `cur_dmatimes < dmatimes` is taken as `>` (it must
//! keep the minimum, as the text says). The greedy choice is not always
//! optimal, so kiln keeps the given order when the greedy one would need
//! more transfers: Algorithm 2 never makes a nest worse.
//!
//! Needs what [`insert_dma`](crate::dma::insert_dma) needs of `order`.
//! Guarantees: a permutation of `order` whose transfer count is at most
//! `order`'s.

use crate::count::count_dma;
use crate::nest::Nest;
use kiln_ir::Result;

/// Runs Algorithm 2 on the outer loops `order` (outermost first).
pub fn reorder_loops(nest: &Nest, sizes: &[u64], order: &[usize]) -> Result<Vec<usize>> {
    let mut unplaced = order.to_vec();
    let mut placed: Vec<usize> = Vec::new();
    while !unplaced.is_empty() {
        let chosen = select(nest, sizes, &unplaced, &placed)?;
        placed.insert(0, unplaced.remove(chosen));
    }
    let given = count_dma(nest, sizes, order)?.transfers;
    let greedy = count_dma(nest, sizes, &placed)?.transfers;
    Ok(if greedy <= given {
        placed
    } else {
        order.to_vec()
    })
}

/// `SELECT(Vars)`: the position in `unplaced` of the loop that, placed
/// just outside `placed`, gives the fewest transfers. Candidates are tried
/// innermost first and only a strictly smaller count replaces the best, so
/// ties keep the given order.
fn select(nest: &Nest, sizes: &[u64], unplaced: &[usize], placed: &[usize]) -> Result<usize> {
    let mut best: Option<(usize, u64)> = None;
    for candidate in (0..unplaced.len()).rev() {
        let order: Vec<usize> = unplaced
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != candidate)
            .map(|(_, &var)| var)
            .chain([unplaced[candidate]])
            .chain(placed.iter().copied())
            .collect();
        let transfers = count_dma(nest, sizes, &order)?.transfers;
        if best.is_none_or(|(_, fewest)| transfers < fewest) {
            best = Some((candidate, transfers));
        }
    }
    Ok(best.map_or(0, |(candidate, _)| candidate))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse_nest;

    fn names(nest: &Nest, order: &[usize]) -> Vec<String> {
        order.iter().map(|&v| nest.loops[v].var.clone()).collect()
    }

    #[test]
    fn matmul_reuses_the_b_tile_across_x() {
        // Algorithm 1's buffers x=1, y=128, k=64: a B tile is 64 rows,
        // an A or C tile one; with x innermost, B is fetched once per
        // (y, k) tile instead of once per (x, y, k).
        let nest = crate::text::matmul_1024();
        let sizes = [1, 128, 64];
        for (given, expected) in [([0, 1, 2], ["y", "k", "x"]), ([2, 0, 1], ["k", "y", "x"])] {
            let order = reorder_loops(&nest, &sizes, &given).unwrap();
            assert_eq!(names(&nest, &order), expected);
            let before = count_dma(&nest, &sizes, &given).unwrap().transfers;
            let after = count_dma(&nest, &sizes, &order).unwrap().transfers;
            // A: 131072 gets; B: 128 tiles x 64 rows; C: 131072 puts and
            // 131072 - 8192 gets (not on a tile's first visit).
            assert_eq!(after, 131_072 + 8192 + 131_072 + 122_880);
            assert!(after < before, "{after} !< {before}");
        }
    }

    #[test]
    fn ties_keep_the_given_order() {
        let nest =
            parse_nest("nest add\nloop i 4\nloop j 128\nin A[i][j] elem 4\nout C[i][j] elem 4\n")
                .unwrap();
        for given in [[0, 1], [1, 0]] {
            assert_eq!(reorder_loops(&nest, &[1, 64], &given).unwrap(), given);
        }
    }
}

//! The part of each tensor one set of buffer sizes puts in local memory
//! (swTVM §5.3, "determining the buffer size"): in each dimension the
//! index's reach with every loop `i` running over `sizes[i]` values, so a
//! tile is the bounding box of what the innermost loops touch. Shared by
//! Algorithm 1 (LDM usage) and Algorithm 3 (how many transfers move a
//! tile).
//!
//! Guarantees: usage grows with every buffer size (Algorithm 1 relies on
//! it); arithmetic saturates instead of overflowing.

use crate::nest::{Access, Nest};

/// The tile's extent in each dimension of `access`, outermost first.
pub fn tile_dims(access: &Access, sizes: &[u64]) -> Vec<u64> {
    access.dims.iter().map(|d| d.span(sizes)).collect()
}

/// Bytes of the tile of `access`.
pub fn tile_bytes(access: &Access, sizes: &[u64]) -> u64 {
    tile_dims(access, sizes)
        .into_iter()
        .fold(access.elem_bytes, u64::saturating_mul)
}

/// Bytes of local memory all the nest's tiles take (one buffer each).
pub fn ldm_usage(nest: &Nest, sizes: &[u64]) -> u64 {
    nest.tensors
        .iter()
        .map(|t| tile_bytes(t, sizes))
        .fold(0, u64::saturating_add)
}

/// How one tile of a row-major tensor is moved: `(runs, elements per
/// run)`. Inner dimensions the tile covers whole are contiguous with the
/// next one out, so their transfers merge into one (swTVM §5.3: transfers
/// whose memory and LDM addresses are continuous are combined).
pub fn contiguous_runs(shape: &[u64], tile: &[u64]) -> (u64, u64) {
    let Some(mut k) = tile.len().checked_sub(1) else {
        return (1, 1);
    };
    let mut run = tile[k];
    while k > 0 && tile[k] == shape[k] {
        k -= 1;
        run = run.saturating_mul(tile[k]);
    }
    let runs = tile[..k].iter().copied().fold(1, u64::saturating_mul);
    (runs, run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_inner_dimensions_merge_into_one_run() {
        assert_eq!(contiguous_runs(&[1024, 1024], &[64, 128]), (64, 128));
        assert_eq!(
            contiguous_runs(&[256, 58, 58], &[2, 58, 58]),
            (1, 2 * 58 * 58)
        );
        assert_eq!(contiguous_runs(&[4, 8, 3, 3], &[2, 2, 3, 3]), (2, 18));
        assert_eq!(contiguous_runs(&[4, 8], &[1, 8]), (1, 8));
        assert_eq!(contiguous_runs(&[7], &[7]), (1, 7));
    }
}

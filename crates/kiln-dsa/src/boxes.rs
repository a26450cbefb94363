//! Bounding boxes of what a tile of loops touches: each access's flat
//! offset split into one affine index per buffer dimension, and interval
//! analysis of those indices over the tile's loop ranges (swTVM §5.3,
//! "determining the buffer size": the index at the smallest and largest
//! loop values).
//!
//! Needs: accesses of a loop-IR kernel (flat row-major offsets, bounds
//! guards) and the range of every loop variable.
//! Guarantees: [`dim_indices`] returns indices only when their weighted
//! sum is the offset and each stays inside its dimension, or leaves it
//! only where the access's guard checks exactly that index against that
//! dimension (a padded window), so the clipped box holds every element
//! read; [`dim_box`] gives one dimension's box as a first index over the
//! tile variables plus a constant extent that holds every access in every
//! tile; `None` where that cannot be said (the caller then buffers the
//! whole buffer).

use kiln_loop::ir::Guard;
use kiln_loop::lower::strides;
use kiln_loop::{Atom, Idx};

/// The indices of `offset` in each dimension of a row-major buffer of
/// `shape` (see the module doc), given each variable's full range.
pub fn dim_indices(
    offset: &Idx,
    guard: &Guard,
    shape: &[usize],
    range: &dyn Fn(&str) -> (i64, i64),
) -> Option<Vec<Idx>> {
    if shape.contains(&0) {
        return None;
    }
    let strides = strides(shape);
    let mut dims = vec![Idx::constant(0); shape.len()];
    for (atom, c) in &offset.terms {
        let Atom::Var(v) = atom else { return None };
        let d = (0..shape.len()).find(|&d| shape[d] > 1 && c % strides[d] == 0)?;
        dims[d] = dims[d].clone().plus(&Idx::var(v).scale(c / strides[d]));
    }
    let mut rest = offset.constant;
    for d in (0..shape.len()).filter(|&d| shape[d] > 1) {
        let q = rest / strides[d];
        dims[d] = dims[d].clone().plus(&Idx::constant(q));
        rest -= q * strides[d];
    }
    if rest != 0 {
        return None;
    }
    for (d, idx) in dims.iter().enumerate() {
        let (lo, hi) = idx.range(range);
        let size = shape[d] as i64;
        let guarded = || guard.iter().any(|(g, e)| *e == size && same(g, idx));
        if (lo < 0 || hi >= size) && !guarded() {
            return None;
        }
    }
    Some(dims)
}

/// Whether two indices are equal (terms in any order).
pub fn same(a: &Idx, b: &Idx) -> bool {
    a.clone().plus(&b.clone().scale(-1)).as_constant() == Some(0)
}

/// How the loops of one tile run: per variable, the name of its tile
/// counter and the tile size when it is tiled, and the values it takes
/// inside one tile.
pub trait TileRanges {
    /// `(tile variable, tile)` when `var` is cut into tiles.
    fn tiled(&self, var: &str) -> Option<(String, i64)>;
    /// Values `var` takes inside one tile: `0..tile` for a tiled loop,
    /// its whole range otherwise.
    fn inner(&self, var: &str) -> (i64, i64);
}

/// The part of `idx` that moves from tile to tile (`a·tile·tile_var` for
/// each term `a·var` of a tiled variable) and the range of the rest
/// inside one tile.
pub fn split_tile(idx: &Idx, tiles: &dyn TileRanges) -> (Idx, (i64, i64)) {
    let mut moving = Idx::constant(0);
    for (atom, a) in &idx.terms {
        if let Atom::Var(v) = atom {
            if let Some((tv, t)) = tiles.tiled(v) {
                moving = moving.plus(&Idx::var(&tv).scale(a * t));
            }
        }
    }
    (moving, idx.range(&|v| tiles.inner(v)))
}

/// The box of one dimension of `size` over `indices` (one per access):
/// its first index over the tile variables and its extent. `None` when
/// the accesses move differently from tile to tile. A box that does not
/// move is clipped to the dimension.
pub fn dim_box(indices: &[&Idx], size: i64, tiles: &dyn TileRanges) -> Option<(Idx, i64)> {
    let mut moving: Option<Idx> = None;
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for idx in indices {
        let (m, (l, h)) = split_tile(idx, tiles);
        match &moving {
            Some(prev) if !same(prev, &m) => return None,
            _ => moving = Some(m),
        }
        lo = lo.min(l);
        hi = hi.max(h);
    }
    let moving = moving?;
    if moving.as_constant().is_some() {
        lo = lo.max(0);
        hi = hi.min(size - 1).max(lo);
    }
    Some((moving.plus(&Idx::constant(lo)), hi - lo + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(v: &str) -> (i64, i64) {
        match v {
            "i2" => (0, 4),
            "r0" => (0, 2),
            _ => (0, 2),
        }
    }

    #[test]
    fn a_padded_window_splits_when_its_guard_checks_the_padded_index() {
        // in0: [3, 5, 3]; the read [i0, i2 + r0 - 1, i3].
        let offset = Idx::var("i0")
            .scale(15)
            .plus(&Idx::var("i2").scale(3))
            .plus(&Idx::var("r0").scale(3))
            .plus(&Idx::var("i3"))
            .plus(&Idx::constant(-3));
        let padded = Idx::var("i2")
            .plus(&Idx::var("r0"))
            .plus(&Idx::constant(-1));
        let dims =
            dim_indices(&offset, &vec![(padded.clone(), 5)], &[3, 5, 3], &full).expect("splits");
        assert!(same(&dims[1], &padded));
        assert!(same(&dims[0], &Idx::var("i0")));
        // Without the guard the index leaves the dimension: no split.
        assert!(dim_indices(&offset, &Vec::new(), &[3, 5, 3], &full).is_none());
    }

    struct Halves;
    impl TileRanges for Halves {
        fn tiled(&self, var: &str) -> Option<(String, i64)> {
            (var == "i").then(|| ("i_t".to_string(), 4))
        }
        fn inner(&self, var: &str) -> (i64, i64) {
            if var == "i" {
                (0, 3)
            } else {
                (0, 2)
            }
        }
    }

    #[test]
    fn a_box_moves_with_its_tile_and_holds_every_access() {
        // [i + r - 1] and [i + 1] with i tiled by 4, r in 0..3.
        let a = Idx::var("i").plus(&Idx::var("r")).plus(&Idx::constant(-1));
        let b = Idx::var("i").plus(&Idx::constant(1));
        let (lo, ext) = dim_box(&[&a, &b], 100, &Halves).expect("a box");
        assert!(same(
            &lo,
            &Idx::var("i_t").scale(4).plus(&Idx::constant(-1))
        ));
        assert_eq!(ext, 6);
        // An index that does not move is clipped to the dimension.
        let r = Idx::var("r").plus(&Idx::constant(-1));
        let (lo, ext) = dim_box(&[&r], 2, &Halves).expect("a box");
        assert_eq!((lo.as_constant(), ext), (Some(0), 2));
        // Accesses moving at different rates have no common box.
        let twice = Idx::var("i").scale(2);
        assert!(dim_box(&[&a, &twice], 100, &Halves).is_none());
    }
}

//! The default schedule's rule for transposes: a loop nest that writes
//! memory consecutively along one output loop and reads it consecutively
//! along another (a Transpose that moves the innermost axis, alone or
//! fused with element-wise ops), run as a cache-blocked transpose.
//!
//! Needs: a CPU kernel after the default schedule's first step (output
//! loops coalesced while consecutive in memory), whose body is one
//! perfect nest of output loops around plain stores.
//! Guarantees: when the stores walk the innermost output loop `o` with
//! stride 1 and some load walks `o` with a stride other than 0 or ±1 and
//! another output loop `c` with stride 1, and both loops are at least a
//! tile long, a [`Schedule`] that
//! 1. coalesces `c` with the loops outside it while the elements stay
//!    consecutive (NCHW → NHWC: height and width become one loop of
//!    pixels, so the tiles cut one long run);
//! 2. splits `c` and `o` into tiles of one vector of output elements
//!    ([`tile`]: the target's vector width), the partial tiles at their
//!    ends peeled off into nests of their own (`peel`, `distribute`), so
//!    every tile loop has a constant bound;
//! 3. moves the tile loops inside every other loop, `c`'s outside `o`'s:
//!    a tile reads `tile` runs of consecutive elements and writes
//!    `tile` runs, each a vector's worth, so every cache line it touches
//!    is used whole while it is cached;
//! 4. copies each tile of the transposed input into a local buffer
//!    (`cache_read` at `o`'s tile loop: the copy does the transposing
//!    reads) and vectorizes the store loop along `o`, which reads the
//!    copy consecutively;
//! 5. runs the outermost loop (over tiles) in parallel when the kernel
//!    does enough work to pay for waking threads.
//!
//! The rule only reorders and regroups iterations that each store their
//! own element: the values stored do not change.

use super::{work, PARALLEL_MIN_WORK};
use crate::canonical::{coalesce_inward, output_nest, Coalescing};
use crate::ir::{for_each_load, Atom, Idx, Kernel, Stmt};
use crate::schedule::{apply, split_names, Directive, Schedule};
use kiln_target::TargetDesc;

/// The blocked schedule of transpose `k` for `target` (see the module
/// doc), or `None` when `k` is not a transpose the rule applies to.
pub(super) fn blocked_transpose(k: &Kernel, target: &TargetDesc) -> Option<Schedule> {
    let tile = tile(k, target)?;
    let vars = nest_vars(k);
    let (o, _) = vars.split_last()?;
    if !plain_stores_along(k, o) {
        return None;
    }
    let (read, c) = read_axis(k, o, &vars)?;
    let mut current = k.clone();
    let mut schedule = Schedule::default();
    let through_c = &vars[..=vars.iter().position(|v| *v == c)?];
    let c = coalesce_inward(
        &mut current,
        &mut schedule,
        through_c,
        Coalescing::Consecutive,
    );
    if extent(&current, &c)? < tile || extent(&current, o)? < tile {
        return None;
    }
    let tiled = tile_loops(&current, (&c, o), &read, tile)?;
    schedule.0.extend(tiled.0);
    let outermost = nest_vars(&current).into_iter().next()?;
    let length = extent(&current, &outermost)?;
    // When `c` is outermost, its loop over tiles is, with more than one
    // iteration only when `c` is longer than a tile.
    let (outermost, several) = if outermost == c {
        (split_names(&c).0, length > tile)
    } else {
        (outermost, length > 1)
    };
    if work(&k.body) >= PARALLEL_MIN_WORK && several {
        schedule.0.push(Directive::Parallel(outermost));
    }
    Some(schedule)
}

/// Elements on a side of a tile: one vector of the output's elements, so a
/// row of a tile is one vector store (and, at 64-byte vectors, one cache
/// line of f32s). `None` for an output without a fixed element size.
fn tile(k: &Kernel, target: &TargetDesc) -> Option<i64> {
    let bytes = k.buffers.iter().find(|b| b.output)?.dtype.size();
    (bytes > 0).then(|| (target.vector_bytes / bytes).max(2) as i64)
}

/// The directives that tile loops `c` and `o` of `k` (`c` outside `o`) by
/// `tile`, move the tile loops innermost and read each tile of parameter
/// `read` from a local copy, checked by applying them. The partial tiles
/// at the ends of `c` and `o` are peeled off first ([`whole_tiles`]), so
/// the tiles inside have constant bounds.
///
/// The copy is what makes the vector loop pay: read in place, each lane
/// of a vector over `o` comes from another row (a gather), and the C
/// compiler cannot combine scalar loads into vector stores either, as it
/// cannot tell the output from the input inside an OpenMP region. Reading
/// a local buffer, nothing can alias.
fn tile_loops(k: &Kernel, (c, o): (&str, &str), read: &str, tile: i64) -> Option<Schedule> {
    let (_, c_inner) = split_names(c);
    let (o_outer, o_inner) = split_names(o);
    let mut d = vec![
        Directive::Split {
            var: c.to_string(),
            factor: tile,
        },
        Directive::Split {
            var: o.to_string(),
            factor: tile,
        },
    ];
    let split = apply(k, &Schedule(d.clone())).ok()?;
    let vars = nest_vars(&split);
    let from = vars.iter().position(|v| *v == c_inner)?;
    let to = vars.iter().position(|v| *v == o_inner)?;
    let o_rest = whole_tiles(k, o, tile);
    // Each reorder swaps `c`'s tile loop with the next loop inward, until
    // only `o`'s tile loop is inside it; where `o` was peeled, `c`'s tile
    // loop holds both parts and is distributed over them first.
    for inner in &vars[from + 1..to] {
        if *inner == o_outer && o_rest.is_some() {
            d.push(Directive::Distribute(c_inner.clone()));
        }
        d.push(Directive::Reorder {
            outer: c_inner.clone(),
            inner: inner.clone(),
        });
    }
    d.splice(
        0..0,
        [whole_tiles(k, c, tile), o_rest].into_iter().flatten(),
    );
    // Vectorized before the copy exists: the copy's own loop over `o`'s
    // tile, made by `cache_read`, stays serial.
    d.push(Directive::Vectorize(o_inner));
    d.push(Directive::CacheRead {
        buf: read.to_string(),
        at: o_outer,
    });
    let schedule = Schedule(d);
    apply(k, &schedule).ok().map(|_| schedule)
}

/// Peels loop `var` of `k` into its whole tiles and the rest, when there
/// is a rest. The partial tiles' copies then run in loops of their own:
/// with a bound that varies from tile to tile the C compiler vectorizes
/// no tile's copy.
fn whole_tiles(k: &Kernel, var: &str, tile: i64) -> Option<Directive> {
    let extent = extent(k, var)?;
    (extent % tile != 0).then(|| Directive::Peel {
        var: var.to_string(),
        at: vec![extent - extent % tile],
    })
}

/// The variables of `k`'s output nest, outermost first.
fn nest_vars(k: &Kernel) -> Vec<String> {
    output_nest(&k.body).iter().map(|l| l.var.clone()).collect()
}

/// The extent of `k`'s loop over `var`.
fn extent(k: &Kernel, var: &str) -> Option<i64> {
    crate::ir::find_loop(&k.body, var).map(|l| l.extent.max())
}

/// Coefficient of loop variable `var` in `offset` (0 when it is absent).
fn stride(offset: &Idx, var: &str) -> i64 {
    offset
        .terms
        .iter()
        .filter(|(a, _)| matches!(a, Atom::Var(x) if x == var))
        .map(|(_, c)| *c)
        .sum()
}

/// Whether the innermost loop of `k`'s output nest, over `o`, holds only
/// stores, each writing consecutive elements along `o`.
fn plain_stores_along(k: &Kernel, o: &str) -> bool {
    let nest = output_nest(&k.body);
    let Some(innermost) = nest.last() else {
        return false;
    };
    innermost.body.iter().all(|s| match s {
        Stmt::Store { offset, .. } => stride(offset, o) == 1,
        _ => false,
    })
}

/// The parameter some load of `k` reads consecutively along an output loop
/// (of `vars`, not `o`) while it jumps along `o`, and that loop: the axis
/// a transpose moved away from the innermost position.
fn read_axis(k: &Kernel, o: &str, vars: &[String]) -> Option<(String, String)> {
    let mut found = None;
    for_each_load(&k.body, &mut |b, offset, _| {
        if found.is_none() && stride(offset, o).abs() > 1 {
            found = vars
                .iter()
                .find(|v| v.as_str() != o && stride(offset, v) == 1)
                .map(|c| (k.buffers[b].name.clone(), c.clone()));
        }
    });
    found
}

#[cfg(test)]
mod tests {
    use super::super::default_schedule;
    use crate::parse_kernel;
    use kiln_target::CpuPreset;

    fn schedule_text(kernel: &str, vector_bytes: usize) -> String {
        let mut target = CpuPreset::X86_64V4.desc(2);
        target.vector_bytes = vector_bytes;
        let k = parse_kernel(kernel).unwrap();
        let s = default_schedule(&k, &target);
        s.0.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Tiles of one vector a side: 16 f32s at 64-byte vectors, 8 at 32.
    #[test]
    fn a_transpose_of_the_last_two_axes_is_tiled_by_the_vector_width() {
        let k = "kernel k(in0: f32[4,64,64], out out0: f32[4,64,64]) {
  for i0 in 0..4 {
    for i1 in 0..64 {
      for i2 in 0..64 {
        out0[4096*i0 + 64*i1 + i2] = in0[4096*i0 + 64*i2 + i1]
      }
    }
  }
}";
        let tiled = "split(i1, F) split(i2, F) reorder(i1i, i2o) vectorize(i2i) \
                     cache_read(in0, i2o)";
        assert_eq!(schedule_text(k, 64), tiled.replace('F', "16"));
        assert_eq!(schedule_text(k, 32), tiled.replace('F', "8"));
    }

    /// A broadcast reads nothing across the output's rows: the rule
    /// leaves it to the plain vector loop.
    #[test]
    fn a_broadcast_is_not_tiled() {
        let broadcast = "kernel k(in0: f32[64], out out0: f32[64,64]) {
  for i0 in 0..64 {
    for i1 in 0..64 {
      out0[64*i0 + i1] = in0[i0]
    }
  }
}";
        assert_eq!(schedule_text(broadcast, 64), "vectorize(i1)");
    }
}

//! kiln's bandwidth-weighted refinement of a phase's tiles (not in
//! swTVM): after `tiling.rs` has kept a tiling by the bytes it moves (the
//! halving tiles or Algorithms 1 and 2's), each candidate tiling is
//! resized here, in its own loop order, to move its DMA in less time by
//! the description's bandwidths, and the fastest replaces the kept one
//! when it reads DDR no more and keeps as many cores busy.
//!
//! The cost ([`dma_cost`]) models what the generated code moves: each
//! LB array's box, got and put, once per tile of the loops around its
//! DMA (a box outside every tile loop once per core that runs the phase,
//! since each core runs the phase's function); an input whose boxes the
//! tiles fetch more than its size in all and that fits the GB is staged
//! there (`staged_inputs`: DDR→GB once per cluster, then GB→LB per
//! fetch), every other transfer crosses DDR. Boxes are counted whole:
//! the emulator clips a tail tile's box, and a halo's, to the buffer.
//! Its time is DDR bytes over the DDR's GB/s plus GB bytes over the GB's.
//! swTVM's Algorithm 2 counts transfers and Algorithm 1 stops at the
//! first overflow, so a weight tile fetched once can leave the
//! activations read from GB once per weight column tile: the cost sees
//! that the other operand's tile could be larger.
//!
//! The search ([`refine`]) is greedy: from the candidate, each step tries,
//! for every tile loop `j` and every other loop `i` (or none), `i`'s tile
//! halved and then `j`'s grown to the largest tile of a balanced count
//! (`⌈extent / count⌉`) that fits the LB, and takes the move that lowers
//! the score most: first the DDR bytes above the bound, then the time.
//! It stops when no move lowers it. The outermost loop, when dealt, keeps
//! at least the bound's count of tiles.
//!
//! Needs: tilings that fit the LB, with the reduction's tile loop last
//! when it has one (any tile of it is legal: `reduction.rs`).
//! Guarantees: the result fits the LB, keeps the loops and their order,
//! has at least the bound's busy cores and at most its DDR bytes (as
//! modelled), and scores no worse than its start; `None` when the start
//! keeps fewer cores busy than the bound or no step brings its DDR bytes
//! down to the bound.

use crate::device::TileLoop;
use crate::tile_select::{busy, half};
use crate::tiling::{layout, usage, BufferUse, Tiling};
use crate::DsaDesc;
use kiln_loop::Kernel;

/// The DMA a tiling moves, as the module doc models it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DmaCost {
    /// Bytes in and out of DDR (to the LB, to the GB, back from the LB).
    pub ddr: u64,
    /// Bytes from the GB to the LB.
    pub gb: u64,
    /// Nanoseconds at the description's bandwidths.
    pub time: f64,
}

/// What a refined tiling must keep: DDR bytes at most `ddr`, at least
/// `busy` cores with a tile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    pub ddr: u64,
    pub busy: i64,
}

/// The modelled DMA of `tiling` on `desc` (module doc); `independent`:
/// whether its outermost tile loop is dealt to the cores.
pub(crate) fn dma_cost(
    k: &Kernel,
    uses: &[BufferUse],
    tiling: &Tiling,
    independent: bool,
    desc: &DsaDesc,
) -> DmaCost {
    let cut = tiling.cut();
    // A box outside every tile loop is fetched by each core that runs
    // the phase; `staged_inputs` counts it once, so never stages it.
    let runners = busy(tiling, independent, desc.total_cores() as i64);
    let gb_room = desc.global_buffer.as_ref().map_or(0, |g| g.bytes);
    let (mut ddr, mut gb) = (0u64, 0u64);
    for (a, _) in layout(k, uses, tiling, tiling.extents) {
        let tiles: i64 = cut[..a.level].iter().map(TileLoop::count).product();
        let visits = if a.level == 0 { runners } else { tiles };
        let moved = visits as u64 * a.bytes();
        let param = &k.buffers[a.param];
        let size = (param.numel() * param.dtype.size()) as u64;
        let staged = a.get && !a.put && tiles as u64 * a.bytes() > size && size <= gb_room;
        match (a.get, staged) {
            (true, true) => {
                ddr += u64::from(desc.clusters) * size;
                gb += moved;
            }
            (true, false) => ddr += moved,
            (false, _) => {}
        }
        if a.put {
            ddr += moved;
        }
    }
    let gb_gbps = desc.global_buffer.as_ref().map_or(1.0, |g| g.gbps);
    DmaCost {
        ddr,
        gb,
        time: ddr as f64 / desc.ddr.gbps + gb as f64 / gb_gbps,
    }
}

/// The score the search lowers: DDR bytes above the bound, then time.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
struct Score(u64, f64);

/// The context of one phase's search.
struct Search<'s, 'u> {
    k: &'s Kernel,
    uses: &'s [BufferUse<'u>],
    desc: &'s DsaDesc,
    /// Whether the outermost tile loop is dealt to the cores.
    independent: bool,
    bound: Bound,
}

impl Search<'_, '_> {
    /// The score of `t`, or `None` when it overflows the LB or keeps
    /// fewer cores busy than the bound.
    fn score(&self, t: &Tiling) -> Option<Score> {
        let cores = self.desc.total_cores() as i64;
        if busy(t, self.independent, cores) < self.bound.busy
            || usage(&layout(self.k, self.uses, t, t.extents)) > self.desc.local_buffer.bytes
        {
            return None;
        }
        let c = dma_cost(self.k, self.uses, t, self.independent, self.desc);
        Some(Score(c.ddr.saturating_sub(self.bound.ddr), c.time))
    }

    fn fits(&self, t: &Tiling) -> bool {
        usage(&layout(self.k, self.uses, t, t.extents)) <= self.desc.local_buffer.bytes
    }

    /// Loop `j`'s tile grown to the largest `⌈extent / count⌉` that fits,
    /// the count kept at or above the bound's busy cores when `j` is the
    /// dealt outermost loop (binary search: the LB used falls with the
    /// count).
    fn grow(&self, t: &mut Tiling, j: usize) {
        let extent = t.loops[j].extent.max(1);
        let floor = if j == 0 && self.independent {
            self.bound.busy.max(1)
        } else {
            1
        };
        let now = t.loops[j].count();
        let (mut lo, mut hi) = (floor, now);
        // Invariant: count `hi` fits (the current tile does), `lo - 1` is
        // below the floor or does not fit.
        while lo < hi {
            let mid = (lo + hi) / 2;
            let keep = t.loops[j].tile;
            t.loops[j].tile = (extent + mid - 1) / mid;
            let ok = self.fits(t);
            t.loops[j].tile = keep;
            if ok {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if hi < now {
            t.loops[j].tile = (extent + hi - 1) / hi;
        }
    }

    /// The best move from `cur` (module doc), with its score.
    fn best_move<'a>(&self, cur: &Tiling<'a>) -> Option<(Tiling<'a>, Score)> {
        let n = cur.loops.len();
        let mut best: Option<(Tiling<'a>, Score)> = None;
        for j in 0..n {
            let shrunk = (0..n).filter(|&i| i != j && cur.loops[i].tile > 1);
            for i in std::iter::once(None).chain(shrunk.map(Some)) {
                let mut t = cur.clone();
                if let Some(i) = i {
                    t.loops[i].tile = half(t.loops[i].tile);
                }
                self.grow(&mut t, j);
                let Some(s) = self.score(&t) else { continue };
                if best.as_ref().is_none_or(|(_, b)| s < *b) {
                    best = Some((t, s));
                }
            }
        }
        best
    }
}

/// `tiling` resized to lower its score under `bound` (module doc), with
/// its modelled time; `None` when it keeps fewer cores busy than the
/// bound, overflows, or ends with more DDR bytes than the bound.
pub(crate) fn refine<'a>(
    k: &Kernel,
    uses: &[BufferUse],
    tiling: Tiling<'a>,
    independent: bool,
    bound: Bound,
    desc: &DsaDesc,
) -> Option<(Tiling<'a>, f64)> {
    let search = Search {
        k,
        uses,
        desc,
        independent,
        bound,
    };
    let mut score = search.score(&tiling)?;
    let mut cur = tiling;
    while let Some((t, s)) = search.best_move(&cur) {
        if s >= score {
            break;
        }
        (cur, score) = (t, s);
    }
    (score.0 == 0).then_some((cur, score.1))
}

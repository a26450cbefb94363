//! Choosing a phase's tiling (see `tiling.rs`'s module doc for the whole
//! rule): the halving tiling and swTVM's Algorithms 1 and 2's, kept by the
//! DMA bytes they move and the cores they keep busy, then refined by kiln
//! (`tile_refine.rs`); fitting a tiling to the LB by halving, and the error
//! naming the arrays when one-element tiles do not fit.
//!
//! Needs: a phase's buffer uses and outer loops (`tiling.rs`).
//! Guarantees: the tiling returned fits the LB.

use crate::device::{LbArray, TileLoop};
use crate::reduction::Reduction;
use crate::tile_choice::{choose_tiles, Choice};
use crate::tile_refine::{dma_cost, refine, Bound};
use crate::tiling::{layout, usage, BufferUse, Tiling};
use crate::DsaDesc;
use kiln_ir::{bail, Result};
use kiln_loop::{Kernel, Loop};
use std::collections::HashMap;

/// Which of a phase's outer loops may be dealt to the cores.
#[derive(Clone, Copy)]
pub(crate) struct Dealt {
    /// The outermost, in kernel order (`gpu_map::independent`).
    pub(crate) independent: bool,
    /// Any of them, in any order (`tile_choice::interchangeable`).
    pub(crate) any_order: bool,
}

/// A tiling and whether its outermost loop may be dealt.
pub(crate) type Dealing<'a> = (Tiling<'a>, bool);

/// What choosing one phase's tiling reads: the kernel, its buffer uses,
/// the phase's outer loops and cuttable reduction, the loops' extents,
/// which outer loops may be dealt to the cores, the target.
#[derive(Clone, Copy)]
pub(crate) struct PhaseTiling<'p, 'a> {
    pub(crate) k: &'p Kernel,
    pub(crate) uses: &'p [BufferUse<'p>],
    pub(crate) outer: &'p [&'p Loop],
    pub(crate) red: Option<&'p Reduction>,
    pub(crate) extents: &'a HashMap<String, i64>,
    pub(crate) dealt: Dealt,
    pub(crate) desc: &'p DsaDesc,
}

impl<'a> PhaseTiling<'_, 'a> {
    /// The tiling kept and whether its outermost loop may be dealt. First
    /// by bytes ([`by_bytes`]) over the tilings without a cut epilogue
    /// reduction; then kiln's refinement (`tile_refine.rs`) resizes every
    /// tiling of [`PhaseTiling::candidates`] (with the epilogue reduction
    /// cuttable) and the fastest replaces the kept one when it reads DDR
    /// no more and keeps as many cores busy. When no tiling without the
    /// cut fits, the halving tiling with it is kept.
    pub(crate) fn best_tiling(&self) -> Result<Dealing<'a>> {
        let (k, uses, desc) = (self.k, self.uses, self.desc);
        let plain = PhaseTiling {
            red: self.red.filter(|r| !r.epilogue),
            ..*self
        };
        let before = plain.candidates();
        let with_cut = self
            .red
            .filter(|r| r.epilogue)
            .and_then(|_| self.candidates().ok());
        let (kept, all) = match (before, with_cut) {
            (Ok(before), with_cut) => {
                let all = with_cut.unwrap_or_else(|| before.clone());
                (by_bytes(k, uses, before, desc), all)
            }
            (Err(_), Some(all)) => (all.first().cloned(), all),
            (Err(e), None) => return Err(e),
        };
        let Some(kept) = kept else {
            bail!("kernel {}: no tiling", k.name)
        };
        let kept_cost = dma_cost(k, uses, &kept.0, kept.1, desc);
        let bound = Bound {
            ddr: kept_cost.ddr,
            busy: busy(&kept.0, kept.1, desc.total_cores() as i64),
        };
        // The kept tiling first: a tie keeps it.
        let mut best = (kept.clone(), kept_cost.time);
        for (t, independent) in std::iter::once(kept).chain(all) {
            if let Some((t, time)) = refine(k, uses, t, independent, bound, desc) {
                if time < best.1 {
                    best = ((t, independent), time);
                }
            }
        }
        Ok(best.0)
    }

    /// The halving tiling, then the choices of Algorithms 1 and 2 (asked
    /// for only when the outer loops may run in any order): the reduction
    /// whole, then sized by Algorithm 1 where it cuts it; each fitted to
    /// the LB.
    fn candidates(&self) -> Result<Vec<Dealing<'a>>> {
        let (k, uses, outer, red, desc) = (self.k, self.uses, self.outer, self.red, self.desc);
        let (extents, dealt) = (self.extents, self.dealt);
        let fit_loops =
            |loops, independent| fitted(k, uses, loops, extents, independent, red.is_some(), desc);
        let mut out = vec![(
            fit_loops(tile_loops(outer, red, None), dealt.independent)?,
            dealt.independent,
        )];
        let choose = |r| {
            dealt
                .any_order
                .then(|| choose_tiles(k, uses, outer, r, extents, desc))
                .flatten()
        };
        let whole = choose(None);
        let cut =
            red.and_then(|r| choose(Some(r)).filter(|c| c.reduction.is_some_and(|t| t < r.extent)));
        // A choice that does not fit is dropped (the halving one fits).
        for c in whole.iter().chain(&cut) {
            out.extend(fit_loops(tile_loops(outer, red, Some(c)), true).map(|t| (t, true)));
        }
        Ok(out)
    }
}

/// The first of `tilings` (the halving one), replaced by each later one
/// that moves no more DMA bytes and keeps as many cores busy.
pub(crate) fn by_bytes<'a>(
    k: &Kernel,
    uses: &[BufferUse],
    tilings: Vec<Dealing<'a>>,
    desc: &DsaDesc,
) -> Option<Dealing<'a>> {
    let cores = desc.total_cores() as i64;
    tilings.into_iter().reduce(|best, (chosen, independent)| {
        if traffic(k, uses, &chosen) <= traffic(k, uses, &best.0)
            && busy(&chosen, independent, cores) >= busy(&best.0, best.1, cores)
        {
            (chosen, independent)
        } else {
            best
        }
    })
}

/// `loops` dealt to the cores (when `independent`) and halved to fit.
pub(crate) fn fitted<'a>(
    k: &Kernel,
    uses: &[BufferUse],
    loops: Vec<TileLoop>,
    extents: &'a HashMap<String, i64>,
    independent: bool,
    reduced: bool,
    desc: &DsaDesc,
) -> Result<Tiling<'a>> {
    let mut tiling = Tiling {
        loops,
        extents,
        reduced,
    };
    if independent {
        spread_over_cores(&mut tiling, desc.total_cores() as i64);
    }
    fit(k, uses, &mut tiling, desc)?;
    Ok(tiling)
}

/// How many of `cores` get a tile of `tiling`'s outermost loop.
pub(crate) fn busy(tiling: &Tiling, independent: bool, cores: i64) -> i64 {
    match tiling.loops.first() {
        Some(t) if independent => t.count().min(cores),
        _ => 1,
    }
}

/// Bytes the phase's DMA moves between the LB and DDR or GB under
/// `tiling`: each array's box, got and put, once per tile of the loops
/// around its DMA.
pub(crate) fn traffic(k: &Kernel, uses: &[BufferUse], tiling: &Tiling) -> u64 {
    let cut = tiling.cut();
    layout(k, uses, tiling, tiling.extents)
        .iter()
        .map(|(a, _)| {
            let visits: i64 = cut[..a.level].iter().map(TileLoop::count).product();
            (u64::from(a.get) + u64::from(a.put)) * visits as u64 * a.bytes()
        })
        .sum()
}

/// The tile loops of the outer loops, then of the cuttable reduction:
/// whole and in kernel order, or as `choice` sizes and orders them.
pub(crate) fn tile_loops(
    outer: &[&Loop],
    reduction: Option<&Reduction>,
    choice: Option<&Choice>,
) -> Vec<TileLoop> {
    let whole: Vec<usize> = (0..outer.len()).collect();
    let order = choice.map_or(&whole, |c| &c.order);
    let tile_loop = |var: &str, extent: i64, tile: Option<i64>| TileLoop {
        var: var.to_string(),
        tile_var: format!("{var}_t"),
        extent,
        tile: tile.unwrap_or(extent.max(1)),
    };
    let reduced = reduction.map(|r| tile_loop(&r.var, r.extent, choice.and_then(|c| c.reduction)));
    order
        .iter()
        .map(|&i| {
            let l = outer[i];
            tile_loop(&l.var, l.extent.max(), choice.map(|c| c.tiles[i]))
        })
        .chain(reduced)
        .collect()
}

/// Halves the outermost loop's tile until every core has one.
pub(crate) fn spread_over_cores(tiling: &mut Tiling, cores: i64) {
    if let Some(first) = tiling.loops.first_mut() {
        while first.tile > 1 && first.count() < cores {
            first.tile = half(first.tile);
        }
    }
}

/// `t / 2` rounded up.
pub(crate) fn half(t: i64) -> i64 {
    (t + 1) / 2
}

/// Halves tiles until the arrays fit the LB (the halving that saves the
/// most first, outer loops on ties; the reduction's, last of the loops
/// when `reduced`, only once the others are one-element tiles), or the
/// error naming the kernel.
pub(crate) fn fit(
    k: &Kernel,
    uses: &[BufferUse],
    tiling: &mut Tiling,
    desc: &DsaDesc,
) -> Result<()> {
    let lb = desc.local_buffer.bytes;
    let n = tiling.loops.len();
    let outer = n - usize::from(tiling.reduced);
    loop {
        let now = usage(&layout(k, uses, tiling, tiling.extents));
        if now <= lb {
            return Ok(());
        }
        let mut best: Option<(u64, usize)> = None;
        let all_ones = tiling.loops[..outer].iter().all(|t| t.tile <= 1);
        for j in (0..n).filter(|&j| (j < outer) != all_ones) {
            let t = tiling.loops[j].tile;
            if t <= 1 {
                continue;
            }
            tiling.loops[j].tile = half(t);
            let u = usage(&layout(k, uses, tiling, tiling.extents));
            tiling.loops[j].tile = t;
            if best.is_none_or(|(b, _)| u < b) {
                best = Some((u, j));
            }
        }
        match best {
            Some((_, j)) => tiling.loops[j].tile = half(tiling.loops[j].tile),
            None => bail!(
                "{}",
                overflow(k, &layout(k, uses, tiling, tiling.extents), now, desc)
            ),
        }
    }
}

/// The LB overflow error: kernel, arrays with their boxes and bytes, LB.
pub(crate) fn overflow(
    k: &Kernel,
    arrays: &[(LbArray, bool)],
    need: u64,
    desc: &DsaDesc,
) -> String {
    let list: Vec<String> = arrays
        .iter()
        .map(|(a, _)| {
            let dims: Vec<String> = a.dims.iter().map(|d| d.ext.to_string()).collect();
            format!(
                "{} box [{}] {} B",
                k.buffers[a.param].name,
                dims.join(", "),
                a.bytes()
            )
        })
        .collect();
    format!(
        "kernel {}: its smallest tiles need {need} bytes of local buffer ({}), \
         but a core of {} has {} bytes",
        k.name,
        list.join("; "),
        desc.name,
        desc.local_buffer.bytes
    )
}

//! A loop-IR kernel tiled for a DSA's local buffers, with its DMA
//! (swTVM §5.2–5.3 in kiln's general form): the [`DeviceKernel`] the DSA
//! printer prints.
//!
//! Needs: a kernel lowered for the DSA target (`Arch::Dsa`: plain loop
//! nests, no gemm statements or local buffers) and a [`DsaDesc`].
//! Guarantees, per phase (each top-level loop nest; a body with
//! top-level scalars is one phase run by core 0):
//! - the perfectly nested outer loops are cut into tiles, and so is the
//!   reduction loop of a phase that accumulates one output element per
//!   outer iteration in a register (`reduction.rs`: a sum, min or max;
//!   its tile loop innermost, the partial sums kept in the output's LB
//!   array across its tiles). Tilings are made: the *halving* one (tiles
//!   start whole, in the kernel's order) and, when the phase's outer
//!   loops may run in any order (no buffer both read and written, every
//!   store dense and indexed by every outer loop), the ones whose sizes
//!   and order come from swTVM's Algorithms 1 and 2 (`tile_choice.rs`):
//!   with the reduction whole, then with it sized by Algorithm 1 when
//!   Algorithm 1 cuts it. Each replaces the one kept so far (halving
//!   first) unless that moves fewer DMA bytes between the LB and DDR or
//!   GB (each array's box times the tiles around its DMA, got and put)
//!   or keeps more cores busy (tiles of the outermost loop, at most one
//!   per core). A reduction with an epilogue (`reduction.rs`) is kept
//!   whole in this first selection. Then kiln's refinement
//!   (`tile_refine.rs`) resizes each of these tilings — a reduction with
//!   an epilogue now cuttable too — in its own order to lower its DMA
//!   time at the description's DDR and GB bandwidths, and the fastest
//!   replaces the kept one when it reads DDR no more (as modelled) and
//!   keeps as many cores busy. When no tiling fits with the epilogue
//!   reduction whole, the halving one with it cut is kept (that choice and
//!   the fitting to the LB live in `tile_select.rs`);
//! - in both, the outermost tile loop is dealt to the cores when its
//!   iterations write disjoint outputs (any loop of a chosen order, else
//!   `kiln_loop::gpu_map::independent` on the kernel's outermost) and
//!   every output box is written whole or, when it is got before it is
//!   put (an output read back: Softmax's rows form), lies apart from the
//!   boxes of the loop's other tiles (a dimension that moves by at least
//!   its extent from tile to tile), halved first until there are as many
//!   tiles as cores;
//! - every buffer the phase touches has one LB array holding the bounding
//!   box of all its accesses in a tile (`boxes.rs`: per dimension when
//!   the offsets are affine per dimension, else the whole buffer), its
//!   DMA inside the innermost tile loop the box moves with (swTVM
//!   Algorithm 3's placement: a box that stays put is moved once), got
//!   when read or written only in part, put back when written — so a
//!   reduction over a tiled loop accumulates in LB across those tiles;
//! - while the arrays overflow the LB (Algorithm 1 counts the nest's
//!   tiles, not the real boxes), the outer loop whose halving saves the
//!   most LB is halved, the cuttable reduction once every outer tile is
//!   one element; when one-element tiles do not fit, an error names the
//!   kernel, its arrays and the LB size;
//! - the compute reads and writes only LB arrays, each access rebased by
//!   its box's first index; it computes what the kernel computes.
//!
//! Inputs several tiles read again are staged whole in the cluster's GB
//! when the preset has one and they fit (largest reuse first is not
//! attempted: in parameter order).
//!
//! Gathers (indices read from data) are refused: their boxes are not
//! known before the data is.
//!
//! Other reduction loops (an epilogue after the reduction, several
//! reductions in one body, arg-reductions, half-float accumulation) are
//! never cut: the lowering keeps each output's reduction in a register,
//! so Algorithm 1 is told to buffer them whole.

use crate::boxes::{dim_box, dim_indices, TileRanges};
use crate::device::{BoxDim, DeviceKernel, LbArray, Phase, TileLoop};
use crate::reduction::{cuttable, resume};
use crate::tile_choice::interchangeable;
use crate::tile_select::{Dealt, PhaseTiling};
use crate::DsaDesc;
use kiln_ir::{bail, Result};
use kiln_loop::ir::Guard;
use kiln_loop::lower::strides;
use kiln_loop::{Atom, Buffer, Extent, Idx, Kernel, Loop, LoopKind, Scope, Stmt, Val};
use std::collections::HashMap;

/// Byte alignment of LB arrays and GB slots.
pub(crate) const ALIGN: u64 = 64;

/// `k` as device code for `desc` (see the module doc).
pub fn tile_kernel(k: &Kernel, desc: &DsaDesc) -> Result<DeviceKernel> {
    check_plain(k, &k.body)?;
    let phases = phase_bodies(&k.body)
        .into_iter()
        .map(|stmts| plan_phase(k, stmts, desc))
        .collect::<Result<Vec<_>>>()?;
    let staged = staged_inputs(k, &phases, desc);
    Ok(DeviceKernel {
        name: k.name.clone(),
        params: k.buffers.clone(),
        phases,
        staged,
    })
}

/// Errors for what the tiling cannot handle, naming the kernel.
fn check_plain(k: &Kernel, body: &[Stmt]) -> Result<()> {
    if let Some(b) = k.buffers.iter().find(|b| b.scope != Scope::Param) {
        bail!(
            "kernel {}: local buffer {} (a CPU schedule)",
            k.name,
            b.name
        );
    }
    for s in body {
        match s {
            Stmt::Loop(l) if !matches!(l.extent, Extent::Const(_)) => {
                bail!(
                    "kernel {}: loop {} is split (a CPU schedule)",
                    k.name,
                    l.var
                )
            }
            Stmt::Loop(l) => check_plain(k, &l.body)?,
            Stmt::Gemm(_) => bail!("kernel {}: a gemm statement", k.name),
            Stmt::Alloc(_) => bail!("kernel {}: a local buffer", k.name),
            _ => {}
        }
    }
    for a in accesses(body) {
        if !reads_no_data(&a.offset) || a.guard.iter().any(|(g, _)| !reads_no_data(g)) {
            let b = &k.buffers[a.buf];
            bail!(
                "kernel {}: {} ({}{:?}) is read at an index read from data (a gather), not an affine access",
                k.name,
                b.name,
                b.dtype,
                b.shape
            );
        }
    }
    Ok(())
}

/// Whether `i` has no data-dependent atom (floor divisions and remainders
/// may remain).
fn reads_no_data(i: &Idx) -> bool {
    i.terms.iter().all(|(a, _)| match a {
        Atom::Var(_) => true,
        Atom::Div(e, _) | Atom::Mod(e, _) => reads_no_data(e),
        Atom::Data { .. } => false,
    })
}

/// The phases: each top-level loop alone, or the whole body when it has
/// top-level statements that are not loops (scalars they share).
fn phase_bodies(body: &[Stmt]) -> Vec<&[Stmt]> {
    if body.iter().all(|s| matches!(s, Stmt::Loop(_))) {
        body.chunks(1).collect()
    } else {
        vec![body]
    }
}

/// One load or store.
pub(crate) struct Access {
    pub buf: usize,
    pub offset: Idx,
    pub guard: Guard,
    pub store: bool,
}

/// Every load and store of `body`.
pub(crate) fn accesses(body: &[Stmt]) -> Vec<Access> {
    let mut out = Vec::new();
    kiln_loop::ir::for_each_load(body, &mut |buf, offset, guard| {
        out.push(Access {
            buf,
            offset: offset.clone(),
            guard: guard.clone(),
            store: false,
        })
    });
    stores(body, &mut out);
    out
}

fn stores(body: &[Stmt], out: &mut Vec<Access>) {
    for s in body {
        match s {
            Stmt::Store { buf, offset, .. } => out.push(Access {
                buf: *buf,
                offset: offset.clone(),
                guard: Vec::new(),
                store: true,
            }),
            Stmt::Loop(l) => stores(&l.body, out),
            _ => {}
        }
    }
}

/// Every loop variable of `body` with its extent.
pub(crate) fn loop_extents(body: &[Stmt], out: &mut HashMap<String, i64>) {
    for s in body {
        if let Stmt::Loop(l) = s {
            out.insert(l.var.clone(), l.extent.max());
            loop_extents(&l.body, out);
        }
    }
}

/// The perfectly nested outer loops of a phase, outermost first.
pub(crate) fn prefix(stmts: &[Stmt]) -> Vec<&Loop> {
    let mut out = Vec::new();
    let mut cur = stmts;
    while let [Stmt::Loop(l)] = cur {
        out.push(l);
        cur = &l.body;
    }
    out
}

/// The tile loops of a phase and the ranges of all its variables.
#[derive(Clone)]
pub(crate) struct Tiling<'a> {
    pub loops: Vec<TileLoop>,
    pub extents: &'a HashMap<String, i64>,
    /// Whether the last loop is the phase's cuttable reduction.
    pub reduced: bool,
}

impl TileRanges for Tiling<'_> {
    fn tiled(&self, var: &str) -> Option<(String, i64)> {
        self.loops
            .iter()
            .find(|t| t.var == var && t.tile < t.extent)
            .map(|t| (t.tile_var.clone(), t.tile))
    }

    fn inner(&self, var: &str) -> (i64, i64) {
        match self.loops.iter().find(|t| t.var == var) {
            Some(t) => (0, t.tile - 1),
            None => (0, self.extents.get(var).copied().unwrap_or(1).max(1) - 1),
        }
    }
}

impl Tiling<'_> {
    /// The loops actually cut (fewer tiles than the extent).
    pub(crate) fn cut(&self) -> Vec<TileLoop> {
        self.loops
            .iter()
            .filter(|t| t.tile < t.extent)
            .cloned()
            .collect()
    }
}

/// The accesses of one buffer in a phase and, when all split per
/// dimension, their indices.
pub(crate) struct BufferUse<'a> {
    pub buf: usize,
    pub accesses: Vec<&'a Access>,
    pub split: Option<Vec<Vec<Idx>>>,
}

/// Per buffer the phase touches, its accesses (buffer order).
pub(crate) fn buffer_uses<'a>(
    k: &Kernel,
    all: &'a [Access],
    extents: &HashMap<String, i64>,
) -> Vec<BufferUse<'a>> {
    let full = |v: &str| (0, extents.get(v).copied().unwrap_or(1).max(1) - 1);
    (0..k.buffers.len())
        .filter_map(|buf| {
            let accesses: Vec<&Access> = all.iter().filter(|a| a.buf == buf).collect();
            if accesses.is_empty() {
                return None;
            }
            let shape = &k.buffers[buf].shape;
            let split = accesses
                .iter()
                .map(|a| dim_indices(&a.offset, &a.guard, shape, &full))
                .collect();
            Some(BufferUse {
                buf,
                accesses,
                split,
            })
        })
        .collect()
}

/// Whether a store at `dims` writes every element of its box: each
/// dimension of more than one element indexed by its own loop running
/// over the whole dimension.
pub(crate) fn dense(dims: &[Idx], shape: &[usize], extents: &HashMap<String, i64>) -> bool {
    let mut seen = Vec::new();
    dims.iter().zip(shape).all(|(idx, &size)| {
        if size <= 1 {
            return true;
        }
        match idx.terms.as_slice() {
            [(Atom::Var(v), 1)] if idx.constant == 0 && !seen.contains(v) => {
                seen.push(v.clone());
                extents.get(v) == Some(&(size as i64))
            }
            _ => false,
        }
    })
}

/// The LB array of one buffer for `tiling`, at offset 0, and whether its
/// box is per dimension (else the whole buffer, flat).
fn array_of(
    k: &Kernel,
    u: &BufferUse,
    tiling: &Tiling,
    extents: &HashMap<String, i64>,
) -> (LbArray, bool) {
    let b = &k.buffers[u.buf];
    // A 0-d buffer is one flat element.
    let boxes = u
        .split
        .as_ref()
        .filter(|_| !b.shape.is_empty())
        .and_then(|split| {
            (0..b.shape.len())
                .map(|d| {
                    let indices: Vec<&Idx> = split.iter().map(|s| &s[d]).collect();
                    let size = b.shape[d] as i64;
                    dim_box(&indices, size, tiling).map(|(lo, ext)| BoxDim { size, lo, ext })
                })
                .collect::<Option<Vec<_>>>()
        });
    let per_dim = boxes.is_some();
    let numel = b.numel() as i64;
    let dims = boxes.unwrap_or_else(|| {
        vec![BoxDim {
            size: numel,
            lo: Idx::constant(0),
            ext: numel,
        }]
    });
    let put = u.accesses.iter().any(|a| a.store);
    let read = u.accesses.iter().any(|a| !a.store);
    let all_dense = per_dim
        && u.split.as_ref().is_some_and(|split| {
            u.accesses
                .iter()
                .zip(split)
                .all(|(a, dims)| !a.store || dense(dims, &b.shape, extents))
        });
    let level = dma_level(&dims, tiling);
    let array = LbArray {
        param: u.buf,
        dtype: b.dtype,
        offset: 0,
        dims,
        get: read || (put && !all_dense),
        put,
        level,
    };
    (array, per_dim)
}

/// The innermost cut tile loop (1-based; 0: none) the box moves with.
fn dma_level(dims: &[BoxDim], tiling: &Tiling) -> usize {
    let mut vars = Vec::new();
    dims.iter().for_each(|d| d.lo.vars(&mut vars));
    tiling
        .cut()
        .iter()
        .enumerate()
        .filter(|(_, t)| vars.contains(&t.tile_var))
        .map(|(i, _)| i + 1)
        .max()
        .unwrap_or(0)
}

/// The arrays of every buffer for `tiling`, laid out in the LB.
pub(crate) fn layout(
    k: &Kernel,
    uses: &[BufferUse],
    tiling: &Tiling,
    extents: &HashMap<String, i64>,
) -> Vec<(LbArray, bool)> {
    let mut next = 0u64;
    uses.iter()
        .map(|u| {
            let (mut a, per_dim) = array_of(k, u, tiling, extents);
            a.offset = next;
            next = (next + a.bytes()).div_ceil(ALIGN) * ALIGN;
            (a, per_dim)
        })
        .collect()
}

pub(crate) fn usage(arrays: &[(LbArray, bool)]) -> u64 {
    arrays
        .iter()
        .map(|(a, _)| a.offset + a.bytes())
        .max()
        .unwrap_or(0)
}

/// Plans one phase: tiles, arrays, compute.
fn plan_phase(k: &Kernel, stmts: &[Stmt], desc: &DsaDesc) -> Result<Phase> {
    let mut extents = HashMap::new();
    loop_extents(stmts, &mut extents);
    let all = accesses(stmts);
    let uses = buffer_uses(k, &all, &extents);
    let outer = prefix(stmts);
    let independent = outer
        .first()
        .is_some_and(|l| kiln_loop::gpu_map::independent(k, l));
    let any_order = interchangeable(k, &uses, &outer, &extents);
    let reduction = cuttable(k, stmts, &outer, any_order);
    let red = reduction.as_ref();
    let dealt = Dealt {
        independent,
        any_order,
    };
    let phase = PhaseTiling {
        k,
        uses: &uses,
        outer: &outer,
        red,
        extents: &extents,
        dealt,
        desc,
    };
    let (tiling, independent) = phase.best_tiling()?;
    let arrays = layout(k, &uses, &tiling, &extents);
    let first = tiling.loops.first().filter(|t| t.count() > 1);
    let spread = independent
        && first.is_some_and(|t| {
            arrays
                .iter()
                .all(|(a, _)| !a.put || !a.get || apart_per_tile(a, t))
        });
    let mut compute = compute_kernel(k, stmts, &uses, &arrays, &tiling);
    if let Some(r) = red {
        if let Some(t) = tiling.cut().into_iter().find(|t| t.var == r.var) {
            compute.body = resume(&compute.body, outer.len(), &t, r.out);
        }
    }
    Ok(Phase {
        tiles: tiling.cut(),
        spread,
        arrays: arrays.into_iter().map(|(a, _)| a).collect(),
        compute,
    })
}

/// Whether the boxes of `a` in distinct tiles of `t` are disjoint: some
/// dimension starts at `s·t + c` (no other tile variable) and spans at
/// most `|s|` indices. An array both got and put is then read back and
/// written only where the same tile (and so the same core) put it, and
/// the tiles of `t` may run on different cores.
fn apart_per_tile(a: &LbArray, t: &TileLoop) -> bool {
    a.dims.iter().any(|d| match d.lo.terms.as_slice() {
        [(Atom::Var(v), s)] => *v == t.tile_var && d.ext <= s.abs(),
        _ => false,
    })
}

/// The compute of one tile over the LB arrays.
fn compute_kernel(
    k: &Kernel,
    stmts: &[Stmt],
    uses: &[BufferUse],
    arrays: &[(LbArray, bool)],
    tiling: &Tiling,
) -> Kernel {
    let extents = tiling.extents;
    let full = |v: &str| (0, extents.get(v).copied().unwrap_or(1).max(1) - 1);
    let index: HashMap<usize, usize> = uses.iter().enumerate().map(|(i, u)| (u.buf, i)).collect();
    let rebase = |buf: usize, offset: &Idx, guard: &Guard| -> (usize, Idx) {
        let i = index[&buf];
        let (array, per_dim) = &arrays[i];
        if !per_dim {
            return (i, offset.clone());
        }
        // A per-dimension box means every access of the buffer split
        // (`buffer_uses`, the same call).
        let shape = &k.buffers[buf].shape;
        let dims = dim_indices(offset, guard, shape, &full).unwrap_or_default();
        (i, rebased(&dims, array))
    };
    let body = shorten(&rewrite(stmts, &rebase), &tiling.cut());
    let buffers = arrays
        .iter()
        .map(|(a, _)| {
            let param = &k.buffers[a.param];
            Buffer {
                name: format!("{}_lb", param.name),
                dtype: a.dtype,
                shape: a.dims.iter().map(|d| d.ext as usize).collect(),
                output: param.output,
                scope: Scope::Local,
            }
        })
        .collect();
    Kernel {
        name: k.name.clone(),
        buffers,
        body,
    }
}

/// `Σ_d stride_d · (dims_d - lo_d)` over the array's box.
fn rebased(dims: &[Idx], array: &LbArray) -> Idx {
    let ext: Vec<usize> = array.dims.iter().map(|d| d.ext as usize).collect();
    let strides = strides(&ext);
    dims.iter()
        .zip(&array.dims)
        .zip(strides)
        .fold(Idx::constant(0), |acc, ((idx, d), s)| {
            acc.plus(&idx.clone().plus(&d.lo.clone().scale(-1)).scale(s))
        })
}

/// `stmts` with every access moved to its LB array (`map`: buffer,
/// offset, guard → array, offset) and every loop serial.
fn rewrite(stmts: &[Stmt], map: &dyn Fn(usize, &Idx, &Guard) -> (usize, Idx)) -> Vec<Stmt> {
    let val = |v: &Val| {
        v.map_leaves(&|leaf| match leaf {
            Val::Load { buf, offset, guard } => {
                let (buf, offset) = map(*buf, offset, guard);
                Some(Val::Load {
                    buf,
                    offset,
                    guard: guard.clone(),
                })
            }
            _ => None,
        })
    };
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Loop(l) => Stmt::Loop(Loop {
                body: rewrite(&l.body, map),
                kind: LoopKind::Serial,
                ..l.clone()
            }),
            Stmt::Store { buf, offset, value } => {
                let (buf, offset) = map(*buf, offset, &Vec::new());
                Stmt::store(buf, offset, val(value))
            }
            other => other.map_values(&mut |v, _| val(v)),
        })
        .collect()
}

/// The tiled loops of `stmts` cut to one tile: `min(tile, extent -
/// tile·tile_var)` iterations, their variable offset by `tile·tile_var`
/// inside.
fn shorten(stmts: &[Stmt], cut: &[TileLoop]) -> Vec<Stmt> {
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Loop(l) => match cut.iter().find(|t| t.var == l.var) {
                Some(t) => {
                    let at = Idx::var(&l.var).plus(&Idx::var(&t.tile_var).scale(t.tile));
                    let body: Vec<Stmt> =
                        l.body.iter().map(|s| s.substitute(&l.var, &at)).collect();
                    Stmt::Loop(Loop {
                        body: shorten(&body, cut),
                        extent: Extent::Tail {
                            total: t.extent,
                            outer: t.tile_var.clone(),
                            factor: t.tile,
                        },
                        ..l.clone()
                    })
                }
                None => Stmt::Loop(Loop {
                    body: shorten(&l.body, cut),
                    ..l.clone()
                }),
            },
            other => other.clone(),
        })
        .collect()
}

/// Inputs several tiles read again, staged whole in the GB (offsets),
/// while they fit.
fn staged_inputs(k: &Kernel, phases: &[Phase], desc: &DsaDesc) -> Vec<(usize, u64)> {
    let Some(gb) = &desc.global_buffer else {
        return Vec::new();
    };
    let written: Vec<usize> = phases
        .iter()
        .flat_map(|p| p.arrays.iter().filter(|a| a.put).map(|a| a.param))
        .collect();
    let mut next = 0u64;
    let mut staged = Vec::new();
    for (p, b) in k.buffers.iter().enumerate() {
        let bytes = (b.numel() * b.dtype.size()) as u64;
        let fetched: u64 = phases
            .iter()
            .flat_map(|ph| ph.arrays.iter().map(move |a| (ph, a)))
            .filter(|(_, a)| a.param == p && a.get)
            .map(|(ph, a)| {
                let times: i64 = ph.tiles[..a.level.min(ph.tiles.len())]
                    .iter()
                    .map(TileLoop::count)
                    .product();
                times as u64 * a.bytes()
            })
            .sum();
        if !written.contains(&p) && fetched > bytes && next + bytes <= gb.bytes {
            staged.push((p, next));
            next = (next + bytes).div_ceil(ALIGN) * ALIGN;
        }
    }
    staged
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The phases of `text` tiled for `stcp920`: (dealt, arrays got and put).
    fn dealing(text: &str) -> Vec<(bool, usize)> {
        let k = kiln_loop::parse_kernel(text).expect("kernel");
        let desc = DsaDesc::preset("stcp920").expect("preset");
        let d = tile_kernel(&k, &desc).expect("tiles");
        d.phases
            .iter()
            .map(|p| (p.spread, p.arrays.iter().filter(|a| a.get && a.put).count()))
            .collect()
    }

    #[test]
    fn an_output_read_back_by_its_own_rows_is_dealt_to_the_cores() {
        // Each row i0 is stored, then read back and rescaled by its sum:
        // a tile's output box is its own rows.
        let rows = dealing(
            "kernel k(in0: f32[64, 100], out out0: f32[64, 100]) {
               for i0 in 0..64 {
                 let s: f32 = 0.0:f32
                 for i1 in 0..100 { out0[100*i0 + i1] = Exp(in0[100*i0 + i1])
                   s = sum(s, out0[100*i0 + i1]) }
                 for i2 in 0..100 { out0[100*i0 + i2] = Div(out0[100*i0 + i2], s) } } }",
        );
        assert_eq!(rows, vec![(true, 1)]);
    }

    #[test]
    fn an_output_read_back_in_a_box_other_tiles_share_stays_on_one_core() {
        // Iteration i0 touches out0's elements 4·i0 .. 4·i0 + 3 only, but
        // as `[2, 32]` their indices do not split per dimension: the box
        // is the whole buffer, the same for every tile.
        let whole = dealing(
            "kernel k(in0: f32[64], out out0: f32[2, 32]) {
               for i0 in 0..16 { for i1 in 0..4 {
                 out0[4*i0 + i1] = in0[4*i0 + i1]
                 out0[4*i0 + i1] = Neg(out0[4*i0 + i1]) } } }",
        );
        assert_eq!(whole, vec![(false, 1)]);
    }
}

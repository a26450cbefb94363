//! The tiles of a phase's outer loops chosen by swTVM's Algorithms 1 and 2
//! (§5.2), for `tiling.rs`: each loop's tile size from Algorithm 1
//! (`ldm.rs`) for the local buffer, and the order of the tile loops from
//! Algorithm 2 (`reorder.rs`).
//!
//! The phase is read as a [`Nest`]: the loops the tiling can cut first —
//! its perfectly nested outer loops in the kernel's order, then the
//! reduction `reduction.rs` accepts when one is passed — then every other
//! loop variable an access uses (other reductions and the loops of a
//! non-perfect body), which the tiling runs whole inside a tile and
//! Algorithm 1 is told to buffer whole (`choose_buffers_around`). One tensor per buffer
//! whose accesses split per dimension (`boxes.rs`): per dimension the
//! union of the accesses' loop terms, each with its largest coefficient
//! in absolute value (constant offsets do not change a tile's extent).
//! The local buffer Algorithm 1 may fill is the core's LB less what the
//! nest does not see: buffers kept whole (accesses that do not split,
//! 0-d buffers) and the alignment of each array.
//!
//! A choice is asked for only when the phase's outer loops may run in any
//! order and on any core ([`interchangeable`]: no buffer is both read and
//! written, and every store writes its box densely (`dense`) with an index
//! that uses every outer loop of more than one iteration, so distinct
//! iterations of the outer loops write distinct elements and read only
//! what no iteration writes); `tiling.rs` checks it once per phase. When
//! an index uses a floor division or remainder, or Algorithm 1 refuses
//! the nest, there is no choice and `tiling.rs` halves tiles instead.
//!
//! Needs: `uses` and `outer` of one phase of a plain kernel, as
//! `tiling.rs` builds them, the outer loops [`interchangeable`]. Guarantees: a tile between 1 and the extent
//! for every outer loop (whole for a loop no access uses) and for the
//! reduction passed; `order` a permutation of the outer loops, the cut
//! ones (tile below the extent) first in Algorithm 2's order, then the
//! whole ones in kernel order (the reduction's tile loop, wherever
//! Algorithm 2 puts it, goes inside them all: `tiling.rs`).
//! The tiles fit the LB as the nest counts it; `tiling.rs` checks the
//! real boxes, deals the outermost tile loop to the cores, and keeps its
//! halving tiles instead when they move fewer bytes.

use crate::dma::outer_loops;
use crate::ldm::{choose_buffers_around, LdmBudget};
use crate::nest::{Access as NestAccess, Affine, Loop as NestLoop, Nest, Term};
use crate::reduction::Reduction;
use crate::reorder::reorder_loops;
use crate::tiling::{dense, BufferUse, ALIGN};
use crate::DsaDesc;
use kiln_loop::{Atom, Idx, Kernel, Loop};
use std::collections::HashMap;

/// Algorithm 1's tiles and Algorithm 2's order for a phase's outer loops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Choice {
    /// The tile of each outer loop, in kernel order.
    pub tiles: Vec<i64>,
    /// Positions in the outer loops, outermost tile loop first.
    pub order: Vec<usize>,
    /// The tile of the phase's cuttable reduction, if it has one.
    pub reduction: Option<i64>,
}

/// The choice for one phase (see the module doc), or `None`.
pub(crate) fn choose_tiles(
    k: &Kernel,
    uses: &[BufferUse],
    outer: &[&Loop],
    reduction: Option<&Reduction>,
    extents: &HashMap<String, i64>,
    desc: &DsaDesc,
) -> Option<Choice> {
    if outer.is_empty() {
        return None;
    }
    let mut cuttable: Vec<&str> = outer.iter().map(|o| o.var.as_str()).collect();
    cuttable.extend(reduction.map(|r| r.var.as_str()));
    let (nest, reserve) = phase_nest(k, uses, &cuttable, extents)?;
    let cut_at = nest
        .loops
        .iter()
        .take_while(|l| cuttable.contains(&l.var.as_str()))
        .count();
    let budget = LdmBudget {
        capacity_bytes: desc.local_buffer.bytes.checked_sub(reserve)?,
        initial_elems: desc.dma.initial_buffer_elems,
    };
    let whole: Vec<usize> = (cut_at..nest.loops.len()).collect();
    let sizes = choose_buffers_around(&nest, budget, &whole).ok()?.sizes;
    let order = reorder_loops(&nest, &sizes, &outer_loops(&nest, &sizes)).ok()?;
    let position = |var: &str| outer.iter().position(|o| o.var == var);
    let mut tiles: Vec<i64> = outer.iter().map(|o| o.extent.max().max(1)).collect();
    let mut reduction_tile = reduction.map(|r| r.extent.max(1));
    for (l, &size) in nest.loops.iter().zip(&sizes).take(cut_at) {
        match position(&l.var) {
            Some(i) => tiles[i] = size as i64,
            None => reduction_tile = Some(size as i64),
        }
    }
    // The reduction's tile loop goes innermost (`reduction.rs`).
    let cut: Vec<usize> = order
        .iter()
        .filter_map(|&i| position(&nest.loops[i].var))
        .collect();
    let order = cut
        .iter()
        .copied()
        .chain((0..outer.len()).filter(|i| !cut.contains(i)))
        .collect();
    Some(Choice {
        tiles,
        order,
        reduction: reduction_tile,
    })
}

/// Whether the outer loops may be reordered and dealt to cores in any
/// order: no buffer both read and written, every store dense and indexed
/// by every outer loop.
pub(crate) fn interchangeable(
    k: &Kernel,
    uses: &[BufferUse],
    outer: &[&Loop],
    extents: &HashMap<String, i64>,
) -> bool {
    uses.iter().all(|u| {
        let stores = u.accesses.iter().filter(|a| a.store).count();
        if stores == 0 {
            return true;
        }
        let shape = &k.buffers[u.buf].shape;
        stores == u.accesses.len()
            && u.split.as_ref().is_some_and(|split| {
                split.iter().all(|dims| {
                    let mut vars = Vec::new();
                    dims.iter().for_each(|d| d.vars(&mut vars));
                    dense(dims, shape, extents)
                        && outer
                            .iter()
                            .all(|o| o.extent.max() <= 1 || vars.contains(&o.var))
                })
            })
    })
}

/// The phase as a nest (the `cuttable` loops first, then the other
/// variables the accesses use) and the LB bytes it does not count;
/// `None` when an index term is not a loop variable.
fn phase_nest(
    k: &Kernel,
    uses: &[BufferUse],
    cuttable: &[&str],
    extents: &HashMap<String, i64>,
) -> Option<(Nest, u64)> {
    let mut loops: Vec<NestLoop> = Vec::new();
    let mut tensors = Vec::new();
    let mut reserve = 0u64;
    let mut used = Vec::new();
    for u in uses {
        let b = &k.buffers[u.buf];
        let elem = b.dtype.size() as u64;
        match u.split.as_ref().filter(|_| !b.shape.is_empty()) {
            Some(split) => {
                for dims in split {
                    for d in dims {
                        for (atom, _) in &d.terms {
                            let Atom::Var(v) = atom else { return None };
                            used.push(v.clone());
                        }
                    }
                }
                reserve += ALIGN;
                tensors.push((u, elem, split));
            }
            None => reserve += (b.numel() as u64 * elem).div_ceil(ALIGN) * ALIGN,
        }
    }
    let inner = used.iter().filter(|v| !cuttable.contains(&v.as_str()));
    for var in cuttable.iter().copied().chain(inner.map(String::as_str)) {
        if used.iter().any(|u| u == var) && loops.iter().all(|l| l.var != var) {
            let extent = *extents.get(var)?;
            loops.push(NestLoop {
                var: var.to_string(),
                extent: extent.max(1) as u64,
            });
        }
    }
    let mut nest = Nest {
        name: k.name.clone(),
        loops,
        tensors: Vec::new(),
    };
    nest.tensors = tensors
        .into_iter()
        .map(|(u, elem, split)| nest_access(&nest, u, elem, split))
        .collect();
    nest.validate().ok()?;
    Some((nest, reserve))
}

/// One buffer as a nest tensor: per dimension the union of its accesses'
/// terms, largest coefficient (absolute) per loop.
fn nest_access(nest: &Nest, u: &BufferUse, elem_bytes: u64, split: &[Vec<Idx>]) -> NestAccess {
    let rank = split.first().map_or(0, Vec::len);
    let dims = (0..rank)
        .map(|d| {
            let mut terms: Vec<Term> = Vec::new();
            for (atom, c) in split.iter().flat_map(|dims| &dims[d].terms) {
                // `phase_nest` refused every other atom.
                let Some(loop_index) = var_loop(nest, atom) else {
                    continue;
                };
                let coeff = c.unsigned_abs();
                match terms.iter_mut().find(|t| t.loop_index == loop_index) {
                    Some(t) => t.coeff = t.coeff.max(coeff),
                    None if coeff > 0 => terms.push(Term { loop_index, coeff }),
                    None => {}
                }
            }
            Affine { terms, constant: 0 }
        })
        .collect();
    NestAccess {
        name: format!("b{}", u.buf),
        dims,
        elem_bytes,
        is_output: u.accesses.iter().any(|a| a.store),
    }
}

/// The nest loop of a variable atom.
fn var_loop(nest: &Nest, atom: &Atom) -> Option<usize> {
    match atom {
        Atom::Var(v) => nest.loop_index(v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiling::{accesses, buffer_uses, loop_extents, prefix};

    /// The choice for the one phase of `text` on `stcp920`, with its
    /// reduction cuttable when `reduction`.
    fn choice_with(text: &str, reduction: bool) -> Option<Choice> {
        let k = kiln_loop::parse_kernel(text).expect("kernel");
        let mut extents = HashMap::new();
        loop_extents(&k.body, &mut extents);
        let all = accesses(&k.body);
        let uses = buffer_uses(&k, &all, &extents);
        let desc = DsaDesc::preset("stcp920").expect("preset");
        let outer = prefix(&k.body);
        if !interchangeable(&k, &uses, &outer, &extents) {
            return None;
        }
        let red = crate::reduction::cuttable(&k, &k.body, &outer, reduction);
        assert_eq!(red.is_some(), reduction);
        choose_tiles(&k, &uses, &outer, red.as_ref(), &extents, &desc)
    }

    fn choice(text: &str) -> Option<Choice> {
        choice_with(text, false)
    }

    #[test]
    fn the_papers_matmul_kernel_gets_k_64_when_its_reduction_may_be_cut() {
        // swTVM's walk-through on a 64 KB LB (less 3 × 64 bytes of
        // alignment, which changes none of its steps): x = 1, y = 128,
        // k = 64; with k whole, x = 4 and y = 8 (`ldm.rs`'s tests).
        let text =
            "kernel k(in0: f32[1024, 1024], in1: f32[1024, 1024], out out0: f32[1024, 1024]) {
               for i0 in 0..1024 { for i1 in 0..1024 {
                 let acc: f32 = 0.0:f32
                 for r0 in 0..1024 { acc = sum(acc, Mul(in0[1024*i0 + r0], in1[1024*r0 + i1])) }
                 out0[1024*i0 + i1] = acc } } }";
        let cut = choice_with(text, true).expect("a choice");
        assert_eq!((cut.tiles, cut.reduction), (vec![1, 128], Some(64)));
        let whole = choice(text).expect("a choice");
        assert_eq!((whole.tiles, whole.reduction), (vec![4, 8], None));
    }

    #[test]
    fn a_transpose_gets_algorithm_1s_tiles() {
        // 512 × 512: i0 and i1 are both compvars (each the contiguous
        // index of one tensor and a higher one of the other); i0, then
        // i1, get 64 values (2 · 64 · 64 floats = 32 KB); doubling i0 to
        // 128 gives 64 KB, over the 64 KB LB less 128 bytes of alignment.
        let c = choice(
            "kernel k(in0: f32[512, 512], out out0: f32[512, 512]) {
               for i0 in 0..512 { for i1 in 0..512 {
                 out0[512*i1 + i0] = in0[512*i0 + i1] } } }",
        );
        assert_eq!(c.map(|c| c.tiles), Some(vec![64, 64]));
    }

    #[test]
    fn outputs_written_again_or_read_back_get_no_choice() {
        // Every i0 writes the same row: the last writer must stay last.
        assert_eq!(
            choice(
                "kernel k(in0: f32[8, 64], out out0: f32[64]) {
                   for i0 in 0..8 { for i1 in 0..64 { out0[i1] = in0[64*i0 + i1] } } }"
            ),
            None
        );
        // The output is read back.
        assert_eq!(
            choice(
                "kernel k(in0: f32[64], out out0: f32[64]) {
                   for i0 in 0..64 { out0[i0] = in0[i0]
                     out0[i0] = Neg(out0[i0]) } }"
            ),
            None
        );
    }
}

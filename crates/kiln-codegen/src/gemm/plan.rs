//! Chooses, per vector target, the micro-kernel shape, the orientation (`C = A B` or
//! `C^T = B^T A^T`) and the cache blocking of one matmul (GotoBLAS/BLIS blocking:
//! Goto & van de Geijn 2008 §6-7; Low et al. 2016, "Analytical modeling is enough").
//!
//! Needs a validated spec. Guarantees `kc <= k`, at least one panel per block, and a plan whose
//! blocks follow the cache model: K blocks as deep as the target's measured `kc_max` (the C
//! tile's read-modify-write is paid once per K block); one packed A block (`mc x kc`) fills
//! about 3/4 of L2, since the micro-kernel streams it once per B micro-panel; packed B blocks
//! (`kc x nc`) live in L3, each micro-panel read once per A block.
//! The thread split is decided at run time in C (`kiln_gemm_split`), from these maximum sizes.

use super::kernel::{KernelShape, VectorTarget};
use super::view::View;
use super::{GemmSpec, Tuning};

/// How one matmul is computed on one vector target.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    pub shape: KernelShape,
    /// Computes `C^T = B^T A^T`: kernel rows run along C's columns.
    pub transposed: bool,
    /// Kernel-orientation sizes (M', N' swap when transposed).
    pub m: usize,
    pub n: usize,
    /// Depth of one K block (K is cut into equal blocks of at most the cache-model depth).
    pub kc: usize,
    /// Largest M block and N block, in panels of `mr` rows and `nr` columns.
    pub mc_panels: usize,
    pub nc_panels: usize,
    /// Pack A into panels; otherwise the micro-kernel reads A's rows in place (only when A is
    /// strided and contiguous along K; a partial last panel is still packed).
    pub pack_a: bool,
}

impl Plan {
    pub(crate) fn m_panels(&self) -> usize {
        self.m.div_ceil(self.shape.mr)
    }

    pub(crate) fn n_panels(&self) -> usize {
        self.n.div_ceil(self.shape.nr)
    }
}

/// Largest N block (columns): packed B blocks are meant for L3, this only bounds the buffer.
const NC_MAX: usize = 4096;

pub(crate) fn plan(spec: &GemmSpec, target: &VectorTarget, tuning: &Tuning) -> Plan {
    let (shape, transposed) = choose_kernel(spec, target, tuning);
    let (m, n) = if transposed {
        (spec.n, spec.m)
    } else {
        (spec.m, spec.n)
    };
    let kc_max = tuning.kc.unwrap_or(target.kc_max).max(1);
    let kc = spec.k.div_ceil(spec.k.div_ceil(kc_max));
    let mc_max = tuning.mc.unwrap_or(target.l2_bytes * 3 / 4 / (kc * 4));
    let nc_max = tuning.nc.unwrap_or(NC_MAX);
    Plan {
        shape,
        transposed,
        m,
        n,
        kc,
        mc_panels: (mc_max / shape.mr).max(1),
        nc_panels: (nc_max / shape.nr).max(1),
        pack_a: match tuning.pack_a {
            Some(pack) => pack || a_rows_stride(spec, transposed).is_none(),
            None => !reads_a_in_place(spec, shape, transposed),
        },
    }
}

/// The (shape, orientation) with the least modelled time: padded tile area divided by the
/// kernel's speed, plus, when C cannot be stored straight from registers (its kernel-column
/// stride is not 1), a scalar copy of every tile per K block.
fn choose_kernel(spec: &GemmSpec, target: &VectorTarget, tuning: &Tuning) -> (KernelShape, bool) {
    let orientations: &[bool] = match tuning.transposed {
        Some(false) => &[false],
        Some(true) => &[true],
        None => &[false, true],
    };
    let mut best: Option<(f64, KernelShape, bool)> = None;
    for rated in target.shapes {
        if tuning.shape.is_some_and(|forced| forced != rated.shape) {
            continue;
        }
        for &transposed in orientations {
            let cost = modelled_cost(spec, target, rated.shape, transposed) / rated.speed;
            if best.is_none_or(|(best_cost, _, _)| cost < best_cost) {
                best = Some((cost, rated.shape, transposed));
            }
        }
    }
    match best {
        Some((_, shape, transposed)) => (shape, transposed),
        // A forced shape this target lacks: fall back to the target's first shape.
        None => (target.shapes[0].shape, tuning.transposed.unwrap_or(false)),
    }
}

fn modelled_cost(
    spec: &GemmSpec,
    target: &VectorTarget,
    shape: KernelShape,
    transposed: bool,
) -> f64 {
    let (m, n) = if transposed {
        (spec.n, spec.m)
    } else {
        (spec.m, spec.n)
    };
    let padded = (m.div_ceil(shape.mr) * shape.mr * n.div_ceil(shape.nr) * shape.nr) as f64;
    let contiguous_c = View::new(&spec.c, transposed)
        .kernel_strides()
        .is_some_and(|(_, _, col)| col == 1);
    let copy_penalty = if contiguous_c {
        0.0
    } else {
        // A scalar read-modify-write per element and K block vs kc/VL vector FMAs.
        2.0 * target.vector_len() as f64 / spec.k.min(256) as f64
    };
    padded * (1.0 + copy_penalty)
}

/// A's row stride (in kernel orientation) when A is strided with unit stride along K, so the
/// micro-kernel can broadcast its elements in place.
fn a_rows_stride(spec: &GemmSpec, transposed: bool) -> Option<isize> {
    let a = if transposed { &spec.b } else { &spec.a };
    match View::new(a, transposed).kernel_strides() {
        Some((_, row, 1)) => Some(row),
        _ => None,
    }
}

/// Reading A in place saves packing it once per N block, which matters when N is small
/// (attention: +12% on 12 x 128x128x64) and costs nothing measurable otherwise, as long as the
/// kernel's rows are few (14 row streams spill registers: -20%) and do not fall in the same L1
/// set (row strides that are multiples of 4 KiB).
fn reads_a_in_place(spec: &GemmSpec, shape: KernelShape, transposed: bool) -> bool {
    a_rows_stride(spec, transposed)
        .is_some_and(|row| shape.mr <= 8 && (row.unsigned_abs() * 4) % 4096 != 0)
}

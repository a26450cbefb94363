//! PANAMERA §3.1 (loop coalescing, Formula (1)): a reduction's canonical
//! form.
//!
//! Needs: a kernel as [`crate::lower`] makes it for one reduction: a perfect
//! nest of output loops `i0, i1, …` (the *parallel* loops) around
//! `let acc; reduction loops r0, r1, … (the *reduced* loops); store`, or
//! the reduction alone when every loop is reduced.
//! Guarantees: [`canonicalize`] classifies each loop as parallel or reduced
//! and returns the [`ReductionForm`] with the schedule (data) that makes it:
//! - the parallel loops fused into one and the reduced loops fused into one
//!   (Formula (1): each original variable recovered from the fused one by
//!   floordiv and mod, which cancel where the fused loops are consecutive in
//!   memory). [`Coalescing`] says how far: [`Coalescing::Full`] fuses all of
//!   them as the paper does (a GPU's threads take one loop whatever the
//!   offsets); [`Coalescing::Consecutive`] stops at the first fusion that
//!   would leave a floordiv or mod in an offset (a CPU's vector loop wants
//!   consecutive elements), and fuses the reduced loops only of an
//!   x-reduce (a y-reduce's reduced loops are outside its vector loop);
//! - the form: *all-reduce* when no loop is parallel; *x-reduce* when the
//!   reduced loop reads consecutive elements (it stays innermost);
//!   *y-reduce* when the parallel loop does (the paper's interchange of
//!   Figure 2d: the reduced loop moves outside, `accumulate_outward`, which
//!   the schedule places itself since a split of the parallel loop may
//!   have to come first).
//!
//! Where the paper's text and this differ: it names the result of its
//! Figure 4b (one parallel loop of 20 around one reduced loop of 2000 that
//! reads consecutive elements) a y-reduce; here, as in kiln's issue text,
//! a form is named by its innermost loop, so that is an x-reduce. The
//! interchange is the same transformation either way.

use crate::auto_schedule::{load_strides, reads_along};
use crate::ir::{reduced_locals, Kernel, Loop, Stmt};
use crate::schedule::{apply, fused_name, has_div_mod_of, Directive, Schedule};
use kiln_target::TargetDesc;
use std::fmt;

/// The canonical forms of a reduction (PANAMERA Figure 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReductionForm {
    /// Every loop reduced: one loop.
    All,
    /// The reduced loop innermost, reading consecutive elements.
    X,
    /// The parallel loop innermost, reading consecutive elements, inside the reduced one.
    Y,
}

impl fmt::Display for ReductionForm {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            ReductionForm::All => "all-reduce",
            ReductionForm::X => "x-reduce",
            ReductionForm::Y => "y-reduce",
        })
    }
}

/// How far loops are fused (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coalescing {
    /// While the fused iterations stay consecutive in memory.
    Consecutive,
    /// All of them (Formula (1)).
    Full,
}

impl Coalescing {
    /// What `target` wants: all loops fused on a GPU, consecutive ones on a CPU.
    pub fn of(target: &TargetDesc) -> Coalescing {
        if target.is_gpu() {
            Coalescing::Full
        } else {
            Coalescing::Consecutive
        }
    }
}

/// A reduction brought to its canonical form.
#[derive(Debug, Clone, PartialEq)]
pub struct Canonical {
    /// `None` when neither loop reads consecutive elements: the loops are
    /// coalesced, no order is preferred.
    pub form: Option<ReductionForm>,
    /// The fusions (and for a y-reduce the interchange) that make it.
    pub schedule: Schedule,
}

/// The canonical form of reduction kernel `k` (see the module doc); the
/// schedule includes the y-reduce's interchange.
pub fn canonicalize(k: &Kernel, coalescing: Coalescing) -> Canonical {
    let mut current = k.clone();
    let mut schedule = Schedule::default();
    let parallel: Vec<String> = output_nest(&k.body).iter().map(|l| l.var.clone()).collect();
    if parallel.is_empty() {
        if let Some(l) = k.body.iter().find_map(as_loop) {
            coalesce_inward(&mut current, &mut schedule, &perfect_nest(l), coalescing);
        }
        let form = Some(ReductionForm::All);
        return Canonical { form, schedule };
    }
    // The form is the innermost loops' (fusing keeps their strides in the
    // fused loop's innermost part, but not visibly once floordiv/mod appear).
    let innermost = output_nest(&k.body).last().map(|l| (*l).clone());
    let form = innermost.as_ref().and_then(form_of);
    let reduced = innermost
        .as_ref()
        .and_then(reduced_loops)
        .unwrap_or_default();
    let inner = coalesce_inward(&mut current, &mut schedule, &parallel, coalescing);
    if form == Some(ReductionForm::X) || coalescing == Coalescing::Full {
        coalesce_inward(&mut current, &mut schedule, &reduced, coalescing);
    }
    if form == Some(ReductionForm::Y) {
        schedule.0.push(Directive::AccumulateOutward(inner));
    }
    Canonical { form, schedule }
}

/// The form of the reduction computed by `l`, the innermost parallel loop:
/// y-reduce when `l` reads consecutive elements (stride 1 or 2), x-reduce
/// when its innermost reduced loop does (stride 1, straight-line body);
/// `None` for a loop that only stores, or when neither reads consecutively.
pub fn form_of(l: &Loop) -> Option<ReductionForm> {
    if y_reducible(l) {
        Some(ReductionForm::Y)
    } else {
        x_reduced_loops(l).map(|_| ReductionForm::X)
    }
}

/// Whether parallel loop `l` computes a reduction over reduced loops (not
/// one of extent-1 loops only, a 1x1 depthwise convolution's) and reads
/// consecutive elements along its own variable (stride 1 or 2): it may be
/// the inner loop of a y-reduce.
pub fn y_reducible(l: &Loop) -> bool {
    reduced_loops(l).is_some() && reads_along(&l.body, &l.var)
}

/// The reduced loops of parallel loop `l`, outermost first, when the
/// innermost of them reads consecutive elements (stride 1) in a
/// straight-line body that updates the accumulator: an x-reduce's nest.
pub fn x_reduced_loops(l: &Loop) -> Option<Vec<String>> {
    let nest = reduced_loops(l)?;
    let innermost = innermost_loop(l)?;
    let straight = innermost.body.iter().all(|s| !matches!(s, Stmt::Loop(_)));
    let unit = load_strides(&innermost.body, &innermost.var).contains(&1);
    let updates = !reduced_locals(&innermost.body).is_empty();
    (straight && unit && updates).then_some(nest)
}

/// The perfect nest of reduced loops of parallel loop `l` (after its
/// `let`), outermost first.
pub fn reduced_loops(l: &Loop) -> Option<Vec<String>> {
    let [Stmt::Let { .. }, Stmt::Loop(outer), ..] = l.body.as_slice() else {
        return None;
    };
    Some(perfect_nest(outer))
}

/// The innermost loop of the reduced nest of `l`.
fn innermost_loop(l: &Loop) -> Option<&Loop> {
    let [Stmt::Let { .. }, Stmt::Loop(outer), ..] = l.body.as_slice() else {
        return None;
    };
    let mut inner = outer;
    while let [Stmt::Loop(next)] = inner.body.as_slice() {
        inner = next;
    }
    Some(inner)
}

/// `l` and the loops perfectly nested in it, outermost first.
fn perfect_nest(l: &Loop) -> Vec<String> {
    let mut nest = vec![l.var.clone()];
    let mut inner = l;
    while let [Stmt::Loop(next)] = inner.body.as_slice() {
        inner = next;
        nest.push(inner.var.clone());
    }
    nest
}

fn as_loop(s: &Stmt) -> Option<&Loop> {
    match s {
        Stmt::Loop(l) => Some(l),
        _ => None,
    }
}

/// The perfect nest of output loops at the top of `body`, outermost first.
pub(crate) fn output_nest(body: &[Stmt]) -> Vec<&Loop> {
    let mut nest = Vec::new();
    let mut cur = body;
    while let [Stmt::Loop(l)] = cur {
        if !l.var.starts_with('i') {
            break;
        }
        nest.push(l);
        cur = &l.body;
    }
    nest
}

/// Fuses the loops of `nest` (outermost first) from the innermost outwards,
/// as far as `coalescing` allows (see the module doc), and returns the
/// innermost loop's name.
pub(crate) fn coalesce_inward(
    current: &mut Kernel,
    schedule: &mut Schedule,
    nest: &[String],
    coalescing: Coalescing,
) -> String {
    let Some((mut inner, outers)) = nest.split_last().map(|(i, o)| (i.clone(), o)) else {
        return String::new();
    };
    for outer in outers.iter().rev() {
        let d = Directive::Fuse {
            outer: outer.clone(),
            inner: inner.clone(),
        };
        let Ok(fused) = apply(current, &Schedule(vec![d.clone()])) else {
            break;
        };
        let name = fused_name(outer, &inner);
        if coalescing == Coalescing::Consecutive && has_div_mod_of(&fused.body, &name) {
            break;
        }
        schedule.0.push(d);
        *current = fused;
        inner = name;
    }
    inner
}

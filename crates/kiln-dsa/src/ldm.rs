//! swTVM §5.2, Algorithm 1 (LDM management): how many values of each loop
//! variable one buffer holds, so that every tensor's tile (`tile.rs`) fits
//! in a core's local memory together.
//!
//! Every buffer starts at one element. *Initial part*: each sizevar, then
//! each compvar (Algorithm 5), gets `min(extent, initial_elems)` values —
//! the shortest transfer with good bandwidth, a field of the target
//! description (64 floats on Sunway) — halved while the tiles overflow
//! the capacity. A variable whose buffer covers its loop leaves `varSet`
//! (`UPDATE` up), which can turn numvars into sizevars or compvars; those
//! get the same treatment in the next round. *Expanding part*: buffers are
//! doubled (at most to the extent), one variable at a time, until the
//! first doubling that overflows, which is undone.
//!
//! Readings of the paper's pseudo-code (checked against its matrix
//! multiplication walk-through, which this reproduces: 16.5 KB after the
//! initial part, 32.75 KB after doubling y, 65 KB for k = 128 refused):
//! - Sort (lines 7–8): sizevars by ascending bytes of the tiles they
//!   index, compvars by ascending number of tensors they index; ties keep
//!   loop order. `Vars` is sizevars then compvars.
//! - The initial part's `while Vars ≠ {}` (line 11) runs again only for
//!   variables not initialised yet (otherwise it never ends).
//! - A variable whose initial size equals its extent leaves `varSet` even
//!   when the extent is not below 64 (the text: UPDATE "if the range of
//!   the variable to be buffered equals the range of the loop variable").
//! - Lines 25–28 (step back to the previous variable when halving reaches
//!   0) cannot run: usage grows with every buffer, and with the current
//!   variable back at one element it is what it was before, which fitted.
//!   Instead, the all-ones usage is checked once, up front.
//! - `select(Vars)` in the expanding part (line 36) takes the variables of
//!   `Vars` in turn. Reading it as Algorithm 2's least-DMA `SELECT` (with
//!   `count.rs` on a 1024³ product in x, y, k order) would double y twice
//!   in the walk-through and refuse y = 256 at 65.25 KB, where the paper
//!   doubles y, then tries k.
//!
//! `choose_buffers_around` starts with some loops buffered whole (out of
//! `varSet`, as if `UPDATE` had moved them up): loops a code generator
//! cannot cut, such as a reduction kept in a register; they stay whole.
//!
//! Needs a valid nest (checked). Guarantees: the chosen tiles' bytes are
//! at most the capacity, each buffer is between 1 and its loop's extent;
//! an error when even one-element tiles do not fit.

use crate::classify::{ClassifyState, Direction};
use crate::desc::DsaDesc;
use crate::nest::Nest;
use crate::tile::{ldm_usage, tile_bytes};
use kiln_ir::{ensure, Result};
use std::collections::BTreeSet;

/// What Algorithm 1 reads from the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LdmBudget {
    /// Bytes of local memory one core's tiles may take.
    pub capacity_bytes: u64,
    /// Values a buffered variable starts with (`dma.initial_buffer_elems`).
    pub initial_elems: u64,
}

impl LdmBudget {
    /// The local buffer of one core of `desc`.
    pub fn from_desc(desc: &DsaDesc) -> LdmBudget {
        LdmBudget {
            capacity_bytes: desc.local_buffer.bytes,
            initial_elems: desc.dma.initial_buffer_elems,
        }
    }
}

/// Which part of Algorithm 1 took a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Initial,
    Expand,
}

/// One decision of Algorithm 1: a variable set to `size` values, and the
/// usage that gives. A refused expansion has `fits == false` (and is
/// undone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub phase: Phase,
    pub loop_index: usize,
    pub size: u64,
    pub usage_bytes: u64,
    pub fits: bool,
}

/// Algorithm 1's result: buffer values per loop (in loop order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferChoice {
    pub sizes: Vec<u64>,
    pub usage_bytes: u64,
    pub trace: Vec<Step>,
}

/// The algorithm's working state.
struct Ldm<'a> {
    nest: &'a Nest,
    budget: LdmBudget,
    sizes: Vec<u64>,
    classes: ClassifyState,
    trace: Vec<Step>,
}

/// Runs Algorithm 1 for `nest` under `budget`.
pub fn choose_buffers(nest: &Nest, budget: LdmBudget) -> Result<BufferChoice> {
    choose_buffers_around(nest, budget, &[])
}

/// Runs Algorithm 1 for `nest` under `budget` with the loops in `whole`
/// buffered whole from the start (out of `varSet`, as if `UPDATE` had
/// moved them up): loops the code generator cannot cut, such as a
/// reduction kept in a register. Out-of-range positions are errors.
pub fn choose_buffers_around(
    nest: &Nest,
    budget: LdmBudget,
    whole: &[usize],
) -> Result<BufferChoice> {
    nest.validate()?;
    let mut ldm = Ldm {
        nest,
        budget,
        sizes: vec![1; nest.loops.len()],
        classes: ClassifyState::new(nest),
        trace: Vec::new(),
    };
    for &var in whole {
        ensure!(var < nest.loops.len(), "no loop {var} to buffer whole");
        ldm.sizes[var] = ldm.extent(var);
        ldm.classes.update(nest, var, Direction::Up);
    }
    let minimum = ldm.usage();
    ensure!(
        minimum <= budget.capacity_bytes,
        "nest '{}': its smallest tiles take {minimum} bytes, more than the {} of local memory",
        nest.name,
        budget.capacity_bytes
    );
    ldm.initial_part()?;
    ldm.expanding_part()?;
    Ok(BufferChoice {
        usage_bytes: ldm.usage(),
        sizes: ldm.sizes,
        trace: ldm.trace,
    })
}

impl Ldm<'_> {
    fn usage(&self) -> u64 {
        ldm_usage(self.nest, &self.sizes)
    }

    fn extent(&self, var: usize) -> u64 {
        self.nest.loops[var].extent
    }

    /// Lines 7–9 and 31–33: sizevars by the bytes of the tiles they index,
    /// then compvars by how many tensors they index.
    fn sorted_vars(&self) -> Result<Vec<usize>> {
        let classes = self.classes.classify(self.nest)?;
        let indexing = |var: usize| {
            self.nest
                .tensors
                .iter()
                .filter(move |t| t.dims.iter().any(|d| d.uses(var)))
        };
        let mut sizevars = classes.sizevars;
        sizevars.sort_by_key(|&v| {
            indexing(v)
                .map(|t| tile_bytes(t, &self.sizes))
                .fold(0, u64::saturating_add)
        });
        let mut compvars = classes.compvars;
        compvars.sort_by_key(|&v| indexing(v).count());
        Ok(sizevars.into_iter().chain(compvars).collect())
    }

    /// Lines 10–33.
    fn initial_part(&mut self) -> Result<()> {
        let mut initialised = BTreeSet::new();
        loop {
            let vars: Vec<usize> = self
                .sorted_vars()?
                .into_iter()
                .filter(|v| !initialised.contains(v))
                .collect();
            if vars.is_empty() {
                return Ok(());
            }
            for var in vars {
                self.initialise(var)?;
                initialised.insert(var);
            }
        }
    }

    /// Lines 15–28 for one variable.
    fn initialise(&mut self, var: usize) -> Result<()> {
        let extent = self.extent(var);
        self.sizes[var] = extent.min(self.budget.initial_elems);
        if self.sizes[var] == extent {
            self.classes.update(self.nest, var, Direction::Up);
        }
        while self.usage() > self.budget.capacity_bytes && self.sizes[var] > 1 {
            if self.sizes[var] == extent {
                self.classes.update(self.nest, var, Direction::Down);
            }
            self.sizes[var] /= 2;
        }
        let usage = self.usage();
        // At one element the usage is what it was before, which fitted.
        ensure!(
            usage <= self.budget.capacity_bytes,
            "LDM overflow at one element"
        );
        self.record(Phase::Initial, var, true);
        Ok(())
    }

    /// Lines 35–47.
    fn expanding_part(&mut self) -> Result<()> {
        let mut vars = self.sorted_vars()?;
        let mut turn = 0;
        while !vars.is_empty() {
            let var = vars[turn % vars.len()];
            turn += 1;
            let extent = self.extent(var);
            let before = self.sizes[var];
            self.sizes[var] = before.saturating_mul(2).min(extent);
            if self.usage() > self.budget.capacity_bytes {
                self.record(Phase::Expand, var, false);
                self.sizes[var] = before;
                return Ok(());
            }
            self.record(Phase::Expand, var, true);
            if self.sizes[var] == extent {
                self.classes.update(self.nest, var, Direction::Up);
                vars = self.sorted_vars()?;
            }
        }
        Ok(())
    }

    fn record(&mut self, phase: Phase, var: usize, fits: bool) {
        self.trace.push(Step {
            phase,
            loop_index: var,
            size: self.sizes[var],
            usage_bytes: self.usage(),
            fits,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse_nest;

    fn sunway() -> LdmBudget {
        LdmBudget::from_desc(&DsaDesc::preset("sunway-cg").unwrap())
    }

    #[test]
    fn paper_matmul_example_chooses_x1_y128_k64() {
        let nest = crate::text::matmul_1024();
        let choice = choose_buffers(&nest, sunway()).unwrap();
        assert_eq!(choice.sizes, [1, 128, 64]);
        let steps: Vec<(Phase, &str, u64, u64, bool)> = choice
            .trace
            .iter()
            .map(|s| {
                let var = nest.loops[s.loop_index].var.as_str();
                (s.phase, var, s.size, s.usage_bytes, s.fits)
            })
            .collect();
        const KB: u64 = 1024;
        assert_eq!(
            steps,
            [
                (Phase::Initial, "y", 64, 4 * (1 + 64 + 64), true),
                // "we set k to 64 that leads to the LDM usage of 16.5KB"
                (Phase::Initial, "k", 64, 33 * KB / 2, true),
                // "When y is set to 128, the LDM usage increases to 32.75KB"
                (Phase::Expand, "y", 128, 131 * KB / 4, true),
                // "with k set to 128, the buffer size reaches 65KB"
                (Phase::Expand, "k", 128, 65 * KB, false),
            ]
        );
        assert_eq!(choice.usage_bytes, 131 * KB / 4);
    }

    #[test]
    fn small_loops_are_buffered_whole_and_large_ones_halved_to_fit() {
        let nest = parse_nest(
            "nest conv\nloop co 64\nloop oh 56\nloop ow 56\nloop ci 64\nloop kh 3\nloop kw 3\n\
             in I[ci][oh + kh][ow + kw] elem 4\nin W[co][ci][kh][kw] elem 4\n\
             out O[co][oh][ow] elem 4\n",
        )
        .unwrap();
        let choice = choose_buffers(&nest, sunway()).unwrap();
        assert_eq!(choice.sizes[1..3], [56, 56]);
        assert_eq!(choice.sizes[4..], [3, 3]);
        assert!(choice.usage_bytes <= 64 * 1024);
        assert!(choice.usage_bytes == ldm_usage(&nest, &choice.sizes));
    }

    #[test]
    fn loops_given_whole_stay_whole() {
        // The 1024^3 product with k whole (a reduction the code keeps in
        // a register), f32, 64 KB = 16384 floats. y (sizevar): 64 needs
        // 1024 + 1024·64 + 64 floats, halved to 8 (1024 + 8192 + 8);
        // x (compvar, as k is out of varSet): halved from 64 to 4
        // (4096 + 8192 + 32 = 12320; 8 would be 16448); y = 16 is refused.
        let nest = crate::text::matmul_1024();
        let choice = choose_buffers_around(&nest, sunway(), &[2]).unwrap();
        assert_eq!(choice.sizes, [4, 8, 1024]);
        assert_eq!(choice.usage_bytes, 4 * 12320);
        assert!(choose_buffers_around(&nest, sunway(), &[3]).is_err());
    }

    #[test]
    fn nests_that_cannot_fit_are_errors() {
        let nest = parse_nest("nest big\nloop i 4\nin A[i] elem 70000\n").unwrap();
        let err = choose_buffers(&nest, sunway()).unwrap_err().to_string();
        assert!(
            err.contains("70000 bytes") && err.contains("65536"),
            "{err}"
        );
    }
}

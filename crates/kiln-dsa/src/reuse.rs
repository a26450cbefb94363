//! GraphTurbo (OSDI '23) §4.3 and Fig. 12: liveness-based reuse of the
//! local buffer. A tensor's space is released after its last reader, so
//! later tensors reuse it; when the tensors live at one step do not fit,
//! the one live across the most steps is spilled, to GB when GB has room
//! for it over its whole life, else to DDR (the paper's heuristic, not
//! the largest-first of prior work: a long-lived tensor is more likely a
//! small one).
//!
//! Needs: per tensor its first and last step and its bytes (per core in
//! LB, in all in GB), per step the working set of the computation
//! running then and the tensors it reads or writes (already counted in
//! that working set).
//! Guarantees: afterwards, at every step, the working set plus the other
//! live LB tensors fit the LB, except where the working set alone does
//! not (nothing to spill then); a spilled tensor stays out of LB for its
//! whole life; GB never holds more than its size.

use crate::scope::Scope;

/// One tensor's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tenancy {
    /// Step writing it.
    pub start: usize,
    /// Last step reading it (`start` when none does).
    pub end: usize,
    /// Bytes per core while in LB.
    pub lb_bytes: u64,
    /// Bytes in GB.
    pub gb_bytes: u64,
}

impl Tenancy {
    fn live_at(&self, step: usize) -> bool {
        self.start <= step && step <= self.end
    }

    fn length(&self) -> usize {
        self.end - self.start
    }
}

/// One computation task (Fig. 12's ct).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Step {
    /// Its own working set per core, in bytes.
    pub working: u64,
    /// Tensors it reads or writes.
    pub uses: Vec<usize>,
}

/// Spills LB tensors (`scopes[t] == Lb`), longest-lived first, until every
/// step fits `lb` bytes per core; `gb` is GB's size (`None`: no GB).
pub fn spill_longest_lived(
    tensors: &[Tenancy],
    steps: &[Step],
    lb: u64,
    gb: Option<u64>,
    scopes: &mut [Scope],
) {
    for (s, step) in steps.iter().enumerate() {
        loop {
            let others: Vec<usize> = (0..tensors.len())
                .filter(|&t| {
                    scopes[t] == Scope::Lb && tensors[t].live_at(s) && !step.uses.contains(&t)
                })
                .collect();
            let pressure = step.working + others.iter().map(|&t| tensors[t].lb_bytes).sum::<u64>();
            if pressure <= lb {
                break;
            }
            let longest = others.iter().copied().max_by_key(|&t| {
                (
                    tensors[t].length(),
                    tensors[t].lb_bytes,
                    std::cmp::Reverse(t),
                )
            });
            let Some(victim) = longest else {
                break;
            };
            scopes[victim] = if fits_gb(tensors, scopes, victim, gb) {
                Scope::Gb
            } else {
                Scope::Ddr
            };
        }
    }
}

/// Whether GB can hold `t` beside the GB tensors live with it.
fn fits_gb(tensors: &[Tenancy], scopes: &[Scope], t: usize, gb: Option<u64>) -> bool {
    let Some(gb) = gb else {
        return false;
    };
    let life = tensors[t].start..=tensors[t].end;
    life.into_iter().all(|s| {
        let held: u64 = (0..tensors.len())
            .filter(|&o| scopes[o] == Scope::Gb && tensors[o].live_at(s))
            .map(|o| tensors[o].gb_bytes)
            .sum();
        held + tensors[t].gb_bytes <= gb
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fig. 12: in1 is released after ct1 and its space reused by out3;
    /// when LB holds three tensors and four are live in (d), out1, live
    /// across seven cts, is spilled, though out2 is larger.
    #[test]
    fn fig12_spills_the_longest_lived_not_the_largest() {
        let tensor = |start, end, bytes| Tenancy {
            start,
            end,
            lb_bytes: bytes,
            gb_bytes: bytes,
        };
        // in1, out1, out2, out3, out4 over cts 0..7.
        let tensors = [
            tensor(0, 1, 10),
            tensor(1, 7, 10),
            tensor(2, 4, 12),
            tensor(3, 4, 10),
            tensor(4, 5, 10),
        ];
        let steps: Vec<Step> = (0..8).map(|_| Step::default()).collect();
        let mut scopes = [Scope::Lb; 5];
        spill_longest_lived(&tensors, &steps, 32, Some(100), &mut scopes);
        assert_eq!(
            scopes,
            [Scope::Lb, Scope::Gb, Scope::Lb, Scope::Lb, Scope::Lb]
        );
        // Without GB room it goes to DDR.
        let mut scopes = [Scope::Lb; 5];
        spill_longest_lived(&tensors, &steps, 32, Some(5), &mut scopes);
        assert_eq!(scopes[1], Scope::Ddr);
    }

    /// A step's own tensors are part of its working set, not spilled.
    #[test]
    fn tensors_in_use_are_not_counted_twice() {
        let tensors = [Tenancy {
            start: 0,
            end: 1,
            lb_bytes: 40,
            gb_bytes: 40,
        }];
        let steps = [
            Step {
                working: 50,
                uses: vec![0],
            },
            Step {
                working: 60,
                uses: vec![0],
            },
        ];
        let mut scopes = [Scope::Lb];
        spill_longest_lived(&tensors, &steps, 64, Some(100), &mut scopes);
        assert_eq!(scopes, [Scope::Lb]);
    }
}

//! GraphTurbo (OSDI '23) §4.3 and Fig. 12: liveness-based reuse of the
//! local buffer. A tensor's space is released after its last reader, so
//! later tensors reuse it; when the tensors live at one step do not fit
//! together, the one live across the most steps is spilled, to GB when
//! GB has room for it over its whole life, else to DDR (the paper's
//! heuristic, not the largest-first of prior work: a long-lived tensor is
//! more likely a small one).
//!
//! Read literally, §4.3 compares "the total size of these tensors" (the
//! outputs live at a step) with LB's capacity; an instance's own
//! intermediates were already fitted by Algorithm 1 and are not counted
//! again.
//!
//! In GB a tensor read in parts holds only the parts some reader still
//! needs (`release.rs`): the room its dead parts leave is GB's
//! again for the tensors spilled after it.
//!
//! Needs: per tensor its first and last step, its bytes (per core in
//! LB, in all in GB) and the GB bytes of it dead after earlier steps.
//! Guarantees: afterwards the LB tensors live at any step fit `lb` per
//! core together, except a single tensor larger than `lb` alone (nothing
//! else to spill); a spilled tensor stays out of LB from the step it is
//! spilled at (it is written out then; readers before it read it from
//! LB); GB never holds more than its size, over a spilled tensor's whole
//! life, counting each tensor's parts still needed at each step.

use crate::scope::Scope;

/// One tensor's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenancy {
    /// Step writing it.
    pub start: usize,
    /// Last step reading it (`start` when none does).
    pub end: usize,
    /// Bytes per core while in LB.
    pub lb_bytes: u64,
    /// Bytes in GB.
    pub gb_bytes: u64,
    /// GB bytes no reader needs after a step before `end`, by ascending
    /// step (`release.rs`).
    pub freed: Vec<(usize, u64)>,
}

impl Tenancy {
    fn length(&self) -> usize {
        self.end - self.start
    }

    /// Per step of its life, the GB bytes it holds then.
    fn gb_held(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let mut freed = self.freed.iter().peekable();
        let mut held = self.gb_bytes;
        (self.start..=self.end).map(move |s| {
            while let Some(&(_, bytes)) = freed.next_if(|&&(at, _)| at < s) {
                held = held.saturating_sub(bytes);
            }
            (s, held)
        })
    }
}

/// Spills LB tensors (`scopes[t] == Lb`), longest-lived first, until the
/// LB tensors live at every step fit `lb` bytes per core; `gb` is GB's
/// size (`None`: no GB). Returns, per tensor, the step at which it was
/// spilled: it is in LB before that step (its readers there read it from
/// LB, §4.2) and in its new scope from then on.
pub fn spill_longest_lived(
    tensors: &[Tenancy],
    lb: u64,
    gb: Option<u64>,
    scopes: &mut [Scope],
) -> Vec<Option<usize>> {
    let mut spilled_at = vec![None; tensors.len()];
    let steps = tensors.iter().map(|t| t.end + 1).max().unwrap_or(0);
    let mut gb_used = vec![0u64; steps];
    for (tensor, _) in tensors
        .iter()
        .zip(scopes.iter())
        .filter(|(_, &s)| s == Scope::Gb)
    {
        tensor.gb_held().for_each(|(s, bytes)| gb_used[s] += bytes);
    }
    let mut by_start: Vec<usize> = (0..tensors.len()).collect();
    by_start.sort_by_key(|&t| tensors[t].start);
    let mut next = 0;
    let mut live: Vec<usize> = Vec::new();
    for s in 0..steps {
        while next < by_start.len() && tensors[by_start[next]].start == s {
            live.push(by_start[next]);
            next += 1;
        }
        live.retain(|&t| tensors[t].end >= s && scopes[t] == Scope::Lb);
        while live.iter().map(|&t| tensors[t].lb_bytes).sum::<u64>() > lb && live.len() > 1 {
            let Some(victim) = longest(tensors, &live) else {
                break;
            };
            scopes[victim] = spill_target(&tensors[victim], gb, &mut gb_used);
            spilled_at[victim] = Some(s);
            live.retain(|&t| t != victim);
        }
    }
    spilled_at
}

/// The live tensor with the longest life (larger, then earlier, on ties).
fn longest(tensors: &[Tenancy], live: &[usize]) -> Option<usize> {
    live.iter().copied().max_by_key(|&t| {
        (
            tensors[t].length(),
            tensors[t].lb_bytes,
            std::cmp::Reverse(t),
        )
    })
}

/// GB when it can hold `tensor` over its whole life (and then does), else
/// DDR.
fn spill_target(tensor: &Tenancy, gb: Option<u64>, gb_used: &mut [u64]) -> Scope {
    let fits = gb.is_some_and(|gb| tensor.gb_held().all(|(s, b)| gb_used[s] + b <= gb));
    if !fits {
        return Scope::Ddr;
    }
    tensor.gb_held().for_each(|(s, bytes)| gb_used[s] += bytes);
    Scope::Gb
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(start: usize, end: usize, bytes: u64) -> Tenancy {
        Tenancy {
            start,
            end,
            lb_bytes: bytes,
            gb_bytes: bytes,
            freed: Vec::new(),
        }
    }

    /// Fig. 12: in1 is released after ct1 and its space reused by out3;
    /// when LB holds three tensors and four are live in (d), out1, live
    /// across seven cts, is spilled, though out2 is larger.
    #[test]
    fn fig12_spills_the_longest_lived_not_the_largest() {
        // in1, out1, out2, out3, out4 over cts 0..7.
        let tensors = [
            tensor(0, 1, 10),
            tensor(1, 7, 10),
            tensor(2, 4, 12),
            tensor(3, 4, 10),
            tensor(4, 5, 10),
        ];
        let mut scopes = [Scope::Lb; 5];
        let spilled_at = spill_longest_lived(&tensors, 32, Some(100), &mut scopes);
        assert_eq!(
            scopes,
            [Scope::Lb, Scope::Gb, Scope::Lb, Scope::Lb, Scope::Lb]
        );
        // Four live first at ct 4: out1 was in LB until then.
        assert_eq!(spilled_at, [None, Some(4), None, None, None]);
        // Without room in GB it goes to DDR.
        let mut scopes = [Scope::Lb; 5];
        spill_longest_lived(&tensors, 32, Some(5), &mut scopes);
        assert_eq!(scopes[1], Scope::Ddr);
    }

    /// A released tensor's space is reused: three tensors of 20 bytes in
    /// a row fit a 40-byte LB when each dies as the next-but-one starts.
    #[test]
    fn released_space_is_reused() {
        let tensors = [tensor(0, 1, 20), tensor(1, 2, 20), tensor(2, 3, 20)];
        let mut scopes = [Scope::Lb; 3];
        spill_longest_lived(&tensors, 40, None, &mut scopes);
        assert_eq!(scopes, [Scope::Lb; 3]);
    }

    /// A tensor in GB read in parts holds only what its readers still
    /// need: once half of it is dead, a spill of that size fits beside
    /// it, where the whole tensor would have sent it to DDR.
    #[test]
    fn dead_parts_of_a_gb_tensor_make_room_for_spills() {
        let mut whole = tensor(0, 6, 40);
        let tensors = |whole: &Tenancy| [whole.clone(), tensor(3, 6, 10), tensor(3, 6, 10)];
        let mut scopes = [Scope::Gb, Scope::Lb, Scope::Lb];
        spill_longest_lived(&tensors(&whole), 15, Some(45), &mut scopes);
        assert_eq!(scopes, [Scope::Gb, Scope::Ddr, Scope::Lb]);
        // Half of it is dead after step 2: the spill takes its room.
        whole.freed = vec![(2, 20)];
        let mut scopes = [Scope::Gb, Scope::Lb, Scope::Lb];
        spill_longest_lived(&tensors(&whole), 15, Some(45), &mut scopes);
        assert_eq!(scopes, [Scope::Gb, Scope::Gb, Scope::Lb]);
        let held: Vec<u64> = whole.gb_held().map(|(_, b)| b).collect();
        assert_eq!(held, [40, 40, 40, 20, 20, 20, 20]);
    }

    /// GB already holding tensors leaves less room for spills.
    #[test]
    fn spills_respect_what_gb_already_holds() {
        let tensors = [tensor(0, 3, 50), tensor(0, 3, 10), tensor(1, 2, 10)];
        let mut scopes = [Scope::Gb, Scope::Lb, Scope::Lb];
        spill_longest_lived(&tensors, 15, Some(55), &mut scopes);
        assert_eq!(scopes, [Scope::Gb, Scope::Ddr, Scope::Lb]);
    }
}

//! Memory planner: hand examples plus a property test checking every plan against an
//! independent validator (pairwise overlap, alignment, live-bytes lower bound, upper bound).

use kiln_exec::memplan::{plan, Lifetime, MemoryPlan};
use proptest::prelude::*;

const ALIGN: usize = 64;

fn tensor(size: usize, first: usize, last: usize) -> Lifetime {
    Lifetime {
        size,
        first,
        last,
        inplace_of: None,
    }
}

/// `t` asking to overwrite tensor `j` in place.
fn in_place_of(j: usize, t: Lifetime) -> Lifetime {
    Lifetime {
        inplace_of: Some(j),
        ..t
    }
}

/// Tensor k produced at step k and read by step k+1 only, each optionally in place of k-1.
fn chain(n: usize, size: usize, in_place: bool) -> Vec<Lifetime> {
    (0..n)
        .map(|k| Lifetime {
            inplace_of: (in_place && k > 0).then(|| k - 1),
            ..tensor(size, k, k + 1)
        })
        .collect()
}

fn distinct_offsets(p: &MemoryPlan) -> usize {
    let mut offsets = p.offsets.clone();
    offsets.sort_unstable();
    offsets.dedup();
    offsets.len()
}

/// The head of the in-place chain tensor `i` belongs to.
fn chain_head(p: &MemoryPlan, mut i: usize) -> usize {
    while let Some(j) = p.reused[i] {
        i = j;
    }
    i
}

fn interval(t: &Lifetime) -> (usize, usize) {
    (t.first.min(t.last), t.first.max(t.last))
}

/// Checks everything the planner promises, computed from scratch.
fn validate(ts: &[Lifetime], p: &MemoryPlan, align: usize) -> Result<(), String> {
    let n = ts.len();
    if p.offsets.len() != n || p.reused.len() != n {
        return Err("plan has the wrong length".into());
    }
    if let Some(i) = (0..n).find(|&i| !p.offsets[i].is_multiple_of(align)) {
        return Err(format!("offset of {i} = {} not aligned", p.offsets[i]));
    }
    let mut taken = vec![false; n];
    for (i, link) in p.reused.iter().enumerate() {
        let Some(j) = *link else { continue };
        let legal = ts[i].inplace_of == Some(j)
            && j != i
            && interval(&ts[i]).0 == interval(&ts[j]).1
            && ts[i].size <= ts[j].size
            && !taken[j]
            && p.offsets[i] == p.offsets[j];
        if !legal {
            return Err(format!("in-place link {i} -> {j} is not legal"));
        }
        taken[j] = true;
    }
    for a in 0..n {
        for b in a + 1..n {
            let ((sa, ea), (sb, eb)) = (interval(&ts[a]), interval(&ts[b]));
            let in_time = sa <= eb && sb <= ea;
            let in_memory = ts[a].size > 0
                && ts[b].size > 0
                && p.offsets[a] < p.offsets[b] + ts[b].size
                && p.offsets[b] < p.offsets[a] + ts[a].size;
            if in_time && in_memory && chain_head(p, a) != chain_head(p, b) {
                return Err(format!("tensors {a} and {b} collide"));
            }
        }
    }
    let end = (0..n)
        .filter(|&i| ts[i].size > 0)
        .map(|i| p.offsets[i] + ts[i].size)
        .max()
        .unwrap_or(0);
    if p.arena_bytes != end {
        return Err(format!("arena {} but tensors end at {end}", p.arena_bytes));
    }
    let total: usize = ts.iter().map(|t| t.size).sum();
    if p.total_bytes != total {
        return Err(format!("total {} but sizes sum to {total}", p.total_bytes));
    }
    let aligned_total: usize = ts.iter().map(|t| t.size.next_multiple_of(align)).sum();
    if p.arena_bytes > aligned_total {
        return Err(format!(
            "arena {} > aligned sum {aligned_total}",
            p.arena_bytes
        ));
    }
    let peak = peak_live_bytes(ts, p);
    if p.arena_bytes < peak {
        return Err(format!("arena {} < peak live bytes {peak}", p.arena_bytes));
    }
    Ok(())
}

/// Max over steps of the bytes live at that step, counting an in-place chain once (by its
/// largest member live then), since its members legitimately share a buffer.
fn peak_live_bytes(ts: &[Lifetime], p: &MemoryPlan) -> usize {
    let last_step = ts.iter().map(|t| interval(t).1).max().unwrap_or(0);
    (0..=last_step)
        .map(|step| {
            let mut per_chain = std::collections::BTreeMap::<usize, usize>::new();
            for (i, t) in ts.iter().enumerate() {
                let (s, e) = interval(t);
                if s <= step && step <= e {
                    let slot = per_chain.entry(chain_head(p, i)).or_default();
                    *slot = (*slot).max(t.size);
                }
            }
            per_chain.values().sum::<usize>()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn chain_of_five_equal_tensors_needs_two_slots() {
    let ts = chain(5, 1024, false);
    let p = plan(&ts, ALIGN);
    validate(&ts, &p, ALIGN).unwrap();
    assert_eq!(distinct_offsets(&p), 2);
    assert_eq!(p.arena_bytes, 2 * 1024);
    assert_eq!(p.total_bytes, 5 * 1024);
}

#[test]
fn in_place_chain_needs_one_slot() {
    let ts = chain(5, 1024, true);
    let p = plan(&ts, ALIGN);
    validate(&ts, &p, ALIGN).unwrap();
    assert_eq!(p.reused, vec![None, Some(0), Some(1), Some(2), Some(3)]);
    assert_eq!(p.arena_bytes, 1024);
}

#[test]
fn illegal_in_place_requests_are_ignored() {
    let ts = vec![
        tensor(100, 0, 2),
        // Larger than the tensor it wants to overwrite.
        in_place_of(0, tensor(200, 2, 3)),
        // Produced before tensor 0's last read.
        in_place_of(0, tensor(50, 1, 3)),
        // Names a tensor that does not exist, and itself.
        in_place_of(9, tensor(10, 3, 4)),
        in_place_of(4, tensor(10, 4, 4)),
    ];
    let p = plan(&ts, ALIGN);
    validate(&ts, &p, ALIGN).unwrap();
    assert!(p.reused.iter().all(Option::is_none));
}

#[test]
fn two_requests_for_one_buffer_get_it_once() {
    let ts = vec![
        tensor(256, 0, 1),
        in_place_of(0, tensor(256, 1, 2)),
        in_place_of(0, tensor(256, 1, 2)),
    ];
    let p = plan(&ts, ALIGN);
    validate(&ts, &p, ALIGN).unwrap();
    assert_eq!(p.reused, vec![None, Some(0), None]);
    assert_eq!(p.arena_bytes, 512);
}

#[test]
fn small_tensors_fill_gaps_and_offsets_stay_aligned() {
    // A big tensor live throughout, two short ones that can share the space after it.
    let ts = vec![tensor(1000, 0, 4), tensor(10, 0, 1), tensor(30, 2, 4)];
    let p = plan(&ts, ALIGN);
    validate(&ts, &p, ALIGN).unwrap();
    assert_eq!(p.offsets, vec![0, 1024, 1024]);
    assert_eq!(p.arena_bytes, 1024 + 30);
}

#[test]
fn empty_and_zero_sized_inputs() {
    let p = plan(&[], ALIGN);
    assert_eq!((p.arena_bytes, p.total_bytes), (0, 0));
    let ts = vec![tensor(0, 0, 3), tensor(0, 1, 2), tensor(8, 0, 0)];
    let p = plan(&ts, 0);
    validate(&ts, &p, 1).unwrap();
    assert_eq!(p.arena_bytes, 8);
}

fn lifetimes() -> impl Strategy<Value = Vec<Lifetime>> {
    let one = (
        prop_oneof![0usize..300, (0usize..8).prop_map(|k| k * 64)],
        0usize..16,
        0usize..5,
        proptest::option::weighted(0.4, 0usize..24),
    );
    proptest::collection::vec(one, 0..24).prop_map(|raw| {
        raw.into_iter()
            .map(|(size, first, len, inplace_of)| Lifetime {
                size,
                first,
                last: first + len,
                inplace_of,
            })
            .collect()
    })
}

/// Random lifetimes whose in-place requests are mostly legal: each tensor may ask for a
/// tensor ending where it starts.
fn lifetimes_with_chains() -> impl Strategy<Value = Vec<Lifetime>> {
    (lifetimes(), any::<u64>()).prop_map(|(mut ts, seed)| {
        for i in 0..ts.len() {
            let candidates: Vec<usize> = (0..ts.len())
                .filter(|&j| j != i && ts[j].last == ts[i].first && ts[j].size >= ts[i].size)
                .collect();
            if !candidates.is_empty() && seed >> (i % 64) & 1 == 1 {
                ts[i].inplace_of = Some(candidates[(seed as usize + i) % candidates.len()]);
            }
        }
        ts
    })
}

proptest! {
    #[test]
    fn random_plans_are_valid(ts in lifetimes(), align in prop_oneof![Just(1usize), Just(16), Just(64)]) {
        let p = plan(&ts, align);
        prop_assert_eq!(validate(&ts, &p, align), Ok(()));
    }

    #[test]
    fn random_in_place_chains_are_valid(ts in lifetimes_with_chains()) {
        let p = plan(&ts, ALIGN);
        prop_assert_eq!(validate(&ts, &p, ALIGN), Ok(()));
    }
}

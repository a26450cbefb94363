//! Memory planner: one arena for all intermediate tensors of a model (DESIGN.md layer 8).
//!
//! Needs: for every intermediate tensor its size in bytes and its lifetime as the closed
//! interval of execution steps `[first, last]` (the step producing it, the last step reading
//! it), and optionally an in-place request `inplace_of = Some(j)`: the op producing this tensor
//! may write over tensor `j`'s buffer because it reads `j` for the last time at that very step.
//!
//! Guarantees: every offset is a multiple of `alignment`; two tensors whose lifetimes overlap
//! never share a byte, except along an honoured in-place chain, where a tensor takes exactly its
//! predecessor's offset. An in-place request `i -> j` is honoured when it is legal: `j` exists
//! and is not `i`, `i` is produced at `j`'s last step, `i` is no larger than `j`, no other
//! tensor already took `j`'s buffer, and the link closes no cycle. Illegal requests are ignored
//! (the tensor simply gets a place of its own), so any input yields a valid plan.
//! `arena_bytes` is at least the peak of live bytes over the steps and at most the sum of the
//! sizes rounded up to `alignment` (what separate aligned allocations would take).
//!
//! Algorithm: "greedy by size" from Pisarchyk & Lee, *Efficient Memory Management for Deep
//! Neural Net Inference* (2020), §4 (the offset-calculation variant used by TFLite). In-place
//! chains are first merged into one placement unit whose members keep their own sizes and
//! lifetimes. Units are placed largest first; each goes to the lowest aligned offset at which
//! none of its members overlaps, in memory, an already placed tensor that is live at the same
//! time. The placement is repeated with the units in two more orders (longest-lived first, and
//! by size times lifetime, as in the paper's comparison of strategies) and the smallest arena
//! kept: no single order is best on every model (BERT-base's arena is 17% above the live-bytes
//! bound largest-first). Cost O(n² log n) for n tensors, ample for the few thousand tensors of
//! a model.

/// One intermediate tensor as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// Bytes the tensor occupies.
    pub size: usize,
    /// Step producing it.
    pub first: usize,
    /// Last step reading it (equal to `first` for a tensor nobody reads).
    pub last: usize,
    /// Another tensor whose buffer this one may overwrite in place: it is produced at the step
    /// that reads that one for the last time.
    pub inplace_of: Option<usize>,
}

/// Where each tensor lives in the arena.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Byte offset of tensor `i` in the arena.
    pub offsets: Vec<usize>,
    /// Size of the arena: the largest `offset + size`.
    pub arena_bytes: usize,
    /// Sum of all sizes: what the tensors would take without sharing.
    pub total_bytes: usize,
    /// `Some(j)` where tensor `i` took tensor `j`'s buffer in place (an honoured request).
    pub reused: Vec<Option<usize>>,
}

/// Plans offsets for `lifetimes` in one arena; `alignment` (bytes, 64 for AVX-512 loads) is
/// the granularity of offsets, 0 treated as 1.
pub fn plan(lifetimes: &[Lifetime], alignment: usize) -> MemoryPlan {
    let alignment = alignment.max(1);
    let reused = honoured_inplace_links(lifetimes);
    let units = inplace_chains(lifetimes.len(), &reused);
    let (offsets, arena_bytes) = ORDERS
        .iter()
        .map(|order| place(lifetimes, order(lifetimes, units.clone()), alignment))
        .min_by_key(|(_, arena)| *arena)
        .unwrap_or_default();
    MemoryPlan {
        offsets,
        arena_bytes,
        total_bytes: lifetimes.iter().map(|t| t.size).sum(),
        reused,
    }
}

/// Placement units in the order they are placed.
type Order = fn(&[Lifetime], Vec<Vec<usize>>) -> Vec<Vec<usize>>;

/// The orders units are placed in; the plan keeps the smallest arena (the first on a tie).
const ORDERS: [Order; 3] = [
    units_largest_first,
    units_longest_first,
    units_largest_area_first,
];

/// Each unit at the lowest free offset, in the given order: the offsets and the arena size.
fn place(lifetimes: &[Lifetime], units: Vec<Vec<usize>>, alignment: usize) -> (Vec<usize>, usize) {
    let mut offsets = vec![0; lifetimes.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(lifetimes.len());
    for unit in units {
        let offset = lowest_free_offset(lifetimes, &unit, &placed, &offsets, alignment);
        for &member in &unit {
            offsets[member] = offset;
        }
        placed.extend(unit);
    }
    let arena_bytes = offsets
        .iter()
        .zip(lifetimes)
        .map(|(offset, t)| if t.size == 0 { 0 } else { offset + t.size })
        .max()
        .unwrap_or(0);
    (offsets, arena_bytes)
}

/// The in-place requests that are legal, decided in producer-step order so a chain
/// a -> b -> c is built front to back.
fn honoured_inplace_links(lifetimes: &[Lifetime]) -> Vec<Option<usize>> {
    let mut reused: Vec<Option<usize>> = vec![None; lifetimes.len()];
    let mut taken = vec![false; lifetimes.len()];
    let mut order: Vec<usize> = (0..lifetimes.len()).collect();
    order.sort_by_key(|&i| (start(&lifetimes[i]), i));
    for i in order {
        let Some(j) = lifetimes[i].inplace_of else {
            continue;
        };
        let legal = j < lifetimes.len()
            && j != i
            && !taken[j]
            && start(&lifetimes[i]) == end(&lifetimes[j])
            && lifetimes[i].size <= lifetimes[j].size
            && !chain_reaches(&reused, j, i);
        if legal {
            reused[i] = Some(j);
            taken[j] = true;
        }
    }
    reused
}

/// Whether following in-place links back from `from` arrives at `target`.
fn chain_reaches(reused: &[Option<usize>], from: usize, target: usize) -> bool {
    let mut at = Some(from);
    // A chain visits each tensor at most once, so the walk ends after at most n steps.
    for _ in 0..=reused.len() {
        match at {
            Some(k) if k == target => return true,
            Some(k) => at = reused[k],
            None => return false,
        }
    }
    true
}

/// Groups tensors into placement units: each in-place chain (head first) is one unit, every
/// other tensor a unit of its own.
fn inplace_chains(n: usize, reused: &[Option<usize>]) -> Vec<Vec<usize>> {
    let mut successor: Vec<Option<usize>> = vec![None; n];
    for (i, link) in reused.iter().enumerate() {
        if let Some(j) = *link {
            successor[j] = Some(i);
        }
    }
    (0..n)
        .filter(|&i| reused[i].is_none())
        .map(|head| {
            let mut unit = vec![head];
            while let Some(next) = successor[unit[unit.len() - 1]] {
                unit.push(next);
            }
            unit
        })
        .collect()
}

/// Largest unit (by its largest member, which is its head) first; ties by earlier start and
/// index so plans are deterministic.
fn units_largest_first(lifetimes: &[Lifetime], units: Vec<Vec<usize>>) -> Vec<Vec<usize>> {
    units_by(lifetimes, units, |size, _| (size, 0))
}

/// Longest-lived unit first (the span from its first member's start to its last member's
/// end), then larger.
fn units_longest_first(lifetimes: &[Lifetime], units: Vec<Vec<usize>>) -> Vec<Vec<usize>> {
    units_by(lifetimes, units, |size, span| (span, size))
}

/// Largest size times span first.
fn units_largest_area_first(lifetimes: &[Lifetime], units: Vec<Vec<usize>>) -> Vec<Vec<usize>> {
    units_by(lifetimes, units, |size, span| {
        (size.saturating_mul(span), size)
    })
}

/// Units by decreasing `key(size, span)` (size: the largest member's; span: steps from the
/// first member's start to the last one's end, at least 1), ties by earlier start and index.
fn units_by(
    lifetimes: &[Lifetime],
    mut units: Vec<Vec<usize>>,
    key: impl Fn(usize, usize) -> (usize, usize),
) -> Vec<Vec<usize>> {
    let size = |unit: &[usize]| unit.iter().map(|&m| lifetimes[m].size).max().unwrap_or(0);
    let span = |unit: &[usize]| {
        let first = unit
            .iter()
            .map(|&m| start(&lifetimes[m]))
            .min()
            .unwrap_or(0);
        let last = unit.iter().map(|&m| end(&lifetimes[m])).max().unwrap_or(0);
        last - first + 1
    };
    units.sort_by_key(|unit| {
        (
            std::cmp::Reverse(key(size(unit), span(unit))),
            start(&lifetimes[unit[0]]),
            unit[0],
        )
    });
    units
}

/// The lowest multiple of `alignment` at which no member of `unit` overlaps in memory a placed
/// tensor live at the same time as that member.
fn lowest_free_offset(
    lifetimes: &[Lifetime],
    unit: &[usize],
    placed: &[usize],
    offsets: &[usize],
    alignment: usize,
) -> usize {
    // Offset o is forbidden by (member m, placed p) iff off_p - size_m < o < off_p + size_p.
    let mut forbidden: Vec<(usize, usize)> = Vec::new();
    for &m in unit {
        for &p in placed {
            let (tm, tp) = (&lifetimes[m], &lifetimes[p]);
            if tm.size == 0 || tp.size == 0 || !live_together(tm, tp) {
                continue;
            }
            // `lo` as "o must be <= lo": off_p - size_m, saturating at "only 0 allowed".
            let below = offsets[p].checked_sub(tm.size);
            forbidden.push((below.map_or(0, |b| b + 1), offsets[p] + tp.size));
        }
    }
    // Each entry now forbids the half-open range [lo, hi); sweep them in order of lo.
    forbidden.sort_unstable();
    let mut offset = 0;
    for (lo, hi) in forbidden {
        if offset >= lo && offset < hi {
            offset = hi.next_multiple_of(alignment);
        }
    }
    offset
}

fn live_together(a: &Lifetime, b: &Lifetime) -> bool {
    start(a) <= end(b) && start(b) <= end(a)
}

/// Lifetimes given with `first > last` are read as the interval between them.
fn start(t: &Lifetime) -> usize {
    t.first.min(t.last)
}

fn end(t: &Lifetime) -> usize {
    t.first.max(t.last)
}

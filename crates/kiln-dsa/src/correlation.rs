//! swTVM §5.4, Algorithm 4: which loop variables each tensor's indices
//! use (its correlation with the loops), restricted to a given set of
//! loops. Algorithm 3 calls it twice: with every loop, and with the loops
//! a buffer covers whole.
//!
//! Needs a valid nest. Guarantees: one set per tensor, in tensor order,
//! each holding exactly the loops of `loop_set` that appear in one of the
//! tensor's indices.

use crate::nest::Nest;
use std::collections::BTreeSet;

/// Loop positions in [`Nest::loops`].
pub type LoopSet = BTreeSet<usize>;

/// `VarsSet(tensor)` for every tensor of the nest.
pub fn analyze_correlation(nest: &Nest, loop_set: &LoopSet) -> Vec<LoopSet> {
    nest.tensors
        .iter()
        .map(|tensor| {
            tensor
                .dims
                .iter()
                .flat_map(|index| index.terms.iter().map(|t| t.loop_index))
                .filter(|l| loop_set.contains(l))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse_nest;

    #[test]
    fn convolution_correlation() {
        let nest = parse_nest(
            "nest c\nloop co 4\nloop oh 4\nloop ci 2\nloop kh 3\n\
             in I[ci][oh + kh] elem 4\nin W[co][ci][kh] elem 4\nout O[co][oh] elem 4\n",
        )
        .unwrap();
        let all: LoopSet = (0..4).collect();
        let sets = analyze_correlation(&nest, &all);
        let expected: Vec<LoopSet> = vec![
            [1, 2, 3].into_iter().collect(),
            [0, 2, 3].into_iter().collect(),
            [0, 1].into_iter().collect(),
        ];
        assert_eq!(sets, expected);
        let only_kh: LoopSet = [3].into_iter().collect();
        let sets = analyze_correlation(&nest, &only_kh);
        assert_eq!(sets.iter().map(LoopSet::len).collect::<Vec<_>>(), [1, 1, 0]);
    }
}

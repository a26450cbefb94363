//! Property tests on random small nests: the text form round-trips, the
//! buffers always fit, every tensor gets exactly one DMA location, and
//! Algorithm 2 never adds transfers.

use kiln_dsa::count::count_dma;
use kiln_dsa::dma::{insert_dma, outer_loops};
use kiln_dsa::ldm::{choose_buffers, LdmBudget};
use kiln_dsa::reorder::reorder_loops;
use kiln_dsa::tile::ldm_usage;
use kiln_dsa::{parse_nest, Access, Affine, Loop, Nest, Term};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// An index as generated: (loop, coefficient) terms and a constant.
type IndexSpec = (Vec<(usize, u64)>, u64);
/// A tensor as generated: its indices, element bytes, whether written.
type TensorSpec = (Vec<IndexSpec>, u64, bool);

/// One dimension's index: up to three (loop, coefficient) terms and a
/// constant; loops are positions modulo the nest's loop count.
fn index() -> impl Strategy<Value = IndexSpec> {
    (prop::collection::vec((0usize..8, 1u64..4), 0..3), 0u64..3)
}

fn tensor() -> impl Strategy<Value = TensorSpec> {
    (prop::collection::vec(index(), 1..4), 1u64..9, any::<bool>())
}

fn nest() -> impl Strategy<Value = Nest> {
    (
        prop::collection::vec(1u64..300, 1..5),
        prop::collection::vec(tensor(), 1..4),
    )
        .prop_map(|(extents, tensors)| build(&extents, &tensors))
}

/// A valid nest: duplicate terms merged, loops no tensor uses added to
/// the first tensor's last index.
fn build(extents: &[u64], tensors: &[TensorSpec]) -> Nest {
    let loops = extents
        .iter()
        .enumerate()
        .map(|(i, &extent)| Loop {
            var: format!("l{i}"),
            extent,
        })
        .collect();
    let mut nest = Nest {
        name: "random".into(),
        loops,
        tensors: Vec::new(),
    };
    for (t, (dims, elem_bytes, is_output)) in tensors.iter().enumerate() {
        let dims = dims
            .iter()
            .map(|(terms, constant)| {
                let merged: BTreeMap<usize, u64> =
                    terms.iter().map(|&(l, c)| (l % extents.len(), c)).collect();
                let terms = merged
                    .into_iter()
                    .map(|(loop_index, coeff)| Term { loop_index, coeff });
                Affine {
                    terms: terms.collect(),
                    constant: *constant,
                }
            })
            .collect();
        nest.tensors.push(Access {
            name: format!("T{t}"),
            dims,
            elem_bytes: *elem_bytes,
            is_output: *is_output,
        });
    }
    for loop_index in 0..extents.len() {
        let used = nest
            .tensors
            .iter()
            .any(|t| t.dims.iter().any(|d| d.uses(loop_index)));
        if !used {
            let last = nest.tensors[0].dims.last_mut().unwrap();
            last.terms.push(Term {
                loop_index,
                coeff: 1,
            });
        }
    }
    nest.validate().unwrap();
    nest
}

fn budget() -> impl Strategy<Value = LdmBudget> {
    (64u64..65536, 1u64..128).prop_map(|(capacity_bytes, initial_elems)| LdmBudget {
        capacity_bytes,
        initial_elems,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn text_round_trips(nest in nest()) {
        prop_assert_eq!(parse_nest(&nest.to_string()).unwrap(), nest);
    }

    #[test]
    fn buffers_fit_and_every_tensor_gets_one_dma(nest in nest(), budget in budget()) {
        let ones = ldm_usage(&nest, &vec![1; nest.loops.len()]);
        let choice = match choose_buffers(&nest, budget) {
            Ok(choice) => choice,
            Err(_) => {
                prop_assert!(ones > budget.capacity_bytes);
                return Ok(());
            }
        };
        prop_assert!(choice.usage_bytes <= budget.capacity_bytes);
        prop_assert_eq!(choice.usage_bytes, ldm_usage(&nest, &choice.sizes));
        for (size, l) in choice.sizes.iter().zip(&nest.loops) {
            prop_assert!((1..=l.extent).contains(size));
        }
        let given = outer_loops(&nest, &choice.sizes);
        let placements = insert_dma(&nest, &choice.sizes, &given).unwrap();
        let tensors: Vec<usize> = placements.iter().map(|p| p.tensor).collect();
        prop_assert_eq!(tensors, (0..nest.tensors.len()).collect::<Vec<_>>());
        prop_assert!(placements.iter().all(|p| p.depth <= given.len() && p.runs_per_tile >= 1));

        let order = reorder_loops(&nest, &choice.sizes, &given).unwrap();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        prop_assert_eq!(&sorted, &given);
        let before = count_dma(&nest, &choice.sizes, &given).unwrap().transfers;
        let after = count_dma(&nest, &choice.sizes, &order).unwrap().transfers;
        prop_assert!(after <= before);
    }
}

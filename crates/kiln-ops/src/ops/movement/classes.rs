//! The data-movement and shape primitives classify, from their tensor
//! expressions alone, as the papers expect: moves that keep every dim are
//! element-wise, broadcasts one-to-many, permutations shuffles, reshapes,
//! offsets and index reads opaque.

use crate::ops::linalg::kernel_check::{classes, random};
use kiln_ir::{Attr, Tensor};

fn ints(v: &[i64]) -> Tensor {
    Tensor::from_vec(vec![v.len()], v.to_vec()).unwrap()
}

#[test]
fn movement_primitives_classify_by_their_index_maps() {
    let mut seed = 1;
    let x = random(&[2, 3, 4], &mut seed);
    let perm = [("perm", Attr::Ints(vec![0, 2, 1]))];
    let axis0 = [("axis", Attr::Int(0))];
    type Case<'a> = (&'a str, &'a [(&'a str, Attr)], Vec<Tensor>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "Transpose",
            &perm,
            vec![x.clone()],
            "opaque(transpose) / shuffle",
        ),
        (
            "Reshape",
            &[],
            vec![x.clone(), ints(&[6, 4])],
            "opaque(reshape) / reorganize",
        ),
        (
            "Reshape",
            &[],
            vec![x.clone(), ints(&[2, 1, 3, 4])],
            "element-wise / one-to-one",
        ),
        (
            "Expand",
            &[],
            vec![x.clone(), ints(&[5, 2, 3, 4])],
            "broadcast / one-to-many",
        ),
        (
            "Slice",
            &[],
            vec![x.clone(), ints(&[1]), ints(&[3]), ints(&[2])],
            "opaque(layout) / reorganize",
        ),
        (
            "Concat",
            &axis0,
            vec![x.clone(), x.clone()],
            "opaque(layout) / reorganize",
        ),
        (
            "Gather",
            &axis0,
            vec![x.clone(), ints(&[1, 0])],
            "opaque(gather) / reorganize",
        ),
        (
            "Tile",
            &[],
            vec![x.clone(), ints(&[1, 2, 1])],
            "opaque(reshape) / reorganize",
        ),
    ];
    for (op, attrs, inputs, want) in cases {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        assert_eq!(classes(op, attrs, &refs), want, "{op}");
    }
}

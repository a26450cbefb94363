//! Pins the classes that the index-map classifier derives for the tricky
//! cases named by issue 3 (APOLLO §3.3 types and the DP paper's mapping
//! types). The full table is docs/classification.md, kept current by a test
//! in kiln-cli.

use kiln_ir::{Attr, DType};
use kiln_ops::te::classify::{classify, ApolloType, MappingType, OpaqueKind};
use kiln_ops::te::examples::Example;

fn classes(e: Example) -> (String, MappingType) {
    let te = e.expr().unwrap_or_else(|err| panic!("{err}"));
    let c = classify(&te);
    (c.apollo.to_string(), c.mapping)
}

use MappingType::*;

#[test]
fn elementwise_of_equal_shapes() {
    let c = classes(Example::new("Add", "add").f32(&[2, 3]).f32(&[2, 3]));
    assert_eq!(c, ("element-wise".into(), OneToOne));
    let c = classes(Example::new("Relu", "relu").f32(&[4]));
    assert_eq!(c, ("element-wise".into(), OneToOne));
}

#[test]
fn broadcast_of_a_size_one_dim() {
    let c = classes(Example::new("Mul", "m").f32(&[4, 3]).f32(&[4, 1]));
    assert_eq!(c, ("broadcast".into(), OneToMany));
    // A missing leading dim broadcasts too.
    let c = classes(Example::new("Add", "a").f32(&[4, 3]).f32(&[3]));
    assert_eq!(c, ("broadcast".into(), OneToMany));
    // Size-1 on both sides is no broadcast at all.
    let c = classes(Example::new("Add", "a").f32(&[1, 3]).f32(&[1, 3]));
    assert_eq!(c, ("element-wise".into(), OneToOne));
}

#[test]
fn reductions_with_and_without_keepdims() {
    let keep = classes(Example::new("ReduceSum", "r").f32(&[4, 5]).ints(&[1]));
    assert_eq!(keep, ("reduction".into(), ManyToMany));
    let drop = Example::new("ReduceMax", "r")
        .f32(&[4, 5])
        .ints(&[0])
        .attr("keepdims", Attr::Int(0));
    assert_eq!(classes(drop), ("reduction".into(), ManyToMany));
    // Reducing a size-1 axis moves no data: element-wise.
    let unit = classes(Example::new("ReduceSum", "r").f32(&[4, 1]).ints(&[1]));
    assert_eq!(unit, ("element-wise".into(), OneToOne));
}

#[test]
fn transpose_is_opaque_shuffle() {
    let e = Example::new("Transpose", "t")
        .f32(&[2, 3, 4])
        .attr("perm", Attr::Ints(vec![0, 2, 1]));
    let te = e.expr().unwrap();
    let c = classify(&te);
    assert_eq!(c.apollo, ApolloType::Opaque(OpaqueKind::Transpose));
    assert_eq!(c.mapping, Shuffle);
}

#[test]
fn gather_is_opaque_reorganize() {
    let e = Example::new("Gather", "g")
        .f32(&[10, 4])
        .input(DType::I64, &[3]);
    assert_eq!(classes(e), ("opaque(gather)".into(), Reorganize));
}

#[test]
fn strided_slice_pad_and_concat_are_layout_reorganize() {
    let slice = Example::new("Slice", "s")
        .f32(&[8])
        .ints(&[1])
        .ints(&[7])
        .ints(&[0])
        .ints(&[2]);
    assert_eq!(classes(slice), ("opaque(layout)".into(), Reorganize));
    let pad = Example::new("Pad", "p").f32(&[4]).ints(&[1, 2]);
    assert_eq!(classes(pad), ("opaque(layout)".into(), Reorganize));
    let concat = Example::new("Concat", "c")
        .f32(&[2, 3])
        .f32(&[2, 5])
        .attr("axis", Attr::Int(1));
    assert_eq!(classes(concat), ("opaque(layout)".into(), Reorganize));
}

#[test]
fn reshapes_are_opaque_unless_only_unit_dims_change() {
    let r = Example::new("Reshape", "r").f32(&[2, 6]).ints(&[3, 4]);
    assert_eq!(classes(r), ("opaque(reshape)".into(), Reorganize));
    let unsqueeze = Example::new("Reshape", "r").f32(&[6]).ints(&[1, 6]);
    assert_eq!(classes(unsqueeze), ("element-wise".into(), OneToOne));
}

#[test]
fn matmul_conv_and_pooling_are_opaque_many_to_many() {
    let mm = Example::new("MatMul", "mm").f32(&[2, 3]).f32(&[3, 4]);
    assert_eq!(classes(mm), ("opaque(matmul)".into(), ManyToMany));
    let conv = Example::new("Conv", "c")
        .f32(&[1, 2, 5, 5])
        .f32(&[4, 2, 3, 3])
        .attr("pads", Attr::Ints(vec![1, 1, 1, 1]));
    assert_eq!(classes(conv), ("opaque(conv)".into(), ManyToMany));
    // Several channels per group on both sides: the reduction runs over
    // the groups and a select keeps the output channel's own; still a
    // convolution (rule 6 gives it an epilogue).
    let grouped = Example::new("Conv", "g")
        .f32(&[1, 4, 5, 5])
        .f32(&[6, 2, 3, 3])
        .attr("group", Attr::Int(2));
    assert_eq!(classes(grouped), ("opaque(conv)".into(), ManyToMany));
    let pool = Example::new("MaxPool", "p")
        .f32(&[1, 2, 6, 6])
        .attr("kernel_shape", Attr::Ints(vec![2, 2]))
        .attr("strides", Attr::Ints(vec![2, 2]));
    assert_eq!(classes(pool), ("opaque(window)".into(), ManyToMany));
}

#[test]
fn expand_is_broadcast_one_to_many() {
    let e = Example::new("Expand", "e").f32(&[1, 3]).ints(&[4, 3]);
    assert_eq!(classes(e), ("broadcast".into(), OneToMany));
}

#[test]
fn every_primitive_op_has_a_classified_example() {
    for row in kiln_ops::te::examples::table() {
        assert!(
            row.apollo != "?",
            "{}: {} (add an example in te/examples.rs)",
            row.label,
            row.expr
        );
    }
}

#[test]
fn reshapes_are_views_and_transposes_are_not() {
    let view = |e: Example| kiln_ops::te::classify::is_view(&e.expr().unwrap());
    assert!(view(
        Example::new("Reshape", "r").f32(&[2, 6]).ints(&[3, 4])
    ));
    assert!(view(
        Example::new("Reshape", "r")
            .f32(&[1, 128, 768])
            .ints(&[1, 128, 12, 64])
    ));
    assert!(view(Example::new("Reshape", "r").f32(&[6]).ints(&[1, 6])));
    assert!(!view(
        Example::new("Transpose", "t")
            .f32(&[2, 3, 4])
            .attr("perm", Attr::Ints(vec![0, 2, 1]))
    ));
    assert!(!view(Example::new("Relu", "r").f32(&[4])));
    assert!(!view(
        Example::new("Slice", "s").f32(&[8]).ints(&[0]).ints(&[4])
    ));
}

#[test]
fn transcendental_rules_come_from_the_op_tables() {
    use kiln_ops::te::classify::calls_transcendental;
    let calls = |e: Example| calls_transcendental(&e.expr().unwrap_or_else(|err| panic!("{err}")));
    for op in ["Exp", "Log", "Sigmoid", "Tanh", "Erf", "Softplus", "Cos"] {
        assert!(calls(Example::new(op, "t").f32(&[4])), "{op}");
    }
    assert!(calls(Example::new("Pow", "p").f32(&[4]).f32(&[1])));
    for op in ["Relu", "Sqrt", "Abs", "Neg", "Floor"] {
        assert!(!calls(Example::new(op, "t").f32(&[4])), "{op}");
    }
    assert!(!calls(Example::new("Add", "a").f32(&[4]).f32(&[4])));
}

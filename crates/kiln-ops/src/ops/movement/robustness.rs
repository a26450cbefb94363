//! Malformed inputs to the shape, movement and generate ops must give
//! errors, never panics (out-of-range indices, negative sizes, zero steps,
//! mismatched shapes, absurd sizes).

use crate::{registry, EvalCx, SubgraphRunner};
use kiln_ir::{Attr, Graph, Node, Result, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};

struct NoSubgraphs;
impl SubgraphRunner for NoSubgraphs {
    fn run(&self, _g: &Graph, _inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        kiln_ir::bail!("no subgraphs here")
    }
}

/// Evaluates `op` on `inputs`, failing the test on a panic.
fn eval(
    op: &str,
    attrs: Vec<(&str, Attr)>,
    inputs: Vec<Tensor>,
    outputs: usize,
) -> Result<Vec<Tensor>> {
    let node = Node {
        name: String::new(),
        op: op.into(),
        domain: String::new(),
        inputs: vec![None; inputs.len()],
        outputs: vec![None; outputs],
        attrs: attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    };
    let def = registry::lookup("", op).expect("op is registered");
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(Some).collect();
    let cx = EvalCx {
        node: &node,
        opset: 18,
        subgraphs: &NoSubgraphs,
    };
    catch_unwind(AssertUnwindSafe(|| def.eval(&cx, &ins)))
        .unwrap_or_else(|_| panic!("{op} panicked"))
}

fn f32s(shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(
        shape.to_vec(),
        (0..n).map(|i| i as f32).collect::<Vec<f32>>(),
    )
    .unwrap()
}

fn i64s(v: &[i64]) -> Tensor {
    Tensor::from_vec(vec![v.len()], v.to_vec()).unwrap()
}

fn i64m(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec()).unwrap()
}

fn rejects(op: &str, attrs: Vec<(&str, Attr)>, inputs: Vec<Tensor>) {
    assert!(
        eval(op, attrs, inputs, 1).is_err(),
        "{op} accepted bad input"
    );
}

#[test]
fn out_of_range_indices_are_errors() {
    rejects("Gather", vec![], vec![f32s(&[3]), i64s(&[3])]);
    rejects("Gather", vec![], vec![f32s(&[3]), i64s(&[-4])]);
    assert!(eval("Gather", vec![], vec![f32s(&[3]), i64s(&[-3])], 1).is_ok());
    rejects("GatherElements", vec![], vec![f32s(&[2]), i64s(&[2])]);
    rejects(
        "GatherND",
        vec![],
        vec![f32s(&[2, 2]), i64m(&[1, 2], &[0, 2])],
    );
    rejects(
        "GatherND",
        vec![],
        vec![f32s(&[2, 2]), i64m(&[1, 3], &[0, 0, 0])],
    );
    rejects(
        "ScatterElements",
        vec![],
        vec![f32s(&[2]), i64s(&[5]), f32s(&[1])],
    );
    rejects(
        "ScatterElements",
        vec![],
        vec![f32s(&[2]), i64s(&[0]), f32s(&[2])],
    );
    rejects(
        "ScatterND",
        vec![],
        vec![f32s(&[2]), i64m(&[1, 1], &[-3]), f32s(&[1])],
    );
    let cache = f32s(&[1, 4, 2]);
    rejects(
        "TensorScatter",
        vec![],
        vec![cache.clone(), f32s(&[1, 2, 2]), i64s(&[3])],
    );
    rejects(
        "TensorScatter",
        vec![],
        vec![cache, f32s(&[1, 2, 2]), i64s(&[i64::MAX])],
    );
    rejects(
        "ReverseSequence",
        vec![],
        vec![f32s(&[2, 2]), i64s(&[3, 1])],
    );
    rejects(
        "Compress",
        vec![("axis", Attr::Int(0))],
        vec![
            f32s(&[1]),
            Tensor::from_vec(vec![2], vec![false, true]).unwrap(),
        ],
    );
}

#[test]
fn bad_sizes_are_errors() {
    rejects("Reshape", vec![], vec![f32s(&[2, 3]), i64s(&[-2, 3])]);
    rejects("Reshape", vec![], vec![f32s(&[]), i64s(&[0])]);
    rejects("Reshape", vec![], vec![f32s(&[0, 3]), i64s(&[0, -1])]);
    rejects("Expand", vec![], vec![f32s(&[3]), i64s(&[-1])]);
    rejects("Expand", vec![], vec![f32s(&[3]), i64s(&[2])]);
    rejects("Tile", vec![], vec![f32s(&[3]), i64s(&[-1])]);
    rejects("Tile", vec![], vec![f32s(&[3]), i64s(&[1 << 40])]);
    rejects("ConstantOfShape", vec![], vec![i64s(&[-1])]);
    rejects("ConstantOfShape", vec![], vec![i64s(&[1 << 40, 1 << 40])]);
    rejects(
        "Range",
        vec![],
        vec![
            Tensor::scalar(0i64),
            Tensor::scalar(5i64),
            Tensor::scalar(0i64),
        ],
    );
    rejects(
        "Range",
        vec![],
        vec![
            Tensor::scalar(0f32),
            Tensor::scalar(f32::INFINITY),
            Tensor::scalar(1f32),
        ],
    );
    rejects(
        "Range",
        vec![],
        vec![
            Tensor::scalar(i64::MIN),
            Tensor::scalar(i64::MAX),
            Tensor::scalar(1i64),
        ],
    );
    rejects(
        "OneHot",
        vec![],
        vec![i64s(&[0]), Tensor::scalar(-1i64), f32s(&[2])],
    );
    rejects("Pad", vec![], vec![f32s(&[2]), i64s(&[1])]);
    rejects("Pad", vec![], vec![f32s(&[2]), i64s(&[-3, 0])]);
    rejects("Pad", vec![], vec![f32s(&[2]), i64s(&[i64::MAX, i64::MAX])]);
    rejects(
        "Pad",
        vec![("mode", Attr::String("reflect".into()))],
        vec![f32s(&[0]), i64s(&[1, 1])],
    );
    // Cropping everything and padding it back is valid; it must just not overflow.
    let _ = eval(
        "Pad",
        vec![],
        vec![f32s(&[2]), i64s(&[i64::MIN + 1, i64::MAX])],
        1,
    );
    assert!(eval("Split", vec![], vec![f32s(&[4]), i64s(&[1, 2])], 2).is_err());
    rejects(
        "DepthToSpace",
        vec![("blocksize", Attr::Int(2))],
        vec![f32s(&[1, 3, 2, 2])],
    );
    rejects(
        "SpaceToDepth",
        vec![("blocksize", Attr::Int(0))],
        vec![f32s(&[1, 1, 2, 2])],
    );
}

#[test]
fn bad_axes_and_attributes_are_errors() {
    rejects(
        "Slice",
        vec![],
        vec![f32s(&[3]), i64s(&[0]), i64s(&[3]), i64s(&[0]), i64s(&[0])],
    );
    rejects(
        "Slice",
        vec![],
        vec![f32s(&[3]), i64s(&[0]), i64s(&[3]), i64s(&[1])],
    );
    let empty = eval(
        "Slice",
        vec![],
        vec![
            f32s(&[0]),
            i64s(&[-1]),
            i64s(&[i64::MIN]),
            i64s(&[0]),
            i64s(&[-1]),
        ],
        1,
    )
    .unwrap();
    assert_eq!(empty[0].shape, vec![0]);
    rejects("Unsqueeze", vec![], vec![f32s(&[3]), i64s(&[0, 0])]);
    rejects("Squeeze", vec![], vec![f32s(&[3]), i64s(&[0])]);
    rejects(
        "Transpose",
        vec![("perm", Attr::Ints(vec![0, 0]))],
        vec![f32s(&[2, 2])],
    );
    rejects(
        "Concat",
        vec![("axis", Attr::Int(0))],
        vec![f32s(&[2, 2]), f32s(&[2, 3])],
    );
    rejects("Concat", vec![("axis", Attr::Int(2))], vec![f32s(&[2, 2])]);
    rejects("Flatten", vec![("axis", Attr::Int(3))], vec![f32s(&[2, 2])]);
    rejects("Trilu", vec![], vec![f32s(&[2])]);
    rejects(
        "GatherND",
        vec![("batch_dims", Attr::Int(-1))],
        vec![f32s(&[2, 2]), i64m(&[1, 1], &[0])],
    );
    rejects("Unique", vec![("axis", Attr::Int(1))], vec![f32s(&[2])]);
}

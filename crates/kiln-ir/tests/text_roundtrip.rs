//! The textual IR prints and parses back exactly. Golden files in
//! `tests/text/` are parsed and re-printed; the output must equal the file
//! (`KILN_BLESS=1` rewrites them). A property test round-trips random graphs.

use kiln_ir::graph::{Attr, Graph, Node, TensorType};
use kiln_ir::text::{parse, print};
use kiln_ir::{DType, Tensor};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

#[test]
fn golden_files_round_trip() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/text");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let src = std::fs::read_to_string(&path).unwrap();
        let g = parse(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let printed = print(&g);
        if std::env::var("KILN_BLESS").is_ok() {
            std::fs::write(&path, &printed).unwrap();
            continue;
        }
        assert_eq!(
            printed,
            src,
            "{} does not re-print identically",
            path.display()
        );
        assert_eq!(print(&parse(&printed).unwrap()), printed);
    }
}

#[test]
fn parse_errors_name_the_line() {
    let bad = "graph \"g\" opsets [\"\"=17] {\n  input %x: f32[2]\n  node \"\" %y: f32[2] = Add(%x, %nope)\n  output %y\n}\n";
    let err = parse(bad).unwrap_err().to_string();
    assert!(err.contains("line 3") && err.contains("nope"), "{err}");
    assert!(parse("graph \"g\" opsets [] { input %x: q9[1] output %x }").is_err());
    assert!(parse("graph \"g\" opsets [] { init %x: f32[2] = [1.0] output %x }").is_err());
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn tensor_of(dtype: DType, n: usize) -> impl Strategy<Value = Tensor> {
    let shape = vec![n];
    match dtype {
        DType::Str => prop::collection::vec(".{0,4}", n)
            .prop_map(move |v| Tensor::from_vec(vec![n], v).unwrap())
            .boxed(),
        DType::Bool => prop::collection::vec(any::<bool>(), n)
            .prop_map(move |v| Tensor::from_vec(vec![n], v).unwrap())
            .boxed(),
        DType::F32 => prop::collection::vec(any::<f32>(), n)
            .prop_map(move |v| Tensor::from_vec(vec![n], v).unwrap())
            .boxed(),
        DType::F64 => prop::collection::vec(any::<f64>(), n)
            .prop_map(move |v| Tensor::from_vec(vec![n], v).unwrap())
            .boxed(),
        d => prop::collection::vec(any::<u8>(), n * d.size())
            .prop_map(move |b| {
                Tensor::new(shape.clone(), kiln_ir::Data::from_le_bytes(d, &b).unwrap()).unwrap()
            })
            .boxed(),
    }
}

fn attr() -> impl Strategy<Value = Attr> {
    prop_oneof![
        any::<i64>().prop_map(Attr::Int),
        any::<f32>().prop_map(Attr::Float),
        ".{0,8}".prop_map(Attr::String),
        prop::collection::vec(any::<i64>(), 0..4).prop_map(Attr::Ints),
        prop::collection::vec(any::<f32>(), 0..4).prop_map(Attr::Floats),
        prop::collection::vec(".{0,3}", 0..3).prop_map(Attr::Strings),
        (dtype(), 0usize..4)
            .prop_flat_map(|(d, n)| tensor_of(d, n))
            .prop_map(Attr::Tensor),
    ]
}

/// A random chain graph: inputs, initializers and nodes that use earlier values.
fn graph() -> impl Strategy<Value = Graph> {
    let inits = prop::collection::vec(
        (dtype(), 0usize..5).prop_flat_map(|(d, n)| tensor_of(d, n)),
        0..3,
    );
    let nodes = prop::collection::vec(
        (
            "[A-Z][a-z]{0,6}",
            prop::collection::btree_map("[a-z_]{1,6}", attr(), 0..3),
            1usize..3,
            any::<u64>(),
            dtype(),
        ),
        0..5,
    );
    (inits, nodes, ".{0,6}").prop_map(|(inits, nodes, name)| {
        let mut g = Graph::new(name);
        g.opsets.insert(String::new(), 17);
        let x = g.add_value("x", TensorType::new(DType::F32, vec![2, 3]));
        g.inputs.push(x);
        for (i, t) in inits.into_iter().enumerate() {
            let id = g.add_value(format!("w {i}"), t.ty());
            g.initializers.insert(id, kiln_ir::Initializer::Tensor(t));
        }
        for (k, (op, attrs, n_out, pick, dt)) in nodes.into_iter().enumerate() {
            let avail = g.values.len();
            let inputs = vec![Some(kiln_ir::ValueId((pick % avail as u64) as u32)), None];
            let outputs = (0..n_out)
                .map(|j| {
                    if j == 1 && pick % 2 == 0 {
                        None
                    } else {
                        Some(g.add_value(format!("v{k}_{j}"), TensorType::unknown_shape(dt)))
                    }
                })
                .collect();
            let attrs: BTreeMap<String, Attr> = attrs;
            g.nodes.push(Node {
                name: format!("n{k}"),
                op,
                domain: String::new(),
                inputs,
                outputs,
                attrs,
            });
        }
        let last = kiln_ir::ValueId(g.values.len() as u32 - 1);
        g.outputs.push(last);
        g
    })
}

/// Equality that treats NaN payloads as equal (NaN != NaN otherwise).
fn same(a: &Graph, b: &Graph) -> bool {
    print(a) == print(b)
}

proptest! {
    #[test]
    fn random_graphs_round_trip(g in graph()) {
        let text = print(&g);
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert!(same(&g, &back), "{}\n---\n{}", text, print(&back));
        prop_assert_eq!(print(&back), text);
    }
}

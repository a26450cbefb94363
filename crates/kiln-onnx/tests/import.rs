//! Importer behaviour on hand-built models: initializer encodings (raw,
//! typed, external), zero-copy weights, opset normalization, and the error
//! messages for bad input. Models are built with the proto structs and
//! encoded with prost, so these tests need no files from outside the repo.

use bytes::Bytes;
use kiln_ir::{Initializer, Tensor};
use kiln_onnx::proto::*;
use kiln_onnx::{load, load_bytes, ImportOptions};
use prost::Message;

fn tensor_type(elem: i32, dims: &[i64]) -> Option<TypeProto> {
    let dim = dims
        .iter()
        .map(|&d| Dimension {
            value: Some(dimension::Value::DimValue(d)),
            denotation: String::new(),
        })
        .collect();
    Some(TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: elem,
            shape: Some(TensorShapeProto { dim }),
        })),
        denotation: String::new(),
    })
}

fn value(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: tensor_type(elem, dims),
        doc_string: String::new(),
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("{op}_0"),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn model(graph: GraphProto, opset: i64) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(graph),
        ..Default::default()
    }
}

/// x[2,3] + w[3] where w is given by `w`.
fn add_model(w: TensorProto) -> ModelProto {
    model(
        GraphProto {
            name: "add".into(),
            node: vec![node("Add", &["x", "w"], &["y"])],
            initializer: vec![w],
            input: vec![value("x", 1, &[2, 3])],
            output: vec![value("y", 1, &[2, 3])],
            ..Default::default()
        },
        13,
    )
}

fn w_raw() -> TensorProto {
    let raw: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    TensorProto {
        name: "w".into(),
        dims: vec![3],
        data_type: 1,
        raw_data: raw.into(),
        ..Default::default()
    }
}

fn encode(m: &ModelProto) -> Bytes {
    Bytes::from(m.encode_to_vec())
}

fn err(bytes: Bytes) -> String {
    load_bytes(bytes, None, &ImportOptions::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn raw_initializers_borrow_the_model_buffer() {
    let bytes = encode(&add_model(w_raw()));
    let range = bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len();
    let m = load_bytes(bytes.clone(), None, &ImportOptions::default()).unwrap();
    let (_, init) = m.graph.initializers.iter().next().unwrap();
    match init {
        Initializer::Raw { bytes: b, .. } => assert!(
            range.contains(&(b.as_ptr() as usize)),
            "weights were copied"
        ),
        other => panic!("expected a raw initializer, got {other:?}"),
    }
    assert_eq!(
        init.to_tensor().unwrap(),
        Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]).unwrap()
    );
}

#[test]
fn typed_and_external_initializers() {
    let typed = TensorProto {
        name: "w".into(),
        dims: vec![3],
        data_type: 1,
        float_data: vec![1.0, 2.0, 3.0],
        ..Default::default()
    };
    let m = load_bytes(encode(&add_model(typed)), None, &ImportOptions::default()).unwrap();
    let t = m
        .graph
        .initializers
        .values()
        .next()
        .unwrap()
        .to_tensor()
        .unwrap();
    assert_eq!(t.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0]);

    let dir = std::env::temp_dir().join(format!("kiln-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut data = vec![0u8; 8]; // 8 bytes of padding before the tensor
    data.extend([4.0f32, 5.0, 6.0].iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(dir.join("weights.bin"), &data).unwrap();
    let kv = |k: &str, v: &str| StringStringEntryProto {
        key: k.into(),
        value: v.into(),
    };
    let ext = TensorProto {
        name: "w".into(),
        dims: vec![3],
        data_type: 1,
        data_location: 1,
        external_data: vec![
            kv("location", "weights.bin"),
            kv("offset", "8"),
            kv("length", "12"),
        ],
        ..Default::default()
    };
    let path = dir.join("model.onnx");
    std::fs::write(&path, add_model(ext.clone()).encode_to_vec()).unwrap();
    let m = load(&path, &ImportOptions::default()).unwrap();
    let t = m
        .graph
        .initializers
        .values()
        .next()
        .unwrap()
        .to_tensor()
        .unwrap();
    assert_eq!(t.as_slice::<f32>().unwrap(), &[4.0, 5.0, 6.0]);

    let mut bad = ext;
    bad.external_data[2] = kv("length", "400");
    std::fs::write(&path, add_model(bad).encode_to_vec()).unwrap();
    let e = load(&path, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("model.onnx") && e.contains("past the end"),
        "{e}"
    );
}

#[test]
fn old_attribute_forms_become_inputs() {
    // Unsqueeze-11 takes `axes` as an attribute; kiln's canonical form is the input.
    let mut n = node("Unsqueeze", &["x"], &["y"]);
    n.attribute.push(AttributeProto {
        name: "axes".into(),
        r#type: attribute_type::INTS,
        ints: vec![0],
        ..Default::default()
    });
    let m = model(
        GraphProto {
            node: vec![n],
            input: vec![value("x", 1, &[2, 3])],
            output: vec![value("y", 1, &[1, 2, 3])],
            ..Default::default()
        },
        11,
    );
    let g = match load_bytes(encode(&m), None, &ImportOptions::default()) {
        Ok(m) => m.graph,
        // Unsqueeze may not be registered yet in a partial build; the rewrite is what is tested.
        Err(e) => panic!("{e}"),
    };
    assert!(g.nodes[0].attrs.is_empty());
    assert_eq!(g.nodes[0].inputs.len(), 2);
    let axes = g.initializers[&g.nodes[0].inputs[1].unwrap()]
        .to_tensor()
        .unwrap();
    assert_eq!(axes.as_slice::<i64>().unwrap(), &[0]);
    assert_eq!(g.ty(g.outputs[0]).shape, Some(vec![1, 2, 3]));
}

#[test]
fn errors_name_file_node_op_and_opset() {
    let mut m = add_model(w_raw());
    m.graph.as_mut().unwrap().node[0].op_type = "FancyOp".into();
    let e = err(encode(&m));
    assert!(
        e.contains("Add_0")
            && e.contains("FancyOp")
            && e.contains("opset 13")
            && e.contains("unsupported"),
        "{e}"
    );

    let e = load(
        std::path::Path::new("/nonexistent/model.onnx"),
        &ImportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("/nonexistent/model.onnx"), "{e}");
    assert!(err(Bytes::new()).contains("empty"));
    assert!(
        err(Bytes::from_static(b"\x08\x07garbage\xff\xff")).contains("not a valid ONNX protobuf")
    );
}

#[test]
fn symbolic_input_dims_are_rejected_unless_bound() {
    let mut m = add_model(w_raw());
    let x = &mut m.graph.as_mut().unwrap().input[0];
    if let Some(type_proto::Value::TensorType(t)) = &mut x.r#type.as_mut().unwrap().value {
        t.shape.as_mut().unwrap().dim[0].value = Some(dimension::Value::DimParam("batch".into()));
    }
    let e = err(encode(&m));
    assert!(
        e.contains("'x'") && e.contains("'batch'") && e.contains("axis 0"),
        "{e}"
    );
    let mut opts = ImportOptions::default();
    opts.input_shapes.insert("x".into(), vec![2, 3]);
    let g = load_bytes(encode(&m), None, &opts).unwrap().graph;
    assert_eq!(g.ty(g.outputs[0]).shape, Some(vec![2, 3]));
}

#[test]
fn bad_tensors_are_errors() {
    let mut short = w_raw();
    short.raw_data = short.raw_data.slice(0..8);
    assert!(err(encode(&add_model(short))).contains("needs 12 bytes"));
    let mut neg = w_raw();
    neg.dims = vec![-3];
    assert!(err(encode(&add_model(neg))).contains("negative"));
    let mut huge = w_raw();
    huge.dims = vec![i64::MAX, i64::MAX];
    assert!(err(encode(&add_model(huge))).contains("too large"));
    let mut f8 = w_raw();
    f8.data_type = 17;
    assert!(err(encode(&add_model(f8))).contains("FLOAT8E4M3FN"));
}

#[test]
fn a_declared_input_beyond_any_memory_is_an_error_naming_it() {
    let m = model(
        GraphProto {
            name: "huge".into(),
            node: vec![node("Relu", &["x"], &["y"])],
            input: vec![value("x", 1, &[1 << 20, 1 << 20, 1 << 10])],
            output: vec![value("y", 1, &[1 << 20, 1 << 20, 1 << 10])],
            ..Default::default()
        },
        13,
    );
    let err = load_bytes(encode(&m), None, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("graph input 'x'")
            && err.contains("4503599627370496 bytes")
            && err.contains("--max-memory"),
        "{err}"
    );
}

/// A graph whose one node is an If nested `depth` deep (each then-branch
/// holds the next If), returning `x`.
fn nested_if(depth: usize) -> GraphProto {
    let leaf = GraphProto {
        name: "leaf".into(),
        node: vec![node("Identity", &["x"], &["y"])],
        output: vec![value("y", 1, &[2])],
        ..Default::default()
    };
    let mut body = leaf.clone();
    for level in 0..depth {
        let mut n = node("If", &["c"], &["y"]);
        for (branch, g) in [("then_branch", body), ("else_branch", leaf.clone())] {
            n.attribute.push(AttributeProto {
                name: branch.into(),
                r#type: attribute_type::GRAPH,
                g: Some(g),
                ..Default::default()
            });
        }
        body = GraphProto {
            name: format!("level{level}"),
            node: vec![n],
            output: vec![value("y", 1, &[2])],
            ..Default::default()
        };
    }
    body.input = vec![value("c", 9, &[]), value("x", 1, &[2])];
    body
}

#[test]
fn nesting_is_bounded_by_the_decoder_and_deep_models_are_errors() {
    // prost refuses messages nested more than 100 deep: about 33 levels of
    // subgraphs (graph -> node -> attribute -> graph).
    assert!(load_bytes(
        encode(&model(nested_if(8), 13)),
        None,
        &ImportOptions::default()
    )
    .is_ok());
    let err = load_bytes(
        encode(&model(nested_if(60), 13)),
        None,
        &ImportOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("recursion limit"), "{err}");
}

//! ONNX import (layer 2 of DESIGN.md).
//!
//! Decodes an ONNX model (pure-Rust protobuf, memory-mapped so raw weights
//! are borrowed, not copied), converts it to kiln's graph IR, rewrites
//! opset-dependent attribute forms into one canonical form
//! ([`normalize`]), infers every tensor's type, and verifies the result.
//! Every failure names the file and, where it applies, the node, op type and
//! opset.

pub mod convert;
pub mod normalize;
pub mod proto;
pub mod tensor;

use bytes::Bytes;
use kiln_ir::{Error, Graph, Result};
use prost::Message;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Options for [`load`].
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Concrete shapes for graph inputs, by name. They override the declared
    /// shapes, which is how inputs with symbolic dimensions get imported.
    pub input_shapes: HashMap<String, Vec<usize>>,
}

/// An imported model.
#[derive(Debug, Clone)]
pub struct Model {
    pub graph: Graph,
    pub ir_version: i64,
    pub producer: String,
}

/// Loads the ONNX model at `path`.
pub fn load(path: &Path, opts: &ImportOptions) -> Result<Model> {
    let ctx = || format!("{}", path.display());
    let file = std::fs::File::open(path)
        .map_err(|e| Error::new(format!("cannot open: {e}")).in_file(ctx()))?;
    let bytes = kiln_ir::mapped::map_file(&file)
        .map_err(|e| Error::new(format!("cannot map: {e}")).in_file(ctx()))?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    load_bytes(bytes, Some(dir), opts).map_err(|e| e.in_file(ctx()))
}

/// Loads a model from memory. `base_dir` is where external data files are
/// looked up (None: external data is an error).
pub fn load_bytes(bytes: Bytes, base_dir: Option<PathBuf>, opts: &ImportOptions) -> Result<Model> {
    if bytes.is_empty() {
        kiln_ir::bail!("file is empty, not an ONNX model");
    }
    let proto = proto::ModelProto::decode(bytes)
        .map_err(|e| Error::new(format!("not a valid ONNX protobuf: {e}")))?;
    let graph = convert::convert_model(&proto, base_dir, opts)?;
    check_bound_inputs(&graph, opts)?;
    Ok(Model {
        graph,
        ir_version: proto.ir_version,
        producer: proto.producer_name.clone(),
    })
}

/// Every shape in `opts.input_shapes` names a graph input.
fn check_bound_inputs(g: &kiln_ir::Graph, opts: &ImportOptions) -> Result<()> {
    let mut names: Vec<&String> = opts.input_shapes.keys().collect();
    names.sort();
    for name in names {
        if !g.inputs.iter().any(|&id| g.name(id) == name.as_str()) {
            let inputs: Vec<&str> = g.inputs.iter().map(|&id| g.name(id)).collect();
            kiln_ir::bail!(
                "a shape is given for '{name}', which is not an input of the graph (its inputs: {})",
                inputs.join(", ")
            );
        }
    }
    Ok(())
}

/// Reads a serialized `TensorProto` (the `.pb` files of ONNX test data).
pub fn read_tensor_pb(path: &Path) -> Result<kiln_ir::Tensor> {
    let ctx = || format!("{}", path.display());
    let bytes =
        std::fs::read(path).map_err(|e| Error::new(format!("cannot read: {e}")).in_file(ctx()))?;
    let t = proto::TensorProto::decode(Bytes::from(bytes))
        .map_err(|e| Error::new(format!("not a TensorProto: {e}")).in_file(ctx()))?;
    tensor::to_tensor(&t, path.parent()).map_err(|e| e.in_file(ctx()))
}

/// Decodes a model file's protobuf without converting it (for tools that
/// only need to peek at names or op types).
pub fn decode_proto(path: &Path) -> Result<proto::ModelProto> {
    let ctx = || format!("{}", path.display());
    let bytes =
        std::fs::read(path).map_err(|e| Error::new(format!("cannot read: {e}")).in_file(ctx()))?;
    proto::ModelProto::decode(Bytes::from(bytes))
        .map_err(|e| Error::new(format!("not a valid ONNX protobuf: {e}")).in_file(ctx()))
}

/// Names of the graph inputs that are not initializers, in order.
pub fn graph_input_names(m: &proto::ModelProto) -> Vec<String> {
    let Some(g) = &m.graph else { return Vec::new() };
    let inits: std::collections::HashSet<&str> =
        g.initializer.iter().map(|t| t.name.as_str()).collect();
    g.input
        .iter()
        .filter(|i| !inits.contains(i.name.as_str()))
        .map(|i| i.name.clone())
        .collect()
}

//! The graph: values (SSA, each with a type), nodes in topological order,
//! graph inputs, outputs and initializers, and captured outer-scope values
//! for subgraphs (bodies of If/Loop/Scan).

use crate::{bail, DType, Error, Result, Tensor};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

/// Index of a value in [`Graph::values`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Element type plus shape. `shape` is `None` when the shape depends on
/// data that is only known at run time (e.g. the output of NonZero); compiled
/// backends reject such tensors, the reference interpreter runs them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Option<Vec<usize>>,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Vec<usize>) -> TensorType {
        TensorType {
            dtype,
            shape: Some(shape),
        }
    }

    pub fn unknown_shape(dtype: DType) -> TensorType {
        TensorType { dtype, shape: None }
    }

    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(|s| s.len())
    }

    pub fn numel(&self) -> Option<usize> {
        self.shape.as_ref().map(|s| s.iter().product())
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.shape {
            None => write!(f, "{}[?]", self.dtype),
            Some(s) => {
                let dims: Vec<String> = s.iter().map(|d| d.to_string()).collect();
                write!(f, "{}[{}]", self.dtype, dims.join(","))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ValueInfo {
    pub name: String,
    pub ty: TensorType,
}

/// Constant data of an initializer. `Raw` keeps little-endian bytes that may
/// borrow a memory-mapped model file, so large weights are never copied on
/// import; `Tensor` holds decoded values (typed ONNX fields, strings, folded
/// constants).
#[derive(Debug, Clone, PartialEq)]
pub enum Initializer {
    Raw {
        dtype: DType,
        shape: Vec<usize>,
        bytes: Bytes,
    },
    Tensor(Tensor),
}

impl Initializer {
    pub fn ty(&self) -> TensorType {
        match self {
            Initializer::Raw { dtype, shape, .. } => TensorType::new(*dtype, shape.clone()),
            Initializer::Tensor(t) => t.ty(),
        }
    }

    /// Decoded values (copies raw bytes into typed storage).
    pub fn to_tensor(&self) -> Result<Tensor> {
        match self {
            Initializer::Raw {
                dtype,
                shape,
                bytes,
            } => Tensor::new(shape.clone(), crate::Data::from_le_bytes(*dtype, bytes)?),
            Initializer::Tensor(t) => Ok(t.clone()),
        }
    }

    /// Gives back the resident pages of raw bytes read from a mapped file
    /// (see [`crate::mapped`]), once a decoded or packed copy replaces them.
    pub fn release_resident(&self) {
        if let Initializer::Raw { bytes, .. } = self {
            crate::mapped::release_resident(bytes);
        }
    }
}

/// A node attribute, as in ONNX `AttributeProto`.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Int(i64),
    Float(f32),
    String(String),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Tensor(Tensor),
    Graph(Box<Graph>),
}

impl Attr {
    pub fn kind(&self) -> &'static str {
        match self {
            Attr::Int(_) => "int",
            Attr::Float(_) => "float",
            Attr::String(_) => "string",
            Attr::Ints(_) => "ints",
            Attr::Floats(_) => "floats",
            Attr::Strings(_) => "strings",
            Attr::Tensor(_) => "tensor",
            Attr::Graph(_) => "graph",
        }
    }
}

/// One operator application. Missing optional inputs/outputs are `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub op: String,
    /// Operator domain; "" is the default ONNX domain (ai.onnx).
    pub domain: String,
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<Option<ValueId>>,
    pub attrs: BTreeMap<String, Attr>,
}

impl Node {
    /// Names the subgraphs of this node (Loop, If, Scan bodies) read from the scope the
    /// node is in: they read it too, though not through its inputs.
    pub fn subgraph_reads(&self) -> BTreeSet<String> {
        self.attrs
            .values()
            .filter_map(|a| match a {
                Attr::Graph(sub) => Some(sub.free_names()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// "node 'name' (Op)" for error messages.
    pub fn describe(&self) -> String {
        let domain = if self.domain.is_empty() {
            String::new()
        } else {
            format!("{}.", self.domain)
        };
        if self.name.is_empty() {
            format!("node ({domain}{})", self.op)
        } else {
            format!("node '{}' ({domain}{})", self.name, self.op)
        }
    }

    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.get(name)
    }

    fn attr_err(&self, name: &str, want: &str, got: &Attr) -> Error {
        Error::new(format!(
            "attribute '{name}' must be {want}, got {}",
            got.kind()
        ))
    }

    pub fn attr_int(&self, name: &str) -> Result<Option<i64>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Int(v)) => Ok(Some(*v)),
            Some(a) => Err(self.attr_err(name, "an int", a)),
        }
    }

    pub fn attr_int_or(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.attr_int(name)?.unwrap_or(default))
    }

    pub fn attr_float(&self, name: &str) -> Result<Option<f32>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Float(v)) => Ok(Some(*v)),
            Some(Attr::Int(v)) => Ok(Some(*v as f32)),
            Some(a) => Err(self.attr_err(name, "a float", a)),
        }
    }

    pub fn attr_float_or(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self.attr_float(name)?.unwrap_or(default))
    }

    pub fn attr_string(&self, name: &str) -> Result<Option<&str>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::String(v)) => Ok(Some(v)),
            Some(a) => Err(self.attr_err(name, "a string", a)),
        }
    }

    pub fn attr_string_or<'a>(&'a self, name: &str, default: &'a str) -> Result<&'a str> {
        Ok(self.attr_string(name)?.unwrap_or(default))
    }

    pub fn attr_ints(&self, name: &str) -> Result<Option<&[i64]>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v)),
            Some(a) => Err(self.attr_err(name, "a list of ints", a)),
        }
    }

    pub fn attr_floats(&self, name: &str) -> Result<Option<&[f32]>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Floats(v)) => Ok(Some(v)),
            Some(a) => Err(self.attr_err(name, "a list of floats", a)),
        }
    }

    pub fn attr_strings(&self, name: &str) -> Result<Option<&[String]>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Strings(v)) => Ok(Some(v)),
            Some(a) => Err(self.attr_err(name, "a list of strings", a)),
        }
    }

    pub fn attr_tensor(&self, name: &str) -> Result<Option<&Tensor>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Tensor(v)) => Ok(Some(v)),
            Some(a) => Err(self.attr_err(name, "a tensor", a)),
        }
    }

    pub fn attr_graph(&self, name: &str) -> Result<Option<&Graph>> {
        match self.attrs.get(name) {
            None => Ok(None),
            Some(Attr::Graph(v)) => Ok(Some(v)),
            Some(a) => Err(self.attr_err(name, "a graph", a)),
        }
    }
}

/// A computation graph. Nodes are kept in topological order (the verifier
/// checks it). Every value is defined exactly once: as a graph input, an
/// initializer, a capture (subgraphs only) or a node output.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Graph {
    pub name: String,
    /// Operator set versions by domain ("" is ai.onnx).
    pub opsets: BTreeMap<String, i64>,
    pub values: Vec<ValueInfo>,
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    pub initializers: BTreeMap<ValueId, Initializer>,
    /// Values of an enclosing graph referenced by name from this subgraph.
    pub captures: Vec<ValueId>,
}

impl Graph {
    /// Names this graph reads from enclosing scopes: its captures and, through nested
    /// subgraphs, whatever those read that this graph does not define.
    pub fn free_names(&self) -> BTreeSet<String> {
        let mut free: BTreeSet<String> = self
            .captures
            .iter()
            .map(|&id| self.name(id).to_string())
            .collect();
        let inner: BTreeSet<String> = self.nodes.iter().flat_map(Node::subgraph_reads).collect();
        if !inner.is_empty() {
            let defined: HashSet<&str> = self.values.iter().map(|v| v.name.as_str()).collect();
            free.extend(inner.into_iter().filter(|n| !defined.contains(n.as_str())));
        }
        free
    }

    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Version of the default ONNX opset.
    pub fn opset(&self) -> i64 {
        self.opsets.get("").copied().unwrap_or(0)
    }

    pub fn add_value(&mut self, name: impl Into<String>, ty: TensorType) -> ValueId {
        self.values.push(ValueInfo {
            name: name.into(),
            ty,
        });
        ValueId(self.values.len() as u32 - 1)
    }

    pub fn value(&self, id: ValueId) -> &ValueInfo {
        &self.values[id.index()]
    }

    pub fn ty(&self, id: ValueId) -> &TensorType {
        &self.values[id.index()].ty
    }

    pub fn name(&self, id: ValueId) -> &str {
        &self.values[id.index()].name
    }

    /// Map from value name to id.
    pub fn names(&self) -> HashMap<&str, ValueId> {
        self.values
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.as_str(), ValueId(i as u32)))
            .collect()
    }

    pub fn find(&self, name: &str) -> Option<ValueId> {
        self.values
            .iter()
            .position(|v| v.name == name)
            .map(|i| ValueId(i as u32))
    }

    /// The node producing each value (None for inputs, initializers, captures).
    pub fn producers(&self) -> Vec<Option<usize>> {
        let mut p = vec![None; self.values.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            for o in node.outputs.iter().flatten() {
                p[o.index()] = Some(n);
            }
        }
        p
    }

    /// Number of uses of each value by nodes and graph outputs.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.values.len()];
        for node in &self.nodes {
            for i in node.inputs.iter().flatten() {
                c[i.index()] += 1;
            }
        }
        for o in &self.outputs {
            c[o.index()] += 1;
        }
        c
    }

    /// Total number of elements in all initializers.
    pub fn parameter_count(&self) -> usize {
        self.initializers
            .values()
            .map(|i| i.ty().numel().unwrap_or(0))
            .sum()
    }

    /// Constant value of `id` if it is an initializer.
    pub fn constant(&self, id: ValueId) -> Option<&Initializer> {
        self.initializers.get(&id)
    }

    /// Fails with a message naming the first tensor whose shape is unknown.
    pub fn require_static_shapes(&self) -> Result<()> {
        for node in &self.nodes {
            for o in node.outputs.iter().flatten() {
                if self.ty(*o).shape.is_none() {
                    bail!(
                        "tensor '{}' (output of {}) has a data-dependent shape; compiled backends need static shapes",
                        self.name(*o),
                        node.describe()
                    );
                }
            }
        }
        Ok(())
    }
}

/// `hint`, or else the first of `hint_1`, `hint_2`, … that `taken` does
/// not hold: how passes and schedules name what they add.
pub fn unique_name(hint: &str, taken: &dyn Fn(&str) -> bool) -> String {
    let mut name = hint.to_string();
    let mut k = 1;
    while taken(&name) {
        name = format!("{hint}_{k}");
        k += 1;
    }
    name
}

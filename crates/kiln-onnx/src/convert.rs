//! `ModelProto`/`GraphProto` → IR graph: value table, initializers, nodes,
//! attributes and subgraphs (with captures of outer-scope values).

use crate::proto::{
    self, attribute_type as at, type_proto, GraphProto, ModelProto, NodeProto, ValueInfoProto,
};
use crate::{normalize, tensor, ImportOptions};
use kiln_ir::{bail, Attr, DType, Error, Graph, Node, Result, Tensor, TensorType, ValueId};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub fn convert_model(
    m: &ModelProto,
    base_dir: Option<PathBuf>,
    opts: &ImportOptions,
) -> Result<Graph> {
    let Some(gp) = &m.graph else {
        bail!("the model has no graph")
    };
    let mut opsets = BTreeMap::new();
    for o in &m.opset_import {
        let d = if o.domain == "ai.onnx" {
            String::new()
        } else {
            o.domain.clone()
        };
        opsets.insert(d, o.version);
    }
    // IR versions before 3 had no opset_import; they mean opset 1.
    opsets.entry(String::new()).or_insert(1);
    let cv = Converter {
        base_dir: base_dir.as_deref(),
        opts,
        opsets,
    };
    let mut g = cv.graph(gp, &|_| None, true)?;
    normalize::normalize(&mut g)?;
    let no_outer = |_: &str| None;
    kiln_ops::infer::infer_graph(&mut g, &no_outer)?;
    kiln_ir::verify::verify(&g)?;
    Ok(g)
}

struct Converter<'a> {
    base_dir: Option<&'a Path>,
    opts: &'a ImportOptions,
    opsets: BTreeMap<String, i64>,
}

/// Placeholder type of node outputs until shape inference sets it.
fn pending() -> TensorType {
    TensorType::unknown_shape(DType::F32)
}

impl Converter<'_> {
    /// Converts a graph. `outer` resolves names of enclosing graphs (for
    /// subgraphs); `top` is true for the model's main graph, whose inputs
    /// must have static shapes.
    fn graph(
        &self,
        gp: &GraphProto,
        outer: &dyn Fn(&str) -> Option<TensorType>,
        top: bool,
    ) -> Result<Graph> {
        let mut g = Graph::new(gp.name.clone());
        g.opsets = self.opsets.clone();
        let mut ids: HashMap<String, ValueId> = HashMap::new();
        for t in &gp.initializer {
            let init = tensor::to_initializer(t, self.base_dir)
                .map_err(|e| e.context(format!("initializer '{}'", t.name)))?;
            if ids.contains_key(&t.name) {
                bail!("initializer '{}' is defined twice", t.name);
            }
            let id = g.add_value(t.name.clone(), init.ty());
            ids.insert(t.name.clone(), id);
            g.initializers.insert(id, init);
        }
        for st in &gp.sparse_initializer {
            let t = sparse_to_dense(st, self.base_dir)?;
            let name = st
                .values
                .as_ref()
                .map(|v| v.name.clone())
                .unwrap_or_default();
            let id = g.add_value(name.clone(), t.ty());
            ids.insert(name, id);
            g.initializers.insert(id, kiln_ir::Initializer::Tensor(t));
        }
        for vi in &gp.input {
            if ids.contains_key(&vi.name) {
                continue; // an input with a default value: kiln treats it as the constant
            }
            let ty = self
                .input_type(vi, top)
                .map_err(|e| e.context(format!("graph input '{}'", vi.name)))?;
            let id = g.add_value(vi.name.clone(), ty);
            ids.insert(vi.name.clone(), id);
            g.inputs.push(id);
        }
        for np in &gp.node {
            let node = self.node(np, &mut g, &mut ids, outer).map_err(|e| {
                let name = if np.name.is_empty() {
                    String::new()
                } else {
                    format!("'{}' ", np.name)
                };
                e.context(format!(
                    "node {name}({}, opset {})",
                    np.op_type,
                    self.opset(&np.domain)
                ))
            })?;
            g.nodes.push(node);
        }
        for vi in &gp.output {
            let id = match ids.get(&vi.name) {
                Some(id) => *id,
                None => self.capture(&vi.name, &mut g, &mut ids, outer)?,
            };
            g.outputs.push(id);
        }
        Ok(g)
    }

    fn opset(&self, domain: &str) -> i64 {
        let d = if domain == "ai.onnx" { "" } else { domain };
        self.opsets.get(d).copied().unwrap_or(1)
    }

    /// Declared type of a graph input, with overrides from the options.
    fn input_type(&self, vi: &ValueInfoProto, top: bool) -> Result<TensorType> {
        // Subgraph inputs may be untyped (e.g. a Loop body's carried values):
        // shape inference takes their dtype from the control-flow node.
        let untyped = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            None => true,
            Some(type_proto::Value::TensorType(tt)) => tt.elem_type == 0,
            Some(_) => false,
        };
        if untyped && !top {
            return Ok(pending());
        }
        let tt = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(type_proto::Value::TensorType(tt)) => tt,
            Some(type_proto::Value::SequenceType(_)) => {
                bail!("has a sequence type; kiln supports tensor inputs only")
            }
            Some(type_proto::Value::MapType(_)) => {
                bail!("has a map type; kiln supports tensor inputs only")
            }
            Some(type_proto::Value::OptionalType(_)) => {
                bail!("has an optional type; kiln supports tensor inputs only")
            }
            Some(type_proto::Value::SparseTensorType(_)) => {
                bail!("has a sparse tensor type; kiln supports dense tensors only")
            }
            None => bail!("has no type"),
        };
        let dtype = DType::from_onnx_code(tt.elem_type).ok_or_else(|| {
            Error::new(format!(
                "has element type {} ({}), which kiln does not support",
                DType::onnx_code_name(tt.elem_type),
                tt.elem_type
            ))
        })?;
        if let Some(shape) = self.opts.input_shapes.get(&vi.name) {
            return Ok(TensorType::new(dtype, shape.clone()));
        }
        let Some(shape) = &tt.shape else {
            if top {
                bail!("has no shape; {}", bind_hint(&vi.name));
            }
            return Ok(TensorType::unknown_shape(dtype));
        };
        let mut dims = Vec::new();
        for (axis, d) in shape.dim.iter().enumerate() {
            match &d.value {
                Some(proto::dimension::Value::DimValue(v)) if *v >= 0 => dims.push(*v as usize),
                other if top => {
                    let what = match other {
                        Some(proto::dimension::Value::DimParam(p)) => {
                            format!("symbolic dimension '{p}'")
                        }
                        Some(proto::dimension::Value::DimValue(v)) => {
                            format!("invalid dimension {v}")
                        }
                        None => "an unknown dimension".to_string(),
                    };
                    bail!(
                        "has {what} at axis {axis}; kiln needs static shapes ({})",
                        bind_hint(&vi.name)
                    );
                }
                _ => return Ok(TensorType::unknown_shape(dtype)),
            }
        }
        Ok(TensorType::new(dtype, dims))
    }

    /// Binds `name` from an enclosing graph as a capture of this subgraph.
    fn capture(
        &self,
        name: &str,
        g: &mut Graph,
        ids: &mut HashMap<String, ValueId>,
        outer: &dyn Fn(&str) -> Option<TensorType>,
    ) -> Result<ValueId> {
        let Some(ty) = outer(name) else {
            bail!("'{name}' is not defined")
        };
        let id = g.add_value(name.to_string(), ty);
        ids.insert(name.to_string(), id);
        g.captures.push(id);
        Ok(id)
    }

    fn node(
        &self,
        np: &NodeProto,
        g: &mut Graph,
        ids: &mut HashMap<String, ValueId>,
        outer: &dyn Fn(&str) -> Option<TensorType>,
    ) -> Result<Node> {
        let mut inputs = Vec::with_capacity(np.input.len());
        for name in &np.input {
            inputs.push(match name.as_str() {
                "" => None,
                n => Some(match ids.get(n) {
                    Some(id) => *id,
                    None => self.capture(n, g, ids, outer).map_err(|_| {
                        Error::new(format!(
                            "input '{n}' is not defined by any earlier node, input or initializer"
                        ))
                    })?,
                }),
            });
        }
        let mut attrs = BTreeMap::new();
        for a in &np.attribute {
            let v = self
                .attr(a, g, ids, outer)
                .map_err(|e| e.context(format!("attribute '{}'", a.name)))?;
            attrs.insert(a.name.clone(), v);
        }
        let mut outputs = Vec::with_capacity(np.output.len());
        for name in &np.output {
            outputs.push(match name.as_str() {
                "" => None,
                n => {
                    if ids.contains_key(n) {
                        bail!("output '{n}' is already defined (ONNX values are assigned once)");
                    }
                    let id = g.add_value(n.to_string(), pending());
                    ids.insert(n.to_string(), id);
                    Some(id)
                }
            });
        }
        Ok(Node {
            name: np.name.clone(),
            op: np.op_type.clone(),
            domain: np.domain.clone(),
            inputs,
            outputs,
            attrs,
        })
    }

    fn attr(
        &self,
        a: &proto::AttributeProto,
        g: &Graph,
        ids: &HashMap<String, ValueId>,
        outer: &dyn Fn(&str) -> Option<TensorType>,
    ) -> Result<Attr> {
        if !a.ref_attr_name.is_empty() {
            bail!(
                "refers to function attribute '{}', which is only valid inside a function",
                a.ref_attr_name
            );
        }
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let kind = if a.r#type != 0 {
            a.r#type
        } else {
            guess_attr_type(a)
        };
        Ok(match kind {
            at::FLOAT => Attr::Float(a.f),
            at::INT => Attr::Int(a.i),
            at::STRING => Attr::String(text(&a.s)),
            at::FLOATS => Attr::Floats(a.floats.clone()),
            at::INTS => Attr::Ints(a.ints.clone()),
            at::STRINGS => Attr::Strings(a.strings.iter().map(|s| text(s)).collect()),
            at::TENSOR => match &a.t {
                Some(t) => Attr::Tensor(tensor::to_tensor(t, self.base_dir)?),
                None => bail!("tensor attribute has no tensor"),
            },
            at::SPARSE_TENSOR => match &a.sparse_tensor {
                Some(st) => Attr::Tensor(sparse_to_dense(st, self.base_dir)?),
                None => bail!("sparse tensor attribute has no tensor"),
            },
            at::GRAPH => match &a.g {
                Some(sub) => {
                    let here =
                        |n: &str| ids.get(n).map(|id| g.ty(*id).clone()).or_else(|| outer(n));
                    Attr::Graph(Box::new(self.graph(sub, &here, false)?))
                }
                None => bail!("graph attribute has no graph"),
            },
            at::TENSORS | at::GRAPHS | at::TYPE_PROTO | 14 | 12 => {
                bail!("attributes of this kind (type {kind}) are not supported by kiln")
            }
            other => bail!("unknown attribute type {other}"),
        })
    }
}

/// Old models may leave `type` unset; infer it from the field that is set.
fn guess_attr_type(a: &proto::AttributeProto) -> i32 {
    if a.t.is_some() {
        at::TENSOR
    } else if a.g.is_some() {
        at::GRAPH
    } else if !a.floats.is_empty() {
        at::FLOATS
    } else if !a.ints.is_empty() {
        at::INTS
    } else if !a.strings.is_empty() {
        at::STRINGS
    } else if !a.s.is_empty() {
        at::STRING
    } else if a.f != 0.0 {
        at::FLOAT
    } else {
        at::INT
    }
}

/// Densifies a sparse tensor (COO indices, flat or per-dimension).
fn sparse_to_dense(st: &proto::SparseTensorProto, base_dir: Option<&Path>) -> Result<Tensor> {
    let (Some(values), Some(indices)) = (&st.values, &st.indices) else {
        bail!("sparse tensor without values or indices")
    };
    let values = tensor::to_tensor(values, base_dir)?;
    let indices = tensor::to_tensor(indices, base_dir)?;
    let mut shape = Vec::new();
    for &d in &st.dims {
        if d < 0 {
            bail!("sparse tensor has negative dimension {d}");
        }
        shape.push(d as usize);
    }
    let total = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::new("sparse tensor too large"))?;
    let idx = indices.data.to_i64_vec()?;
    let nnz = values.len();
    let strides = kiln_ops::util::strides(&shape);
    // Flat positions; negative or out-of-range coordinates become `total` (rejected below).
    let flat: Vec<usize> = if indices.rank() == 1 {
        idx.iter()
            .map(|&i| usize::try_from(i).unwrap_or(total))
            .collect()
    } else {
        if idx.len() != nnz * shape.len() {
            bail!("sparse tensor indices do not match its values");
        }
        idx.chunks(shape.len().max(1))
            .map(|c| {
                let inside = c
                    .iter()
                    .zip(&shape)
                    .all(|(&i, &d)| i >= 0 && (i as usize) < d);
                if inside {
                    c.iter().zip(&strides).map(|(&i, &s)| i as usize * s).sum()
                } else {
                    total
                }
            })
            .collect()
    };
    if flat.len() != nnz || flat.iter().any(|&i| i >= total) {
        bail!("sparse tensor indices are out of range");
    }
    // value index of each dense position; absent positions read the appended zero
    let mut positions = vec![nnz; total];
    for (k, &i) in flat.iter().enumerate() {
        positions[i] = k;
    }
    let joined = kiln_ir::dispatch_all!(&values.data, |v: T| {
        let mut with_zero = v.to_vec();
        with_zero.push(<T as Default>::default());
        <T as kiln_ir::Elem>::wrap(positions.iter().map(|&p| with_zero[p].clone()).collect())
    });
    Tensor::new(shape, joined)
}

/// How a user gives an input its shape, from the CLI or from Python.
fn bind_hint(input: &str) -> String {
    format!("give one with --input-shape {input}=D0,D1,... or, in Python, input_shapes={{'{input}': [D0, D1, ...]}}")
}

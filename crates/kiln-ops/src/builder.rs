//! Builds replacement nodes inside a graph: what compound ops use to open
//! themselves into primitives ([`crate::Op::decompose`]) and what graph
//! passes use to emit new nodes.
//!
//! Every node is typed as it is added, by its op's own shape inference, so
//! a decomposition that does not fit its inputs fails here, naming the op,
//! rather than producing a graph that is wrong later.

use crate::{registry, InferCx, InputInfo};
use kiln_ir::{
    bail, Attr, DType, Data, Graph, Initializer, Node, Result, Tensor, TensorType, ValueId,
};
use std::collections::HashMap;

pub struct Builder<'g> {
    graph: &'g mut Graph,
    opset: i64,
    /// Prefix of the names of new nodes and values.
    base: String,
    counter: usize,
    /// Nodes added, in order.
    pub nodes: Vec<Node>,
    /// Values known at build time (initializers read on demand).
    known: HashMap<ValueId, Tensor>,
}

impl<'g> Builder<'g> {
    /// A builder adding to `graph`, whose new names start with `base`.
    pub fn new(graph: &'g mut Graph, opset: i64, base: &str) -> Builder<'g> {
        Builder {
            graph,
            opset,
            base: base.to_string(),
            counter: 0,
            nodes: Vec::new(),
            known: HashMap::new(),
        }
    }

    pub fn graph(&self) -> &Graph {
        self.graph
    }

    pub fn ty(&self, id: ValueId) -> &TensorType {
        self.graph.ty(id)
    }

    /// The shape of `id`, which decompositions need to be static.
    pub fn shape(&self, id: ValueId) -> Result<Vec<usize>> {
        match &self.graph.ty(id).shape {
            Some(s) => Ok(s.clone()),
            None => Err(kiln_ir::Error::not_static(format!(
                "'{}' has no static shape",
                self.graph.name(id)
            ))),
        }
    }

    /// The value of `id`, which must be a constant (an axes or shape input).
    pub fn require_value(&mut self, id: ValueId) -> Result<Tensor> {
        match self.value(id)? {
            Some(t) => Ok(t),
            None => Err(kiln_ir::Error::not_static(format!(
                "'{}' must be a constant",
                self.graph.name(id)
            ))),
        }
    }

    /// The value of `id` when it is a constant.
    pub fn value(&mut self, id: ValueId) -> Result<Option<Tensor>> {
        if let Some(t) = self.known.get(&id) {
            return Ok(Some(t.clone()));
        }
        match self.graph.initializers.get(&id) {
            Some(init) => {
                let t = init.to_tensor()?;
                self.known.insert(id, t.clone());
                Ok(Some(t))
            }
            None => Ok(None),
        }
    }

    fn fresh_name(&mut self, hint: &str) -> String {
        loop {
            self.counter += 1;
            let name = format!("{}/{hint}_{}", self.base, self.counter);
            if self.graph.find(&name).is_none() {
                return name;
            }
        }
    }

    /// Adds `t` as an initializer.
    pub fn constant(&mut self, t: Tensor) -> ValueId {
        let name = self.fresh_name("const");
        let id = self.graph.add_value(name, t.ty());
        self.graph
            .initializers
            .insert(id, Initializer::Tensor(t.clone()));
        self.known.insert(id, t);
        id
    }

    /// A 0-d constant of `dtype`.
    pub fn scalar(&mut self, dtype: DType, v: f64) -> Result<ValueId> {
        Ok(self.constant(Tensor::new(vec![], Data::from_f64(dtype, &[v])?)?))
    }

    /// A 1-d int64 constant (axes, shapes, starts, …).
    pub fn ints(&mut self, v: &[i64]) -> ValueId {
        self.constant(Tensor {
            shape: vec![v.len()],
            data: Data::I64(v.into()),
        })
    }

    /// Adds a node `op(inputs) {attrs}` with one output and returns it.
    pub fn op(&mut self, op: &str, inputs: &[ValueId], attrs: &[(&str, Attr)]) -> Result<ValueId> {
        let ins: Vec<Option<ValueId>> = inputs.iter().copied().map(Some).collect();
        self.op_opt(op, &ins, attrs)
    }

    /// Like [`Builder::op`] with optional (omitted) inputs.
    pub fn op_opt(
        &mut self,
        op: &str,
        inputs: &[Option<ValueId>],
        attrs: &[(&str, Attr)],
    ) -> Result<ValueId> {
        let Some(def) = registry::lookup("", op) else {
            bail!("decomposition uses unknown op '{op}'");
        };
        let name = self.fresh_name(op);
        let mut node = Node {
            name: name.clone(),
            op: op.to_string(),
            domain: String::new(),
            inputs: inputs.to_vec(),
            outputs: Vec::new(),
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        };
        for id in inputs.iter().flatten() {
            let small = self.graph.initializers.get(id).is_some_and(|i| {
                i.ty().numel().unwrap_or(usize::MAX) <= crate::infer::MAX_KNOWN_ELEMS
            });
            if small {
                self.value(*id)?;
            }
        }
        let infos = inputs
            .iter()
            .map(|i| {
                i.map(|i| InputInfo {
                    ty: self.graph.ty(i).clone(),
                    value: self.known.get(&i),
                })
            })
            .collect();
        let cx = InferCx {
            node: &node,
            opset: self.opset,
            inputs: infos,
            scope: &|_| None,
        };
        let ty = match def.infer(&cx)?.into_iter().next() {
            Some(t) => t,
            None => bail!("{op} produced no output type"),
        };
        let out = self.graph.add_value(name, ty);
        node.outputs.push(Some(out));
        self.nodes.push(node);
        Ok(out)
    }
}

//! Representative instances of every primitive op, for the classification
//! table (`kiln ops`, docs/classification.md) and its tests. A class belongs
//! to an op *instance* (Add of equal shapes is element-wise, Add with a
//! size-1 dimension is broadcast), so each op is shown on the instances
//! that tell its cases apart. Element-wise ops get theirs generated;
//! the others are listed here.

use super::{classify::classify, TensorExpr};
use crate::{registry, InferCx, InputInfo};
use kiln_ir::{bail, Attr, DType, Data, Node, Result, Tensor, TensorType};

/// One op instance: attributes, input types and constant input values.
pub struct Example {
    pub op: String,
    pub label: String,
    pub attrs: Vec<(String, Attr)>,
    pub inputs: Vec<(TensorType, Option<Tensor>)>,
}

impl Example {
    pub fn new(op: &str, label: &str) -> Example {
        Example {
            op: op.into(),
            label: label.into(),
            attrs: Vec::new(),
            inputs: Vec::new(),
        }
    }

    pub fn input(mut self, dtype: DType, shape: &[usize]) -> Example {
        self.inputs
            .push((TensorType::new(dtype, shape.to_vec()), None));
        self
    }

    pub fn f32(self, shape: &[usize]) -> Example {
        self.input(DType::F32, shape)
    }

    /// A constant int64 input (shape, axes, indices, pads, …).
    pub fn ints(mut self, v: &[i64]) -> Example {
        let t = Tensor {
            shape: vec![v.len()],
            data: Data::I64(v.into()),
        };
        self.inputs.push((t.ty(), Some(t)));
        self
    }

    pub fn attr(mut self, name: &str, a: Attr) -> Example {
        self.attrs.push((name.into(), a));
        self
    }

    /// The instance's tensor expression.
    pub fn expr(&self) -> Result<TensorExpr> {
        let Some(p) = registry::lookup("", &self.op).and_then(|op| op.primitive()) else {
            bail!("{} is not a primitive op", self.op);
        };
        let node = Node {
            name: self.label.clone(),
            op: self.op.clone(),
            domain: String::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            attrs: self.attrs.iter().cloned().collect(),
        };
        let cx = InferCx {
            node: &node,
            opset: super::SCALAR_OPSET,
            inputs: self
                .inputs
                .iter()
                .map(|(ty, v)| {
                    Some(InputInfo {
                        ty: ty.clone(),
                        value: v.as_ref(),
                    })
                })
                .collect(),
            scope: &|_| None,
        };
        match p.define(&cx)? {
            Some(te) => Ok(te),
            None => bail!("{}: example does not determine the expression", self.label),
        }
    }
}

/// The examples of primitive op `op`.
pub fn examples(op: &str) -> Vec<Example> {
    let listed = listed(op);
    if !listed.is_empty() {
        return listed;
    }
    let Some(def) = registry::lookup("", op) else {
        return Vec::new();
    };
    if def.scalar_kernel().is_some() {
        return elementwise(op);
    }
    Vec::new()
}

/// Equal shapes and a size-1 broadcast, in the first dtype the op accepts.
fn elementwise(op: &str) -> Vec<Example> {
    let arity = match op {
        "Where" => 3,
        // Variadic: shown with two operands.
        "Max" | "Min" | "Sum" | "Mean" => 2,
        _ if is_unary(op) => 1,
        _ => 2,
    };
    for dtype in [DType::F32, DType::I64, DType::Bool] {
        let mut types = vec![dtype; arity];
        if op == "Where" {
            types[0] = DType::Bool;
        }
        let same = types
            .iter()
            .fold(Example::new(op, &format!("{op} [2,3]")), |e, &d| {
                e.input(d, &[2, 3])
            });
        if same.expr().is_err() {
            continue;
        }
        let mut out = vec![same];
        if arity > 1 {
            let mut b = Example::new(op, &format!("{op} [2,3] with [1,3]"));
            for (k, &d) in types.iter().enumerate() {
                b = b.input(d, if k == arity - 1 { &[1, 3] } else { &[2, 3] });
            }
            out.push(b);
        }
        return out;
    }
    Vec::new()
}

/// Whether element-wise `op` takes one operand (its scalar rule accepts one;
/// a rule reading a second operand fails without it).
fn is_unary(op: &str) -> bool {
    Example::new(op, op).f32(&[2]).expr().is_ok()
        || Example::new(op, op).input(DType::Bool, &[2]).expr().is_ok()
        || Example::new(op, op).input(DType::I64, &[2]).expr().is_ok()
}

fn listed(op: &str) -> Vec<Example> {
    let e = Example::new;
    match op {
        "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" => vec![
            e(op, &format!("{op} [4,5] axis 1 keepdims"))
                .f32(&[4, 5])
                .ints(&[1]),
            e(op, &format!("{op} [4,5] axis 1"))
                .f32(&[4, 5])
                .ints(&[1])
                .attr("keepdims", Attr::Int(0)),
            e(op, &format!("{op} [4,1] axis 1")).f32(&[4, 1]).ints(&[1]),
        ],
        "ArgMax" | "ArgMin" => vec![
            e(op, &format!("{op} [4,5] axis 1 keepdims"))
                .f32(&[4, 5])
                .attr("axis", Attr::Int(1)),
            e(op, &format!("{op} [4,5] axis 0 select_last_index"))
                .f32(&[4, 5])
                .attr("keepdims", Attr::Int(0))
                .attr("select_last_index", Attr::Int(1)),
        ],
        "Transpose" => vec![e(op, "Transpose [2,3] perm [1,0]")
            .f32(&[2, 3])
            .attr("perm", Attr::Ints(vec![1, 0]))],
        "Reshape" => vec![
            e(op, "Reshape [2,6] to [3,4]").f32(&[2, 6]).ints(&[3, 4]),
            e(op, "Reshape [6] to [1,6]").f32(&[6]).ints(&[1, 6]),
        ],
        "Slice" => vec![
            e(op, "Slice [8] 1:7:2")
                .f32(&[8])
                .ints(&[1])
                .ints(&[7])
                .ints(&[0])
                .ints(&[2]),
            e(op, "Slice [8] 0:8").f32(&[8]).ints(&[0]).ints(&[8]),
        ],
        "Concat" => vec![e(op, "Concat [2,3] [2,5] axis 1")
            .f32(&[2, 3])
            .f32(&[2, 5])
            .attr("axis", Attr::Int(1))],
        "Gather" => vec![e(op, "Gather [10,4] by i64[3]")
            .f32(&[10, 4])
            .input(DType::I64, &[3])],
        "Expand" => vec![e(op, "Expand [1,3] to [4,3]").f32(&[1, 3]).ints(&[4, 3])],
        "Tile" => vec![e(op, "Tile [2,3] by [2,1]").f32(&[2, 3]).ints(&[2, 1])],
        "Pad" => vec![e(op, "Pad [4] by 1,2").f32(&[4]).ints(&[1, 2])],
        "MatMul" => vec![
            e(op, "MatMul [2,3]x[3,4]").f32(&[2, 3]).f32(&[3, 4]),
            e(op, "MatMul [5,2,3]x[3,4]").f32(&[5, 2, 3]).f32(&[3, 4]),
        ],
        "Conv" => vec![e(op, "Conv [1,2,5,5] * [4,2,3,3] pad 1")
            .f32(&[1, 2, 5, 5])
            .f32(&[4, 2, 3, 3])
            .attr("pads", Attr::Ints(vec![1, 1, 1, 1]))],
        "MaxPool" => vec![e(op, "MaxPool [1,2,6,6] 2x2 stride 2")
            .f32(&[1, 2, 6, 6])
            .attr("kernel_shape", Attr::Ints(vec![2, 2]))
            .attr("strides", Attr::Ints(vec![2, 2]))],
        "BitShift" => vec![e(op, "BitShift [2,3] LEFT")
            .input(DType::I64, &[2, 3])
            .input(DType::I64, &[2, 3])
            .attr("direction", Attr::String("LEFT".into()))],
        "Cast" => vec![e(op, "Cast f32[2,3] to i64")
            .f32(&[2, 3])
            .attr("to", Attr::Int(7))],
        "Trilu" => vec![e(op, "Trilu [3,3]").f32(&[3, 3])],
        "GatherElements" => vec![e(op, "GatherElements [3,3] by i64[2,3]")
            .f32(&[3, 3])
            .input(DType::I64, &[2, 3])],
        _ => Vec::new(),
    }
}

/// One row of the classification table.
pub struct Row {
    pub op: String,
    pub label: String,
    pub expr: String,
    pub apollo: String,
    pub mapping: String,
}

/// Rows for every primitive op registered in the default domain, in name
/// order; an op without an example gets a row saying so.
pub fn table() -> Vec<Row> {
    let mut rows = Vec::new();
    for (domain, op) in registry::names() {
        let is_primitive = registry::lookup(&domain, &op).is_some_and(|d| d.primitive().is_some());
        if !domain.is_empty() || !is_primitive {
            continue;
        }
        let exs = examples(&op);
        if exs.is_empty() {
            rows.push(Row {
                op: op.clone(),
                label: op.clone(),
                expr: "(no example)".into(),
                apollo: "?".into(),
                mapping: "?".into(),
            });
        }
        for ex in exs {
            let (expr, apollo, mapping) = match ex.expr() {
                Ok(te) => {
                    let c = classify(&te);
                    (te.to_string(), c.apollo.to_string(), c.mapping.to_string())
                }
                Err(err) => (format!("error: {err}"), "?".into(), "?".into()),
            };
            rows.push(Row {
                op: op.clone(),
                label: ex.label,
                expr,
                apollo,
                mapping,
            });
        }
    }
    rows
}

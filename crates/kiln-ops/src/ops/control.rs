//! Control flow: If, Loop and Scan (opset 8 batched form and 9+). Their
//! bodies are `Attr::Graph` subgraphs run through `EvalCx::subgraphs`, which
//! resolves values captured from enclosing scopes. Only tensor values are
//! supported: kiln's IR has no sequences or optionals, so models that carry
//! them through a loop fail at import with a message naming the value.

mod scan;

use crate::registry::Registry;
use crate::util::{normalize_axis, normalize_axis_inclusive, numel};
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{
    bail, dispatch_all, ensure, DType, Data, Elem, Graph, Node, Result, Tensor, TensorType,
};
use scan::Scan;

pub fn register(r: &mut Registry) {
    r.add("If", If);
    r.add("Loop", Loop);
    r.add("Scan", Scan);
    r.add_in(FUSED_DOMAIN, FUSED_OP, Fused);
}

/// Domain and op type of a fused group (`kiln-fuse`'s apply step): one
/// node whose graph attribute `body` holds the group's nodes. Its inputs
/// are the body's inputs, its outputs the body's outputs.
pub const FUSED_DOMAIN: &str = "kiln";
pub const FUSED_OP: &str = "Fused";

/// A fused group: computes exactly what its body computes.
struct Fused;

impl Op for Fused {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let g = body(cx.node, "body")?;
        ensure!(
            g.inputs.len() == cx.node.inputs.len(),
            "fused body has {} inputs, the node {}",
            g.inputs.len(),
            cx.node.inputs.len()
        );
        (0..g.outputs.len())
            .map(|k| output_type(g, k).cloned())
            .collect()
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let g = body(cx.node, "body")?;
        let ins = inputs
            .iter()
            .enumerate()
            .map(|(k, t)| match t {
                Some(t) => Ok((*t).clone()),
                None => bail!("fused node input {k} is missing"),
            })
            .collect::<Result<Vec<_>>>()?;
        run_body(cx, g, ins, g.outputs.len())
    }
}

/// The graph attribute `name` of `node`, or an error naming it.
fn body<'a>(node: &'a Node, name: &str) -> Result<&'a Graph> {
    node.attr_graph(name)?
        .ok_or_else(|| kiln_ir::Error::new(format!("attribute '{name}' (a graph) is required")))
}

/// Inferred type of the subgraph's `k`-th output.
fn output_type(g: &Graph, k: usize) -> Result<&TensorType> {
    match g.outputs.get(k) {
        Some(&id) => Ok(g.ty(id)),
        None => bail!(
            "subgraph '{}' has {} outputs, output {k} is missing",
            g.name,
            g.outputs.len()
        ),
    }
}

/// Truth value of a single-element condition tensor (bool or numeric).
fn truth(t: &Tensor, what: &str) -> Result<bool> {
    ensure!(
        t.len() == 1,
        "{what} must hold exactly one element, got shape {:?}",
        t.shape
    );
    Ok(match &t.data {
        Data::Bool(v) => v[0],
        Data::Str(_) => bail!("{what} must be a bool tensor, got strings"),
        d => d.get_f64(0) != 0.0,
    })
}

/// Gives a single-element value the shape the subgraph declares for input
/// `k` when that is another single-element shape ([] vs [1]).
fn as_declared(g: &Graph, k: usize, t: Tensor) -> Result<Tensor> {
    match g.inputs.get(k).map(|&id| &g.ty(id).shape) {
        Some(Some(s)) if *s != t.shape && numel(s) == 1 && t.len() == 1 => t.reshaped(s.clone()),
        _ => Ok(t),
    }
}

/// Runs `g` and checks it returned `n` outputs.
fn run_body(cx: &EvalCx, g: &Graph, inputs: Vec<Tensor>, n: usize) -> Result<Vec<Tensor>> {
    let outs = cx.subgraphs.run(g, inputs)?;
    ensure!(
        outs.len() == n,
        "subgraph '{}' returned {} outputs, expected {n}",
        g.name,
        outs.len()
    );
    Ok(outs)
}

// ---------------------------------------------------------------- tensors

/// The slice of `t` at `index` along `axis`, with that axis removed.
fn index_axis(t: &Tensor, axis: usize, index: usize) -> Result<Tensor> {
    ensure!(
        axis < t.rank() && index < t.shape[axis],
        "index {index} on axis {axis} is out of range for shape {:?}",
        t.shape
    );
    let outer: usize = t.shape[..axis].iter().product();
    let inner: usize = t.shape[axis + 1..].iter().product();
    let n = t.shape[axis];
    let idx = (0..outer).flat_map(move |o| (0..inner).map(move |i| (o * n + index) * inner + i));
    let mut shape = t.shape.clone();
    shape.remove(axis);
    Tensor::new(shape, t.data.gather(idx))
}

/// Stacks equally shaped tensors along a new axis `axis`.
fn stack(parts: &[Tensor], axis: usize) -> Result<Tensor> {
    let Some(first) = parts.first() else {
        bail!("nothing to stack")
    };
    for p in parts {
        ensure!(
            p.shape == first.shape && p.dtype() == first.dtype(),
            "values to concatenate differ between iterations: {} and {}",
            first.ty(),
            p.ty()
        );
    }
    ensure!(
        axis <= first.rank(),
        "axis {axis} is out of range for rank {}",
        first.rank() + 1
    );
    let outer: usize = first.shape[..axis].iter().product();
    let inner: usize = first.shape[axis..].iter().product();
    let data = dispatch_all!(&first.data, |_v: T| {
        let slices: Vec<&[T]> = parts
            .iter()
            .map(|p| p.as_slice::<T>())
            .collect::<Result<_>>()?;
        let mut out = Vec::with_capacity(outer * inner * parts.len());
        for o in 0..outer {
            for s in &slices {
                out.extend_from_slice(&s[o * inner..(o + 1) * inner]);
            }
        }
        T::wrap(out)
    });
    let mut shape = first.shape.clone();
    shape.insert(axis, parts.len());
    Tensor::new(shape, data)
}

/// An empty tensor: `elem` (the per-iteration shape, when known) with a
/// zero-length axis inserted at `axis`.
fn empty_stack(dtype: DType, elem: Option<&[usize]>, axis: usize, what: &str) -> Result<Tensor> {
    let Some(elem) = elem else {
        bail!("{what} ran no iterations and its per-iteration shape is not known statically")
    };
    let mut shape = elem.to_vec();
    ensure!(
        axis <= shape.len(),
        "axis {axis} is out of range for rank {}",
        shape.len() + 1
    );
    shape.insert(axis, 0);
    Ok(Tensor::zeros(dtype, shape))
}

// ---------------------------------------------------------------- If

struct If;

impl Op for If {
    fn subgraph_is_live(&self, _node: &Node, attr: &str, inputs: &[Option<&Tensor>]) -> bool {
        match inputs.first().copied().flatten().map(|c| truth(c, "cond")) {
            Some(Ok(taken)) => (attr == "then_branch") == taken,
            _ => true,
        }
    }

    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let (then_g, else_g) = (body(cx.node, "then_branch")?, body(cx.node, "else_branch")?);
        let n = cx.node.outputs.len();
        ensure!(
            then_g.outputs.len() == n && else_g.outputs.len() == n,
            "the node has {n} outputs but the branches have {} and {}",
            then_g.outputs.len(),
            else_g.outputs.len()
        );
        // A condition known at compile time picks the branch.
        if let Some(c) = cx.value(0) {
            let g = if truth(c, "cond")? { then_g } else { else_g };
            return (0..n).map(|k| output_type(g, k).cloned()).collect();
        }
        (0..n)
            .map(|k| {
                let (t, e) = (output_type(then_g, k)?, output_type(else_g, k)?);
                ensure!(
                    t.dtype == e.dtype,
                    "output {k} is {} in then_branch but {} in else_branch",
                    t.dtype,
                    e.dtype
                );
                Ok(if t.shape == e.shape {
                    t.clone()
                } else {
                    TensorType::unknown_shape(t.dtype)
                })
            })
            .collect()
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let branch = if truth(arg(inputs, 0)?, "cond")? {
            "then_branch"
        } else {
            "else_branch"
        };
        let g = body(cx.node, branch)?;
        run_body(cx, g, Vec::new(), cx.node.outputs.len())
    }
}

// ---------------------------------------------------------------- Loop

/// Loop(M?, cond?, v_initial...) with body (iter, cond, v...) -> (cond, v..., scan...).
struct Loop;

impl Loop {
    /// (number of carried values N, number of scan outputs K).
    fn counts(node: &Node, g: &Graph) -> Result<(usize, usize)> {
        let n = node.inputs.len().saturating_sub(2);
        ensure!(
            g.inputs.len() == n + 2,
            "the body takes {} inputs but the Loop passes {}",
            g.inputs.len(),
            n + 2
        );
        ensure!(
            g.outputs.len() > n,
            "the body returns {} outputs, needs at least {}",
            g.outputs.len(),
            n + 1
        );
        let k = g.outputs.len() - 1 - n;
        ensure!(
            node.outputs.len() <= n + k,
            "the node has {} outputs, the body provides {}",
            node.outputs.len(),
            n + k
        );
        Ok((n, k))
    }
}

impl Op for Loop {
    fn subgraph_input_types(
        &self,
        _node: &Node,
        _opset: i64,
        attr: &str,
        inputs: &[Option<TensorType>],
    ) -> Result<Option<Vec<Option<TensorType>>>> {
        if attr != "body" {
            return Ok(None);
        }
        let mut known = vec![
            Some(TensorType::new(DType::I64, vec![])),
            Some(TensorType::new(DType::Bool, vec![])),
        ];
        // Carried values may change shape between iterations: dtype only.
        known.extend(
            inputs
                .iter()
                .skip(2)
                .map(|t| t.as_ref().map(|t| TensorType::unknown_shape(t.dtype))),
        );
        Ok(Some(known))
    }

    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let g = body(cx.node, "body")?;
        let (n, k) = Loop::counts(cx.node, g)?;
        let mut out = Vec::with_capacity(n + k);
        for i in 0..n {
            let init = &cx.input(2 + i)?.ty;
            let last = output_type(g, 1 + i)?;
            ensure!(
                init.dtype == last.dtype,
                "carried value {i} starts as {} but the body returns {}",
                init.dtype,
                last.dtype
            );
            // Zero iterations return the initial value, others the body's.
            out.push(if init.shape.is_some() && init.shape == last.shape {
                init.clone()
            } else {
                TensorType::unknown_shape(init.dtype)
            });
        }
        for j in 0..k {
            // The trip count depends on run-time conditions.
            out.push(TensorType::unknown_shape(output_type(g, 1 + n + j)?.dtype));
        }
        Ok(out)
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let g = body(cx.node, "body")?;
        let (n, k) = Loop::counts(cx.node, g)?;
        let max_trips = match inputs.first().copied().flatten() {
            Some(m) => {
                ensure!(
                    m.len() == 1,
                    "M must hold one element, got shape {:?}",
                    m.shape
                );
                m.data.to_i64_vec()?[0]
            }
            None => i64::MAX,
        };
        let mut cond = match inputs.get(1).copied().flatten() {
            Some(c) => truth(c, "cond")?,
            None => true,
        };
        let mut carried: Vec<Tensor> = (0..n)
            .map(|i| arg(inputs, 2 + i).cloned())
            .collect::<Result<_>>()?;
        let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); k];
        let mut iter = 0i64;
        while cond && iter < max_trips {
            let mut ins = vec![
                as_declared(g, 0, Tensor::scalar(iter))?,
                as_declared(g, 1, Tensor::scalar(cond))?,
            ];
            ins.extend(carried.iter().cloned());
            let mut outs = run_body(cx, g, ins, 1 + n + k)?;
            let produced = outs.split_off(1 + n);
            cond = truth(&outs[0], "the body's condition output")?;
            carried = outs.split_off(1);
            for (acc, t) in scans.iter_mut().zip(produced) {
                acc.push(t);
            }
            iter += 1;
        }
        let mut result = carried;
        for (j, acc) in scans.iter().enumerate() {
            result.push(if acc.is_empty() {
                let ty = output_type(g, 1 + n + j)?;
                empty_stack(ty.dtype, ty.shape.as_deref(), 0, "Loop")?
            } else {
                stack(acc, 0)?
            });
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_inserts_axis() {
        let a = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]).unwrap();
        let b = Tensor::from_vec(vec![2], vec![3.0f32, 4.0]).unwrap();
        let s0 = stack(&[a.clone(), b.clone()], 0).unwrap();
        assert_eq!(s0.shape, vec![2, 2]);
        assert_eq!(s0.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
        let s1 = stack(&[a, b], 1).unwrap();
        assert_eq!(s1.as_slice::<f32>().unwrap(), &[1.0, 3.0, 2.0, 4.0]);
    }

    #[test]
    fn index_axis_removes_axis() {
        let t = Tensor::from_vec(vec![2, 3], vec![0i64, 1, 2, 3, 4, 5]).unwrap();
        let c = index_axis(&t, 1, 2).unwrap();
        assert_eq!(c.shape, vec![2]);
        assert_eq!(c.as_slice::<i64>().unwrap(), &[2, 5]);
    }
}

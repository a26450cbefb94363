//! Control flow: If, Loop and Scan (opset 8 batched form and 9+). Their
//! bodies are `Attr::Graph` subgraphs run through `EvalCx::subgraphs`, which
//! resolves values captured from enclosing scopes. Only tensor values are
//! supported: kiln's IR has no sequences or optionals, so models that carry
//! them through a loop fail at import with a message naming the value.

use crate::registry::Registry;
use crate::util::{normalize_axis, normalize_axis_inclusive, numel};
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{
    bail, dispatch_all, ensure, DType, Data, Elem, Graph, Node, Result, Tensor, TensorType,
};

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

// ---------------------------------------------------------------- Scan

struct Scan;

/// Scan's attributes and the split of its inputs and outputs.
struct ScanSpec {
    /// Number of state variables N.
    states: usize,
    /// Number of scan inputs M.
    inputs: usize,
    /// Number of scan outputs K.
    outputs: usize,
    /// Per scan input: reverse the scan direction.
    in_reverse: Vec<bool>,
    /// Per scan output: prepend instead of append.
    out_reverse: Vec<bool>,
    in_axes: Vec<i64>,
    out_axes: Vec<i64>,
}

impl ScanSpec {
    /// Reads the attributes; the states start at node input 1 for opset 8
    /// (input 0 is sequence_lens), else at input 0.
    fn new(node: &Node, opset: i64, g: &Graph) -> Result<ScanSpec> {
        let m = node
            .attr_int("num_scan_inputs")?
            .ok_or_else(|| kiln_ir::Error::new("attribute 'num_scan_inputs' is required"))?;
        ensure!(m > 0, "num_scan_inputs must be positive, got {m}");
        let m = m as usize;
        let first_state = if opset < 9 { 1 } else { 0 };
        let total = node.inputs.len().saturating_sub(first_state);
        ensure!(
            total >= m,
            "num_scan_inputs is {m} but the node has {total} state and scan inputs"
        );
        let n = total - m;
        ensure!(
            g.inputs.len() == n + m,
            "the body takes {} inputs but the Scan passes {}",
            g.inputs.len(),
            n + m
        );
        ensure!(
            g.outputs.len() >= n,
            "the body returns {} outputs, needs at least the {n} states",
            g.outputs.len()
        );
        let k = g.outputs.len() - n;
        ensure!(
            node.outputs.len() <= n + k,
            "the node has {} outputs, the body provides {}",
            node.outputs.len(),
            n + k
        );
        let flags = |name: &str, len: usize| -> Result<Vec<bool>> {
            match node.attr_ints(name)? {
                None => Ok(vec![false; len]),
                Some(v) => {
                    ensure!(
                        v.len() == len,
                        "attribute '{name}' has {} entries, expected {len}",
                        v.len()
                    );
                    v.iter()
                        .map(|&d| {
                            if d == 0 || d == 1 {
                                Ok(d == 1)
                            } else {
                                bail!("attribute '{name}' entries must be 0 or 1, got {d}")
                            }
                        })
                        .collect()
                }
            }
        };
        let axes = |name: &str, len: usize| -> Result<Vec<i64>> {
            match node.attr_ints(name)? {
                None => Ok(vec![0; len]),
                Some(v) => {
                    ensure!(
                        v.len() == len,
                        "attribute '{name}' has {} entries, expected {len}",
                        v.len()
                    );
                    Ok(v.to_vec())
                }
            }
        };
        let in_dirs = if opset < 9 {
            "directions"
        } else {
            "scan_input_directions"
        };
        Ok(ScanSpec {
            states: n,
            inputs: m,
            outputs: k,
            in_reverse: flags(in_dirs, m)?,
            out_reverse: if opset < 9 {
                vec![false; k]
            } else {
                flags("scan_output_directions", k)?
            },
            in_axes: if opset < 9 {
                vec![0; m]
            } else {
                axes("scan_input_axes", m)?
            },
            out_axes: if opset < 9 {
                vec![0; k]
            } else {
                axes("scan_output_axes", k)?
            },
        })
    }

    /// Runs the scan over unbatched states and inputs: returns the final
    /// states then the scan outputs.
    fn run(
        &self,
        cx: &EvalCx,
        g: &Graph,
        states: Vec<Tensor>,
        scan_inputs: &[&Tensor],
    ) -> Result<Vec<Tensor>> {
        let mut axes = Vec::with_capacity(self.inputs);
        let mut len = None;
        for (i, x) in scan_inputs.iter().enumerate() {
            let axis = normalize_axis(self.in_axes[i], x.rank())?;
            let l = x.shape[axis];
            ensure!(
                len.is_none_or(|n| n == l),
                "scan inputs have different sequence lengths ({} and {l})",
                len.unwrap_or(0)
            );
            len = Some(l);
            axes.push(axis);
        }
        let len = len.unwrap_or(0);
        let mut states = states;
        let mut scans: Vec<Vec<Tensor>> = vec![Vec::with_capacity(len); self.outputs];
        for t in 0..len {
            let mut ins = states;
            for (i, x) in scan_inputs.iter().enumerate() {
                let pos = if self.in_reverse[i] { len - 1 - t } else { t };
                ins.push(index_axis(x, axes[i], pos)?);
            }
            let mut outs = run_body(cx, g, ins, self.states + self.outputs)?;
            let produced = outs.split_off(self.states);
            states = outs;
            for (acc, t) in scans.iter_mut().zip(produced) {
                acc.push(t);
            }
        }
        let mut result = states;
        for (j, mut acc) in scans.into_iter().enumerate() {
            let ty = output_type(g, self.states + j)?;
            let elem_rank = acc.first().map(|t| t.rank()).or(ty.rank());
            let axis = match elem_rank {
                Some(r) => normalize_axis_inclusive(self.out_axes[j], r)?,
                None => 0,
            };
            if self.out_reverse[j] {
                acc.reverse();
            }
            result.push(if acc.is_empty() {
                empty_stack(ty.dtype, ty.shape.as_deref(), axis, "Scan")?
            } else {
                stack(&acc, axis)?
            });
        }
        Ok(result)
    }

    /// Output types for the unbatched form, given the scan inputs' types.
    fn infer(
        &self,
        g: &Graph,
        states: &[&TensorType],
        scan_inputs: &[&TensorType],
    ) -> Result<Vec<TensorType>> {
        let mut out = Vec::with_capacity(self.states + self.outputs);
        for (i, init) in states.iter().enumerate() {
            let last = output_type(g, i)?;
            ensure!(
                init.dtype == last.dtype,
                "state {i} starts as {} but the body returns {}",
                init.dtype,
                last.dtype
            );
            // States keep one shape across iterations (the spec requires it).
            out.push(if init.shape.is_some() {
                (*init).clone()
            } else {
                last.clone()
            });
        }
        let mut len = None;
        for (i, x) in scan_inputs.iter().enumerate() {
            if let Some(s) = &x.shape {
                len = Some(s[normalize_axis(self.in_axes[i], s.len())?]);
            }
        }
        for j in 0..self.outputs {
            let ty = output_type(g, self.states + j)?;
            out.push(match (&ty.shape, len) {
                (Some(s), Some(l)) => {
                    let mut s = s.clone();
                    s.insert(normalize_axis_inclusive(self.out_axes[j], s.len())?, l);
                    TensorType::new(ty.dtype, s)
                }
                _ => TensorType::unknown_shape(ty.dtype),
            });
        }
        Ok(out)
    }
}

/// Type of `t` with axis `axis` (normalized against its rank) removed.
fn drop_axis(t: &TensorType, axis: i64) -> Result<TensorType> {
    Ok(match &t.shape {
        Some(s) => {
            let mut s = s.clone();
            let a = normalize_axis(axis, s.len())?;
            ensure!(
                a < s.len(),
                "a scanned tensor needs axis {axis}, but it is a scalar"
            );
            s.remove(a);
            TensorType::new(t.dtype, s)
        }
        None => TensorType::unknown_shape(t.dtype),
    })
}

impl Op for Scan {
    fn subgraph_input_types(
        &self,
        node: &Node,
        opset: i64,
        attr: &str,
        inputs: &[Option<TensorType>],
    ) -> Result<Option<Vec<Option<TensorType>>>> {
        if attr != "body" {
            return Ok(None);
        }
        let m = node.attr_int("num_scan_inputs")?.unwrap_or(0).max(0) as usize;
        let first = if opset < 9 { 1 } else { 0 };
        let rest = inputs.get(first..).unwrap_or(&[]);
        let n = rest.len().saturating_sub(m);
        let axes = node.attr_ints("scan_input_axes")?.filter(|_| opset >= 9);
        let mut known = Vec::with_capacity(rest.len());
        for (i, t) in rest.iter().enumerate() {
            // Opset 8 inputs carry a leading batch axis; scan inputs then
            // have their sequence axis at 1.
            let elem = |t: &TensorType| -> Result<TensorType> {
                let t = if opset < 9 {
                    drop_axis(t, 0)?
                } else {
                    t.clone()
                };
                if i < n {
                    return Ok(t);
                }
                let axis = axes.and_then(|a| a.get(i - n).copied()).unwrap_or(0);
                drop_axis(&t, axis)
            };
            known.push(t.as_ref().map(elem).transpose()?);
        }
        Ok(Some(known))
    }

    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let g = body(cx.node, "body")?;
        let spec = ScanSpec::new(cx.node, cx.opset, g)?;
        let first = if cx.opset < 9 { 1 } else { 0 };
        let types: Vec<&TensorType> = (0..spec.states + spec.inputs)
            .map(|i| cx.input(first + i).map(|x| &x.ty))
            .collect::<Result<_>>()?;
        if cx.opset < 9 {
            infer_batched(&spec, g, &types)
        } else {
            spec.infer(g, &types[..spec.states], &types[spec.states..])
        }
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let g = body(cx.node, "body")?;
        let spec = ScanSpec::new(cx.node, cx.opset, g)?;
        if cx.opset < 9 {
            return eval_batched(&spec, cx, g, inputs);
        }
        let states: Vec<Tensor> = (0..spec.states)
            .map(|i| arg(inputs, i).cloned())
            .collect::<Result<_>>()?;
        let scan_inputs: Vec<&Tensor> = (0..spec.inputs)
            .map(|i| arg(inputs, spec.states + i))
            .collect::<Result<_>>()?;
        spec.run(cx, g, states, &scan_inputs)
    }
}

/// Scan-8 output types: every value has a leading batch axis; scan outputs
/// have the (padded) sequence axis at 1.
fn infer_batched(spec: &ScanSpec, g: &Graph, types: &[&TensorType]) -> Result<Vec<TensorType>> {
    let batch = types
        .iter()
        .find_map(|t| t.shape.as_ref().and_then(|s| s.first().copied()));
    let unbatched: Vec<TensorType> = types
        .iter()
        .map(|t| drop_axis(t, 0))
        .collect::<Result<_>>()?;
    let refs: Vec<&TensorType> = unbatched.iter().collect();
    let inner = spec.infer(g, &refs[..spec.states], &refs[spec.states..])?;
    Ok(inner
        .into_iter()
        .map(|t| match (t.shape, batch) {
            (Some(mut s), Some(b)) => {
                s.insert(0, b);
                TensorType::new(t.dtype, s)
            }
            _ => TensorType::unknown_shape(t.dtype),
        })
        .collect())
}

/// Scan-8: runs the scan per batch entry over its `sequence_lens` prefix;
/// scan outputs past a sequence's length are zero.
fn eval_batched(
    spec: &ScanSpec,
    cx: &EvalCx,
    g: &Graph,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let values: Vec<&Tensor> = (0..spec.states + spec.inputs)
        .map(|i| arg(inputs, 1 + i))
        .collect::<Result<_>>()?;
    let Some(batch) = values.first().and_then(|t| t.shape.first().copied()) else {
        bail!("Scan-8 inputs need a leading batch axis")
    };
    for t in &values {
        ensure!(
            t.shape.first() == Some(&batch),
            "all Scan-8 inputs must share the batch size {batch}, got shape {:?}",
            t.shape
        );
    }
    let scan_inputs = &values[spec.states..];
    for t in scan_inputs {
        ensure!(
            t.rank() >= 2,
            "Scan-8 scan inputs need [batch, sequence, ...] shapes, got {:?}",
            t.shape
        );
    }
    let max_len = scan_inputs.first().map_or(0, |t| t.shape[1]);
    let lens = match inputs.first().copied().flatten() {
        Some(l) => {
            let v = l.data.to_i64_vec()?;
            ensure!(
                v.len() == batch,
                "sequence_lens has {} entries for batch size {batch}",
                v.len()
            );
            v.iter()
                .map(|&x| {
                    if x >= 0 && x as usize <= max_len {
                        Ok(x as usize)
                    } else {
                        bail!("sequence length {x} is outside [0, {max_len}]")
                    }
                })
                .collect::<Result<Vec<_>>>()?
        }
        None => vec![max_len; batch],
    };
    let mut per_batch: Vec<Vec<Tensor>> = Vec::with_capacity(batch);
    for (b, &len) in lens.iter().enumerate() {
        let states = values[..spec.states]
            .iter()
            .map(|t| index_axis(t, 0, b))
            .collect::<Result<Vec<_>>>()?;
        let seqs = scan_inputs
            .iter()
            .map(|t| prefix(&index_axis(t, 0, b)?, len))
            .collect::<Result<Vec<_>>>()?;
        let seq_refs: Vec<&Tensor> = seqs.iter().collect();
        let mut outs = spec.run(cx, g, states, &seq_refs)?;
        for o in outs.iter_mut().skip(spec.states) {
            *o = pad_axis0(o, max_len)?;
        }
        per_batch.push(outs);
    }
    let count = spec.states + spec.outputs;
    (0..count)
        .map(|j| {
            let parts: Vec<Tensor> = per_batch.iter().map(|outs| outs[j].clone()).collect();
            if parts.is_empty() {
                bail!("Scan-8 with batch size 0 is not supported")
            }
            stack(&parts, 0)
        })
        .collect()
}

/// The first `len` entries of `t` along axis 0.
fn prefix(t: &Tensor, len: usize) -> Result<Tensor> {
    let inner: usize = t.shape[1..].iter().product();
    let mut shape = t.shape.clone();
    shape[0] = len;
    Tensor::new(shape, t.data.gather(0..len * inner))
}

/// Pads `t` with zeros along axis 0 up to `len` entries.
fn pad_axis0(t: &Tensor, len: usize) -> Result<Tensor> {
    let have = t.shape.first().copied().unwrap_or(0);
    if have >= len {
        return Ok(t.clone());
    }
    let inner: usize = t.shape[1..].iter().product();
    let data = dispatch_all!(&t.data, |v: T| {
        let mut out = v.to_vec();
        out.resize(len * inner, <T as Default>::default());
        T::wrap(out)
    });
    let mut shape = t.shape.clone();
    shape[0] = len;
    Tensor::new(shape, data)
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

//! Scan (opset 8's batched form with `sequence_lens`, and 9+): a body run
//! once per slice of the scanned inputs, carrying state, stacking the
//! per-iteration outputs.

use super::*;

pub(super) struct Scan;

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

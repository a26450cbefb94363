//! FlexAttention (ai.onnx.preview opset 1): scaled dot-product attention
//! over 4-D inputs with grouped KV heads and optional `score_mod` and
//! `prob_mod` subgraphs applied to the (batch, heads, q, kv) scores before
//! the softmax and to the probabilities after it. Scores are computed in the
//! input type, then handled in `softmax_precision` (default float32, or
//! double for double inputs).

use crate::ops::norm::{float_tensor, float_values, rounder};
use crate::registry::Registry;
use crate::{arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, DType, Graph, Node, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add_in("ai.onnx.preview", "FlexAttention", FlexAttention);
}

struct FlexAttention;

#[derive(Clone, Copy)]
struct Dims {
    batch: usize,
    q_heads: usize,
    kv_heads: usize,
    q_len: usize,
    kv_len: usize,
    head_size: usize,
    v_size: usize,
}

impl Dims {
    fn of(q: &[usize], k: &[usize], v: &[usize]) -> Result<Dims> {
        let (&[b, hq, l, e], &[kb, hk, s, ek], &[vb, hv, sv, ev]) = (q, k, v) else {
            bail!("Q, K and V must be 4-D, got {q:?}, {k:?}, {v:?}");
        };
        if kb != b || vb != b || hv != hk || sv != s || ek != e || hk == 0 || hq % hk != 0 {
            bail!("inconsistent Q/K/V shapes {q:?}, {k:?}, {v:?}");
        }
        Ok(Dims {
            batch: b,
            q_heads: hq,
            kv_heads: hk,
            q_len: l,
            kv_len: s,
            head_size: e,
            v_size: ev,
        })
    }

    fn scores_shape(&self) -> Vec<usize> {
        vec![self.batch, self.q_heads, self.q_len, self.kv_len]
    }
}

/// The type scores and probabilities are handled in.
fn compute_dtype(node: &Node, input: DType) -> Result<DType> {
    match node.attr_int("softmax_precision")? {
        Some(code) => match DType::from_onnx_code(code as i32) {
            Some(d) if d.is_float() => Ok(d),
            _ => bail!("softmax_precision {code} is not a float type"),
        },
        None if input == DType::F64 => Ok(DType::F64),
        None => Ok(DType::F32),
    }
}

impl Op for FlexAttention {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let t = cx.input(2)?.ty.dtype;
        if !t.is_float() {
            bail!("FlexAttention needs float inputs, got {t}");
        }
        Ok(vec![match (cx.shape(0)?, cx.shape(1)?, cx.shape(2)?) {
            (Some(q), Some(k), Some(v)) => {
                let d = Dims::of(q, k, v)?;
                TensorType::new(t, vec![d.batch, d.q_heads, d.q_len, d.v_size])
            }
            _ => TensorType::unknown_shape(t),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (q, k, v) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        let d = Dims::of(&q.shape, &k.shape, &v.shape)?;
        let ct = compute_dtype(cx.node, q.dtype())?;
        let (r, rc) = (rounder(q.dtype()), rounder(ct));
        let scale = cx
            .node
            .attr_float("scale")?
            .map_or(1.0 / (d.head_size as f64).sqrt(), |s| s as f64);
        let root = r((scale as f32 as f64).sqrt());
        let qs: Vec<f64> = float_values(q)?.iter().map(|&x| r(x * root)).collect();
        let ks: Vec<f64> = float_values(k)?.iter().map(|&x| r(x * root)).collect();
        let group = d.q_heads / d.kv_heads;
        let (hs, t) = (d.head_size, d.kv_len);
        let mut scores = Vec::with_capacity(d.scores_shape().iter().product());
        for b in 0..d.batch {
            for h in 0..d.q_heads {
                let kv = b * d.kv_heads + h / group;
                for i in 0..d.q_len {
                    let qrow = &qs[((b * d.q_heads + h) * d.q_len + i) * hs..][..hs];
                    for j in 0..t {
                        let krow = &ks[(kv * t + j) * hs..][..hs];
                        scores.push(rc(r(qrow.iter().zip(krow).map(|(a, c)| a * c).sum())));
                    }
                }
            }
        }
        let scores = apply_mod(cx, "score_mod", ct, &d, scores)?;
        let mut probs = scores;
        for row in probs.chunks_exact_mut(t.max(1)) {
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = row.iter().map(|&x| rc((x - m).exp())).collect();
            let sum: f64 = e.iter().sum();
            for (p, x) in row.iter_mut().zip(e) {
                *p = rc(x / sum);
            }
        }
        let probs = apply_mod(cx, "prob_mod", ct, &d, probs)?;
        let vv = float_values(v)?;
        let vs = d.v_size;
        let mut y = Vec::with_capacity(d.batch * d.q_heads * d.q_len * vs);
        for (row_index, prow) in probs
            .chunks_exact(t.max(1))
            .enumerate()
            .take(d.batch * d.q_heads * d.q_len)
        {
            let (b, h) = (
                row_index / (d.q_heads * d.q_len),
                row_index / d.q_len % d.q_heads,
            );
            let kv = b * d.kv_heads + h / group;
            for c in 0..vs {
                y.push(rc((0..t)
                    .map(|j| prow[j] * rc(vv[(kv * t + j) * vs + c]))
                    .sum()));
            }
        }
        Ok(vec![float_tensor(
            v.dtype(),
            vec![d.batch, d.q_heads, d.q_len, vs],
            &y,
        )?])
    }
}

/// Runs the modifier subgraph `name` (if the node has it) on `values`.
fn apply_mod(
    cx: &EvalCx,
    name: &str,
    dtype: DType,
    d: &Dims,
    values: Vec<f64>,
) -> Result<Vec<f64>> {
    let Some(g): Option<&Graph> = cx.node.attr_graph(name)? else {
        return Ok(values);
    };
    let shape = d.scores_shape();
    let input = float_tensor(dtype, shape.clone(), &values)?;
    let out = cx.subgraphs.run(g, vec![input])?;
    match out.as_slice() {
        [t] if t.shape == shape && t.dtype().is_float() => float_values(t),
        _ => bail!("{name} must return one float tensor of shape {shape:?}"),
    }
}

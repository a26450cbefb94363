//! LinearAttention (opset 27): recurrent linear attention over 3-D
//! (batch, seq, heads * size) inputs. A (key_size × value_size) state per
//! batch and KV head is updated token by token with one of four rules:
//! `linear` (S += k vᵀ), `gated` (S is first decayed by exp(decay)),
//! `delta` (v is replaced by beta * (v - Sᵀk)) and `gated_delta` (both).
//! Each query head reads `scale * qᵀS` from its KV head's state. Returns the
//! output and the final state. Computed in f64 (the definition uses float32).

use crate::ops::norm::{float_tensor, float_values};
use crate::registry::Registry;
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, Node, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("LinearAttention", LinearAttention);
}

struct LinearAttention;

const PAST_STATE: usize = 3;
const DECAY: usize = 4;
const BETA: usize = 5;

struct Rule {
    gated: bool,
    delta: bool,
}

fn rule(node: &Node) -> Result<Rule> {
    Ok(match node.attr_string_or("update_rule", "gated_delta")? {
        "linear" => Rule {
            gated: false,
            delta: false,
        },
        "gated" => Rule {
            gated: true,
            delta: false,
        },
        "delta" => Rule {
            gated: false,
            delta: true,
        },
        "gated_delta" => Rule {
            gated: true,
            delta: true,
        },
        other => bail!("unknown update_rule '{other}'"),
    })
}

#[derive(Clone, Copy)]
struct Dims {
    batch: usize,
    seq: usize,
    q_heads: usize,
    kv_heads: usize,
    key_size: usize,
    value_size: usize,
}

impl Dims {
    fn of(node: &Node, q: &[usize], k: &[usize], v: &[usize]) -> Result<Dims> {
        let heads = |name: &str| match node.attr_int(name)? {
            Some(h) if h > 0 => Ok(h as usize),
            _ => bail!("attribute '{name}' is required and must be positive"),
        };
        let (hq, hk) = (heads("q_num_heads")?, heads("kv_num_heads")?);
        if hq % hk != 0 {
            bail!("q_num_heads ({hq}) must be a multiple of kv_num_heads ({hk})");
        }
        let (&[b, t, qw], &[kb, kt, kw], &[vb, vt, vw]) = (q, k, v) else {
            bail!("query, key and value must be 3-D, got {q:?}, {k:?}, {v:?}");
        };
        if kb != b
            || vb != b
            || kt != t
            || vt != t
            || qw % hq != 0
            || kw % hk != 0
            || vw % hk != 0
            || qw / hq != kw / hk
        {
            bail!("inconsistent query/key/value shapes {q:?}, {k:?}, {v:?} for {hq} query and {hk} kv heads");
        }
        Ok(Dims {
            batch: b,
            seq: t,
            q_heads: hq,
            kv_heads: hk,
            key_size: qw / hq,
            value_size: vw / hk,
        })
    }

    fn output_shape(&self) -> Vec<usize> {
        vec![self.batch, self.seq, self.q_heads * self.value_size]
    }

    fn state_shape(&self) -> Vec<usize> {
        vec![self.batch, self.kv_heads, self.key_size, self.value_size]
    }
}

impl Op for LinearAttention {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let t = cx.input(0)?.ty.dtype;
        let s = cx.opt_input(PAST_STATE).map_or(t, |p| p.ty.dtype);
        match (cx.shape(0)?, cx.shape(1)?, cx.shape(2)?) {
            (Some(q), Some(k), Some(v)) => {
                let d = Dims::of(cx.node, q, k, v)?;
                Ok(vec![
                    TensorType::new(t, d.output_shape()),
                    TensorType::new(s, d.state_shape()),
                ])
            }
            _ => Ok(vec![
                TensorType::unknown_shape(t),
                TensorType::unknown_shape(s),
            ]),
        }
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let (q, k, v) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        let d = Dims::of(cx.node, &q.shape, &k.shape, &v.shape)?;
        let rule = rule(cx.node)?;
        let decay = gate_input(
            opt_arg(inputs, DECAY),
            rule.gated,
            "decay",
            &d,
            &[d.kv_heads, d.kv_heads * d.key_size],
        )?;
        let beta = gate_input(
            opt_arg(inputs, BETA),
            rule.delta,
            "beta",
            &d,
            &[d.kv_heads, 1],
        )?;
        let past = opt_arg(inputs, PAST_STATE);
        let mut state = match past {
            Some(p) if p.shape == d.state_shape() => float_values(p)?,
            Some(p) => bail!(
                "past_state shape {:?} must be {:?}",
                p.shape,
                d.state_shape()
            ),
            None => vec![0.0; d.state_shape().iter().product()],
        };
        let scale = match cx.node.attr_float_or("scale", 0.0)? {
            s if s != 0.0 => s as f64,
            _ => 1.0 / (d.key_size as f64).sqrt(),
        };
        let io = Io {
            q: float_values(q)?,
            k: float_values(k)?,
            v: float_values(v)?,
            decay,
            beta,
            scale,
        };
        let out = run(&d, &io, &mut state);
        let state_dtype = past.map_or(q.dtype(), |p| p.dtype());
        Ok(vec![
            float_tensor(q.dtype(), d.output_shape(), &out)?,
            float_tensor(state_dtype, d.state_shape(), &state)?,
        ])
    }
}

/// A decay or beta input: required by its rule, forbidden otherwise, with a
/// last dim from `widths`. Returns (values, last dim).
fn gate_input(
    t: Option<&Tensor>,
    needed: bool,
    name: &str,
    d: &Dims,
    widths: &[usize],
) -> Result<Option<(Vec<f64>, usize)>> {
    match (t, needed) {
        (None, false) => Ok(None),
        (None, true) => bail!("this update_rule requires the {name} input"),
        (Some(_), false) => bail!("this update_rule does not take the {name} input"),
        (Some(t), true) => match *t.shape.as_slice() {
            [b, s, w] if b == d.batch && s == d.seq && widths.contains(&w) => {
                Ok(Some((float_values(t)?, w)))
            }
            _ => bail!(
                "{name} of shape {:?} must be (batch, seq, one of {widths:?})",
                t.shape
            ),
        },
    }
}

struct Io {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    decay: Option<(Vec<f64>, usize)>,
    beta: Option<(Vec<f64>, usize)>,
    scale: f64,
}

/// Runs the recurrence, updating `state` (batch, kv_heads, key, value) in
/// place; returns the output (batch, seq, q_heads * value).
fn run(d: &Dims, io: &Io, state: &mut [f64]) -> Vec<f64> {
    let (dk, dv) = (d.key_size, d.value_size);
    let group = d.q_heads / d.kv_heads;
    let mut out = vec![0.0; d.batch * d.seq * d.q_heads * dv];
    let mut v_t = vec![0.0; dv];
    for b in 0..d.batch {
        for g in 0..d.kv_heads {
            let s = &mut state[(b * d.kv_heads + g) * dk * dv..][..dk * dv];
            for t in 0..d.seq {
                let token = b * d.seq + t;
                let k_t = &io.k[(token * d.kv_heads + g) * dk..][..dk];
                v_t.copy_from_slice(&io.v[(token * d.kv_heads + g) * dv..][..dv]);
                if let Some((decay, w)) = &io.decay {
                    for (row, cells) in s.chunks_exact_mut(dv).enumerate() {
                        let gate = if *w == d.kv_heads {
                            decay[token * w + g]
                        } else {
                            decay[token * w + g * dk + row]
                        };
                        cells.iter_mut().for_each(|c| *c *= gate.exp());
                    }
                }
                if let Some((beta, w)) = &io.beta {
                    let bt = beta[token * w + if *w == 1 { 0 } else { g }];
                    for (m, vm) in v_t.iter_mut().enumerate() {
                        let retrieved: f64 = (0..dk).map(|i| s[i * dv + m] * k_t[i]).sum();
                        *vm = bt * (*vm - retrieved);
                    }
                }
                for (i, &ki) in k_t.iter().enumerate() {
                    for (c, &vm) in s[i * dv..(i + 1) * dv].iter_mut().zip(&v_t) {
                        *c += ki * vm;
                    }
                }
                for h in g * group..(g + 1) * group {
                    let q_t = &io.q[(token * d.q_heads + h) * dk..][..dk];
                    let o = &mut out[(token * d.q_heads + h) * dv..][..dv];
                    for (m, om) in o.iter_mut().enumerate() {
                        *om = io.scale * (0..dk).map(|i| q_t[i] * s[i * dv + m]).sum::<f64>();
                    }
                }
            }
        }
    }
    out
}

//! Attention (opsets 23-25): scaled dot-product attention over 4-D
//! (batch, heads, seq, head_size) or 3-D (batch, seq, heads * head_size)
//! Q/K/V, with grouped KV heads, an additive or boolean mask (padded with
//! "masked" up to the key length and broadcast to (batch, heads, q, kv)),
//! offset-aware causal masking, sliding windows (opset 25), `nonpad_kv_seqlen`
//! padding (opset 24), softcap, a KV cache (past -> present key/value) and the
//! optional `qk_matmul_output` selected by `qk_matmul_output_mode`.
//! A query row whose every key is masked yields zeros, not NaN.
//! Arithmetic is in f64, rounded to the element type after each stage of
//! the operator's definition (scaling, QK, softcap, bias, softmax, PV) so
//! 16-bit types match the stage-by-stage definition.

use crate::ops::norm::softmax::{softmax_line, Stages};
use crate::ops::norm::{float_tensor, float_values, rounder};
use crate::registry::Registry;
use crate::util::{ints, strides};
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, DType, Node, Result, Tensor, TensorType};

pub fn register(r: &mut Registry) {
    r.add("Attention", Attention);
}

struct Attention;

/// Input positions.
const MASK: usize = 3;
const PAST_KEY: usize = 4;
const PAST_VALUE: usize = 5;
const NONPAD: usize = 6;

/// The node's attributes.
struct Config {
    causal: bool,
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    mode: i64,
    scale: Option<f64>,
    softcap: f64,
    softmax_dtype: Option<DType>,
    left_window: i64,
    right_window: i64,
}

impl Config {
    fn of(node: &Node) -> Result<Config> {
        let heads = |name: &str| -> Result<Option<usize>> {
            match node.attr_int(name)? {
                None => Ok(None),
                Some(h) if h > 0 => Ok(Some(h as usize)),
                Some(h) => bail!("{name} must be positive, got {h}"),
            }
        };
        let mode = node.attr_int_or("qk_matmul_output_mode", 0)?;
        if !(0..=3).contains(&mode) {
            bail!("qk_matmul_output_mode must be 0..3, got {mode}");
        }
        let softmax_dtype = match node.attr_int("softmax_precision")? {
            None => None,
            Some(code) => match DType::from_onnx_code(code as i32) {
                Some(d) if d.is_float() => Some(d),
                _ => bail!("softmax_precision {code} is not a float type"),
            },
        };
        let window = |name: &str| -> Result<i64> {
            let w = node.attr_int_or(name, -1)?;
            if w < -1 {
                bail!("{name} must be -1 or nonnegative, got {w}");
            }
            Ok(w)
        };
        Ok(Config {
            causal: node.attr_int_or("is_causal", 0)? != 0,
            q_heads: heads("q_num_heads")?,
            kv_heads: heads("kv_num_heads")?,
            mode,
            scale: node.attr_float("scale")?.map(|s| s as f64),
            softcap: node.attr_float_or("softcap", 0.0)? as f64,
            softmax_dtype,
            left_window: window("left_window_size")?,
            right_window: window("right_window_size")?,
        })
    }
}

/// Sizes of one Attention computation.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    q_heads: usize,
    kv_heads: usize,
    q_len: usize,
    kv_len: usize,
    past_len: usize,
    head_size: usize,
    v_size: usize,
    three_d: bool,
}

impl Dims {
    fn total(&self) -> usize {
        self.past_len + self.kv_len
    }

    fn of(
        cfg: &Config,
        q: &[usize],
        k: &[usize],
        v: &[usize],
        past: Option<(&[usize], &[usize])>,
    ) -> Result<Dims> {
        if q.len() != k.len() || q.len() != v.len() {
            bail!("Q, K and V must have the same rank, got {q:?}, {k:?}, {v:?}");
        }
        let d = match (q, k, v) {
            (&[b, hq, sq, dq], &[bk, hk, sk, dk], &[bv, hv, sv, dv]) => {
                if bk != b || bv != b || hv != hk || sv != sk || dk != dq {
                    bail!("inconsistent Q/K/V shapes {q:?}, {k:?}, {v:?}");
                }
                Dims {
                    batch: b,
                    q_heads: hq,
                    kv_heads: hk,
                    q_len: sq,
                    kv_len: sk,
                    past_len: 0,
                    head_size: dq,
                    v_size: dv,
                    three_d: false,
                }
            }
            (&[b, sq, hidden_q], &[bk, sk, hidden_k], &[bv, sv, hidden_v]) => {
                let (Some(hq), Some(hk)) = (cfg.q_heads, cfg.kv_heads) else {
                    bail!("3-D inputs need the q_num_heads and kv_num_heads attributes");
                };
                if hidden_q % hq != 0 || hidden_k % hk != 0 || hidden_v % hk != 0 {
                    bail!("hidden sizes {hidden_q}, {hidden_k}, {hidden_v} are not divisible by the head counts {hq}, {hk}");
                }
                if bk != b || bv != b || sv != sk || hidden_k / hk != hidden_q / hq {
                    bail!("inconsistent Q/K/V shapes {q:?}, {k:?}, {v:?}");
                }
                Dims {
                    batch: b,
                    q_heads: hq,
                    kv_heads: hk,
                    q_len: sq,
                    kv_len: sk,
                    past_len: 0,
                    head_size: hidden_q / hq,
                    v_size: hidden_v / hk,
                    three_d: true,
                }
            }
            _ => bail!("Q, K and V must be 3-D or 4-D, got {q:?}, {k:?}, {v:?}"),
        };
        if d.kv_heads == 0 || d.q_heads % d.kv_heads != 0 {
            bail!(
                "q heads ({}) must be a multiple of kv heads ({})",
                d.q_heads,
                d.kv_heads
            );
        }
        let Some((pk, pv)) = past else { return Ok(d) };
        if pk.len() != 4 || pv.len() != 4 || pk[2] != pv[2] {
            bail!(
                "past_key and past_value must be 4-D with the same length, got {pk:?} and {pv:?}"
            );
        }
        if pk != [d.batch, d.kv_heads, pk[2], d.head_size]
            || pv != [d.batch, d.kv_heads, pv[2], d.v_size]
        {
            bail!("past_key {pk:?} / past_value {pv:?} do not match K and V");
        }
        Ok(Dims {
            past_len: pk[2],
            ..d
        })
    }

    fn y_shape(&self) -> Vec<usize> {
        if self.three_d {
            vec![self.batch, self.q_len, self.q_heads * self.v_size]
        } else {
            vec![self.batch, self.q_heads, self.q_len, self.v_size]
        }
    }

    /// (batch, heads, total, size) of the present key or value.
    fn present_shape(&self, size: usize) -> Vec<usize> {
        vec![self.batch, self.kv_heads, self.total(), size]
    }

    fn scores_shape(&self) -> [usize; 4] {
        [self.batch, self.q_heads, self.q_len, self.total()]
    }
}

/// The past key/value shapes, which must come together.
fn past_shapes<'a>(
    pk: Option<&'a [usize]>,
    pv: Option<&'a [usize]>,
) -> Result<Option<(&'a [usize], &'a [usize])>> {
    match (pk, pv) {
        (None, None) => Ok(None),
        (Some(k), Some(v)) => Ok(Some((k, v))),
        _ => bail!("past_key and past_value must be given together"),
    }
}

impl Op for Attention {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let cfg = Config::of(cx.node)?;
        let (t1, t2) = (cx.input(0)?.ty.dtype, cx.input(2)?.ty.dtype);
        if !t1.is_float() || !t2.is_float() {
            bail!("Q/K/V must be float tensors");
        }
        let shape = |i: usize| cx.opt_input(i).map(|x| x.ty.shape.as_deref());
        let unknown = || {
            vec![
                TensorType::unknown_shape(t1),
                TensorType::unknown_shape(t1),
                TensorType::unknown_shape(t2),
                TensorType::unknown_shape(t1),
            ]
        };
        let (Some(Some(q)), Some(Some(k)), Some(Some(v))) = (shape(0), shape(1), shape(2)) else {
            return Ok(unknown());
        };
        let past = match (shape(PAST_KEY), shape(PAST_VALUE)) {
            (Some(None), _) | (_, Some(None)) => return Ok(unknown()),
            (pk, pv) => past_shapes(pk.flatten(), pv.flatten())?,
        };
        let d = Dims::of(&cfg, q, k, v, past)?;
        Ok(vec![
            TensorType::new(t1, d.y_shape()),
            TensorType::new(t1, d.present_shape(d.head_size)),
            TensorType::new(t2, d.present_shape(d.v_size)),
            TensorType::new(t1, d.scores_shape().to_vec()),
        ])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let cfg = Config::of(cx.node)?;
        let (q, k, v) = (arg(inputs, 0)?, arg(inputs, 1)?, arg(inputs, 2)?);
        let (pk, pv) = (opt_arg(inputs, PAST_KEY), opt_arg(inputs, PAST_VALUE));
        let d = Dims::of(
            &cfg,
            &q.shape,
            &k.shape,
            &v.shape,
            past_shapes(pk.map(|t| &t.shape[..]), pv.map(|t| &t.shape[..]))?,
        )?;
        let present_k = present(pk, k, &d, d.head_size)?;
        let present_v = present(pv, v, &d, d.v_size)?;
        let nonpad = opt_arg(inputs, NONPAD)
            .map(|t| nonpad_lengths(t, &d))
            .transpose()?;
        let bias = attention_bias(&cfg, &d, opt_arg(inputs, MASK), nonpad.as_deref())?;
        let q_heads = to_head_major(&float_values(q)?, &d, d.q_heads, d.q_len, d.head_size);
        let (y, scores) = attend(&cfg, &d, q.dtype(), &q_heads, &present_k, &present_v, &bias);
        Ok(vec![
            float_tensor(q.dtype(), d.y_shape(), &y)?,
            float_tensor(k.dtype(), d.present_shape(d.head_size), &present_k)?,
            float_tensor(v.dtype(), d.present_shape(d.v_size), &present_v)?,
            float_tensor(q.dtype(), d.scores_shape().to_vec(), &scores)?,
        ])
    }
}

/// Reorders 3-D (batch, seq, heads * size) data to (batch, heads, seq, size);
/// 4-D data already has that layout.
fn to_head_major(v: &[f64], d: &Dims, heads: usize, seq: usize, size: usize) -> Vec<f64> {
    if !d.three_d {
        return v.to_vec();
    }
    let mut out = Vec::with_capacity(v.len());
    for b in 0..d.batch {
        for h in 0..heads {
            for s in 0..seq {
                let at = ((b * seq + s) * heads + h) * size;
                out.extend_from_slice(&v[at..at + size]);
            }
        }
    }
    out
}

/// The past cache followed by the new keys (or values) along the sequence:
/// (batch, kv_heads, total, size).
fn present(past: Option<&Tensor>, new: &Tensor, d: &Dims, size: usize) -> Result<Vec<f64>> {
    let new = to_head_major(&float_values(new)?, d, d.kv_heads, d.kv_len, size);
    let Some(past) = past else { return Ok(new) };
    let past = float_values(past)?;
    let (p, n) = (d.past_len * size, d.kv_len * size);
    let mut out = Vec::with_capacity(past.len() + new.len());
    for bh in 0..d.batch * d.kv_heads {
        out.extend_from_slice(&past[bh * p..(bh + 1) * p]);
        out.extend_from_slice(&new[bh * n..(bh + 1) * n]);
    }
    Ok(out)
}

fn nonpad_lengths(t: &Tensor, d: &Dims) -> Result<Vec<i64>> {
    let v = ints(t)?;
    if v.len() != d.batch {
        bail!(
            "nonpad_kv_seqlen must have one value per batch ({}), got {}",
            d.batch,
            v.len()
        );
    }
    if let Some(&bad) = v.iter().find(|&&n| n < 0 || n as usize > d.total()) {
        bail!(
            "nonpad_kv_seqlen value {bad} is out of range 0..={}",
            d.total()
        );
    }
    Ok(v)
}

/// The additive bias over (batch, q_heads, q, kv): the mask (boolean masks
/// give 0 / -inf; keys past the mask's length are masked), plus -inf where
/// the causal frontier, the sliding window or the non-padded length exclude
/// a key.
fn attention_bias(
    cfg: &Config,
    d: &Dims,
    mask: Option<&Tensor>,
    nonpad: Option<&[i64]>,
) -> Result<Vec<f64>> {
    let shape = d.scores_shape();
    let mut bias = match mask {
        Some(m) => mask_bias(m, shape)?,
        None => vec![0.0; shape.iter().product()],
    };
    // Keys before the query block: the internal cache, or per batch the
    // external cache's valid length minus the query length.
    let offset = |b: usize| -> i64 {
        match nonpad {
            Some(n) if d.past_len == 0 => n[b] - d.q_len as i64,
            _ => d.past_len as i64,
        }
    };
    let (left, right) = (cfg.left_window, cfg.right_window);
    let mut at = 0;
    for b in 0..d.batch {
        let off = offset(b);
        for _h in 0..d.q_heads {
            for i in 0..d.q_len {
                for j in 0..d.total() {
                    let diff = i as i64 + off - j as i64;
                    let allowed = (!cfg.causal || diff >= 0)
                        && (left < 0 || diff <= left)
                        && (right < 0 || -diff <= right)
                        && nonpad.is_none_or(|n| (j as i64) < n[b]);
                    if !allowed {
                        bias[at] = f64::NEG_INFINITY;
                    }
                    at += 1;
                }
            }
        }
    }
    Ok(bias)
}

/// The mask as an additive bias broadcast to `shape` (right-aligned); its
/// last dim may be shorter than the key length, the rest counts as masked.
fn mask_bias(m: &Tensor, shape: [usize; 4]) -> Result<Vec<f64>> {
    let r = m.rank();
    let kv = shape[3];
    if r == 0 || r > 4 || m.shape[r - 1] > kv {
        bail!(
            "attn_mask of shape {:?} does not fit the scores shape {shape:?}",
            m.shape
        );
    }
    let is_bool = m.dtype() == DType::Bool;
    let vals = m.data.to_f64_vec()?;
    let st = strides(&m.shape);
    // Stride of each of the 4 score dims in the mask (0 = broadcast).
    let mut step = [0usize; 4];
    for (k, s) in step.iter_mut().enumerate().take(3).skip(4 - r) {
        let md = m.shape[k + r - 4];
        if md != 1 && md != shape[k] {
            bail!(
                "attn_mask of shape {:?} does not broadcast to the scores shape {shape:?}",
                m.shape
            );
        }
        *s = if md == 1 { 0 } else { st[k + r - 4] };
    }
    let mask_len = m.shape[r - 1];
    let mut out = Vec::with_capacity(shape.iter().product());
    for b in 0..shape[0] {
        for h in 0..shape[1] {
            for i in 0..shape[2] {
                let base = b * step[0] + h * step[1] + i * step[2];
                for j in 0..kv {
                    out.push(if j >= mask_len {
                        f64::NEG_INFINITY
                    } else {
                        let x = vals[base + j];
                        if is_bool {
                            if x != 0.0 {
                                0.0
                            } else {
                                f64::NEG_INFINITY
                            }
                        } else {
                            x
                        }
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Runs the attention: returns Y (in the output layout) and the selected
/// qk_matmul_output, both in f64.
fn attend(
    cfg: &Config,
    d: &Dims,
    dtype: DType,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    bias: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let r = rounder(dtype);
    let softmax_dtype = cfg.softmax_dtype.unwrap_or(dtype);
    // Q and K are each scaled by sqrt(scale) (rounded to the element type).
    let scale = cfg.scale.unwrap_or(1.0 / (d.head_size as f64).sqrt());
    let root = r(scale.sqrt());
    let qs: Vec<f64> = q.iter().map(|&x| r(x * root)).collect();
    let ks: Vec<f64> = k.iter().map(|&x| r(x * root)).collect();
    let (t, hs, vs) = (d.total(), d.head_size, d.v_size);
    let group = d.q_heads / d.kv_heads;
    let mut scores = vec![0.0; d.batch * d.q_heads * d.q_len * t];
    let mut y = vec![0.0; d.batch * d.q_len * d.q_heads * vs];
    let mut logits = vec![0.0; t];
    let mut probs = vec![0.0; t];
    for b in 0..d.batch {
        for h in 0..d.q_heads {
            let kv_head = b * d.kv_heads + h / group;
            let keys = &ks[kv_head * t * hs..][..t * hs];
            let values = &v[kv_head * t * vs..][..t * vs];
            for i in 0..d.q_len {
                let row = (b * d.q_heads + h) * d.q_len + i;
                let brow = &bias[row * t..][..t];
                let debug = &mut scores[row * t..][..t];
                score_row(
                    cfg,
                    r,
                    &qs[row * hs..][..hs],
                    keys,
                    brow,
                    &mut logits,
                    debug,
                );
                let masked = brow.iter().all(|&x| x == f64::NEG_INFINITY);
                // A fully masked row attends nothing: zeros, not NaN (also
                // when every logit is -inf, whose softmax would be 0/0).
                probs.copy_from_slice(&logits);
                if masked || logits.iter().all(|&x| x == f64::NEG_INFINITY) {
                    probs.fill(0.0);
                } else {
                    softmax_line(&mut probs, Stages::of(softmax_dtype));
                }
                probs.iter_mut().for_each(|p| *p = r(*p));
                if cfg.mode == 3 {
                    debug.copy_from_slice(&probs);
                }
                let out_at = if d.three_d {
                    ((b * d.q_len + i) * d.q_heads + h) * vs
                } else {
                    row * vs
                };
                for (c, out) in y[out_at..out_at + vs].iter_mut().enumerate() {
                    *out = r(probs
                        .iter()
                        .enumerate()
                        .map(|(j, p)| p * values[j * vs + c])
                        .sum());
                }
            }
        }
    }
    (y, scores)
}

/// The logits of one query row against every key (QK, softcap, + bias),
/// and in `debug` the stage `qk_matmul_output_mode` 0-2 asks for.
fn score_row(
    cfg: &Config,
    r: fn(f64) -> f64,
    query: &[f64],
    keys: &[f64],
    bias: &[f64],
    logits: &mut [f64],
    debug: &mut [f64],
) {
    for (j, (logit, dbg)) in logits.iter_mut().zip(debug.iter_mut()).enumerate() {
        let key = &keys[j * query.len()..][..query.len()];
        let raw = r(query.iter().zip(key).map(|(a, b)| a * b).sum());
        let capped = if cfg.softcap > 0.0 {
            r(cfg.softcap * r(r(raw / cfg.softcap).tanh()))
        } else {
            raw
        };
        *logit = r(capped + bias[j]);
        *dbg = match cfg.mode {
            0 => raw,
            1 => capped,
            _ => *logit,
        };
    }
}

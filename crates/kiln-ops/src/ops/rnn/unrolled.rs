//! RNN, GRU and LSTM unrolled over their (static) time steps into
//! primitive ops, so the backends generate them (matrix products with
//! their gates fused after them) instead of leaving a whole recurrent
//! layer to the interpreter. Per direction:
//!
//! 1. the input products of every step at once: `X [seq·batch, input]`
//!    times `Wᵀ`, plus the biases that do not depend on the state;
//! 2. per step, in the direction's order: that step's rows, plus the state
//!    times `Rᵀ` (and its bias where the gate needs it apart), cut into the
//!    gates, which update the state as [`super::Cell::step`] does;
//! 3. `Y` the steps' states stacked in time order (directions side by
//!    side), `Y_h` (and `Y_c`) the last ones.
//!
//! Needs: static shapes, the default activations (the kind's Sigmoid and
//! Tanh), no clip, no sequence_lens, no input_forget. Declines (`None`:
//! the interpreter's kernel runs the node) otherwise. Guarantees: the
//! interpreter's results up to rounding (it computes in f64).

use super::{Act, Config, Kind};
use crate::ops::compose::{self, reshape};
use crate::{Builder, InferCx};
use kiln_ir::{Attr, DType, Result, Tensor, ValueId};

/// The decomposition of recurrent node `cx.node` of `kind` over
/// `inputs`, or `None` where it declines (see the module doc).
pub(super) fn decompose(
    cx: &InferCx,
    b: &mut Builder,
    kind: Kind,
    inputs: &[Option<ValueId>],
) -> Result<Option<Vec<Option<ValueId>>>> {
    let cfg = Config::parse(cx.node, kind)?;
    let input = |i: usize| inputs.get(i).copied().flatten();
    let (Some(x), Some(w), Some(r)) = (input(0), input(1), input(2)) else {
        return Ok(None);
    };
    let defaults = cfg.acts.iter().all(|acts| defaults(kind, acts));
    let unsupported = !defaults || cfg.clip.is_some() || cfg.input_forget || input(4).is_some();
    let (Ok(xs), Ok(ws), Ok(rs)) = (b.shape(x), b.shape(w), b.shape(r)) else {
        return Ok(None);
    };
    if unsupported || !b.ty(x).dtype.is_float() || !weights_fit(&cfg, &ws, &rs) {
        return Ok(None);
    }
    let (seq, batch, _) = cfg.seq_batch(&xs)?;
    let hidden = rs[2];
    let x = match cfg.batch_first {
        true => b.op("Transpose", &[x], &[("perm", Attr::Ints(vec![1, 0, 2]))])?,
        false => x,
    };
    let layer = Layer {
        cfg: &cfg,
        seq,
        batch,
        hidden,
        dtype: b.ty(x).dtype,
    };
    let mut ys = Vec::new();
    let mut hs = Vec::new();
    let mut cs = Vec::new();
    for d in 0..cfg.dirs {
        let weights = Weights::of(b, &layer, d, [w, r], input(3), input(7))?;
        let h0 = initial(b, &layer, d, input(5))?;
        let c0 = initial(b, &layer, d, input(6))?;
        let (y, h, c) = layer.direction(b, x, d, &weights, h0, c0)?;
        ys.push(y);
        hs.push(h);
        cs.push(c);
    }
    let outputs = layer.outputs(b, ys, hs, cs)?;
    Ok(Some(outputs))
}

/// Whether W and R have the shapes `[dirs, G·H, input]` and
/// `[dirs, G·H, H]` of the node's kind and hidden size (a malformed node
/// is left to the interpreter's kernel, which names what is wrong).
fn weights_fit(cfg: &Config, ws: &[usize], rs: &[usize]) -> bool {
    let [d, gh, h] = rs[..] else {
        return false;
    };
    let hidden_ok = cfg.hidden.is_none_or(|n| n == h);
    ws.len() == 3 && ws[..2] == [d, gh] && d == cfg.dirs && gh == cfg.kind.gates() * h && hidden_ok
}

/// Whether `acts` are `kind`'s default activations.
fn defaults(kind: Kind, acts: &[Act]) -> bool {
    match kind {
        Kind::Rnn => matches!(acts, [Act::Tanh]),
        Kind::Gru => matches!(acts, [Act::Sigmoid, Act::Tanh]),
        Kind::Lstm => matches!(acts, [Act::Sigmoid, Act::Tanh, Act::Tanh]),
    }
}

/// One direction's weights, transposed for products on the right.
struct Weights {
    /// `Wᵀ [input, G·H]`; `Rᵀ` restricted to the columns every step's
    /// state product feeds (`[H, G·H]`, or a GRU's `z` and `r` columns
    /// `[H, 2H]` where the reset gate multiplies the state first), and
    /// that GRU's candidate columns `[H, H]` apart.
    w: ValueId,
    r: ValueId,
    r_cand: Option<ValueId>,
    /// The bias added to the input products (`[G·H]`), and the state's
    /// candidate bias kept apart (GRU with linear_before_reset).
    x_bias: Option<ValueId>,
    h_bias: Option<ValueId>,
    /// LSTM peepholes (input, output, forget), each `[H]`.
    peepholes: Option<[ValueId; 3]>,
}

impl Weights {
    fn of(
        b: &mut Builder,
        l: &Layer,
        d: usize,
        [w, r]: [ValueId; 2],
        bias: Option<ValueId>,
        peep: Option<ValueId>,
    ) -> Result<Weights> {
        let gh = l.cfg.kind.gates() * l.hidden;
        let w = transposed_slice(b, w, d)?;
        let mut r = transposed_slice(b, r, d)?;
        let mut r_cand = None;
        if l.cfg.kind == Kind::Gru && !l.cfg.linear_before_reset {
            let n = l.hidden;
            r_cand = Some(slice_cols(b, r, 2 * n, 3 * n)?);
            r = slice_cols(b, r, 0, 2 * n)?;
        }
        let (x_bias, h_bias) = match bias {
            None => (None, None),
            Some(bias) => {
                let wb = slice(b, bias, &[d, 0], &[d + 1, gh])?;
                let rb = slice(b, bias, &[d, gh], &[d + 1, 2 * gh])?;
                let (wb, rb) = (reshape(b, wb, &[gh])?, reshape(b, rb, &[gh])?);
                l.split_bias(b, wb, rb)?
            }
        };
        let peepholes = match peep {
            None => None,
            Some(p) => {
                let n = l.hidden;
                let mut gate = |k: usize| -> Result<ValueId> {
                    let v = slice(b, p, &[d, k * n], &[d + 1, (k + 1) * n])?;
                    reshape(b, v, &[n])
                };
                Some([gate(0)?, gate(1)?, gate(2)?])
            }
        };
        Ok(Weights {
            w,
            r,
            r_cand,
            x_bias,
            h_bias,
            peepholes,
        })
    }
}

/// The node's sizes and attributes.
struct Layer<'a> {
    cfg: &'a Config,
    seq: usize,
    batch: usize,
    hidden: usize,
    dtype: DType,
}

impl Layer<'_> {
    /// The input-side bias (`Wb + Rb`, but for the GRU candidate's `Rb`
    /// under linear_before_reset) and the state-side bias kept apart.
    fn split_bias(
        &self,
        b: &mut Builder,
        wb: ValueId,
        rb: ValueId,
    ) -> Result<(Option<ValueId>, Option<ValueId>)> {
        if !(self.cfg.kind == Kind::Gru && self.cfg.linear_before_reset) {
            return Ok((Some(b.op("Add", &[wb, rb], &[])?), None));
        }
        let n = self.hidden;
        let zr = slice(b, rb, &[0], &[2 * n])?;
        let zeros = b.constant(Tensor::zeros(self.dtype, vec![n]));
        let rb_zr = b.op("Concat", &[zr, zeros], &[("axis", Attr::Int(0))])?;
        let x_bias = b.op("Add", &[wb, rb_zr], &[])?;
        Ok((Some(x_bias), Some(slice(b, rb, &[2 * n], &[3 * n])?)))
    }

    /// One direction over every step: its `Y` slice `[seq, 1, batch, H]`
    /// and its last `h` and `c` (`[1, batch, H]`).
    fn direction(
        &self,
        b: &mut Builder,
        x: ValueId,
        d: usize,
        wt: &Weights,
        mut h: ValueId,
        mut c: ValueId,
    ) -> Result<(ValueId, ValueId, ValueId)> {
        let gh = self.cfg.kind.gates() * self.hidden;
        let features = b.shape(x)?[2];
        let xs = reshape(b, x, &[self.seq * self.batch, features])?;
        let mut xw = b.op("MatMul", &[xs, wt.w], &[])?;
        if let Some(bias) = wt.x_bias {
            xw = b.op("Add", &[xw, bias], &[])?;
        }
        let xw = reshape(b, xw, &[self.seq, self.batch, gh])?;
        let mut states = vec![None; self.seq];
        let steps: Vec<usize> = match self.cfg.reverse[d] {
            true => (0..self.seq).rev().collect(),
            false => (0..self.seq).collect(),
        };
        for t in steps {
            let rows = slice(b, xw, &[t], &[t + 1])?;
            let rows = reshape(b, rows, &[self.batch, gh])?;
            (h, c) = self.step(b, rows, wt, h, c)?;
            states[t] = Some(reshape(b, h, &[1, 1, self.batch, self.hidden])?);
        }
        let states: Vec<ValueId> = states.into_iter().flatten().collect();
        let y = b.op("Concat", &states, &[("axis", Attr::Int(0))])?;
        let state = [1, self.batch, self.hidden];
        Ok((y, reshape(b, h, &state)?, reshape(b, c, &state)?))
    }

    /// One step: the gates from the step's input rows and the state `h`,
    /// then the new `h` and `c` (`[batch, H]`; `c` unchanged but for LSTM).
    fn step(
        &self,
        b: &mut Builder,
        rows: ValueId,
        wt: &Weights,
        h: ValueId,
        c: ValueId,
    ) -> Result<(ValueId, ValueId)> {
        let n = self.hidden;
        let hr = b.op("MatMul", &[h, wt.r], &[])?;
        let gate = |b: &mut Builder, v: ValueId, k: usize| slice_cols(b, v, k * n, (k + 1) * n);
        match self.cfg.kind {
            Kind::Rnn => {
                let pre = b.op("Add", &[rows, hr], &[])?;
                Ok((b.op("Tanh", &[pre], &[])?, c))
            }
            Kind::Lstm => {
                let pre = b.op("Add", &[rows, hr], &[])?;
                let [i, o, f, g] = [0, 1, 2, 3].map(|k| gate(b, pre, k));
                let peep = |b: &mut Builder, v: Result<ValueId>, k: usize, s: ValueId| {
                    let v = v?;
                    match wt.peepholes {
                        Some(p) => {
                            let ps = b.op("Mul", &[p[k], s], &[])?;
                            b.op("Add", &[v, ps], &[])
                        }
                        None => Ok(v),
                    }
                };
                let i = peep(b, i, 0, c)?;
                let i = b.op("Sigmoid", &[i], &[])?;
                let f = peep(b, f, 2, c)?;
                let f = b.op("Sigmoid", &[f], &[])?;
                let g = b.op("Tanh", &[g?], &[])?;
                let fc = b.op("Mul", &[f, c], &[])?;
                let ig = b.op("Mul", &[i, g], &[])?;
                let c_new = b.op("Add", &[fc, ig], &[])?;
                let o = peep(b, o, 1, c_new)?;
                let o = b.op("Sigmoid", &[o], &[])?;
                let tc = b.op("Tanh", &[c_new], &[])?;
                Ok((b.op("Mul", &[o, tc], &[])?, c_new))
            }
            Kind::Gru => self.gru_step(b, rows, hr, wt, h).map(|h| (h, c)),
        }
    }

    /// A GRU step: `z`, `r` from the summed products, the candidate with
    /// the reset gate applied before (default) or after (linear before
    /// reset) the state's product.
    fn gru_step(
        &self,
        b: &mut Builder,
        rows: ValueId,
        hr: ValueId,
        wt: &Weights,
        h: ValueId,
    ) -> Result<ValueId> {
        let n = self.hidden;
        let zr_x = slice_cols(b, rows, 0, 2 * n)?;
        let zr_h = match wt.r_cand {
            Some(_) => hr,
            None => slice_cols(b, hr, 0, 2 * n)?,
        };
        let zr = b.op("Add", &[zr_x, zr_h], &[])?;
        let zr = b.op("Sigmoid", &[zr], &[])?;
        let z = slice_cols(b, zr, 0, n)?;
        let r = slice_cols(b, zr, n, 2 * n)?;
        let x_cand = slice_cols(b, rows, 2 * n, 3 * n)?;
        let h_cand = match wt.r_cand {
            Some(r_cand) => {
                let rh = b.op("Mul", &[r, h], &[])?;
                b.op("MatMul", &[rh, r_cand], &[])?
            }
            None => {
                let mut hc = slice_cols(b, hr, 2 * n, 3 * n)?;
                if let Some(bias) = wt.h_bias {
                    hc = b.op("Add", &[hc, bias], &[])?;
                }
                b.op("Mul", &[r, hc], &[])?
            }
        };
        let cand = b.op("Add", &[x_cand, h_cand], &[])?;
        let cand = b.op("Tanh", &[cand], &[])?;
        // h' = (1 - z) ⊙ cand + z ⊙ h = cand + z ⊙ (h - cand)
        let diff = b.op("Sub", &[h, cand], &[])?;
        let zd = b.op("Mul", &[z, diff], &[])?;
        b.op("Add", &[cand, zd], &[])
    }

    /// `Y`, `Y_h` (and LSTM's `Y_c`) from each direction's pieces, in the
    /// node's layout.
    fn outputs(
        &self,
        b: &mut Builder,
        ys: Vec<ValueId>,
        hs: Vec<ValueId>,
        cs: Vec<ValueId>,
    ) -> Result<Vec<Option<ValueId>>> {
        let concat = |b: &mut Builder, v: &[ValueId], axis: i64| match v {
            [one] => Ok(*one),
            _ => b.op("Concat", v, &[("axis", Attr::Int(axis))]),
        };
        let mut y = concat(b, &ys, 1)?;
        let mut h = concat(b, &hs, 0)?;
        let mut c = concat(b, &cs, 0)?;
        if self.cfg.batch_first {
            y = b.op("Transpose", &[y], &[("perm", Attr::Ints(vec![2, 0, 1, 3]))])?;
            let perm = ("perm", Attr::Ints(vec![1, 0, 2]));
            h = b.op("Transpose", &[h], &[perm.clone()])?;
            c = b.op("Transpose", &[c], &[perm])?;
        }
        let mut outs = vec![Some(y), Some(h)];
        if self.cfg.kind == Kind::Lstm {
            outs.push(Some(c));
        }
        Ok(outs)
    }
}

/// Direction `d`'s initial state `[batch, H]` from input `v`
/// (`[dirs, batch, H]`, or `[batch, dirs, H]` batch first), zeros when
/// absent.
fn initial(b: &mut Builder, l: &Layer, d: usize, v: Option<ValueId>) -> Result<ValueId> {
    let shape = [l.batch, l.hidden];
    let Some(v) = v else {
        return Ok(b.constant(Tensor::zeros(l.dtype, shape.to_vec())));
    };
    let one = match l.cfg.batch_first {
        true => slice(b, v, &[0, d], &[l.batch, d + 1])?,
        false => slice(b, v, &[d], &[d + 1])?,
    };
    reshape(b, one, &shape)
}

/// `W[d]` or `R[d]` (`[dirs, G·H, k]`) transposed to `[k, G·H]`.
fn transposed_slice(b: &mut Builder, m: ValueId, d: usize) -> Result<ValueId> {
    let s = b.shape(m)?;
    let one = slice(b, m, &[d], &[d + 1])?;
    let one = reshape(b, one, &s[1..])?;
    b.op("Transpose", &[one], &[("perm", Attr::Ints(vec![1, 0]))])
}

/// `v[starts..ends]` along its leading axes.
fn slice(b: &mut Builder, v: ValueId, starts: &[usize], ends: &[usize]) -> Result<ValueId> {
    let axes: Vec<usize> = (0..starts.len()).collect();
    compose::slice(b, v, &axes, starts, ends, &[])
}

/// Columns `from..to` of the matrix `v`.
fn slice_cols(b: &mut Builder, v: ValueId, from: usize, to: usize) -> Result<ValueId> {
    compose::slice(b, v, &[1], &[from], &[to], &[])
}

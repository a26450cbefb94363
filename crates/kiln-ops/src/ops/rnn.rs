//! Recurrent layers RNN, GRU and LSTM (opsets 7, 14, 22): forward, reverse
//! and bidirectional directions, activation lists with alpha/beta, clip,
//! sequence_lens, initial states, layout 0/1 and every output. Computed in
//! f64 per batch entry, so sequences of different lengths are independent.
//! With static shapes and the default activations a node opens into its
//! time steps' matrix products and gates (`unrolled`).

mod unrolled;

use crate::registry::Registry;
use crate::util::ints;
use crate::{arg, opt_arg, Builder, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, Node, Result, Tensor, TensorType, ValueId};

pub fn register(r: &mut Registry) {
    r.add("RNN", Recurrent(Kind::Rnn));
    r.add("GRU", Recurrent(Kind::Gru));
    r.add("LSTM", Recurrent(Kind::Lstm));
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Rnn,
    Gru,
    Lstm,
}

impl Kind {
    /// Number of gates stacked in W and R.
    fn gates(self) -> usize {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 3,
            Kind::Lstm => 4,
        }
    }

    /// Default activation functions of one direction.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Kind::Rnn => &["Tanh"],
            Kind::Gru => &["Sigmoid", "Tanh"],
            Kind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation function with its alpha/beta bound.
#[derive(Debug, Clone, Copy)]
enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f64, f64),
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    ScaledTanh(f64, f64),
    HardSigmoid(f64, f64),
    Elu(f64),
    Softsign,
    Softplus,
}

impl Act {
    /// Builds `name`, taking its alpha/beta from the front of the queues
    /// (the spec consumes them in the order of the activation functions).
    fn parse(
        name: &str,
        alphas: &mut impl Iterator<Item = f64>,
        betas: &mut impl Iterator<Item = f64>,
    ) -> Result<Act> {
        let mut a = |default: f64| alphas.next().unwrap_or(default);
        Ok(match name.to_ascii_lowercase().as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "affine" => Act::Affine(a(1.0), betas.next().unwrap_or(0.0)),
            "leakyrelu" => Act::LeakyRelu(a(0.01)),
            "thresholdedrelu" => Act::ThresholdedRelu(a(1.0)),
            "scaledtanh" => Act::ScaledTanh(a(1.0), betas.next().unwrap_or(1.0)),
            "hardsigmoid" => Act::HardSigmoid(a(0.2), betas.next().unwrap_or(0.5)),
            "elu" => Act::Elu(a(1.0)),
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            other => bail!("unknown activation function '{other}'"),
        })
    }

    fn apply(self, x: f64) -> f64 {
        match self {
            Act::Relu => x.max(0.0),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Affine(a, b) => a * x + b,
            Act::LeakyRelu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            Act::ThresholdedRelu(a) => {
                if x >= a {
                    x
                } else {
                    0.0
                }
            }
            Act::ScaledTanh(a, b) => a * (b * x).tanh(),
            Act::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Act::Elu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => x.exp().ln_1p(),
        }
    }
}

/// The node's attributes.
struct Config {
    kind: Kind,
    dirs: usize,
    /// Per direction: reverse the time axis.
    reverse: [bool; 2],
    /// Per direction: the activations (f, g, h as the kind uses them).
    acts: Vec<Vec<Act>>,
    clip: Option<f64>,
    hidden: Option<usize>,
    batch_first: bool,
    linear_before_reset: bool,
    input_forget: bool,
}

impl Config {
    fn parse(node: &Node, kind: Kind) -> Result<Config> {
        let (dirs, reverse) = match node.attr_string_or("direction", "forward")? {
            "forward" => (1, [false, false]),
            "reverse" => (1, [true, true]),
            "bidirectional" => (2, [false, true]),
            other => bail!("unknown direction '{other}'"),
        };
        let per = kind.default_activations().len();
        let names: Vec<String> = match node.attr_strings("activations")? {
            Some(v) => v.to_vec(),
            None => kind
                .default_activations()
                .iter()
                .map(|s| s.to_string())
                .collect(),
        };
        ensure!(
            names.len() == per || names.len() == per * dirs,
            "expected {} activation functions, got {}",
            per * dirs,
            names.len()
        );
        let floats = |name: &str| -> Result<Vec<f64>> {
            Ok(node
                .attr_floats(name)?
                .unwrap_or(&[])
                .iter()
                .map(|&v| v as f64)
                .collect())
        };
        let (alphas, betas) = (floats("activation_alpha")?, floats("activation_beta")?);
        let (mut alphas, mut betas) = (alphas.into_iter(), betas.into_iter());
        let parsed: Vec<Act> = names
            .iter()
            .map(|n| Act::parse(n, &mut alphas, &mut betas))
            .collect::<Result<_>>()?;
        // One list for both directions when only one direction's is given.
        let acts = (0..dirs)
            .map(|d| parsed[(d * per) % parsed.len()..][..per].to_vec())
            .collect();
        let clip = node.attr_float("clip")?.map(|c| c as f64);
        ensure!(clip.is_none_or(|c| c >= 0.0), "clip must not be negative");
        let hidden = match node.attr_int("hidden_size")? {
            Some(h) if h > 0 => Some(h as usize),
            Some(h) => bail!("hidden_size must be positive, got {h}"),
            None => None,
        };
        let layout = node.attr_int_or("layout", 0)?;
        ensure!(
            layout == 0 || layout == 1,
            "layout must be 0 or 1, got {layout}"
        );
        Ok(Config {
            kind,
            dirs,
            reverse,
            acts,
            clip,
            hidden,
            batch_first: layout == 1,
            linear_before_reset: node.attr_int_or("linear_before_reset", 0)? != 0,
            input_forget: node.attr_int_or("input_forget", 0)? != 0,
        })
    }

    fn clip(&self, x: f64) -> f64 {
        match self.clip {
            Some(c) => x.clamp(-c, c),
            None => x,
        }
    }

    /// (seq_length, batch) of X's shape.
    fn seq_batch(&self, x: &[usize]) -> Result<(usize, usize, usize)> {
        ensure!(x.len() == 3, "X must be 3-D, got {:?}", x);
        Ok(if self.batch_first {
            (x[1], x[0], x[2])
        } else {
            (x[0], x[1], x[2])
        })
    }

    /// Output shapes (Y, Y_h, Y_c) for the given sizes.
    fn output_shapes(&self, seq: usize, batch: usize, hidden: usize) -> [Vec<usize>; 3] {
        let d = self.dirs;
        let (y, state) = if self.batch_first {
            (vec![batch, seq, d, hidden], vec![batch, d, hidden])
        } else {
            (vec![seq, d, batch, hidden], vec![d, batch, hidden])
        };
        [y, state.clone(), state]
    }
}

struct Recurrent(Kind);

impl Op for Recurrent {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let cfg = Config::parse(cx.node, self.0)?;
        let dtype = cx.input(0)?.ty.dtype;
        let hidden = cfg
            .hidden
            .or_else(|| cx.shape(2).ok().flatten().and_then(|r| r.last().copied()));
        let n = if self.0 == Kind::Lstm { 3 } else { 2 };
        Ok(match (cx.shape(0)?, hidden) {
            (Some(x), Some(h)) => {
                let (seq, batch, _) = cfg.seq_batch(x)?;
                cfg.output_shapes(seq, batch, h)
                    .into_iter()
                    .take(n)
                    .map(|s| TensorType::new(dtype, s))
                    .collect()
            }
            _ => vec![TensorType::unknown_shape(dtype); n],
        })
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let cfg = Config::parse(cx.node, self.0)?;
        let x = arg(inputs, 0)?;
        ensure!(
            x.dtype().is_float(),
            "X must be a float tensor, got {}",
            x.dtype()
        );
        let (seq, batch, input) = cfg.seq_batch(&x.shape)?;
        let (w, r) = (arg(inputs, 1)?, arg(inputs, 2)?);
        let g = cfg.kind.gates();
        let hidden = cfg.hidden.or_else(|| r.shape.last().copied()).unwrap_or(0);
        ensure!(
            w.shape == [cfg.dirs, g * hidden, input],
            "W must have shape [{}, {}, {input}], got {:?}",
            cfg.dirs,
            g * hidden,
            w.shape
        );
        ensure!(
            r.shape == [cfg.dirs, g * hidden, hidden],
            "R must have shape [{}, {}, {hidden}], got {:?}",
            cfg.dirs,
            g * hidden,
            r.shape
        );
        let read = |i: usize, len: usize, what: &str| -> Result<Option<Vec<f64>>> {
            match opt_arg(inputs, i) {
                Some(t) => {
                    ensure!(
                        t.len() == len,
                        "{what} has {} elements, expected {len}",
                        t.len()
                    );
                    Ok(Some(t.data.to_f64_vec()?))
                }
                None => Ok(None),
            }
        };
        let bias = read(3, cfg.dirs * 2 * g * hidden, "B")?;
        let lens = match opt_arg(inputs, 4) {
            Some(t) => {
                let v = ints(t)?;
                ensure!(
                    v.len() == batch,
                    "sequence_lens has {} entries for batch size {batch}",
                    v.len()
                );
                v.iter()
                    .map(|&l| {
                        if (0..=seq as i64).contains(&l) {
                            Ok(l as usize)
                        } else {
                            bail!("sequence length {l} is outside [0, {seq}]")
                        }
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            None => vec![seq; batch],
        };
        let state_len = cfg.dirs * batch * hidden;
        let h0 = read(5, state_len, "initial_h")?.map(|v| to_dir_major(&cfg, v, batch, hidden));
        let c0 = read(6, state_len, "initial_c")?.map(|v| to_dir_major(&cfg, v, batch, hidden));
        let peep = read(7, cfg.dirs * 3 * hidden, "P")?;
        let xv = x.data.to_f64_vec()?;
        let (wv, rv) = (w.data.to_f64_vec()?, r.data.to_f64_vec()?);
        let dims = Dims {
            seq,
            batch,
            input,
            hidden,
        };
        // y[d][t][b][j], h[d][b][j], c[d][b][j]
        let mut y = vec![0.0; cfg.dirs * seq * batch * hidden];
        let mut h_last = vec![0.0; state_len];
        let mut c_last = vec![0.0; state_len];
        for d in 0..cfg.dirs {
            let gh = g * hidden;
            let cell = Cell {
                cfg: &cfg,
                acts: &cfg.acts[d],
                w: &wv[d * gh * input..(d + 1) * gh * input],
                r: &rv[d * gh * hidden..(d + 1) * gh * hidden],
                wb: bias.as_ref().map(|b| &b[d * 2 * gh..d * 2 * gh + gh]),
                rb: bias.as_ref().map(|b| &b[d * 2 * gh + gh..(d + 1) * 2 * gh]),
                p: peep
                    .as_ref()
                    .map(|p| &p[d * 3 * hidden..(d + 1) * 3 * hidden]),
                hidden,
            };
            for b in 0..batch {
                let s = (d * batch + b) * hidden;
                let mut h = h0
                    .as_ref()
                    .map_or(vec![0.0; hidden], |v| v[s..s + hidden].to_vec());
                let mut c = c0
                    .as_ref()
                    .map_or(vec![0.0; hidden], |v| v[s..s + hidden].to_vec());
                let steps: Vec<usize> = if cfg.reverse[d] {
                    (0..lens[b]).rev().collect()
                } else {
                    (0..lens[b]).collect()
                };
                for t in steps {
                    let xt = x_at(&cfg, &xv, &dims, t, b);
                    cell.step(xt, &mut h, &mut c);
                    let o = ((d * seq + t) * batch + b) * hidden;
                    y[o..o + hidden].copy_from_slice(&h);
                }
                h_last[s..s + hidden].copy_from_slice(&h);
                c_last[s..s + hidden].copy_from_slice(&c);
            }
        }
        let [ys, hs, cs] = cfg.output_shapes(seq, batch, hidden);
        let dtype = x.dtype();
        let make = |v: Vec<f64>, shape: Vec<usize>| -> Result<Tensor> {
            Tensor::new(shape, super::resize::from_f64(v, dtype, false)?)
        };
        let mut outs = vec![
            make(y_layout(&cfg, y, &dims), ys)?,
            make(state_layout(&cfg, h_last, batch, hidden), hs)?,
        ];
        if cfg.kind == Kind::Lstm {
            outs.push(make(state_layout(&cfg, c_last, batch, hidden), cs)?);
        }
        Ok(outs)
    }

    fn decompose(
        &self,
        cx: &InferCx,
        b: &mut Builder,
        inputs: &[Option<ValueId>],
    ) -> Result<Option<Vec<Option<ValueId>>>> {
        unrolled::decompose(cx, b, self.0, inputs)
    }
}

struct Dims {
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
}

/// The input vector of time step `t`, batch entry `b`.
fn x_at<'a>(cfg: &Config, x: &'a [f64], d: &Dims, t: usize, b: usize) -> &'a [f64] {
    let row = if cfg.batch_first {
        b * d.seq + t
    } else {
        t * d.batch + b
    };
    &x[row * d.input..(row + 1) * d.input]
}

/// Initial states as [dirs, batch, hidden] whatever the layout.
fn to_dir_major(cfg: &Config, v: Vec<f64>, batch: usize, hidden: usize) -> Vec<f64> {
    if !cfg.batch_first {
        return v;
    }
    let mut out = vec![0.0; v.len()];
    for b in 0..batch {
        for d in 0..cfg.dirs {
            let (src, dst) = ((b * cfg.dirs + d) * hidden, (d * batch + b) * hidden);
            out[dst..dst + hidden].copy_from_slice(&v[src..src + hidden]);
        }
    }
    out
}

/// Final states from [dirs, batch, hidden] into the output layout.
fn state_layout(cfg: &Config, v: Vec<f64>, batch: usize, hidden: usize) -> Vec<f64> {
    if !cfg.batch_first {
        return v;
    }
    let mut out = vec![0.0; v.len()];
    for b in 0..batch {
        for d in 0..cfg.dirs {
            let (src, dst) = ((d * batch + b) * hidden, (b * cfg.dirs + d) * hidden);
            out[dst..dst + hidden].copy_from_slice(&v[src..src + hidden]);
        }
    }
    out
}

/// Y from [dirs, seq, batch, hidden] into [seq, dirs, batch, hidden]
/// (layout 0) or [batch, seq, dirs, hidden] (layout 1).
fn y_layout(cfg: &Config, v: Vec<f64>, d: &Dims) -> Vec<f64> {
    let h = d.hidden;
    let mut out = vec![0.0; v.len()];
    for dir in 0..cfg.dirs {
        for t in 0..d.seq {
            for b in 0..d.batch {
                let src = ((dir * d.seq + t) * d.batch + b) * h;
                let dst = if cfg.batch_first {
                    ((b * d.seq + t) * cfg.dirs + dir) * h
                } else {
                    ((t * cfg.dirs + dir) * d.batch + b) * h
                };
                out[dst..dst + h].copy_from_slice(&v[src..src + h]);
            }
        }
    }
    out
}

/// One direction's weights.
struct Cell<'a> {
    cfg: &'a Config,
    acts: &'a [Act],
    /// [gates * hidden, input]
    w: &'a [f64],
    /// [gates * hidden, hidden]
    r: &'a [f64],
    wb: Option<&'a [f64]>,
    rb: Option<&'a [f64]>,
    /// Peepholes [input, output, forget] (LSTM).
    p: Option<&'a [f64]>,
    hidden: usize,
}

/// Row `row` of a row-major matrix with `cols` columns, dotted with `v`.
fn dot_row(m: &[f64], row: usize, cols: usize, v: &[f64]) -> f64 {
    m[row * cols..(row + 1) * cols]
        .iter()
        .zip(v)
        .map(|(a, b)| a * b)
        .sum()
}

impl Cell<'_> {
    fn bias(b: Option<&[f64]>, i: usize) -> f64 {
        b.map_or(0.0, |b| b[i])
    }

    /// X·W^T + bias for gate row `i`.
    fn x_part(&self, x: &[f64], i: usize) -> f64 {
        dot_row(self.w, i, x.len(), x) + Cell::bias(self.wb, i)
    }

    /// v·R^T + bias for gate row `i`.
    fn h_part(&self, v: &[f64], i: usize) -> f64 {
        dot_row(self.r, i, self.hidden, v) + Cell::bias(self.rb, i)
    }

    /// Advances the hidden state `h` (and cell state `c` for LSTM) by one step.
    fn step(&self, x: &[f64], h: &mut Vec<f64>, c: &mut [f64]) {
        let n = self.hidden;
        let act = |k: usize, v: f64| self.acts[k].apply(self.cfg.clip(v));
        match self.cfg.kind {
            Kind::Rnn => {
                *h = (0..n)
                    .map(|j| act(0, self.x_part(x, j) + self.h_part(h, j)))
                    .collect()
            }
            Kind::Gru => {
                // Gate rows: z at 0, r at n, h at 2n.
                let z: Vec<f64> = (0..n)
                    .map(|j| act(0, self.x_part(x, j) + self.h_part(h, j)))
                    .collect();
                let r: Vec<f64> = (0..n)
                    .map(|j| act(0, self.x_part(x, n + j) + self.h_part(h, n + j)))
                    .collect();
                let cand: Vec<f64> = if self.cfg.linear_before_reset {
                    (0..n)
                        .map(|j| {
                            act(
                                1,
                                self.x_part(x, 2 * n + j) + r[j] * self.h_part(h, 2 * n + j),
                            )
                        })
                        .collect()
                } else {
                    let rh: Vec<f64> = r.iter().zip(h.iter()).map(|(a, b)| a * b).collect();
                    (0..n)
                        .map(|j| act(1, self.x_part(x, 2 * n + j) + self.h_part(&rh, 2 * n + j)))
                        .collect()
                };
                *h = (0..n)
                    .map(|j| (1.0 - z[j]) * cand[j] + z[j] * h[j])
                    .collect();
            }
            Kind::Lstm => {
                // Gate rows: i at 0, o at n, f at 2n, c at 3n; peepholes i, o, f.
                let pre =
                    |g: usize, j: usize| self.x_part(x, g * n + j) + self.h_part(h, g * n + j);
                let peep =
                    |k: usize, j: usize, state: f64| self.p.map_or(0.0, |p| p[k * n + j] * state);
                let mut h_new = vec![0.0; n];
                for j in 0..n {
                    let i_gate = act(0, pre(0, j) + peep(0, j, c[j]));
                    let f_gate = if self.cfg.input_forget {
                        1.0 - i_gate
                    } else {
                        act(0, pre(2, j) + peep(2, j, c[j]))
                    };
                    let cand = act(1, pre(3, j));
                    let c_new = f_gate * c[j] + i_gate * cand;
                    let o_gate = act(0, pre(1, j) + peep(1, j, c_new));
                    h_new[j] = o_gate * self.acts[2].apply(c_new);
                    c[j] = c_new;
                }
                *h = h_new;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SubgraphRunner;
    use kiln_ir::{Attr, Graph};

    struct NoBodies;
    impl SubgraphRunner for NoBodies {
        fn run(&self, _g: &Graph, _inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
            bail!("no subgraphs")
        }
    }

    /// RNN with hidden size 1, W = 1, R = 0: h_t = tanh(x_t).
    fn run_rnn(direction: &str, x: Vec<f32>, lens: Vec<i32>) -> Vec<Tensor> {
        let mut node = Node {
            name: String::new(),
            op: "RNN".into(),
            domain: String::new(),
            inputs: vec![],
            outputs: vec![],
            attrs: Default::default(),
        };
        node.attrs.insert("hidden_size".into(), Attr::Int(1));
        node.attrs
            .insert("direction".into(), Attr::String(direction.into()));
        let cx = EvalCx {
            node: &node,
            opset: 14,
            subgraphs: &NoBodies,
        };
        let xt = Tensor::from_vec(vec![2, 2, 1], x).unwrap();
        let w = Tensor::from_vec(vec![1, 1, 1], vec![1.0f32]).unwrap();
        let r = Tensor::from_vec(vec![1, 1, 1], vec![0.0f32]).unwrap();
        let l = Tensor::from_vec(vec![2], lens).unwrap();
        Recurrent(Kind::Rnn)
            .eval(&cx, &[Some(&xt), Some(&w), Some(&r), None, Some(&l)])
            .unwrap()
    }

    #[test]
    fn sequence_lens_zero_pad_and_last_valid_state() {
        // x[t][b]: batch 0 has length 1, batch 1 length 2.
        let out = run_rnn("forward", vec![0.1, 0.2, 0.3, 0.4], vec![1, 2]);
        let y = out[0].as_slice::<f32>().unwrap();
        assert_eq!(y[2], 0.0, "step past the sequence end is zero");
        let yh = out[1].as_slice::<f32>().unwrap();
        assert!((yh[0] - 0.1f32.tanh()).abs() < 1e-6);
        assert!((yh[1] - 0.4f32.tanh()).abs() < 1e-6);
    }

    #[test]
    fn reverse_ends_at_first_step() {
        let out = run_rnn("reverse", vec![0.1, 0.2, 0.3, 0.4], vec![1, 2]);
        let yh = out[1].as_slice::<f32>().unwrap();
        assert!((yh[0] - 0.1f32.tanh()).abs() < 1e-6);
        assert!((yh[1] - 0.2f32.tanh()).abs() < 1e-6);
    }
}

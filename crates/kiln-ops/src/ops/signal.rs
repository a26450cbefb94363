//! Signal processing: DFT (opset 17: axis attribute; 20+: axis input), STFT,
//! the Hann, Hamming and Blackman windows, and MelWeightMatrix. Complex
//! values are a trailing dimension of 2 (real, imaginary); real signals have
//! a trailing 1. Transforms are computed in f64 with exact twiddle tables.

use super::resize::from_f64;
use crate::registry::Registry;
use crate::util::{ints, normalize_axis};
use crate::{arg, opt_arg, EvalCx, InferCx, Op};
use kiln_ir::{bail, ensure, DType, Node, Result, Tensor, TensorType};
use std::f64::consts::PI;

pub fn register(r: &mut Registry) {
    r.add("DFT", Dft);
    r.add("STFT", Stft);
    r.add("HannWindow", Window(WindowKind::Hann));
    r.add("HammingWindow", Window(WindowKind::Hamming));
    r.add("BlackmanWindow", Window(WindowKind::Blackman));
    r.add("MelWeightMatrix", MelWeightMatrix);
}

/// A scalar integer input (sizes, lengths, axes).
fn scalar_int(t: &Tensor, what: &str) -> Result<i64> {
    let v = ints(t)?;
    ensure!(
        v.len() == 1,
        "{what} must be a scalar, got shape {:?}",
        t.shape
    );
    Ok(v[0])
}

/// A non-negative scalar integer input as a length.
fn length(t: &Tensor, what: &str) -> Result<usize> {
    let v = scalar_int(t, what)?;
    ensure!(
        v >= 0 && v < 1 << 40,
        "{what} must be a non-negative length, got {v}"
    );
    Ok(v as usize)
}

// ---------------------------------------------------------------- DFT core

/// A discrete Fourier transform of one length: `(cos, sin)` of 2πk/n.
struct Twiddles {
    cos: Vec<f64>,
    sin: Vec<f64>,
}

impl Twiddles {
    fn new(n: usize) -> Twiddles {
        let (cos, sin) = (0..n)
            .map(|k| (2.0 * PI * k as f64 / n as f64).sin_cos())
            .map(|(s, c)| (c, s))
            .unzip();
        Twiddles { cos, sin }
    }

    /// Bins `0..bins` of the DFT of the length-n complex signal `x`
    /// (missing samples are zero); `sign` -1 forward, +1 inverse.
    fn transform(&self, x: &[(f64, f64)], bins: usize, sign: f64) -> Vec<(f64, f64)> {
        let n = self.cos.len();
        (0..bins)
            .map(|k| {
                let (mut re, mut im) = (0.0, 0.0);
                for (j, &(xr, xi)) in x.iter().enumerate().take(n) {
                    // (k * j) mod n keeps the angle exact.
                    let t = (k % n) * j % n;
                    let (c, s) = (self.cos[t], sign * self.sin[t]);
                    re += xr * c - xi * s;
                    im += xr * s + xi * c;
                }
                (re, im)
            })
            .collect()
    }
}

/// What a DFT node computes.
#[derive(Debug, Clone, Copy)]
struct DftSpec {
    inverse: bool,
    onesided: bool,
}

impl DftSpec {
    /// Output length along the transformed axis and the trailing size.
    fn output_dims(self, n: usize) -> (usize, usize) {
        match (self.inverse, self.onesided) {
            (false, true) => (n / 2 + 1, 2),
            (true, true) => (n, 1),
            _ => (n, 2),
        }
    }

    /// Transforms one signal (complex samples along the axis) of DFT length n.
    fn apply(self, tw: &Twiddles, signal: &[(f64, f64)], n: usize) -> Vec<(f64, f64)> {
        let (bins, _) = self.output_dims(n);
        if !self.inverse {
            return tw.transform(signal, bins, -1.0);
        }
        let scale = 1.0 / n as f64;
        let spectrum: Vec<(f64, f64)> = if self.onesided {
            // Rebuild the Hermitian-symmetric full spectrum from its first
            // n/2 + 1 bins; only the real part of the result is kept.
            let half = |k: usize| signal.get(k).copied().unwrap_or((0.0, 0.0));
            (0..n)
                .map(|k| {
                    if k <= n / 2 {
                        half(k)
                    } else {
                        let (r, i) = half(n - k);
                        (r, -i)
                    }
                })
                .collect()
        } else {
            signal.to_vec()
        };
        tw.transform(&spectrum, bins, 1.0)
            .into_iter()
            .map(|(r, i)| (r * scale, i * scale))
            .collect()
    }
}

/// Runs `spec` along `axis` of `x` ([..., 1|2]) with DFT length `n`.
fn dft(x: &Tensor, axis: usize, n: usize, spec: DftSpec) -> Result<Tensor> {
    let rank = x.rank();
    let comps = x.shape[rank - 1];
    ensure!(
        comps == 1 || comps == 2,
        "the last dimension must be 1 (real) or 2 (complex), got {comps}"
    );
    ensure!(
        axis < rank - 1,
        "axis {axis} is the complex dimension or out of range for rank {rank}"
    );
    ensure!(n > 0, "dft_length must be positive");
    ensure!(
        x.dtype().is_float(),
        "DFT needs a float tensor, got {}",
        x.dtype()
    );
    let v = x.data.to_f64_vec()?;
    let len = x.shape[axis];
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..rank - 1].iter().product();
    let (bins, out_comps) = spec.output_dims(n);
    let tw = Twiddles::new(n);
    let mut out = vec![0.0; outer * bins * inner * out_comps];
    let mut signal = Vec::with_capacity(len.min(n));
    for o in 0..outer {
        for i in 0..inner {
            signal.clear();
            for j in 0..len.min(n) {
                let at = ((o * len + j) * inner + i) * comps;
                signal.push((v[at], if comps == 2 { v[at + 1] } else { 0.0 }));
            }
            for (k, (re, im)) in spec.apply(&tw, &signal, n).into_iter().enumerate() {
                let at = ((o * bins + k) * inner + i) * out_comps;
                out[at] = re;
                if out_comps == 2 {
                    out[at + 1] = im;
                }
            }
        }
    }
    let mut shape = x.shape.clone();
    shape[axis] = bins;
    shape[rank - 1] = out_comps;
    Tensor::new(shape, from_f64(out, x.dtype(), false)?)
}

// ---------------------------------------------------------------- DFT op

struct Dft;

impl Dft {
    fn spec(node: &Node) -> Result<DftSpec> {
        Ok(DftSpec {
            inverse: node.attr_int_or("inverse", 0)? != 0,
            onesided: node.attr_int_or("onesided", 0)? != 0,
        })
    }

    /// The axis (attribute before opset 20, input 2 after), normalized;
    /// None when it is an input not known yet.
    fn axis(
        node: &Node,
        opset: i64,
        axis_input: Option<Option<&Tensor>>,
        rank: usize,
    ) -> Result<Option<usize>> {
        let axis = if opset < 20 {
            node.attr_int_or("axis", 1)?
        } else {
            match axis_input {
                None => -2,
                Some(None) => return Ok(None),
                Some(Some(t)) => scalar_int(t, "axis")?,
            }
        };
        Ok(Some(normalize_axis(axis, rank)?))
    }

    /// DFT length: the input, else the axis length (doubled minus two for
    /// an inverse one-sided transform).
    fn length(spec: DftSpec, given: Option<&Tensor>, axis_len: usize) -> Result<usize> {
        Ok(match given {
            Some(t) => length(t, "dft_length")?,
            None if spec.inverse && spec.onesided => 2 * axis_len.saturating_sub(1),
            None => axis_len,
        })
    }
}

impl Op for Dft {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = &cx.input(0)?.ty;
        let spec = Dft::spec(cx.node)?;
        let unknown = Ok(vec![TensorType::unknown_shape(x.dtype)]);
        let Some(shape) = &x.shape else {
            return unknown;
        };
        let axis_input = cx.opt_input(2).map(|i| i.value);
        let Some(axis) = Dft::axis(cx.node, cx.opset, axis_input, shape.len())? else {
            return unknown;
        };
        if cx.opt_input(1).is_some_and(|i| i.value.is_none()) {
            return unknown;
        }
        ensure!(
            axis + 1 < shape.len(),
            "axis {axis} is the complex dimension or out of range for rank {}",
            shape.len()
        );
        let n = Dft::length(spec, cx.value(1), shape[axis])?;
        let (bins, comps) = spec.output_dims(n);
        let mut out = shape.clone();
        out[axis] = bins;
        *out.last_mut().unwrap_or(&mut 0) = comps;
        Ok(vec![TensorType::new(x.dtype, out)])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        ensure!(
            x.rank() >= 2,
            "DFT input must have rank 2 or more, got {:?}",
            x.shape
        );
        let spec = Dft::spec(cx.node)?;
        let Some(axis) = Dft::axis(cx.node, cx.opset, Some(opt_arg(inputs, 2)), x.rank())? else {
            bail!("axis is unknown")
        };
        ensure!(axis + 1 < x.rank(), "axis {axis} is the complex dimension");
        let n = Dft::length(spec, opt_arg(inputs, 1), x.shape[axis])?;
        Ok(vec![dft(x, axis, n, spec)?])
    }
}

// ---------------------------------------------------------------- STFT

struct Stft;

/// STFT sizes: (frame_step, frame_length, frames).
fn stft_sizes(
    signal_len: usize,
    step: &Tensor,
    window: Option<&[usize]>,
    frame_length: Option<&Tensor>,
) -> Result<(usize, usize, usize)> {
    let step = length(step, "frame_step")?;
    ensure!(step > 0, "frame_step must be positive");
    let frame = match (frame_length, window) {
        (Some(f), w) => {
            let f = length(f, "frame_length")?;
            if let Some(w) = w {
                ensure!(
                    w == [f],
                    "the window has shape {:?} but frame_length is {f}",
                    w
                );
            }
            f
        }
        (None, Some(w)) => {
            ensure!(w.len() == 1, "the window must be 1-D, got shape {:?}", w);
            w[0]
        }
        (None, None) => signal_len,
    };
    ensure!(
        frame > 0 && frame <= signal_len,
        "frame length {frame} must be in [1, {signal_len}]"
    );
    Ok((step, frame, (signal_len - frame) / step + 1))
}

impl Op for Stft {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let x = &cx.input(0)?.ty;
        let onesided = cx.node.attr_int_or("onesided", 1)? != 0;
        let unknown = Ok(vec![TensorType::unknown_shape(x.dtype)]);
        let (Some(shape), Some(step)) = (&x.shape, cx.value(1)) else {
            return unknown;
        };
        ensure!(
            shape.len() == 3,
            "signal must be [batch, length, 1|2], got {:?}",
            shape
        );
        let window = cx.opt_input(2).map(|w| w.ty.shape.as_deref());
        let frame_length = cx.opt_input(3).map(|f| f.value);
        if matches!(window, Some(None)) || matches!(frame_length, Some(None)) {
            return unknown;
        }
        let (_, frame, frames) =
            stft_sizes(shape[1], step, window.flatten(), frame_length.flatten())?;
        let bins = if onesided { frame / 2 + 1 } else { frame };
        Ok(vec![TensorType::new(
            x.dtype,
            vec![shape[0], frames, bins, 2],
        )])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = arg(inputs, 0)?;
        ensure!(
            x.rank() == 3,
            "signal must be [batch, length, 1|2], got {:?}",
            x.shape
        );
        ensure!(
            x.dtype().is_float(),
            "STFT needs a float signal, got {}",
            x.dtype()
        );
        let comps = x.shape[2];
        ensure!(
            comps == 1 || comps == 2,
            "the last dimension must be 1 (real) or 2 (complex), got {comps}"
        );
        let window = opt_arg(inputs, 2);
        let (step, frame, frames) = stft_sizes(
            x.shape[1],
            arg(inputs, 1)?,
            window.map(|w| w.shape.as_slice()),
            opt_arg(inputs, 3),
        )?;
        let weights = match window {
            Some(w) => w.data.to_f64_vec()?,
            None => vec![1.0; frame],
        };
        let spec = DftSpec {
            inverse: false,
            onesided: cx.node.attr_int_or("onesided", 1)? != 0,
        };
        let (bins, _) = spec.output_dims(frame);
        let tw = Twiddles::new(frame);
        let v = x.data.to_f64_vec()?;
        let (batch, len) = (x.shape[0], x.shape[1]);
        let mut out = Vec::with_capacity(batch * frames * bins * 2);
        for b in 0..batch {
            for f in 0..frames {
                let frame_signal: Vec<(f64, f64)> = (0..frame)
                    .map(|j| {
                        let at = (b * len + f * step + j) * comps;
                        let im = if comps == 2 { v[at + 1] } else { 0.0 };
                        (v[at] * weights[j], im * weights[j])
                    })
                    .collect();
                out.extend(
                    spec.apply(&tw, &frame_signal, frame)
                        .into_iter()
                        .flat_map(|(r, i)| [r, i]),
                );
            }
        }
        Ok(vec![Tensor::new(
            vec![batch, frames, bins, 2],
            from_f64(out, x.dtype(), false)?,
        )?])
    }
}

// ---------------------------------------------------------------- windows

#[derive(Debug, Clone, Copy)]
enum WindowKind {
    Hann,
    Hamming,
    Blackman,
}

impl WindowKind {
    /// Coefficients (a0, a1, a2) of a0 - a1 cos(2πn/N) + a2 cos(4πn/N).
    fn coefficients(self) -> (f64, f64, f64) {
        match self {
            WindowKind::Hann => (0.5, 0.5, 0.0),
            WindowKind::Hamming => (25.0 / 46.0, 21.0 / 46.0, 0.0),
            WindowKind::Blackman => (0.42, 0.5, 0.08),
        }
    }
}

struct Window(WindowKind);

/// The output dtype named by an `output_datatype` attribute.
fn output_dtype(node: &Node) -> Result<DType> {
    let code = node.attr_int_or("output_datatype", 1)?;
    match DType::from_onnx_code(code as i32) {
        Some(d) if d.is_numeric() => Ok(d),
        _ => bail!(
            "output_datatype {code} ({}) is not a supported numeric type",
            DType::onnx_code_name(code as i32)
        ),
    }
}

impl Op for Window {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = output_dtype(cx.node)?;
        Ok(vec![match cx.value(0) {
            Some(size) => TensorType::new(dtype, vec![length(size, "size")?]),
            None => TensorType::unknown_shape(dtype),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let size = length(arg(inputs, 0)?, "size")?;
        let periodic = cx.node.attr_int_or("periodic", 1)? != 0;
        let (a0, a1, a2) = self.0.coefficients();
        // A periodic window is the first `size` points of a symmetric one
        // of length size + 1.
        let denom = if periodic {
            size
        } else {
            size.saturating_sub(1)
        } as f64;
        let values: Vec<f64> = (0..size)
            .map(|n| {
                if denom == 0.0 {
                    return 1.0;
                }
                let t = 2.0 * PI * n as f64 / denom;
                a0 - a1 * t.cos() + a2 * (2.0 * t).cos()
            })
            .collect();
        let dtype = output_dtype(cx.node)?;
        Ok(vec![Tensor::new(
            vec![size],
            from_f64(values, dtype, false)?,
        )?])
    }
}

// ---------------------------------------------------------------- mel

struct MelWeightMatrix;

/// Hertz to mel, evaluated as the ONNX reference does (the f32 inputs'
/// arithmetic in f32, then f64), so the bin edges floor identically.
fn hz_to_mel(hz: f64) -> f64 {
    (2595.0f32 * (hz as f32 / 700.0).ln_1p()) as f64 / std::f64::consts::LN_10
}

impl Op for MelWeightMatrix {
    fn infer(&self, cx: &InferCx) -> Result<Vec<TensorType>> {
        let dtype = output_dtype(cx.node)?;
        Ok(vec![match (cx.value(0), cx.value(1)) {
            (Some(mels), Some(dft_len)) => TensorType::new(
                dtype,
                vec![
                    length(dft_len, "dft_length")? / 2 + 1,
                    length(mels, "num_mel_bins")?,
                ],
            ),
            _ => TensorType::unknown_shape(dtype),
        }])
    }

    fn eval(&self, cx: &EvalCx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let mels = length(arg(inputs, 0)?, "num_mel_bins")?;
        let dft_len = length(arg(inputs, 1)?, "dft_length")?;
        let rate = length(arg(inputs, 2)?, "sample_rate")?;
        ensure!(rate > 0, "sample_rate must be positive");
        let edge = |i: usize, what: &str| -> Result<f64> {
            let t = arg(inputs, i)?;
            ensure!(
                t.len() == 1 && t.dtype().is_float(),
                "{what} must be a float scalar"
            );
            Ok(t.data.get_f64(0))
        };
        let (low, high) = (
            hz_to_mel(edge(3, "lower_edge_hertz")?),
            hz_to_mel(edge(4, "upper_edge_hertz")?),
        );
        let spectrogram_bins = dft_len / 2 + 1;
        // num_mel_bins + 2 points evenly spaced in mel, mapped to DFT bins.
        let step = (high - low) / (mels + 2) as f64;
        let points: Vec<i64> = (0..mels + 2)
            .map(|i| {
                let hz =
                    700.0 * ((i as f64 * step + low) / 2595.0 * std::f64::consts::LN_10).exp_m1();
                ((dft_len + 1) as f64 * hz / rate as f64).floor() as i64
            })
            .collect();
        let mut out = vec![0.0; spectrogram_bins * mels];
        let mut set = |bin: i64, m: usize, v: f64| -> Result<()> {
            ensure!(
                (0..spectrogram_bins as i64).contains(&bin),
                "mel band {m} reaches DFT bin {bin}, outside [0, {spectrogram_bins})"
            );
            out[bin as usize * mels + m] = v;
            Ok(())
        };
        for m in 0..mels {
            let (lo, center, hi) = (points[m], points[m + 1], points[m + 2]);
            if center == lo {
                set(center, m, 1.0)?;
            } else {
                for j in lo..=center {
                    set(j, m, (j - lo) as f64 / (center - lo) as f64)?;
                }
            }
            for j in center..hi {
                set(j, m, (hi - j) as f64 / (hi - center) as f64)?;
            }
        }
        let dtype = output_dtype(cx.node)?;
        Ok(vec![Tensor::new(
            vec![spectrogram_bins, mels],
            from_f64(out, dtype, false)?,
        )?])
    }
}

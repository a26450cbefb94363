//! Matrix products large enough to take the GPU's gemm template — both
//! tile sizes, split depth, batches, implicit-GEMM convolutions (padded,
//! strided, grouped), an element-wise epilogue — as text-IR graphs, and the error
//! bound a product meets when its factors are rounded (TF32 keeps 10
//! mantissa bits).
//!
//! Compiled with NVRTC without a GPU (`tests/cuda_nvrtc.rs`), run on one
//! against the interpreter (`tests/cuda_products.rs`).
//!
//! The bound: rounding each factor to `p` mantissa bits moves each term
//! `a·b` by at most about `2^-p·|a·b|`, so an output moves by at most
//! `unit · Σ|a|·|b|`. `Σ|a|·|b|` is the same graph run on the inputs'
//! absolute values, because every case is products, sums and 1-Lipschitz
//! element-wise ops (bias, Relu) of its inputs.

use crate::random_graph;
use kiln_ir::{Data, Graph, Result, Tensor};

/// One product graph: a name and its text form.
pub struct ProductCase {
    pub name: &'static str,
    pub text: String,
}

/// Every product case.
pub fn cases() -> Vec<ProductCase> {
    let matmul = |name, a: &str, b: &str, c: &str| {
        ProductCase {
        name,
        text: format!(
            "graph \"{name}\" opsets [\"\"=18] {{\n  input %a: f32[{a}]\n  input %b: f32[{b}]\n  node \"mm\" %c: f32[{c}] = MatMul(%a, %b)\n  output %c\n}}\n"
        ),
    }
    };
    let conv = |name, x: &str, w: &str, y: &str, attrs: &str| {
        ProductCase {
        name,
        text: format!(
            "graph \"{name}\" opsets [\"\"=18] {{\n  input %x: f32[{x}]\n  input %w: f32[{w}]\n  node \"conv\" %y: f32[{y}] = Conv(%x, %w) {{{attrs}}}\n  output %y\n}}\n"
        ),
    }
    };
    vec![
        matmul("odd_64_tiles", "2,70,300", "300,130", "2,70,130"),
        matmul("split_depth", "16,4096", "4096,24", "16,24"),
        matmul("batched", "3,4,64,72", "3,4,72,50", "3,4,64,50"),
        ProductCase {
            name: "tiles_128_bias_relu",
            text: "graph \"tiles_128_bias_relu\" opsets [\"\"=18] {\n  input %a: f32[256,200]\n  input %b: f32[200,384]\n  input %bias: f32[384]\n  node \"mm\" %c: f32[256,384] = MatMul(%a, %b)\n  node \"add\" %d: f32[256,384] = Add(%c, %bias)\n  node \"relu\" %e: f32[256,384] = Relu(%d)\n  output %e\n}\n".into(),
        },
        conv("conv_padded", "2,16,19,19", "32,16,3,3", "2,32,19,19", "pads=[1,1,1,1]"),
        conv(
            "conv_grouped",
            "1,32,14,14",
            "64,8,3,3",
            "1,64,14,14",
            "group=4, pads=[1,1,1,1]",
        ),
        conv(
            "conv_strided",
            "1,24,33,33",
            "40,24,3,3",
            "1,40,17,17",
            "pads=[1,1,1,1], strides=[2,2]",
        ),
    ]
}

/// `text` parsed, typed and verified.
pub fn graph(text: &str) -> Result<Graph> {
    let mut g = kiln_ir::text::parse(text)?;
    kiln_ops::infer::infer_graph(&mut g, &|_| None)?;
    kiln_ir::verify::verify(&g)?;
    Ok(g)
}

/// A case's inputs, what the interpreter computes from them, and the
/// magnitudes `Σ|a|·|b|` of every output element (see the module doc).
pub struct Oracle {
    pub inputs: Vec<Tensor>,
    pub want: Vec<Tensor>,
    pub magnitude: Vec<Tensor>,
}

impl Oracle {
    pub fn of(g: &Graph) -> Result<Oracle> {
        let inputs = random_graph::inputs(g, 7);
        let want = kiln_interp::run(g, &inputs)?;
        let absolute = inputs
            .iter()
            .map(|t| {
                let v: Vec<f64> = t.data.to_f64_vec()?.iter().map(|x| x.abs()).collect();
                Tensor::new(t.shape.clone(), Data::from_f64(t.data.dtype(), &v)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let magnitude = kiln_interp::run(g, &absolute)?;
        Ok(Oracle {
            inputs,
            want,
            magnitude,
        })
    }

    /// The largest `|got − want| / (unit·Σ|a||b| + 1e-5)` over all output
    /// elements: at most 1 when `got` meets the bound for `unit`.
    pub fn worst(&self, got: &[Tensor], unit: f64) -> Result<f64> {
        let mut worst: f64 = 0.0;
        for ((g, w), m) in got.iter().zip(&self.want).zip(&self.magnitude) {
            let (g, w, m) = (
                g.data.to_f64_vec()?,
                w.data.to_f64_vec()?,
                m.data.to_f64_vec()?,
            );
            for ((x, y), z) in g.iter().zip(&w).zip(&m) {
                let ratio = (x - y).abs() / (unit * z + 1e-5);
                worst = worst.max(if ratio.is_nan() { f64::INFINITY } else { ratio });
            }
        }
        Ok(worst)
    }
}

//! Random well-formed graphs for differential tests: element-wise,
//! broadcast, reduction, matmul, convolution, reshape and transpose ops
//! (plus Softmax and LayerNorm) in multi-branch DAGs, as kiln's text IR.
//! Shared by the CPU backend's test (`random_graphs.rs`) and the CUDA
//! backend's (`kiln-cuda/tests/random_graphs.rs`, which includes this
//! file by path).

use kiln_ir::{Graph, Tensor};

/// A random graph ready for a backend: its text (printed on failure), the
/// graph after the default passes, inputs, and the interpreter's outputs.
pub struct Case {
    pub seed: u64,
    pub text: String,
    pub graph: Graph,
    pub inputs: Vec<Tensor>,
    pub want: Vec<Tensor>,
}

/// The first `count` random graphs (`$KILN_RANDOM_GRAPHS`, default 24) as
/// cases.
pub fn cases() -> impl Iterator<Item = Case> {
    let count: u64 = std::env::var("KILN_RANDOM_GRAPHS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    (0..count).map(|seed| {
        let text = random_graph(seed);
        let original = super::load(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let inputs = super::inputs(&original).expect("inputs");
        let want = kiln_interp::run(&original, &inputs).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut graph = original;
        kiln_passes::optimize(&mut graph, &Default::default()).expect("passes");
        Case {
            seed,
            text,
            graph,
            inputs,
            want,
        }
    })
}

/// Panics with `c`'s text when `got` differs from the interpreter's.
pub fn check(c: &Case, got: &[Tensor], name: &str) {
    if let Err(e) = std::panic::catch_unwind(|| super::assert_close(got, &c.want, name)) {
        eprintln!("{}", c.text);
        std::panic::resume_unwind(e);
    }
}

/// A small deterministic generator (64-bit LCG).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn weights(&mut self, n: usize) -> String {
        let v: Vec<String> = (0..n)
            .map(|_| format!("{:.3}", (self.below(2001) as f64 - 1000.0) / 2000.0))
            .collect();
        v.join(", ")
    }
}

/// A graph being generated: its text lines and the values so far with
/// their shapes.
struct Gen {
    rng: Rng,
    lines: Vec<String>,
    values: Vec<(String, Vec<usize>)>,
    next: usize,
}

fn dims(shape: &[usize]) -> String {
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl Gen {
    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("v{}", self.next)
    }

    fn init(&mut self, shape: &[usize]) -> String {
        let name = self.fresh();
        let n: usize = shape.iter().product();
        let w = self.rng.weights(n);
        self.lines
            .push(format!("  init %{name}: f32[{}] = [{w}]", dims(shape)));
        name
    }

    fn node(&mut self, op: &str, args: &[&str], shape: Vec<usize>, attrs: &str) -> String {
        let name = self.fresh();
        let args: Vec<String> = args.iter().map(|a| format!("%{a}")).collect();
        self.lines.push(format!(
            "  node \"n{name}\" %{name}: f32[{}] = {op}({}){attrs}",
            dims(&shape),
            args.join(", ")
        ));
        self.values.push((name.clone(), shape));
        name
    }

    /// A random earlier value, preferring recent ones (chains), sometimes
    /// an older one (branches).
    fn pick(&mut self) -> (String, Vec<usize>) {
        let n = self.values.len();
        let back = if self.rng.below(3) == 0 {
            self.rng.below(n)
        } else {
            self.rng.below(n.min(2))
        };
        self.values[n - 1 - back].clone()
    }

    /// An earlier value of `shape`, if any.
    fn pick_shaped(&mut self, shape: &[usize]) -> Option<String> {
        let same: Vec<String> = self
            .values
            .iter()
            .filter(|(_, s)| s == shape)
            .map(|(n, _)| n.clone())
            .collect();
        (!same.is_empty()).then(|| same[self.rng.below(same.len())].clone())
    }

    fn step(&mut self) {
        let (x, shape) = self.pick();
        let rank = shape.len();
        let last = shape[rank - 1];
        match self.rng.below(12) {
            0 => {
                let op = ["Relu", "Tanh", "Neg", "Sigmoid", "Abs"][self.rng.below(5)];
                self.node(op, &[&x], shape, "");
            }
            1 | 2 => {
                let y = self.pick_shaped(&shape).unwrap_or_else(|| x.clone());
                let op = ["Add", "Mul", "Sub", "Max"][self.rng.below(4)];
                self.node(op, &[&x, &y], shape, "");
            }
            3 => {
                let bshape = if rank == 4 {
                    vec![shape[1], 1, 1]
                } else {
                    vec![last]
                };
                let b = self.init(&bshape);
                self.node("Add", &[&x, &b], shape, "");
            }
            4 => {
                let op = ["ReduceSum", "ReduceMax"][self.rng.below(2)];
                let axis = if rank == 4 { 1 } else { rank - 1 };
                let mut out = shape.clone();
                out[axis] = 1;
                let axes = self.init_ints(&[1], &[axis]);
                let r = self.node(op, &[&x, &axes], out, " {keepdims=1}");
                // Read the reduction back by broadcast (softmax-like).
                self.node("Sub", &[&x, &r], shape, "");
            }
            5 if rank == 3 => {
                let w = self.init(&[last, last]);
                self.node("MatMul", &[&x, &w], shape, "");
            }
            5 => {
                let c = shape[1];
                let w = self.init(&[c, c, 3, 3]);
                self.node("Conv", &[&x, &w], shape, " {pads=[1,1,1,1]}");
            }
            6 if rank == 3 => {
                let perm = " {perm=[0,2,1]}";
                let t = self.node("Transpose", &[&x], vec![shape[0], shape[2], shape[1]], perm);
                self.node("Transpose", &[&t], shape, perm);
            }
            6 => {
                let flat = vec![shape[0], shape[1], shape[2] * shape[3]];
                let s = self.init_ints(&[flat.len()], &flat);
                let r = self.node("Reshape", &[&x, &s], flat, "");
                let s = self.init_ints(&[shape.len()], &shape);
                self.node("Reshape", &[&r, &s], shape, "");
            }
            7 => {
                let axis = if rank == 4 { 1 } else { rank as i64 - 1 };
                self.node("Softmax", &[&x], shape, &format!(" {{axis={axis}}}"));
            }
            8 if rank == 3 => {
                let g = self.init(&[last]);
                let b = self.init(&[last]);
                self.node("LayerNormalization", &[&x, &g, &b], shape, " {axis=-1}");
            }
            _ => {
                let op = ["Relu", "Tanh"][self.rng.below(2)];
                self.node(op, &[&x], shape, "");
            }
        }
    }

    fn init_ints(&mut self, shape: &[usize], values: &[usize]) -> String {
        let name = self.fresh();
        let v: Vec<String> = values.iter().map(|d| d.to_string()).collect();
        self.lines.push(format!(
            "  init %{name}: i64[{}] = [{}]",
            dims(shape),
            v.join(", ")
        ));
        name
    }
}

/// Graph `seed`: 3-d activations (matmul, transpose, layernorm) or 4-d
/// images (convolution, reshape), 6 to 15 ops.
pub fn random_graph(seed: u64) -> String {
    let mut g = Gen {
        rng: Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) ^ 0xD1B54A32D192ED03),
        lines: Vec::new(),
        values: Vec::new(),
        next: 0,
    };
    // Large enough that matmuls and convolutions become gemms (with
    // their prologues and epilogues), small enough to run quickly.
    let shape = if g.rng.below(2) == 0 {
        vec![2, 16, 32]
    } else {
        vec![1, 8, 8, 8]
    };
    g.values.push(("x".into(), shape.clone()));
    let ops = 6 + g.rng.below(10);
    for _ in 0..ops {
        g.step();
    }
    let last = g.values.last().map(|v| v.0.clone()).unwrap_or_default();
    let mut outputs = vec![format!("%{last}")];
    let other = g.values[g.rng.below(g.values.len())].0.clone();
    if other != last && other != "x" {
        outputs.push(format!("%{other}"));
    }
    format!(
        "graph \"random{seed}\" opsets [\"\"=18] {{\n  input %x: f32[{}]\n{}\n  output {}\n}}\n",
        dims(&shape),
        g.lines.join("\n"),
        outputs.join(", ")
    )
}

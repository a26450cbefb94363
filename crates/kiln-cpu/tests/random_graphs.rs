//! Differential test of every fusion planner: random graphs of
//! element-wise, broadcast, reduction, matmul, convolution, reshape and
//! transpose ops in multi-branch DAGs (plus Softmax and LayerNorm, which
//! the graph passes open into reductions and broadcasts) run on the CPU
//! backend under `none`, `tvm`, `apollo` and `dp`, and must equal the
//! reference interpreter. `KILN_RANDOM_GRAPHS=N` changes the number of
//! graphs (default 24); a failure prints the graph's text.

mod common;

use common::{assert_close, inputs, load};
use kiln_cpu::{CompiledModel, CpuOptions};
use kiln_fuse::PlannerKind;

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
fn random_graph(seed: u64) -> String {
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

#[test]
fn every_planner_matches_the_interpreter_on_random_graphs() {
    let count: u64 = std::env::var("KILN_RANDOM_GRAPHS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let mut fused_groups = 0;
    let mut prologues = 0;
    let mut concurrent_blocks = 0;
    for seed in 0..count {
        let text = random_graph(seed);
        let original = load(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let ins = inputs(&original).unwrap();
        let want = kiln_interp::run(&original, &ins).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut g = original.clone();
        kiln_passes::optimize(&mut g, &Default::default()).unwrap();
        for fusion in PlannerKind::ALL {
            let opts = CpuOptions {
                threads: 2,
                fusion,
                ..Default::default()
            };
            let name = format!("graph {seed} under {fusion}");
            let model =
                CompiledModel::compile(&g, &opts).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            fused_groups += model
                .report
                .fusion
                .plan
                .groups
                .iter()
                .filter(|g| g.nodes.len() > 1)
                .count();
            prologues += prologue_groups(&g, &model.report.fusion.plan);
            concurrent_blocks += model.report.concurrent_blocks;
            let got = model
                .run(&ins)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            if let Err(e) = std::panic::catch_unwind(|| assert_close(&got, &want, &name)) {
                eprintln!("{text}");
                std::panic::resume_unwind(e);
            }
        }
    }
    // The test must exercise fusion, not only single-node kernels.
    eprintln!(
        "{count} graphs, {fused_groups} fused groups ({prologues} with a prologue) and {concurrent_blocks} concurrent blocks over all planners"
    );
    assert!(
        fused_groups > count as usize,
        "only {fused_groups} fused groups"
    );
    assert!(
        prologues > 0,
        "no group fused a prologue into a matmul/convolution"
    );
}

/// Groups in which a matmul or convolution reads a value another member
/// computes (a prologue).
fn prologue_groups(g: &kiln_ir::Graph, plan: &kiln_fuse::Plan) -> usize {
    let producers = g.producers();
    let contraction =
        |n: usize| matches!(g.nodes[n].op.as_str(), "MatMul" | "Conv" | "ChannelsLast");
    plan.groups
        .iter()
        .filter(|group| {
            group.nodes.iter().any(|&n| {
                contraction(n)
                    && g.nodes[n]
                        .inputs
                        .iter()
                        .flatten()
                        .any(|v| producers[v.index()].is_some_and(|p| group.nodes.contains(&p)))
            })
        })
        .count()
}

/// APOLLO's parallelism stitching on the CPU: the independent transposes
/// of a multi-head pattern run as one concurrent block, with the same
/// results as the interpreter.
#[test]
fn parallel_branches_run_concurrently() {
    let text = r#"graph "heads" opsets [""=18] {
  input %x: f32[8,16,32]
  node "t1" %a: f32[32,16,8] = Transpose(%x) {perm=[2,1,0]}
  node "t2" %b: f32[16,8,32] = Transpose(%x) {perm=[1,0,2]}
  node "t3" %c: f32[8,32,16] = Transpose(%x) {perm=[0,2,1]}
  output %a, %b, %c
}"#;
    let g = load(text).unwrap();
    let ins = inputs(&g).unwrap();
    let want = kiln_interp::run(&g, &ins).unwrap();
    let opts = CpuOptions {
        threads: 2,
        fusion: PlannerKind::Apollo,
        ..Default::default()
    };
    let model = CompiledModel::compile(&g, &opts).unwrap();
    assert_eq!(
        model.report.concurrent_blocks, 1,
        "{:?}",
        model.report.fusion.plan
    );
    let got = model.run(&ins).unwrap();
    assert_close(&got, &want, "heads").unwrap();
}

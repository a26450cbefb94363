//! The generator's op table: one builder per op family (element-wise
//! unary and binary ops, logic, reductions, data movement, casts,
//! contractions, normalizations, convolution and pooling). Each picks
//! operands among the values so far (`Gen::pick`), draws attributes and
//! appends the node; `Gen::accept` (in the parent module) then keeps it
//! only if type inference accepts the graph.

use super::{Attrs, Gen, Rng, DTYPES};
use kiln_ir::{DType, Data, Tensor, ValueId};

impl Gen {
    /// Appends one random op (see the module doc); `None` when the op
    /// found no operands it can take.
    pub(super) fn random_op(&mut self) -> Option<()> {
        match self.rng.below(100) {
            0..=17 => self.unary(),
            18..=37 => self.binary(),
            38..=41 => self.logic(),
            42..=43 => self.where_op(),
            44..=53 => self.reduce(),
            54..=56 => self.arg_reduce(),
            57..=72 => self.movement(),
            73..=76 => self.cast(),
            77..=80 => self.matmul(),
            81..=82 => self.gemm(),
            83..=85 => self.softmax(),
            86..=87 => self.layer_norm(),
            88..=89 => self.cumsum(),
            90..=94 => self.conv(),
            95..=98 => self.pool(),
            _ => self.identity(),
        }
    }

    fn identity(&mut self) -> Option<()> {
        let x = self.pick(|_, _| true)?;
        self.node1("Identity", &[x], Attrs::new());
        Some(())
    }

    fn unary(&mut self) -> Option<()> {
        let float = |d: DType, _: &[usize]| d == DType::F32 || d == DType::F16;
        let signed = |d: DType, _: &[usize]| d != DType::Bool;
        match self.rng.below(16) {
            0..=8 => {
                let x = self.pick(float)?;
                let op = self.rng.pick(&[
                    "Relu", "Sigmoid", "Tanh", "Exp", "Floor", "Ceil", "Erf", "Softplus", "Abs",
                    "Neg",
                ]);
                self.node1(op, &[x], Attrs::new());
            }
            9 => {
                let x = self.pick(signed)?;
                let op = self.rng.pick(&["Abs", "Neg", "Relu", "Sign"]);
                self.node1(op, &[x], Attrs::new());
            }
            10 => {
                let x = self.pick(float)?;
                let a = self.node1("Abs", &[x], Attrs::new());
                let (d, _) = self.ty(x);
                let one = self.scalar_of(d, 1.0);
                let s = self.node1("Add", &[a, one], Attrs::new());
                self.node1("Log", &[s], Attrs::new());
            }
            11 => {
                let x = self.pick(float)?;
                let a = self.node1("Abs", &[x], Attrs::new());
                self.node1("Sqrt", &[a], Attrs::new());
            }
            12 => {
                let x = self.pick(float)?;
                let alpha = self.rng.pick(&[0.01f32, 0.2, 0.5, 1.5]);
                let beta = self.rng.pick(&[0.5f32, 0.0, 0.3]);
                let attrs = Attrs::new().float("alpha", alpha).float("beta", beta);
                self.node1("HardSigmoid", &[x], attrs);
            }
            13 => {
                let x = self.pick(float)?;
                let alpha = self.rng.pick(&[0.01f32, 0.1, 2.0, -0.5]);
                self.node1("LeakyRelu", &[x], Attrs::new().float("alpha", alpha));
            }
            _ => self.clip()?,
        }
        Some(())
    }

    /// Clip with optional scalar min and max inputs (min may exceed max).
    fn clip(&mut self) -> Option<()> {
        let x = self.pick(|d, _| d != DType::Bool)?;
        let (d, _) = self.ty(x);
        let lo = self
            .rng
            .chance(75)
            .then(|| self.rng.pick(&[-1.0, -0.5, 0.0, 1.0]));
        let hi = self
            .rng
            .chance(75)
            .then(|| self.rng.pick(&[2.0, 0.5, 0.0, 1.0]));
        let lo = lo.map(|v| self.scalar_of(d, v));
        let hi = hi.map(|v| self.scalar_of(d, v));
        let mut ins = vec![Some(x), lo, hi];
        while ins.last() == Some(&None) {
            ins.pop();
        }
        self.node("Clip", &ins, Attrs::new());
        Some(())
    }

    /// A second operand for `x` of the same dtype: an earlier value of
    /// the same or a broadcast-compatible shape, `x` itself, or a new
    /// initializer of a broadcastable shape.
    fn operand(&mut self, x: ValueId) -> ValueId {
        let (d, s) = self.ty(x);
        match self.rng.below(10) {
            0..=3 => self
                .pick(|d2, s2| d2 == d && broadcastable(&s, s2))
                .unwrap_or(x),
            4 => x,
            _ => {
                let shape = self.broadcast_shape(&s);
                self.random_init(d, shape)
            }
        }
    }

    /// A shape that broadcasts with `s`: a suffix of it with some dims
    /// replaced by 1, or with extra leading dims.
    fn broadcast_shape(&mut self, s: &[usize]) -> Vec<usize> {
        let keep = self.rng.below(s.len() + 1);
        let mut out: Vec<usize> = s[s.len() - keep..]
            .iter()
            .map(|&d| if self.rng.chance(30) { 1 } else { d })
            .collect();
        if self.rng.chance(15) && s.len() < 4 {
            out.insert(0, self.rng.pick(&[1, 2]));
        }
        out
    }

    fn binary(&mut self) -> Option<()> {
        let numeric = |d: DType, _: &[usize]| d != DType::Bool && d != DType::F16;
        let float = |d: DType, _: &[usize]| d == DType::F32;
        let pick_float = self.rng.chance(40);
        let x = if pick_float {
            self.pick(float)?
        } else {
            self.pick(numeric)?
        };
        let (d, _) = self.ty(x);
        let mut y = self.operand(x);
        let mut x = x;
        if self.rng.chance(30) {
            std::mem::swap(&mut x, &mut y);
        }
        let op = if d.is_float() {
            // Integer Div is left out: division by zero is undefined in C
            // (kiln's C gives 0), and Pow on integers overflows.
            self.rng.pick(&[
                "Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Equal", "Less", "Greater",
            ])
        } else {
            self.rng.pick(&[
                "Add", "Sub", "Mul", "Max", "Min", "Equal", "Less", "Greater",
            ])
        };
        if op == "Pow" {
            let e = self.rng.pick(&[2.0, 3.0, 0.5, -1.0, 0.0, 1.0]);
            let e = self.scalar_of(d, e);
            self.node1("Pow", &[x, e], Attrs::new());
        } else {
            self.node1(op, &[x, y], Attrs::new());
        }
        Some(())
    }

    fn logic(&mut self) -> Option<()> {
        let x = self.pick(|d, _| d == DType::Bool)?;
        let y = self.operand(x);
        let op = self.rng.pick(&["And", "Or", "Xor", "Equal", "Not"]);
        if op == "Not" {
            self.node1(op, &[x], Attrs::new());
        } else {
            self.node1(op, &[x, y], Attrs::new());
        }
        Some(())
    }

    fn where_op(&mut self) -> Option<()> {
        let c = self.pick(|d, _| d == DType::Bool)?;
        let (_, cs) = self.ty(c);
        let x = self
            .pick(|d, s| d != DType::Bool && broadcastable(&cs, s))
            .or_else(|| self.pick(|d, _| d != DType::Bool))?;
        let y = self.operand(x);
        self.node1("Where", &[c, x, y], Attrs::new());
        Some(())
    }

    /// Distinct random axes of a rank-`r` tensor, some negative.
    fn axes(&mut self, r: usize, max: usize) -> Vec<i64> {
        let mut axes: Vec<i64> = (0..r as i64).filter(|_| self.rng.chance(45)).collect();
        axes.truncate(max);
        axes.iter()
            .map(|&a| if self.rng.chance(30) { a - r as i64 } else { a })
            .collect()
    }

    fn reduce(&mut self) -> Option<()> {
        let x = self.pick(|d, _| d != DType::Bool && d != DType::F16)?;
        let (d, s) = self.ty(x);
        let ops: &[&str] = if d.is_float() {
            &[
                "ReduceSum",
                "ReduceMax",
                "ReduceMin",
                "ReduceMean",
                "ReduceProd",
                "ReduceL2",
                "ReduceLogSumExp",
            ]
        } else {
            &["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"]
        };
        let op = self.rng.pick(ops);
        let mut attrs = Attrs::new().int("keepdims", self.rng.below(2) as i64);
        let axes = self.axes(s.len(), 4);
        if axes.is_empty() && self.rng.chance(50) {
            attrs = attrs.int("noop_with_empty_axes", self.rng.below(2) as i64);
        }
        let axes = (!axes.is_empty() || self.rng.chance(50)).then(|| self.ints(&axes));
        self.node(op, &[Some(x), axes], attrs);
        Some(())
    }

    fn arg_reduce(&mut self) -> Option<()> {
        let x = self.pick(|d, s| d != DType::Bool && d != DType::F16 && !s.is_empty())?;
        let (_, s) = self.ty(x);
        let axis = self.any_axis(s.len());
        let attrs = Attrs::new()
            .int("axis", axis)
            .int("keepdims", self.rng.below(2) as i64)
            .int("select_last_index", self.rng.below(2) as i64);
        let op = self.rng.pick(&["ArgMax", "ArgMin"]);
        self.node1(op, &[x], attrs);
        Some(())
    }

    fn movement(&mut self) -> Option<()> {
        match self.rng.below(12) {
            0 => self.transpose(),
            1 => self.reshape(),
            2 => self.flatten(),
            3 => self.squeeze(),
            4 => self.unsqueeze(),
            5 => self.concat(),
            6 => self.slice(),
            7 => self.gather(),
            8 => self.expand(),
            9 => self.tile(),
            _ => self.pad(),
        }
    }

    fn any(&mut self) -> Option<ValueId> {
        self.pick(|_, _| true)
    }

    fn transpose(&mut self) -> Option<()> {
        let x = self.pick(|_, s| !s.is_empty())?;
        let (_, s) = self.ty(x);
        let mut perm: Vec<i64> = (0..s.len() as i64).collect();
        for i in (1..perm.len()).rev() {
            let j = self.rng.below(i + 1);
            perm.swap(i, j);
        }
        let attrs = if self.rng.chance(15) {
            Attrs::new()
        } else {
            Attrs::new().ints("perm", perm)
        };
        self.node1("Transpose", &[x], attrs);
        Some(())
    }

    fn reshape(&mut self) -> Option<()> {
        let x = self.any()?;
        let (_, s) = self.ty(x);
        let n: usize = s.iter().product();
        let mut shape = self.factor(n);
        if n > 0 && !shape.is_empty() && self.rng.chance(30) {
            let k = self.rng.below(shape.len());
            shape[k] = -1;
        }
        let shape = self.ints(&shape);
        self.node1("Reshape", &[x, shape], Attrs::new());
        Some(())
    }

    /// A random shape of `n` elements, rank 0-4.
    fn factor(&mut self, n: usize) -> Vec<i64> {
        if n == 0 {
            let mut v: Vec<i64> = (0..1 + self.rng.below(3))
                .map(|_| self.rng.pick(&[1, 2, 3]))
                .collect();
            let k = self.rng.below(v.len());
            v[k] = 0;
            return v;
        }
        let mut dims = Vec::new();
        let mut rest = n;
        for p in [2, 3, 5, 7] {
            while rest % p == 0 {
                dims.push(p);
                rest /= p;
            }
        }
        if rest > 1 {
            dims.push(rest);
        }
        // Merge random neighbours down to at most 4 dims, then sprinkle 1s.
        while dims.len() > 4 || (dims.len() > 1 && self.rng.chance(40)) {
            let k = self.rng.below(dims.len() - 1);
            let merged = dims[k] * dims[k + 1];
            dims.splice(k..k + 2, [merged]);
        }
        if dims.len() < 4 && self.rng.chance(30) {
            let k = self.rng.below(dims.len() + 1);
            dims.insert(k, 1);
        }
        dims.iter().map(|&d| d as i64).collect()
    }

    fn flatten(&mut self) -> Option<()> {
        let x = self.any()?;
        let (_, s) = self.ty(x);
        let r = s.len() as i64;
        let axis = self.rng.range(-r, r + 1);
        self.node1("Flatten", &[x], Attrs::new().int("axis", axis));
        Some(())
    }

    fn squeeze(&mut self) -> Option<()> {
        let x = self.pick(|_, s| s.contains(&1))?;
        let (_, s) = self.ty(x);
        let r = s.len() as i64;
        let mut ones = Vec::new();
        for i in (0..r).filter(|&i| s[i as usize] == 1) {
            if self.rng.chance(60) {
                ones.push(if self.rng.chance(30) { i - r } else { i });
            }
        }
        let axes = (!ones.is_empty()).then(|| self.ints(&ones));
        self.node("Squeeze", &[Some(x), axes], Attrs::new());
        Some(())
    }

    fn unsqueeze(&mut self) -> Option<()> {
        let x = self.pick(|_, s| s.len() < 5)?;
        let (_, s) = self.ty(x);
        let out_rank = s.len() + 1 + self.rng.below(2);
        let added = out_rank - s.len();
        let mut axes: Vec<i64> = Vec::new();
        while axes.len() < added {
            let a = self.rng.below(out_rank) as i64;
            if !axes.contains(&a) && !axes.contains(&(a - out_rank as i64)) {
                let a = if self.rng.chance(25) {
                    a - out_rank as i64
                } else {
                    a
                };
                axes.push(a);
            }
        }
        let axes = self.ints(&axes);
        self.node1("Unsqueeze", &[x, axes], Attrs::new());
        Some(())
    }

    fn concat(&mut self) -> Option<()> {
        let x = self.pick(|_, s| !s.is_empty())?;
        let (d, s) = self.ty(x);
        let r = s.len();
        let axis = self.rng.below(r);
        let mut parts = vec![x];
        for _ in 0..1 + self.rng.below(2) {
            let y = match self.rng.below(3) {
                0 => self
                    .pick(|d2, s2| {
                        d2 == d && s2.len() == r && (0..r).all(|i| i == axis || s2[i] == s[i])
                    })
                    .unwrap_or(x),
                1 => x,
                _ => {
                    let mut s2 = s.clone();
                    s2[axis] = self.rng.pick(&[0, 1, 2, 3]);
                    self.random_init(d, s2)
                }
            };
            parts.push(y);
        }
        let axis = if self.rng.chance(30) {
            axis as i64 - r as i64
        } else {
            axis as i64
        };
        self.node1("Concat", &parts, Attrs::new().int("axis", axis));
        Some(())
    }

    fn slice(&mut self) -> Option<()> {
        let x = self.pick(|_, s| !s.is_empty())?;
        let (_, s) = self.ty(x);
        let r = s.len() as i64;
        let (mut starts, mut ends, mut axes, mut steps) = (vec![], vec![], vec![], vec![]);
        for a in 0..r {
            if !self.rng.chance(60) {
                continue;
            }
            let d = s[a as usize] as i64;
            let step = self.rng.pick(&[1, 1, 1, 2, 3, -1, -1, -2]);
            let bound = |rng: &mut Rng| match rng.below(8) {
                0 => 100,
                1 => -100,
                2 => i64::MAX,
                3 => i64::MIN,
                _ => rng.range(-d - 1, d + 2),
            };
            starts.push(bound(&mut self.rng));
            ends.push(bound(&mut self.rng));
            axes.push(if self.rng.chance(30) { a - r } else { a });
            steps.push(step);
        }
        if axes.is_empty() {
            return None;
        }
        let starts = self.ints(&starts);
        let ends = self.ints(&ends);
        // Without axes, starts/ends apply to the leading axes.
        let explicit = self.rng.chance(80);
        let axes = explicit.then(|| self.ints(&axes));
        let unit = steps.iter().all(|&s| s == 1) && self.rng.chance(50);
        let steps = (explicit && !unit).then(|| self.ints(&steps));
        let mut ins = vec![Some(x), Some(starts), Some(ends), axes, steps];
        while ins.last() == Some(&None) {
            ins.pop();
        }
        self.node("Slice", &ins, Attrs::new());
        Some(())
    }

    fn gather(&mut self) -> Option<()> {
        let x = self.pick(|_, s| s.iter().any(|&d| d > 0))?;
        let (_, s) = self.ty(x);
        let axes: Vec<usize> = (0..s.len()).filter(|&a| s[a] > 0).collect();
        let axis = self.rng.pick(&axes);
        let d = s[axis] as i64;
        let shape: Vec<usize> = (0..self.rng.below(3))
            .map(|_| self.rng.pick(&[1, 2, 3]))
            .collect();
        let n: usize = shape.iter().product();
        let v: Vec<i64> = (0..n).map(|_| self.rng.range(-d, d)).collect();
        let idx = self.init(Tensor {
            shape,
            data: Data::I64(v.into()),
        });
        let axis = if self.rng.chance(30) {
            axis as i64 - s.len() as i64
        } else {
            axis as i64
        };
        self.node1("Gather", &[x, idx], Attrs::new().int("axis", axis));
        Some(())
    }

    fn expand(&mut self) -> Option<()> {
        let x = self.any()?;
        let (_, s) = self.ty(x);
        let mut shape: Vec<i64> = s
            .iter()
            .map(|&d| match d {
                1 if self.rng.chance(50) => self.rng.pick(&[2, 3]),
                _ if self.rng.chance(20) => 1,
                d => d as i64,
            })
            .collect();
        if s.len() < 4 && self.rng.chance(40) {
            shape.insert(0, self.rng.pick(&[1, 2]));
        }
        if self.rng.chance(20) && !shape.is_empty() {
            shape.remove(0);
        }
        let shape = self.ints(&shape);
        self.node1("Expand", &[x, shape], Attrs::new());
        Some(())
    }

    fn tile(&mut self) -> Option<()> {
        let x = self.any()?;
        let (_, s) = self.ty(x);
        let reps: Vec<i64> = s.iter().map(|_| self.rng.pick(&[1, 1, 2, 3, 0])).collect();
        let reps = self.ints(&reps);
        self.node1("Tile", &[x, reps], Attrs::new());
        Some(())
    }

    fn pad(&mut self) -> Option<()> {
        let x = self.pick(|d, s| !s.is_empty() && d != DType::F16)?;
        let (d, s) = self.ty(x);
        let mode = self.rng.pick(&["constant", "constant", "reflect", "edge"]);
        let r = s.len();
        let mut pads = vec![0i64; 2 * r];
        for (k, p) in pads.iter_mut().enumerate() {
            let dim = s[k % r] as i64;
            *p = match mode {
                "reflect" => self.rng.range(0, dim.clamp(1, 3)),
                "edge" if dim == 0 => 0,
                "constant" if self.rng.chance(10) => -1,
                _ => self.rng.range(0, 3),
            };
        }
        let pads = self.ints(&pads);
        let value = (mode == "constant" && self.rng.chance(60)).then(|| self.scalar_of(d, 1.5));
        self.node(
            "Pad",
            &[Some(x), Some(pads), value],
            Attrs::new().string("mode", mode),
        );
        Some(())
    }

    fn cast(&mut self) -> Option<()> {
        let x = self.any()?;
        let to = if self.rng.chance(5) {
            DType::F16
        } else {
            self.rng.pick(&DTYPES)
        };
        self.node1("Cast", &[x], Attrs::new().int("to", to.onnx_code() as i64));
        Some(())
    }

    fn matmul(&mut self) -> Option<()> {
        let x = self.pick(|d, s| d == DType::F32 && !s.is_empty())?;
        let (d, s) = self.ty(x);
        let k = s[s.len() - 1];
        let y =
            self.pick(|d2, s2| d2 == d && ((s2.len() >= 2 && s2[s2.len() - 2] == k) || s2 == [k]));
        let y = match y {
            Some(y) if self.rng.chance(40) => y,
            _ => {
                let n = self.rng.pick(&[1, 2, 3, 5, 7, 16]);
                let mut ws = if self.rng.chance(15) {
                    vec![k]
                } else {
                    vec![k, n]
                };
                if s.len() >= 3 && self.rng.chance(40) {
                    ws.insert(0, s[s.len() - 3]);
                }
                self.random_init(d, ws)
            }
        };
        self.node1("MatMul", &[x, y], Attrs::new());
        Some(())
    }

    fn gemm(&mut self) -> Option<()> {
        let a = self.pick(|d, s| d == DType::F32 && s.len() == 2)?;
        let (d, s) = self.ty(a);
        let trans_a = self.rng.below(2);
        let trans_b = self.rng.below(2);
        let (m, k) = if trans_a == 1 {
            (s[1], s[0])
        } else {
            (s[0], s[1])
        };
        let n = self.rng.pick(&[1, 3, 5, 8]);
        let bs = if trans_b == 1 { vec![n, k] } else { vec![k, n] };
        let b = self.random_init(d, bs);
        let c = match self.rng.below(4) {
            0 => None,
            1 => Some(vec![n]),
            2 => Some(vec![m, n]),
            _ => Some(vec![m, 1]),
        };
        let c = c.map(|cs| self.random_init(d, cs));
        let attrs = Attrs::new()
            .int("transA", trans_a as i64)
            .int("transB", trans_b as i64)
            .float("alpha", self.rng.pick(&[1.0, 0.5, -2.0]))
            .float("beta", self.rng.pick(&[1.0, 0.0, 3.0]));
        self.node("Gemm", &[Some(a), Some(b), c], attrs);
        Some(())
    }

    fn softmax(&mut self) -> Option<()> {
        let x = self.pick(|d, s| d == DType::F32 && !s.is_empty())?;
        let (_, s) = self.ty(x);
        let axis = self.any_axis(s.len());
        let op = self.rng.pick(&["Softmax", "LogSoftmax"]);
        self.node1(op, &[x], Attrs::new().int("axis", axis));
        Some(())
    }

    fn layer_norm(&mut self) -> Option<()> {
        let x = self.pick(|d, s| d == DType::F32 && !s.is_empty())?;
        let (d, s) = self.ty(x);
        let axis = self.any_axis(s.len());
        let a = if axis < 0 {
            axis + s.len() as i64
        } else {
            axis
        } as usize;
        let ps = s[a..].to_vec();
        let scale = self.random_init(d, ps.clone());
        let bias = self.rng.chance(60).then(|| self.random_init(d, ps));
        let attrs = Attrs::new()
            .int("axis", axis)
            .float("epsilon", self.rng.pick(&[1e-5, 1e-3, 0.1]));
        self.node("LayerNormalization", &[Some(x), Some(scale), bias], attrs);
        Some(())
    }

    fn cumsum(&mut self) -> Option<()> {
        let x = self.pick(|d, s| d != DType::Bool && d != DType::F16 && !s.is_empty())?;
        let (_, s) = self.ty(x);
        let axis = self.any_axis(s.len());
        let axis = self.init(Tensor::scalar(axis));
        let attrs = Attrs::new()
            .int("exclusive", self.rng.below(2) as i64)
            .int("reverse", self.rng.below(2) as i64);
        self.node1("CumSum", &[x, axis], attrs);
        Some(())
    }

    /// A rank-4 f32 image (an earlier one, or a new graph input).
    fn image(&mut self) -> Option<ValueId> {
        let found = self.pick(|d, s| d == DType::F32 && s.len() == 4 && s[1] > 0);
        match found {
            Some(x) if self.rng.chance(70) => Some(x),
            _ if self.g.inputs.len() < 4 => {
                let n = self.rng.pick(&[1, 2]);
                let c = self.rng.pick(&[1, 2, 3, 4]);
                let h = self.rng.pick(&[1, 2, 3, 5, 7, 8]);
                let w = self.rng.pick(&[1, 2, 3, 5, 7, 8]);
                Some(self.input(DType::F32, vec![n, c, h, w]))
            }
            _ => found,
        }
    }

    fn conv(&mut self) -> Option<()> {
        let x = self.image()?;
        let (d, s) = self.ty(x);
        let c = s[1];
        let depthwise = c > 1 && self.rng.chance(30);
        let (group, m) = if depthwise {
            (c, c * self.rng.pick(&[1, 2]))
        } else {
            (1, self.rng.pick(&[1, 2, 3, 4]))
        };
        let kh = self.rng.pick(&[1, 2, 3]);
        let kw = self.rng.pick(&[1, 2, 3]);
        let w = self.random_init(d, vec![m, c / group, kh, kw]);
        let b = self.rng.chance(40).then(|| self.random_init(d, vec![m]));
        let mut attrs = Attrs::new()
            .ints("kernel_shape", vec![kh as i64, kw as i64])
            .ints("strides", self.pair(&[1, 1, 2]))
            .ints("dilations", self.pair(&[1, 1, 1, 2]))
            .int("group", group as i64);
        if self.rng.chance(15) {
            attrs = attrs.string(
                "auto_pad",
                self.rng.pick(&["SAME_UPPER", "SAME_LOWER", "VALID"]),
            );
        } else {
            attrs = attrs.ints("pads", self.pads(&[kh, kw]));
        }
        self.node("Conv", &[Some(x), Some(w), b], attrs);
        Some(())
    }

    fn pair(&mut self, from: &[i64]) -> Vec<i64> {
        vec![self.rng.pick(from), self.rng.pick(from)]
    }

    /// Pads (begin h, begin w, end h, end w) below each kernel extent.
    fn pads(&mut self, k: &[usize]) -> Vec<i64> {
        let mut p = vec![0i64; 4];
        for (i, v) in p.iter_mut().enumerate() {
            *v = self.rng.below(k[i % 2]) as i64;
        }
        p
    }

    fn pool(&mut self) -> Option<()> {
        let x = self.image()?;
        let kh = self.rng.pick(&[1, 2, 3]);
        let kw = self.rng.pick(&[1, 2, 3]);
        let max = self.rng.chance(50);
        let pads = self.pads(&[kh, kw]);
        let strides = self.pair(&[1, 1, 2]);
        let ceil_mode = self.rng.chance(25) as i64;
        let dilations = (max && self.rng.chance(20)).then(|| self.pair(&[1, 2]));
        let mut attrs = Attrs::new()
            .ints("kernel_shape", vec![kh as i64, kw as i64])
            .ints("strides", strides)
            .ints("pads", pads)
            .int("ceil_mode", ceil_mode);
        let op = if max {
            if let Some(d) = dilations {
                attrs = attrs.ints("dilations", d);
            }
            "MaxPool"
        } else {
            attrs = attrs.int("count_include_pad", self.rng.below(2) as i64);
            "AveragePool"
        };
        self.node1(op, &[x], attrs);
        Some(())
    }
}

/// Whether shapes `a` and `b` broadcast together (numpy rules).
fn broadcastable(a: &[usize], b: &[usize]) -> bool {
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .all(|(&x, &y)| x == y || x == 1 || y == 1)
}

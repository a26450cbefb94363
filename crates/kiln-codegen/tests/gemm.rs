//! Generated matmuls compiled with the system C compiler and compared with naive references
//! computed here in Rust (in f64, by plain loops; the convolution by a direct sliding window),
//! for every vector width the C supports (AVX-512, AVX2, 16-byte fallback), with and without
//! OpenMP, and on 1, 2 and 3 threads. Skipped, with a note, when no C compiler is installed.

mod common;

use common::compile;
use std::path::Path;
use std::process::Command;

use kiln_codegen::gemm::{
    gemm_c_tuned, gemm_prelude, gemm_prepack_c_tuned, gemm_workspace_tuned, prepack_name, Factor,
    GemmSpec, KernelShape, Operand, Param, Prepacked, Tuning, Window, WindowLayout,
};

/// Largest accepted error, relative to the largest reference magnitude of the case.
const TOLERANCE: f64 = 1e-4;

struct Input {
    name: &'static str,
    data: Vec<f32>,
}

/// One generated function, its inputs, and the whole expected output buffer (untouched
/// elements must stay 0).
struct Case {
    spec: GemmSpec,
    tuning: Tuning,
    inputs: Vec<Input>,
    output: &'static str,
    expected: Vec<f64>,
}

/// Deterministic values in [-1, 1).
fn values(count: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f64 / (1u64 << 23) as f64 - 1.0) as f32
        })
        .collect()
}

fn strided(param: &str, batch: isize, row: isize, col: isize) -> Operand {
    Operand::Strided {
        param: param.into(),
        batch,
        row,
        col,
    }
}

/// Reads element (b, r, c) of a strided operand from `data`.
fn at(data: &[f32], (batch, row, col): (isize, isize, isize), b: usize, r: usize, c: usize) -> f64 {
    let index = batch * b as isize + row * r as isize + col * c as isize;
    data[index as usize] as f64
}

fn params(inputs: &[&str], output: &str) -> Vec<Param> {
    let mut list: Vec<Param> = inputs
        .iter()
        .map(|name| Param::new("const float* restrict", *name))
        .collect();
    list.push(Param::new("float* restrict", output));
    list
}

/// Length of the buffer a strided operand of `batch x rows x cols` spans (non-negative strides).
fn span(strides: (isize, isize, isize), batch: usize, rows: usize, cols: usize) -> usize {
    let (sb, sr, sc) = strides;
    (sb * (batch as isize - 1) + sr * (rows as isize - 1) + sc * (cols as isize - 1)) as usize + 1
}

/// A matmul over strided A, B, C with an optional epilogue `epi(acc, b, r, c)` mirrored in C.
struct Matmul {
    name: &'static str,
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    a: (isize, isize, isize),
    b: (isize, isize, isize),
    c: (isize, isize, isize),
    bias: bool,
    /// The factor packed once before the call (read from parameter `packed`).
    prepack: Option<Factor>,
}

impl Matmul {
    fn plain(name: &'static str, m: usize, n: usize, k: usize) -> Matmul {
        let (m_, n_, k_) = (m as isize, n as isize, k as isize);
        Matmul {
            name,
            batch: 1,
            m,
            n,
            k,
            a: (m_ * k_, k_, 1),
            b: (k_ * n_, n_, 1),
            c: (m_ * n_, n_, 1),
            bias: false,
            prepack: None,
        }
    }

    fn case(&self, seed: u64, tuning: Tuning) -> Case {
        let (batch, m, n, k) = (self.batch, self.m, self.n, self.k);
        let a = values(span(self.a, batch, m, k), seed);
        let b = values(span(self.b, batch, k, n), seed + 1);
        let bias = values(n, seed + 2);
        let mut expected = vec![0.0; span(self.c, batch, m, n)];
        for bi in 0..batch {
            for r in 0..m {
                for (c, &bias_c) in bias.iter().enumerate() {
                    let acc: f64 = (0..k)
                        .map(|p| at(&a, self.a, bi, r, p) * at(&b, self.b, bi, p, c))
                        .sum();
                    let value = if self.bias {
                        (acc + bias_c as f64).max(0.0)
                    } else {
                        acc
                    };
                    let index =
                        self.c.0 * bi as isize + self.c.1 * r as isize + self.c.2 * c as isize;
                    expected[index as usize] = value;
                }
            }
        }
        let mut inputs = vec![Input { name: "A", data: a }, Input { name: "B", data: b }];
        let mut names = vec!["A", "B"];
        if self.bias {
            inputs.push(Input {
                name: "bias",
                data: bias,
            });
            names.push("bias");
        }
        let mut params = params(&names, "C");
        if self.prepack.is_some() {
            params.push(Param::new("const float* restrict", "packed"));
        }
        Case {
            spec: GemmSpec {
                name: self.name.into(),
                params,
                batch,
                m,
                n,
                k,
                a: strided("A", self.a.0, self.a.1, self.a.2),
                b: strided("B", self.b.0, self.b.1, self.b.2),
                c: strided("C", self.c.0, self.c.1, self.c.2),
                epilogue: self.bias.then(|| "fmaxf(acc + bias[c], 0.0f)".to_string()),
                prepacked: self.prepack.map(|factor| Prepacked {
                    factor,
                    param: "packed".into(),
                }),
            },
            tuning,
            inputs,
            output: "C",
            expected,
        }
    }
}

/// A 2-D convolution (NCHW) to run as implicit GEMM: M = output channels, N = output pixels,
/// K = input channels x kernel window, one batch entry per image. B is either an `Expr` written
/// here or a `Window`.
#[derive(Clone)]
struct Conv {
    name: &'static str,
    images: usize,
    cin: usize,
    cout: usize,
    size: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
    dilation: [usize; 2],
    window: bool,
    /// `Columns`: NCHW image, OIHW weights, NCHW output (the window is B). `ChannelsLast`: NHWC
    /// image, HWIO weights, NHWC output (the window is A, read through row pointers). `Rows`:
    /// NCHW image, IHWO weights, NHWC output (the window is A, read through per-K offsets).
    layout: WindowLayout,
    /// The weights (B, with pixel rows) are packed once before the call.
    prepack_weights: bool,
    /// `ChannelsLast` only: the images' pixels are all rows of one product
    /// (`Window::images`) instead of one batch entry per image.
    images_in_rows: bool,
    /// `ChannelsLast` only (with `images_in_rows` when several images): a
    /// grouped convolution, one batch entry per group.
    groups: usize,
}

impl Conv {
    fn square(
        name: &'static str,
        cin: usize,
        cout: usize,
        size: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
    ) -> Conv {
        Conv {
            name,
            images: 1,
            cin,
            cout,
            size: [size, size],
            kernel: [kernel, kernel],
            stride: [stride, stride],
            pad: [pad, pad],
            dilation: [1, 1],
            window: false,
            layout: WindowLayout::Columns,
            prepack_weights: false,
            images_in_rows: false,
            groups: 1,
        }
    }

    /// Batch entries of the product: one per group, one per image, or one
    /// for all.
    fn batch(&self) -> usize {
        if self.groups > 1 {
            self.groups
        } else if self.images_in_rows {
            1
        } else {
            self.images
        }
    }

    /// Input and output channels of one group.
    fn per_group(&self) -> (usize, usize) {
        (self.cin / self.groups, self.cout / self.groups)
    }

    /// Output size along axis `d` (symmetric padding).
    fn out(&self, d: usize) -> usize {
        (self.size[d] + 2 * self.pad[d] - self.dilation[d] * (self.kernel[d] - 1) - 1)
            / self.stride[d]
            + 1
    }

    /// The C expression of im2col element (b, r = (ci, kh, kw), c = (oh, ow)), 0 in the padding.
    fn window_expr(&self) -> String {
        let ([h, w], [kh, kw], ow) = (self.size, self.kernel, self.out(1));
        let ih = format!(
            "(c / {ow} * {} + r / {kw} % {kh} * {} - {})",
            self.stride[0], self.dilation[0], self.pad[0]
        );
        let iw = format!(
            "(c % {ow} * {} + r % {kw} * {} - {})",
            self.stride[1], self.dilation[1], self.pad[1]
        );
        format!(
            "({ih} >= 0 && {ih} < {h} && {iw} >= 0 && {iw} < {w}) ? X[b * {} + r / {} * {} + {ih} * {w} + {iw}] : 0.0f",
            self.cin * h * w,
            kh * kw,
            h * w
        )
    }

    fn operand(&self) -> Operand {
        if !self.window {
            return Operand::Expr(self.window_expr());
        }
        let image = (self.cin * self.size[0] * self.size[1]) as isize;
        let (batch, images, image_stride) = if self.images_in_rows {
            (0, self.images, image)
        } else {
            (image, 1, 0)
        };
        let (cin_g, _) = self.per_group();
        Operand::Window(Window {
            param: "X".into(),
            batch: if self.groups > 1 {
                cin_g as isize
            } else {
                batch
            },
            images,
            image_stride,
            channels: cin_g,
            pixel_stride: self.cin,
            size: self.size,
            out: [self.out(0), self.out(1)],
            kernel: self.kernel,
            stride: self.stride,
            pad: self.pad,
            dilation: self.dilation,
            layout: self.layout,
        })
    }

    /// Element index of image value (img, ci, y, x) in this case's layout.
    fn x_index(&self, img: usize, ci: usize, y: usize, x: usize) -> usize {
        let ([h, w], cin) = (self.size, self.cin);
        if self.layout == WindowLayout::ChannelsLast {
            ((img * h + y) * w + x) * cin + ci
        } else {
            ((img * cin + ci) * h + y) * w + x
        }
    }

    /// Element index of weight (co, ci, ky, kx) in this case's layout (`ci`
    /// within the group of `co`).
    fn w_index(&self, co: usize, ci: usize, ky: usize, kx: usize) -> usize {
        let ([kh, kw], (cin, _), cout) = (self.kernel, self.per_group(), self.cout);
        match self.layout {
            WindowLayout::ChannelsLast => ((ky * kw + kx) * cin + ci) * cout + co,
            WindowLayout::Rows => ((ci * kh + ky) * kw + kx) * cout + co,
            WindowLayout::Columns => ((co * cin + ci) * kh + ky) * kw + kx,
        }
    }

    /// Element index of output (img, co, pixel).
    fn y_index(&self, img: usize, co: usize, pixel: usize) -> usize {
        let pixels = self.out(0) * self.out(1);
        if self.layout != WindowLayout::Columns {
            (img * pixels + pixel) * self.cout + co
        } else {
            (img * self.cout + co) * pixels + pixel
        }
    }

    /// Direct sliding-window reference with bias and ReLU, NCHW output.
    fn reference(&self, x: &[f32], weights: &[f32], bias: &[f32]) -> Vec<f64> {
        let ([h, w], [kh, kw], [oh, ow]) = (self.size, self.kernel, [self.out(0), self.out(1)]);
        let mut expected = vec![0.0; self.images * self.cout * oh * ow];
        let (cin_g, cout_g) = self.per_group();
        for img in 0..self.images {
            for co in 0..self.cout {
                let first = co / cout_g * cin_g;
                for y in 0..oh {
                    for xo in 0..ow {
                        let mut acc = 0.0;
                        for ci in first..first + cin_g {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (y * self.stride[0] + ky * self.dilation[0]) as isize
                                        - self.pad[0] as isize;
                                    let ix = (xo * self.stride[1] + kx * self.dilation[1]) as isize
                                        - self.pad[1] as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                        continue;
                                    }
                                    let xi = self.x_index(img, ci, iy as usize, ix as usize);
                                    let wi = self.w_index(co, ci - first, ky, kx);
                                    acc += x[xi] as f64 * weights[wi] as f64;
                                }
                            }
                        }
                        expected[self.y_index(img, co, y * ow + xo)] =
                            (acc + bias[co] as f64).max(0.0);
                    }
                }
            }
        }
        expected
    }

    fn case(&self, seed: u64, tuning: Tuning) -> Case {
        let pixels = self.out(0) * self.out(1);
        let (cin_g, cout_g) = self.per_group();
        let window = cin_g * self.kernel[0] * self.kernel[1];
        let x = values(self.images * self.cin * self.size[0] * self.size[1], seed);
        let weights = values(self.cout * window, seed + 1);
        let bias = values(self.cout, seed + 2);
        let expected = self.reference(&x, &weights, &bias);
        let mut params = params(&["X", "W", "bias"], "Y");
        if self.prepack_weights {
            params.push(Param::new("const float* restrict", "packed"));
        }
        Case {
            spec: GemmSpec {
                name: self.name.into(),
                params,
                batch: self.batch(),
                k: window,
                prepacked: self.prepack_weights.then(|| Prepacked {
                    factor: Factor::B,
                    param: "packed".into(),
                }),
                // Pixel rows: pixels x output channels; else the transpose.
                ..if self.layout != WindowLayout::Columns {
                    let (group_stride, image_stride) = if self.groups > 1 {
                        (cout_g as isize, 0)
                    } else {
                        (0, (self.cout * pixels) as isize)
                    };
                    let c_batch = group_stride + image_stride;
                    GemmSpec {
                        m: if self.images_in_rows {
                            pixels * self.images
                        } else {
                            pixels
                        },
                        n: cout_g,
                        a: self.operand(),
                        b: strided("W", group_stride, self.cout as isize, 1),
                        c: strided("Y", c_batch, self.cout as isize, 1),
                        epilogue: Some(format!("fmaxf(acc + bias[b * {group_stride} + c], 0.0f)")),
                        ..empty_spec()
                    }
                } else {
                    GemmSpec {
                        m: self.cout,
                        n: pixels,
                        a: strided("W", 0, window as isize, 1),
                        b: self.operand(),
                        c: strided("Y", (self.cout * pixels) as isize, pixels as isize, 1),
                        epilogue: Some("fmaxf(acc + bias[r], 0.0f)".into()),
                        ..empty_spec()
                    }
                }
            },
            tuning,
            inputs: vec![
                Input { name: "X", data: x },
                Input {
                    name: "W",
                    data: weights,
                },
                Input {
                    name: "bias",
                    data: bias,
                },
            ],
            output: "Y",
            expected,
        }
    }
}

/// A spec whose fields a case overrides (operands empty expressions, sizes 0).
fn empty_spec() -> GemmSpec {
    GemmSpec {
        name: String::new(),
        params: Vec::new(),
        batch: 0,
        m: 0,
        n: 0,
        k: 0,
        a: Operand::Expr(String::new()),
        b: Operand::Expr(String::new()),
        c: Operand::Expr(String::new()),
        epilogue: None,
        prepacked: None,
    }
}

fn small_blocks(shape: Option<KernelShape>, transposed: Option<bool>) -> Tuning {
    Tuning {
        kc: Some(16),
        mc: Some(40),
        nc: Some(100),
        shape,
        transposed,
        ..Tuning::default()
    }
}

fn cases() -> Vec<Case> {
    let mut cases = vec![
        Matmul::plain("mm_1x1x1", 1, 1, 1).case(1, Tuning::default()),
        Matmul::plain("mm_7x13x5", 7, 13, 5).case(2, Tuning::default()),
        Matmul::plain("mm_100x37x129", 100, 37, 129).case(3, Tuning::default()),
        Matmul::plain("mm_65x257x300", 65, 257, 300).case(4, Tuning::default()),
    ];
    // Batch 3, B shared by every batch entry (stride 0), C rows padded to 40 (gaps stay 0).
    cases.push(
        Matmul {
            b: (0, 31, 1),
            c: (20 * 40, 40, 1),
            batch: 3,
            ..Matmul::plain("mm_batch_broadcast", 20, 31, 17)
        }
        .case(5, Tuning::default()),
    );
    // A and B stored transposed (column-major), C column-major.
    cases.push(
        Matmul {
            a: (0, 1, 45),
            b: (0, 1, 23),
            c: (0, 1, 45),
            ..Matmul::plain("mm_transposed_strides", 45, 29, 23)
        }
        .case(6, Tuning::default()),
    );
    // Bias + ReLU epilogue with K cut into several blocks (applied once, after the last).
    cases.push(
        Matmul {
            bias: true,
            ..Matmul::plain("mm_bias_relu", 65, 257, 300)
        }
        .case(7, Tuning::default()),
    );
    // Every micro-kernel shape in both orientations, on many small blocks.
    let shapes = [
        (14, 32),
        (8, 48),
        (6, 64),
        (28, 16),
        (6, 16),
        (4, 24),
        (6, 8),
        (4, 12),
        (8, 32),
    ];
    for (index, (mr, nr)) in shapes.into_iter().enumerate() {
        for transposed in [false, true] {
            let name: &'static str =
                Box::leak(format!("mm_{mr}x{nr}_t{}", transposed as u8).into_boxed_str());
            let tuning = small_blocks(Some(KernelShape { mr, nr }), Some(transposed));
            cases.push(
                Matmul {
                    bias: true,
                    batch: 2,
                    ..Matmul::plain(name, 100, 137, 129)
                }
                .case(10 + index as u64, tuning),
            );
        }
    }
    // A packed although it could be read in place, and read in place with a partial panel
    // (28 rows: the widest tile read in place), each with the epilogue applied in the
    // registers of the gemm's own kernels (rows and packed A sources).
    for (name, pack_a, mr, nr) in [
        ("mm_8x48_packed_a", true, 8, 48),
        ("mm_8x48_rows_a", false, 8, 48),
        ("mm_28x16_rows_a", false, 28, 16),
    ] {
        let tuning = Tuning {
            pack_a: Some(pack_a),
            ..small_blocks(Some(KernelShape { mr, nr }), Some(false))
        };
        cases.push(
            Matmul {
                bias: true,
                ..Matmul::plain(name, 61, 100, 77)
            }
            .case(20, tuning),
        );
    }
    // B's rows read in place (its partial last panel packed): alone, with A's rows in place
    // over two batch entries, in the transposed orientation (A column-major), and beside a
    // prepacked A with an epilogue.
    let rows_b = |pack_a: Option<bool>, shape: (usize, usize), transposed: bool| Tuning {
        pack_a,
        pack_b: Some(false),
        ..small_blocks(
            Some(KernelShape {
                mr: shape.0,
                nr: shape.1,
            }),
            Some(transposed),
        )
    };
    cases.push(Matmul::plain("mm_8x48_rows_b", 61, 100, 77).case(21, rows_b(None, (8, 48), false)));
    cases.push(
        Matmul {
            batch: 2,
            ..Matmul::plain("mm_8x48_rows_a_rows_b", 61, 100, 77)
        }
        .case(22, rows_b(Some(false), (8, 48), false)),
    );
    cases.push(
        Matmul {
            a: (0, 1, 61),
            ..Matmul::plain("mm_14x32_rows_b_t1", 61, 100, 77)
        }
        .case(23, rows_b(None, (14, 32), true)),
    );
    cases.push(
        Matmul {
            bias: true,
            prepack: Some(Factor::A),
            ..Matmul::plain("mm_prepacked_a_rows_b", 61, 137, 129)
        }
        .case(28, rows_b(None, (6, 64), false)),
    );
    // A weight read through an expression (any index of its own buffer) packed once before
    // the call, in both orientations.
    for (index, (factor, transposed)) in [(Factor::B, false), (Factor::A, true)]
        .into_iter()
        .enumerate()
    {
        let name: &'static str =
            Box::leak(format!("mm_prepacked_expr_{factor:?}").into_boxed_str());
        let tuning = Tuning {
            transposed: Some(transposed),
            ..small_blocks(None, Some(transposed))
        };
        let mut case = Matmul {
            bias: true,
            prepack: Some(factor),
            ..Matmul::plain(name, 61, 137, 129)
        }
        .case(36 + index as u64, tuning);
        match factor {
            Factor::A => case.spec.a = Operand::Expr("A[r * 129 + c]".into()),
            Factor::B => case.spec.b = Operand::Expr("B[r * 137 + c]".into()),
        }
        cases.push(case);
    }
    // A weight packed once before the call, on either side, in both orientations, with several
    // K blocks and partial panels (the packing must match what the matmul reads).
    for (index, (factor, transposed)) in [Factor::A, Factor::B]
        .into_iter()
        .flat_map(|f| [(f, false), (f, true)])
        .enumerate()
    {
        let name: &'static str =
            Box::leak(format!("mm_prepacked_{factor:?}_t{}", transposed as u8).into_boxed_str());
        for (blocks, tuning) in [
            (
                "",
                Tuning {
                    transposed: Some(transposed),
                    ..Tuning::default()
                },
            ),
            ("_small", small_blocks(None, Some(transposed))),
        ] {
            let name: &'static str = Box::leak(format!("{name}{blocks}").into_boxed_str());
            cases.push(
                Matmul {
                    bias: true,
                    prepack: Some(factor),
                    ..Matmul::plain(name, 61, 137, 129)
                }
                .case(24 + index as u64, tuning),
            );
        }
    }
    let conv = Conv {
        images: 2,
        size: [11, 9],
        ..Conv::square("conv3x3_s2_p1", 5, 6, 11, 3, 2, 1)
    };
    cases.push(conv.case(30, Tuning::default()));
    let transposed = Conv {
        name: "conv3x3_s2_p1_transposed",
        ..conv.clone()
    };
    cases.push(transposed.case(31, small_blocks(None, Some(true))));
    cases.push(Conv::square("conv3x3_s1_p1_wide", 16, 20, 20, 3, 1, 1).case(32, Tuning::default()));
    // The same geometries, and odder ones, through the window packer.
    let windows = [
        Conv {
            name: "win3x3_s2_p1",
            window: true,
            ..conv.clone()
        },
        Conv {
            name: "win3x3_s1_p1_wide",
            window: true,
            ..Conv::square("", 16, 20, 20, 3, 1, 1)
        },
        Conv {
            name: "win1x1_s2",
            window: true,
            ..Conv::square("", 7, 9, 13, 1, 2, 0)
        },
        Conv {
            name: "win5x3_dilated",
            window: true,
            images: 3,
            size: [12, 17],
            kernel: [5, 3],
            stride: [1, 3],
            pad: [4, 2],
            dilation: [2, 1],
            ..Conv::square("", 3, 5, 0, 0, 1, 0)
        },
        Conv {
            name: "win7x7_s2_p3",
            window: true,
            ..Conv::square("", 3, 8, 23, 7, 2, 3)
        },
    ];
    // Each through both packers: runs of image rows and gathers from the staged copy.
    for (index, conv) in windows.into_iter().enumerate() {
        let seed = 40 + 4 * index as u64;
        for (packer, staged) in [("runs", false), ("staged", true)] {
            let named = |suffix: &str| Conv {
                name: Box::leak(format!("{}_{packer}{suffix}", conv.name).into_boxed_str()),
                ..conv.clone()
            };
            let tuning = Tuning {
                staged: Some(staged),
                ..Tuning::default()
            };
            let small = Tuning {
                staged: Some(staged),
                ..small_blocks(None, Some(true))
            };
            let seed = seed + 2 * staged as u64;
            cases.push(named("").case(seed, tuning));
            cases.push(named("_small_blocks_t").case(seed + 1, small));
        }
        // NHWC: through row pointers (K blocks within a tap), and packed.
        for (suffix, pack_a, kc) in [
            ("_nhwc_pointers", false, Some(4)),
            ("_nhwc_packed", true, None),
        ] {
            let nhwc = Conv {
                name: Box::leak(format!("{}{suffix}", conv.name).into_boxed_str()),
                layout: WindowLayout::ChannelsLast,
                cin: conv.cin * 4,
                ..conv.clone()
            };
            let tuning = Tuning {
                pack_a: Some(pack_a),
                kc,
                shape: Some(KernelShape { mr: 8, nr: 48 }),
                ..Tuning::default()
            };
            cases.push(nhwc.case(seed + 3 + pack_a as u64, tuning.clone()));
            // Grouped: 4 and 8 channels per group (vector lanes over several
            // groups where the width allows, a last vector of half a width);
            // through row pointers also 24 and 56 (the batched product, its taps
            // inside each tile: N under one 48-column tile, every tile copied, and
            // over it, whole tiles into C and the clipped ones copied).
            let widths: &[usize] = if pack_a { &[4, 8] } else { &[4, 8, 24, 56] };
            for &per_group in widths {
                let grouped = Conv {
                    name: Box::leak(
                        format!("{}_groups_of_{per_group}", nhwc.name).into_boxed_str(),
                    ),
                    cin: per_group * 6,
                    cout: per_group * 6,
                    groups: 6,
                    images_in_rows: conv.images > 1,
                    ..nhwc.clone()
                };
                cases.push(grouped.case(seed + 9 + per_group as u64, tuning.clone()));
            }
            if conv.images > 1 {
                let in_rows = Conv {
                    name: Box::leak(format!("{}_images_in_rows", nhwc.name).into_boxed_str()),
                    images_in_rows: true,
                    ..nhwc
                };
                cases.push(in_rows.case(seed + 3 + pack_a as u64, tuning));
            }
        }
        // NCHW image as pixel rows: through offsets (in K blocks of 16, weights prepacked when
        // there is one image), packed as an expression, and transposed.
        let rows = |suffix: &str| Conv {
            name: Box::leak(format!("{}_rows{suffix}", conv.name).into_boxed_str()),
            layout: WindowLayout::Rows,
            ..conv.clone()
        };
        let offsets = Tuning {
            kc: Some(16),
            ..Tuning::default()
        };
        let prepacked = Conv {
            prepack_weights: conv.images == 1,
            ..rows("_offsets")
        };
        cases.push(prepacked.case(seed + 5, offsets));
        let packed = Tuning {
            pack_a: Some(true),
            ..Tuning::default()
        };
        cases.push(rows("_packed").case(seed + 6, packed));
        cases.push(rows("_t").case(seed + 7, small_blocks(None, Some(true))));
    }
    cases
}

/// The threads the harness sizes workspaces for (`KILN_MAX_THREADS`).
const TEST_THREADS: usize = 4;

const HARNESS: &str = r#"
#include <stdio.h>
static float* test_load(const char* dir, const char* name, long count)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    float* data = malloc(sizeof(float) * (size_t)count);
    FILE* file = fopen(path, "rb");
    if (!data || !file || fread(data, sizeof(float), (size_t)count, file) != (size_t)count) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    fclose(file);
    return data;
}
static void test_store(const char* dir, const char* name, const float* data, long count)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE* file = fopen(path, "wb");
    if (!file || fwrite(data, sizeof(float), (size_t)count, file) != (size_t)count) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(file);
}
"#;

/// The C program: prelude, every case's function, and a main that loads inputs, runs each
/// function once and stores its output.
fn program(cases: &[Case]) -> String {
    let mut source = format!(
        "#define KILN_MAX_THREADS {TEST_THREADS}\n{}\n{HARNESS}\n",
        gemm_prelude()
    );
    let mut main = String::from(
        "int main(int argc, char** argv)\n{\n    const char* dir = argv[1];\n    (void)argc;\n",
    );
    for case in cases {
        source.push_str(&gemm_c_tuned(&case.spec, &case.tuning).expect("valid spec"));
        let name = &case.spec.name;
        main.push_str("    {\n");
        for input in &case.inputs {
            main.push_str(&format!(
                "        float* {0} = test_load(dir, \"{name}.{0}\", {1});\n",
                input.name,
                input.data.len()
            ));
        }
        let out_len = case.expected.len();
        main.push_str(&format!(
            "        float* {} = calloc({out_len}, sizeof(float));\n",
            case.output
        ));
        let args: Vec<&str> = case.spec.params.iter().map(|p| p.name.as_str()).collect();
        if let Some(prepacked) = &case.spec.prepacked {
            source.push_str(&gemm_prepack_c_tuned(&case.spec, &case.tuning).expect("valid spec"));
            let pack = prepack_name(&case.spec);
            let param = &prepacked.param;
            main.push_str(&format!(
                "        float* {param} = malloc(sizeof(float) * (size_t){pack}_floats());\n"
            ));
            let unpacked: Vec<&str> = args
                .iter()
                .map(|a| if a == param { "0" } else { a })
                .collect();
            main.push_str(&format!(
                "        {pack}({}, {param});\n",
                unpacked.join(", ")
            ));
        }
        let floats = gemm_workspace_tuned(&case.spec, &case.tuning)
            .expect("valid spec")
            .floats(TEST_THREADS);
        main.push_str(&format!(
            "        float* kiln_test_ws = aligned_alloc(64, sizeof(float) * {floats} + 64);\n        {name}({}, kiln_test_ws);\n        free(kiln_test_ws);\n",
            args.join(", ")
        ));
        main.push_str(&format!(
            "        test_store(dir, \"{name}.out\", {}, {out_len});\n",
            case.output
        ));
        for arg in args {
            main.push_str(&format!("        free((void*){arg});\n"));
        }
        main.push_str("    }\n");
    }
    main.push_str("    return 0;\n}\n");
    source + &main
}

fn compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).arg("--version").output() {
        Ok(out) if out.status.success() => Some(cc),
        _ => {
            eprintln!("note: no C compiler `{cc}` found; generated gemm tests skipped");
            None
        }
    }
}

fn write_floats(path: &Path, data: &[f32]) {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes).expect("write input");
}

fn read_floats(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).expect("read output");
    bytes
        .chunks_exact(4)
        .map(|chunk| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
        .collect()
}

/// Compiles all cases with `flags`, runs the program once per thread count and checks every
/// output. Returns false (after a note) when the compiler rejects the flags themselves.
fn check_all(flags: &[&str], thread_counts: &[usize]) {
    let Some(cc) = compiler() else {
        return;
    };
    let cases = cases();
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("gemm_test.c");
    let exe = dir.path().join("gemm_test");
    std::fs::write(&source, program(&cases)).expect("write C");
    compile(&cc, flags, &source, &exe);
    for case in &cases {
        for input in &case.inputs {
            let path = dir
                .path()
                .join(format!("{}.{}", case.spec.name, input.name));
            write_floats(&path, &input.data);
        }
    }
    for &threads in thread_counts {
        let run = Command::new(&exe)
            .arg(dir.path())
            .env("OMP_NUM_THREADS", threads.to_string())
            .output()
            .expect("run test program");
        assert!(
            run.status.success(),
            "program failed ({flags:?}, {threads} threads):\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
        for case in &cases {
            let got = read_floats(&dir.path().join(format!("{}.out", case.spec.name)));
            assert_eq!(got.len(), case.expected.len(), "{}", case.spec.name);
            let scale = case.expected.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
            let (worst, index) = got
                .iter()
                .zip(&case.expected)
                .enumerate()
                .map(|(i, (g, e))| ((*g as f64 - e).abs() / scale, i))
                .fold(
                    (0.0, 0),
                    |best, cur| if cur.0 > best.0 { cur } else { best },
                );
            assert!(
                worst < TOLERANCE,
                "{} ({flags:?}, {threads} threads): relative error {worst:.3e} at {index}: got {}, expected {}",
                case.spec.name,
                got[index],
                case.expected[index]
            );
        }
    }
}

#[test]
fn avx512_or_native_width_with_openmp() {
    check_all(&["-O2", "-march=native", "-fopenmp"], &[1, 2, 3]);
}

#[test]
fn avx2_width() {
    check_all(&["-O2", "-march=native", "-mno-avx512f", "-fopenmp"], &[2]);
}

#[test]
fn sixteen_byte_fallback_width() {
    check_all(&["-O2", "-march=x86-64", "-fopenmp"], &[3]);
}

#[test]
fn without_openmp() {
    check_all(
        &[
            "-O2",
            "-march=native",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Wno-unknown-pragmas",
            "-Werror",
        ],
        &[1],
    );
}

#[test]
fn under_address_and_undefined_sanitizers() {
    check_all(
        &[
            "-O1",
            "-march=native",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
        ],
        &[1],
    );
}

#[test]
fn fma_peak_program_runs() {
    let Some(cc) = compiler() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("peak.c");
    let exe = dir.path().join("peak");
    std::fs::write(&source, kiln_codegen::peak::peak_c()).expect("write C");
    let strict = [
        "-O2",
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Wno-unknown-pragmas",
        "-Werror",
        "-DKILN_PEAK_MAIN",
    ];
    compile(&cc, &strict, &source, &exe);
    compile(
        &cc,
        &["-O2", "-march=native", "-fopenmp", "-DKILN_PEAK_MAIN"],
        &source,
        &exe,
    );
    let run = Command::new(&exe).arg("2").output().expect("run peak");
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success() && text.contains("GFLOP/s"), "{text}");
    // "1 thread X GFLOP/s": a positive number.
    let single: f64 = text
        .split("1 thread ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
        .expect("a GFLOP/s figure");
    assert!(single > 0.1, "{text}");
}

//! Measures one generated matmul against the machine's measured fp32 FMA peak.
//!
//! `cargo run --release -p kiln-codegen --example gemm_bench -- [M N K] [threads]
//!  [--batch B] [--kc N] [--mc N] [--nc N] [--shape MRxNR] [--transposed 0|1] [--pack-a 0|1] [--pack-b 0|1] [--staged 0|1] [--prefetch 0|1] [--prepacked [--cold-b COPIES]] [--reps N]
//!  [--conv3x3 [--expr | --nhwc | --rows] [--kernel K] [--stride S]]`
//!
//! `--conv3x3` makes B an implicit-GEMM expression instead: a 3x3, stride 1, pad 1 convolution
//! over `K/9` input channels of a square `sqrt(N) x sqrt(N)` image (M = output channels), the
//! way a ResNet layer runs (64 3136 576 is ResNet-50's 3x3 conv of stage 2): a `Window`
//! operand, or with `--expr` the same read written as an `Operand::Expr`. With `--nhwc` the
//! image is NHWC and A is the window (M = pixels of a square image, N = output channels), read
//! through row pointers: `3136 64 576` is the same stage-2 convolution. With `--rows` the image
//! is NCHW and A is the window with pixels as rows (M = pixels), read from a zero-padded copy
//! through per-K offsets. `--kernel K --stride S`
//! make the window K x K with stride S and padding K/2 (input side = output side x S):
//! `64 12544 147 --kernel 7 --stride 2` is ResNet-50's first convolution (`12544 64 147
//! --rows --prepacked`: the same, pixels as rows).
//!
//! The cache blocking takes this machine's L1 and L2 sizes (`kiln_target::host`), as kiln's own
//! compiles do.
//!
//! `--prepacked` packs B once before timing, as kiln does for a model's weights
//! (`gemm_prepack_c`), so the timed calls read the packing (batch 1; B strided). `--cold-b COPIES`
//! packs that many copies and the calls take them in turn: with more bytes than the last-level
//! cache, every call reads its weights from memory, as a model's successive layers do.
//!
//! Compiles (with `$CC`, default `cc`, kiln's flags `CompilerConfig::default_flags("native")`;
//! `$KILN_CFLAGS` replaces
//! those) one program holding the generated gemm (row-major A, B, C; batch strides M*K, K*N,
//! M*N) and the FMA peak benchmark, runs it, and prints GFLOP/s (best and median of the
//! repetitions), the peak for the same thread count and the fraction. A sample of C is checked
//! against a double-precision dot product so a fast wrong kernel cannot pass unnoticed.

use std::process::Command;

use kiln_codegen::gemm::{
    gemm_c_tuned, gemm_prelude, gemm_prepack_c_tuned, gemm_workspace_tuned, prepack_name, Factor,
    GemmSpec, KernelShape, Operand, Param, Prepacked, Tuning, Window, WindowLayout,
};
use kiln_codegen::peak::peak_c;

struct Args {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    reps: usize,
    conv: bool,
    expr: bool,
    nhwc: bool,
    rows: bool,
    /// Window side and stride of `--conv3x3` (3 and 1 unless `--kernel`/`--stride`).
    kernel: usize,
    stride: usize,
    /// B packed once before timing (`--prepacked`).
    prepacked: bool,
    /// Copies of the prepacked B the calls take in turn (`--cold-b N`, default 1).
    b_copies: usize,
    tuning: Tuning,
}

fn parse_args() -> Result<Args, String> {
    let mut positional = Vec::new();
    let mut args = Args {
        batch: 1,
        m: 1024,
        n: 1024,
        k: 1024,
        threads: 2,
        reps: 0,
        conv: false,
        expr: false,
        nhwc: false,
        rows: false,
        kernel: 3,
        stride: 1,
        prepacked: false,
        b_copies: 1,
        tuning: Tuning::default(),
    };
    let mut iter = std::env::args().skip(1);
    let number = |text: Option<String>| -> Result<usize, String> {
        let text = text.ok_or("missing value")?;
        text.parse().map_err(|_| format!("not a number: {text}"))
    };
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--batch" => args.batch = number(iter.next())?,
            "--conv3x3" => args.conv = true,
            "--expr" => args.expr = true,
            "--nhwc" => args.nhwc = true,
            "--rows" => args.rows = true,
            "--kernel" => args.kernel = number(iter.next())?,
            "--stride" => args.stride = number(iter.next())?,
            "--reps" => args.reps = number(iter.next())?,
            "--prepacked" => args.prepacked = true,
            "--cold-b" => args.b_copies = number(iter.next())?.max(1),
            "--kc" => args.tuning.kc = Some(number(iter.next())?),
            "--mc" => args.tuning.mc = Some(number(iter.next())?),
            "--nc" => args.tuning.nc = Some(number(iter.next())?),
            "--transposed" => args.tuning.transposed = Some(number(iter.next())? != 0),
            "--pack-a" => args.tuning.pack_a = Some(number(iter.next())? != 0),
            "--pack-b" => args.tuning.pack_b = Some(number(iter.next())? != 0),
            "--staged" => args.tuning.staged = Some(number(iter.next())? != 0),
            "--prefetch" => args.tuning.prefetch = Some(number(iter.next())? != 0),
            "--shape" => {
                let text = iter.next().ok_or("missing shape")?;
                let (mr, nr) = text.split_once('x').ok_or("shape is MRxNR")?;
                args.tuning.shape = Some(KernelShape {
                    mr: number(Some(mr.to_string()))?,
                    nr: number(Some(nr.to_string()))?,
                });
            }
            _ => positional.push(number(Some(arg))?),
        }
    }
    match positional.as_slice() {
        [] => {}
        [threads] => args.threads = *threads,
        [m, n, k] => (args.m, args.n, args.k) = (*m, *n, *k),
        [m, n, k, threads] => (args.m, args.n, args.k, args.threads) = (*m, *n, *k, *threads),
        _ => return Err("usage: gemm_bench [M N K] [threads] [--options]".into()),
    }
    let pixel_rows = args.nhwc || args.rows;
    let pixels = if pixel_rows { args.m } else { args.n };
    let taps = args.kernel * args.kernel;
    if args.b_copies > 1 && !args.prepacked {
        return Err("--cold-b needs --prepacked".into());
    }
    if args.prepacked && ((args.conv && !pixel_rows) || args.batch != 1) {
        return Err("--prepacked is for batch-1 matmuls with a strided B".into());
    }
    if args.conv && (!args.k.is_multiple_of(taps) || image_side(pixels).is_none()) {
        return Err(
            "--conv3x3 needs K = kernel^2 * channels and N (M with --nhwc or --rows) a square"
                .into(),
        );
    }
    Ok(args)
}

/// The side of a square image of `pixels` pixels.
fn image_side(pixels: usize) -> Option<usize> {
    (1..=pixels)
        .find(|side| side * side >= pixels)
        .filter(|side| side * side == pixels)
}

/// im2col element (b, r = (ci, kh, kw), c = (oh, ow)) of a 3x3 stride-1 pad-1 convolution of
/// the images in `B` (`K/9` channels of `side x side`), 0 in the padding.
fn conv_expr(k: usize, side: usize) -> String {
    let ih = format!("(c / {side} + r / 3 % 3 - 1)");
    let iw = format!("(c % {side} + r % 3 - 1)");
    format!(
        "({ih} >= 0 && {ih} < {side} && {iw} >= 0 && {iw} < {side}) ? B[b * {} + r / 9 * {} + {ih} * {side} + {iw}] : 0.0f",
        k / 9 * side * side,
        side * side
    )
}

fn spec(args: &Args) -> GemmSpec {
    let (m, n, k) = (args.m as isize, args.n as isize, args.k as isize);
    let strided = |param: &str, batch, row| Operand::Strided {
        param: param.into(),
        batch,
        row,
        col: 1,
    };
    let mut params = vec![
        Param::new("const float* restrict", "A"),
        Param::new("const float* restrict", "B"),
        Param::new("float* restrict", "C"),
    ];
    if args.prepacked {
        params.push(Param::new("const float* restrict", "P"));
    }
    GemmSpec {
        name: "bench_gemm".into(),
        params,
        batch: args.batch,
        m: args.m,
        n: args.n,
        k: args.k,
        a: match image_side(args.m) {
            Some(side) if args.conv && args.nhwc => {
                Operand::Window(square_window("A", side, args, WindowLayout::ChannelsLast))
            }
            Some(side) if args.conv && args.rows => {
                Operand::Window(square_window("A", side, args, WindowLayout::Rows))
            }
            _ => strided("A", m * k, k),
        },
        b: match image_side(args.n) {
            _ if args.nhwc || args.rows => strided("B", k * n, n),
            Some(side) if args.conv && args.expr => Operand::Expr(conv_expr(args.k, side)),
            Some(side) if args.conv => {
                Operand::Window(square_window("B", side, args, WindowLayout::Columns))
            }
            _ => strided("B", k * n, n),
        },
        c: strided("C", m * n, n),
        epilogue: None,
        prepacked: args.prepacked.then(|| Prepacked {
            factor: Factor::B,
            param: "P".into(),
        }),
    }
}

/// A `kernel x kernel` window of stride `stride` and padding `kernel / 2` over `K / kernel^2`
/// channels, producing a `side x side` output, in `param`.
fn square_window(param: &str, side: usize, args: &Args, layout: WindowLayout) -> Window {
    let (kernel, stride) = (args.kernel, args.stride);
    let input = side * stride;
    Window {
        param: param.into(),
        batch: (args.k / (kernel * kernel) * input * input) as isize,
        channels: args.k / (kernel * kernel),
        pixel_stride: args.k / (kernel * kernel),
        size: [input, input],
        out: [side, side],
        kernel: [kernel, kernel],
        stride: [stride, stride],
        pad: [kernel / 2, kernel / 2],
        dilation: [1, 1],
        layout,
        images: 1,
        image_stride: 0,
    }
}

const MAIN: &str = r#"
#include <stdio.h>
/* A 64-byte aligned buffer of `floats` floats. */
static float* bench_alloc(long floats)
{
    return (float*)aligned_alloc(64, ((size_t)(floats > 0 ? floats : 1) * sizeof(float) + 63) / 64 * 64);
}
@A_AT@
@B_AT@
static int kiln_cmp(const void* x, const void* y)
{
    const double a = *(const double*)x, b = *(const double*)y;
    return (a > b) - (a < b);
}
/* Process CPU time: time other processes take from our cores is not counted. */
static double kiln_cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
int main(int argc, char** argv)
{
    const long BATCH = @BATCH@, M = @M@, N = @N@, K = @K@;
    int threads = atoi(argv[1]), reps = atoi(argv[2]);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    float* A = bench_alloc(BATCH * M * K);
    float* B = bench_alloc(BATCH * K * N);
    float* C = bench_alloc(BATCH * M * N);
    float* WS = bench_alloc(@WS_FIXED@ + @WS_PER_THREAD@ * (long)threads);
    if (!A || !B || !C || !WS)
        return 1;
    unsigned s = 12345;
    for (long i = 0; i < BATCH * M * K; i++) { s = s * 1103515245u + 12345u; A[i] = (float)((s >> 9) & 1023) / 512.0f - 1.0f; }
    for (long i = 0; i < BATCH * K * N; i++) { s = s * 1103515245u + 12345u; B[i] = (float)((s >> 9) & 1023) / 512.0f - 1.0f; }
@PACK@
    const double peak_before = kiln_fma_peak_gflops(threads);
    CALL_GEMM();
    double first = kiln_peak_now();
    CALL_GEMM();
    first = kiln_peak_now() - first;
    if (reps <= 0)
        reps = first > 0.5 ? 3 : (int)(1.0 / first) + 3;
    double* times = malloc(sizeof(double) * reps);
    double cpu_best = 1e30;
    for (int i = 0; i < reps; i++) {
        const double c0 = kiln_cpu_now(), t0 = kiln_peak_now();
        CALL_GEMM();
        times[i] = kiln_peak_now() - t0;
        const double cpu = kiln_cpu_now() - c0;
        if (cpu < cpu_best)
            cpu_best = cpu;
    }
    qsort(times, reps, sizeof(double), kiln_cmp);
    const double peak_after = kiln_fma_peak_gflops(threads);
    const double peak = peak_before > peak_after ? peak_before : peak_after;
    double max_err = 0.0;
    for (int t = 0; t < 256; t++) {
        s = s * 1103515245u + 12345u;
        const long b = (s >> 4) % BATCH, i = (s >> 8) % M, j = (s >> 16) % N;
        double exact = 0.0, scale = 0.0;
        for (long p = 0; p < K; p++) {
            const double x = A_AT(b, i, p), y = B_AT(b, p, j);
            exact += x * y;
            scale += fabs(x * y);
        }
        const double err = fabs(C[b * M * N + i * N + j] - exact) / (scale > 0 ? scale : 1.0);
        if (err > max_err)
            max_err = err;
    }
    const double flops = 2.0 * BATCH * M * N * K;
    const double best = flops / times[0] * 1e-9, median = flops / times[reps / 2] * 1e-9;
    printf("%s %ldx(%ldx%ldx%ld), %d threads: best %.1f GFLOP/s (%.3f ms), median %.1f GFLOP/s, %d runs\n",
           @KIND@, BATCH, M, N, K, threads, best, times[0] * 1e3, median, reps);
    printf("fp32 FMA peak, %d threads: %.1f GFLOP/s (before %.1f, after %.1f)\n", threads, peak, peak_before, peak_after);
    printf("per-thread CPU time rate (insensitive to other processes): %.1f GFLOP/s per thread\n",
           flops / cpu_best * 1e-9);
    printf("fraction of peak: best %.1f%%, median %.1f%%; max relative error %.2e\n",
           100.0 * best / peak, 100.0 * median / peak, max_err);
    return max_err < 1e-5 ? 0 : 2;
}
"#;

fn main() {
    if let Err(message) = run() {
        eprintln!("gemm_bench: {message}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut args = parse_args()?;
    // The cache sizes kiln's own compiles give the gemm (`c.rs` `kernel_c`): this machine's.
    let host = kiln_target::host();
    args.tuning.l2_bytes = args.tuning.l2_bytes.or(Some(host.l2_per_core()));
    args.tuning.l1_bytes = args.tuning.l1_bytes.or(Some(host.l1_per_core()));
    let spec = spec(&args);
    let mut gemm = gemm_c_tuned(&spec, &args.tuning).map_err(|e| e.to_string())?;
    let workspace = gemm_workspace_tuned(&spec, &args.tuning).map_err(|e| e.to_string())?;
    let pack = if args.prepacked {
        gemm += &gemm_prepack_c_tuned(&spec, &args.tuning).map_err(|e| e.to_string())?;
        let name = prepack_name(&spec);
        format!(
            "    const long COPIES = {copies}, PACKED = {name}_floats();\n    float* P = bench_alloc(PACKED * COPIES);\n    if (!P) return 1;\n    for (long c = 0; c < COPIES; c++) {name}(A, B, C, P + c * PACKED, P + c * PACKED);\n    long call = 0;\n#define CALL_GEMM() bench_gemm(A, B, C, P + (call++ % COPIES) * PACKED, WS)",
            copies = args.b_copies
        )
    } else {
        "#define CALL_GEMM() bench_gemm(A, B, C, WS)".to_string()
    };
    let (kernel, stride, pad, taps) = (
        args.kernel,
        args.stride,
        args.kernel / 2,
        args.kernel * args.kernel,
    );
    let b_at = match image_side(args.n) {
        Some(side) if args.conv && !args.nhwc && !args.rows => format!(
            "#define B_IN(b, ci, y, x) ((y) >= 0 && (y) < {input} && (x) >= 0 && (x) < {input} ? B[(b) * (K / {taps}) * {input} * {input} + (ci) * {input} * {input} + (y) * {input} + (x)] : 0.0f)\n\
             #define B_AT(b, p, j) B_IN(b, (p) / {taps}, (j) / {side} * {stride} + (p) / {kernel} % {kernel} - {pad}, (j) % {side} * {stride} + (p) % {kernel} - {pad})\n",
            input = side * stride
        ),
        _ => "#define B_AT(b, p, j) B[(b) * K * N + (p) * N + (j)]\n".to_string(),
    };
    let a_at = match image_side(args.m) {
        Some(side) if args.conv && args.nhwc => format!(
            "#define A_IN(b, y, x, ci) ((y) >= 0 && (y) < {input} && (x) >= 0 && (x) < {input} ? A[(b) * {input} * {input} * (K / {taps}) + ((y) * {input} + (x)) * (K / {taps}) + (ci)] : 0.0f)\n\
             #define A_AT(b, i, p) A_IN(b, (i) / {side} * {stride} + (p) / (K / {taps}) / {kernel} - {pad}, (i) % {side} * {stride} + (p) / (K / {taps}) % {kernel} - {pad}, (p) % (K / {taps}))\n",
            input = side * stride
        ),
        Some(side) if args.conv && args.rows => format!(
            "#define A_IN(b, ci, y, x) ((y) >= 0 && (y) < {input} && (x) >= 0 && (x) < {input} ? A[(b) * (K / {taps}) * {input} * {input} + (ci) * {input} * {input} + (y) * {input} + (x)] : 0.0f)\n\
             #define A_AT(b, i, p) A_IN(b, (p) / {taps}, (i) / {side} * {stride} + (p) / {kernel} % {kernel} - {pad}, (i) % {side} * {stride} + (p) % {kernel} - {pad})\n",
            input = side * stride
        ),
        _ => "#define A_AT(b, i, p) A[(b) * M * K + (i) * K + (p)]\n".to_string(),
    };
    let main = MAIN
        .replace("@A_AT@", &a_at)
        .replace("@B_AT@", &b_at)
        .replace("@PACK@", &pack)
        .replace(
            "@KIND@",
            if args.conv {
                "\"conv3x3 (implicit GEMM)\""
            } else {
                "\"gemm\""
            },
        )
        .replace("@BATCH@", &args.batch.to_string())
        .replace("@M@", &args.m.to_string())
        .replace("@N@", &args.n.to_string())
        .replace("@K@", &args.k.to_string())
        .replace("@WS_FIXED@", &workspace.fixed.to_string())
        .replace("@WS_PER_THREAD@", &workspace.per_thread.to_string());
    // Workspace slots for up to 256 threads; the team is `threads`.
    let source = format!(
        "#define KILN_MAX_THREADS 256\n{}\n{}\n{gemm}\n{main}",
        gemm_prelude(),
        peak_c()
    );
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let c_path = dir.path().join("bench.c");
    let exe = dir.path().join("bench");
    std::fs::write(&c_path, source).map_err(|e| e.to_string())?;
    if let Ok(keep) = std::env::var("KILN_KEEP_C") {
        std::fs::copy(&c_path, &keep).map_err(|e| e.to_string())?;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let flags = std::env::var("KILN_CFLAGS")
        .map(|f| f.split_whitespace().map(str::to_string).collect())
        .unwrap_or_else(|_| kiln_runtime::jit::CompilerConfig::default_flags("native"));
    let status = Command::new(&cc)
        .args(&flags)
        .arg(&c_path)
        .arg("-o")
        .arg(&exe)
        .arg("-lm")
        .status()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if !status.success() {
        return Err(format!("{cc} failed"));
    }
    let status = Command::new(&exe)
        .arg(args.threads.to_string())
        .arg(args.reps.to_string())
        .status()
        .map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("benchmark exited with {status}"));
    }
    Ok(())
}

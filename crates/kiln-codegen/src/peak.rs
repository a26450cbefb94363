//! The fp32 FMA peak of the machine, measured by a small C program: the yardstick the matmul
//! and the model benchmarks are reported against ("fraction of peak").
//!
//! Needs a C11 compiler with vector extensions (and OpenMP for more than one thread).
//! Guarantees C text exporting `double kiln_fma_peak_gflops(int threads)`: each of `threads`
//! OpenMP threads runs many independent vector FMA chains (`acc = acc * x + y`; enough chains
//! to cover FMA latency times throughput on current cores: 16 zmm chains for AVX-512, 12
//! otherwise so they fit 16 registers), timed with `clock_gettime`, best of several runs, in
//! GFLOP/s (a multiply-add counts 2). Without OpenMP it measures one thread whatever `threads`
//! says. Under `-std=c11` it needs POSIX `clock_gettime`: it defines `_POSIX_C_SOURCE` itself
//! when it comes first in the file, otherwise the file must. Compiled with `-DKILN_PEAK_MAIN` the text is also a program:
//! `./peak [threads]` prints the single-thread and `threads`-thread peaks.

use std::fmt::Write;

/// Independent FMA chains per vector width in bytes.
const CHAINS: [(usize, usize); 3] = [(64, 16), (32, 12), (16, 12)];

const HEADER: &str = r#"#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__)
#define KILN_PEAK_VBYTES 64
#elif defined(__AVX__)
#define KILN_PEAK_VBYTES 32
#else
#define KILN_PEAK_VBYTES 16
#endif
typedef float kiln_peak_vf __attribute__((vector_size(KILN_PEAK_VBYTES)));

static double kiln_peak_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
"#;

const MEASURE: &str = r#"
/* Iterations per timed run: about 10 ms at 100 GFLOP/s per thread. */
#define KILN_PEAK_ITERS (1L << 21)

/* Read by the timing loop (so its start value is unknown to the compiler) and written with
   its result (so the chains are not optimised away). */
volatile float kiln_peak_seed = 1.0f, kiln_peak_sink;

double kiln_fma_peak_gflops(int threads)
{
    const double flops_per_iter = 2.0 * KILN_PEAK_CHAINS * (KILN_PEAK_VBYTES / 4);
    double best = 0.0;
    if (threads < 1)
        threads = 1;
    for (int run = 0; run < 7; run++) {
        int used = 1;
        float total = 0.0f;
        const double start = kiln_peak_now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
#ifdef _OPENMP
#pragma omp single
            used = omp_get_num_threads();
#endif
            total += kiln_peak_chains(KILN_PEAK_ITERS, kiln_peak_seed);
        }
        const double seconds = kiln_peak_now() - start;
        kiln_peak_sink = total;
        const double gflops = flops_per_iter * (double)KILN_PEAK_ITERS * used / seconds * 1e-9;
        if (gflops > best)
            best = gflops;
    }
    return best;
}

#ifdef KILN_PEAK_MAIN
int main(int argc, char** argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    printf("fp32 FMA peak: 1 thread %.1f GFLOP/s, %d threads %.1f GFLOP/s\n",
           kiln_fma_peak_gflops(1), threads, kiln_fma_peak_gflops(threads));
    return 0;
}
#endif
"#;

/// The chain function for `chains` independent accumulators, fully unrolled.
fn chains_function(chains: usize) -> String {
    let mut out = String::new();
    out.push_str("static float kiln_peak_chains(long iters, float seed)\n{\n");
    out.push_str("    const kiln_peak_vf x = (kiln_peak_vf){0} + 0.999999f, y = (kiln_peak_vf){0} + 1e-6f;\n");
    for i in 0..chains {
        let _ = writeln!(
            out,
            "    kiln_peak_vf a{i} = (kiln_peak_vf){{0}} + seed * {}.0f;",
            i + 1
        );
    }
    out.push_str("    for (long i = 0; i < iters; i++) {\n");
    for i in 0..chains {
        let _ = writeln!(out, "        a{i} = a{i} * x + y;");
    }
    out.push_str("    }\n");
    let sum: Vec<String> = (0..chains).map(|i| format!("a{i}")).collect();
    let _ = writeln!(out, "    const kiln_peak_vf s = {};", sum.join(" + "));
    out.push_str("    float total = 0.0f;\n");
    out.push_str("    for (int i = 0; i < KILN_PEAK_VBYTES / 4; i++)\n        total += s[i];\n");
    out.push_str("    return total;\n}\n");
    out
}

/// C source of the FMA peak benchmark (see the module doc).
pub fn peak_c() -> String {
    let mut out = String::from(HEADER);
    for (index, (bytes, chains)) in CHAINS.iter().enumerate() {
        let directive = match index {
            0 => format!("#if KILN_PEAK_VBYTES == {bytes}"),
            _ if index + 1 == CHAINS.len() => "#else".to_string(),
            _ => format!("#elif KILN_PEAK_VBYTES == {bytes}"),
        };
        let _ = writeln!(out, "{directive}\n#define KILN_PEAK_CHAINS {chains}");
        out.push_str(&chains_function(*chains));
    }
    out.push_str("#endif\n");
    out.push_str(MEASURE);
    out
}

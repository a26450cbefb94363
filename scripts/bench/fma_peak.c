/* fma_peak.c: measured fp32 fused-multiply-add peak of this machine.
 *
 * Fallback for `kiln peak --threads N --json` used by scripts/bench/run.py.
 * Each thread runs CHAINS independent dependency chains of vector FMAs
 * (acc = acc * mul + add), enough to cover FMA latency x FMA ports on current
 * x86 and Arm cores (e.g. Zen 4: 4-cycle latency, 2 ports -> 8 chains needed).
 * The vector width follows the target like kiln's generated C: 64 bytes with
 * AVX-512F, 32 with AVX/AVX2, otherwise 16.
 *
 * Build: cc -O3 -march=native -ffp-contract=fast -fopenmp fma_peak.c -o fma_peak
 * (-ffp-contract=fast makes GCC fuse a*b+c into one FMA even under -std=c11.)
 * Run:   OMP_NUM_THREADS=2 ./fma_peak [seconds-per-repeat]
 * Prints one JSON line: {"gflops": best, "threads": T, "lanes": L, ...}.
 * Without -fopenmp it runs on one thread and says so.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX512F__)
#define VBYTES 64
#elif defined(__AVX__) || defined(__AVX2__)
#define VBYTES 32
#else
#define VBYTES 16
#endif
#define LANES (VBYTES / (int)sizeof(float))
#define CHAINS 16
#define REPEATS 5

typedef float vf __attribute__((vector_size(VBYTES)));

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static vf splat(float x)
{
    vf v;
    for (int i = 0; i < LANES; i++)
        v[i] = x;
    return v;
}

/* Runs `iters` rounds of CHAINS independent FMAs; returns a value derived from
 * every chain so the compiler cannot drop any of them. The multiplier keeps
 * the accumulators bounded (fixed point add / (1 - mul)), so no overflow and
 * no subnormals. */
static float fma_chains(long iters, float seed)
{
    const vf mul = splat(0.999999f), add = splat(1e-6f);
    vf a0 = splat(seed), a1 = a0 + add, a2 = a1 + add, a3 = a2 + add;
    vf a4 = a3 + add, a5 = a4 + add, a6 = a5 + add, a7 = a6 + add;
    vf a8 = a7 + add, a9 = a8 + add, a10 = a9 + add, a11 = a10 + add;
    vf a12 = a11 + add, a13 = a12 + add, a14 = a13 + add, a15 = a14 + add;
    for (long i = 0; i < iters; i++) {
        a0 = a0 * mul + add;
        a1 = a1 * mul + add;
        a2 = a2 * mul + add;
        a3 = a3 * mul + add;
        a4 = a4 * mul + add;
        a5 = a5 * mul + add;
        a6 = a6 * mul + add;
        a7 = a7 * mul + add;
        a8 = a8 * mul + add;
        a9 = a9 * mul + add;
        a10 = a10 * mul + add;
        a11 = a11 * mul + add;
        a12 = a12 * mul + add;
        a13 = a13 * mul + add;
        a14 = a14 * mul + add;
        a15 = a15 * mul + add;
    }
    vf s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11)) +
           ((a12 + a13) + (a14 + a15));
    float total = 0.0f;
    for (int i = 0; i < LANES; i++)
        total += s[i];
    return total;
}

/* One timed repeat on every thread; returns GFLOP/s over the slowest thread. */
static double timed_repeat(long iters, int *threads, float *sink)
{
    float sum = 0.0f;
    int nthreads = 1;
    double t0 = now_s();
#pragma omp parallel reduction(+ : sum)
    {
#ifdef _OPENMP
#pragma omp single
        nthreads = omp_get_num_threads();
        sum += fma_chains(iters, 1.0f + (float)omp_get_thread_num());
#else
        sum += fma_chains(iters, 1.0f);
#endif
    }
    double dt = now_s() - t0;
    *threads = nthreads;
    *sink += sum;
    double flops = 2.0 * LANES * CHAINS * (double)iters * nthreads;
    return flops / dt * 1e-9;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 0.5;
    if (!(seconds > 0.0) || seconds > 60.0) {
        fprintf(stderr, "usage: %s [seconds-per-repeat in (0, 60]]\n", argv[0]);
        return 2;
    }
    int threads = 1;
    float sink = 0.0f;
    /* Calibrate the iteration count so one repeat takes about `seconds`. */
    long iters = 1L << 16;
    double dt = 0.0;
    while (iters < (1L << 40)) {
        double t0 = now_s();
        timed_repeat(iters, &threads, &sink);
        dt = now_s() - t0;
        if (dt >= seconds / 8)
            break;
        iters *= 2;
    }
    if (dt > 0.0)
        iters = (long)((double)iters * seconds / dt) + 1;
    double best = 0.0;
    for (int r = 0; r < REPEATS; r++) {
        double g = timed_repeat(iters, &threads, &sink);
        if (g > best)
            best = g;
    }
    printf("{\"gflops\": %.2f, \"threads\": %d, \"lanes\": %d, \"chains\": %d, "
           "\"vector_bytes\": %d, \"repeats\": %d, \"iters\": %ld, \"checksum\": %g}\n",
           best, threads, LANES, CHAINS, VBYTES, REPEATS, iters, (double)sink);
    return 0;
}

//! The memory bandwidth of the machine, measured by a small C program (STREAM's triad): the
//! yardstick memory-bound kernels (reductions, element-wise chains) are reported against
//! ("fraction of bandwidth"), beside [`crate::peak`]'s compute peak.
//!
//! Needs a C11 compiler (and OpenMP for more than one thread).
//! Guarantees C text exporting `double kiln_triad_gbps(int threads)`: `a[i] = b[i] + s * c[i]`
//! over three f32 arrays of [`TRIAD_ELEMS`] elements each (far larger than any cache, so
//! the data streams from memory), first touched by the threads that use them, each run
//! split statically over `threads` OpenMP threads; best of several runs, in GB/s counting
//! 12 bytes per element (two reads and a write, as STREAM counts). Returns 0 when the
//! arrays cannot be allocated. Under `-std=c11` it defines `_POSIX_C_SOURCE` itself when
//! it comes first in the file, otherwise the file must.

/// Elements per array: 64 MiB of f32 each, well beyond the last-level caches of current
/// CPUs, so the triad measures memory, not cache.
pub const TRIAD_ELEMS: usize = 1 << 24;

const TRIAD: &str = r#"#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#endif
#include <stdlib.h>
#include <time.h>

static double kiln_triad_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

volatile float kiln_triad_scalar = 3.0f, kiln_triad_sink;

double kiln_triad_gbps(int threads)
{
    const long n = KILN_TRIAD_ELEMS;
    float* a = malloc(sizeof(float) * n);
    float* b = malloc(sizeof(float) * n);
    float* c = malloc(sizeof(float) * n);
    double best = 0.0;
    if (!a || !b || !c)
        goto done;
    if (threads < 1)
        threads = 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; i++) {
        a[i] = 0.0f;
        b[i] = 1.0f;
        c[i] = 2.0f;
    }
    const float s = kiln_triad_scalar;
    for (int run = 0; run < 8; run++) {
        const double start = kiln_triad_now();
#pragma omp parallel for simd num_threads(threads) schedule(static)
        for (long i = 0; i < n; i++)
            a[i] = b[i] + s * c[i];
        const double gbps = 12.0 * (double)n / (kiln_triad_now() - start) * 1e-9;
        if (gbps > best)
            best = gbps;
        kiln_triad_sink = a[run];
    }
done:
    free(a);
    free(b);
    free(c);
    return best;
}
"#;

/// C source of the triad benchmark (see the module doc).
pub fn triad_c() -> String {
    format!("#define KILN_TRIAD_ELEMS {TRIAD_ELEMS}L\n{TRIAD}")
}

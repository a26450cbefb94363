//! The C prelude shared by every generated matmul in one C file: headers, the vector type for
//! the width the compiler targets, unaligned vector load/store, the packing-buffer allocator,
//! the thread-balancing block split and the micro-kernels of that width.
//!
//! Needs a C11 compiler with GCC/Clang vector extensions. Guarantees it can be pasted once per
//! C file (a guard macro makes a second copy harmless) and that everything it defines starts
//! with `kiln_`/`KILN_`. Fused multiply-adds come from contracting `x * y + z`: GCC does so by
//! default (`-std=gnu*`) and, in ISO mode, for the kernels through a pragma; Clang with its
//! `fp contract(fast)` pragma.

use std::sync::OnceLock;

use super::emit::CWriter;
use super::kernel::{contracted, emit_ukernel, for_each_target, ASource, TARGETS};

const HEADER: &str = r#"#ifndef KILN_GEMM_PRELUDE
#define KILN_GEMM_PRELUDE
#include <stdlib.h>
#include <string.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
/* Helpers and micro-kernels a file may not call: no unused-function warnings (Clang warns even
   for static inline functions). */
#if defined(__GNUC__)
#define KILN_STATIC_INLINE static inline __attribute__((unused))
#else
#define KILN_STATIC_INLINE static inline
#endif
/* A helper kept out of line: rarely run code (a tile clipped at the matrix edge) that, inlined
   into a gemm's loop nest, would multiply the compiler's work on that nest. */
#if defined(__GNUC__)
#define KILN_NOINLINE static __attribute__((noinline, unused))
#else
#define KILN_NOINLINE static
#endif
/* An OpenMP directive, `KILN_OMP(omp simd)`: nothing without OpenMP, so code built without it
   has no unknown pragmas to warn about. */
#ifdef _OPENMP
#define KILN_OMP(...) _Pragma(#__VA_ARGS__)
#else
#define KILN_OMP(...)
#endif
/* A loop GCC must leave rolled (its full unrolling would cost more than it saves). */
#if defined(__GNUC__) && !defined(__clang__)
#define KILN_ROLLED _Pragma("GCC unroll 1")
#else
#define KILN_ROLLED
#endif
#if defined(__clang__)
/* `omp simd` is a request: a loop Clang cannot vectorize (a gather, a call) stays scalar,
   which is not worth a warning per loop. */
#pragma clang diagnostic ignored "-Wpass-failed"
#pragma clang fp contract(fast)
#endif
@WIDTH@
typedef float kiln_vf __attribute__((vector_size(KILN_VBYTES)));

/* Vector load/store at any float address (memcpy: no alignment or aliasing assumption;
   compilers turn it into one vector move). */
KILN_STATIC_INLINE kiln_vf kiln_vload(const float* p)
{
    kiln_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
KILN_STATIC_INLINE void kiln_vstore(float* p, kiln_vf v)
{
    memcpy(p, &v, sizeof v);
}
/* The first `n` floats at `p` as a vector, the other lanes zero: no read past them. */
KILN_STATIC_INLINE kiln_vf kiln_vload_part(const float* p, long n)
{
    kiln_vf v = {0};
    memcpy(&v, p, sizeof(float) * (size_t)n);
    return v;
}
/* `v`'s lanes permuted: lane j of the result is lane INDEX_j of `v` (constant indices). */
#if defined(__clang__)
#define KILN_LANES(v, ...) __builtin_shufflevector((v), (v), __VA_ARGS__)
#else
typedef int kiln_vi __attribute__((vector_size(KILN_VBYTES)));
#define KILN_LANES(v, ...) __builtin_shuffle((v), (kiln_vi){__VA_ARGS__})
#endif

/* The most threads a gemm runs on: its workspace has a slot for each (the model defines it). */
#ifndef KILN_MAX_THREADS
#define KILN_MAX_THREADS 1
#endif
KILN_STATIC_INLINE long kiln_gemm_threads(void)
{
#ifdef _OPENMP
    const long t = omp_get_max_threads();
    return t < KILN_MAX_THREADS ? t : KILN_MAX_THREADS;
#else
    return 1;
#endif
}
KILN_STATIC_INLINE long kiln_thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Part `part` of `parts` of the `floats` floats from `p`, fetched into L2 one cache line
   (16 floats) at a time: a prepacked weight panel the next tiles read, streamed from memory
   a slice per tile while the current panel is in use instead of all at once, stalled, when
   its first tile starts. */
KILN_STATIC_INLINE void kiln_gemm_prefetch_part(const float* p, long floats, long part, long parts)
{
    const long lines = (floats + 15) / 16, per = (lines + parts - 1) / parts;
    for (long l = part * per; l < (part + 1) * per && l < lines; l++)
        __builtin_prefetch(p + l * 16, 0, 2);
}

/* Chooses how many M and N blocks (*mb, *nb: at least their incoming values, at most mpan and
   npan panels) to cut the batch * mb * nb tasks into, for the OpenMP thread count: the least
   makespan (tasks per thread times the largest task, in panels; blocks differ by at most one
   panel), then the least repacking (every M block packs its own copy of B when B is packed
   per call, every N block its own copy of A when A is), then the fewest tasks. */
KILN_STATIC_INLINE void kiln_gemm_split(long batch, long mpan, long npan, long mr, long nr, int pack_a,
                            int pack_b, long* mb, long* nb)
{
    const long threads = kiln_gemm_threads();
    const long mb0 = *mb, nb0 = *nb;
    long best_span = -1, best_repack = 0, best_tasks = 0;
    for (long m = mb0; m <= mpan && m <= mb0 + 2 * threads; m++) {
        for (long n = nb0; n <= npan && n <= nb0 + 2 * threads; n++) {
            const long tasks = batch * m * n;
            const long span = (tasks + threads - 1) / threads * ((mpan + m - 1) / m) * ((npan + n - 1) / n);
            const long repack = (pack_b ? (m - 1) * npan * nr : 0) + (pack_a ? (n - 1) * mpan * mr : 0);
            const int better = best_span < 0 || span < best_span ||
                               (span == best_span && (repack < best_repack ||
                                                      (repack == best_repack && tasks < best_tasks)));
            if (better) {
                best_span = span;
                best_repack = repack;
                best_tasks = tasks;
                *mb = m;
                *nb = n;
            }
        }
    }
}
"#;

/// Builds the prelude text (headers, helpers, every target's micro-kernels behind `#if`).
fn build_prelude() -> String {
    let mut w = CWriter::new();
    for line in HEADER.lines() {
        if line == "@WIDTH@" {
            emit_width_selection(&mut w);
        } else {
            w.directive(line);
        }
    }
    contracted(&mut w, |w| {
        for_each_target(w, |w, target| {
            for rated in target.shapes {
                for source in ASource::ALL {
                    emit_ukernel(w, rated.shape, target.vector_len(), source, None);
                }
            }
        })
    });
    w.directive("#endif /* KILN_GEMM_PRELUDE */");
    w.finish()
}

/// `#define KILN_VBYTES`: `KILN_FORCE_VBYTES` where defined (an ahead-of-time export fixes the
/// width its weights were packed for), else from the first target whose condition holds.
fn emit_width_selection(w: &mut CWriter) {
    w.directive("#if defined(KILN_FORCE_VBYTES)");
    w.directive("#define KILN_VBYTES KILN_FORCE_VBYTES");
    for target in TARGETS {
        let keyword = "#elif";
        w.directive(format!("{keyword} {}", target.condition));
        w.directive(format!("#define KILN_VBYTES {}", target.bytes));
    }
    w.directive("#endif");
}

/// The shared C prelude (built once).
pub(crate) fn prelude() -> &'static str {
    static PRELUDE: OnceLock<String> = OnceLock::new();
    PRELUDE.get_or_init(build_prelude)
}

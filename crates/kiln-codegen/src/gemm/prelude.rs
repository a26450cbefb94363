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
use super::kernel::{emit_ukernel, for_each_target, ASource, TARGETS};

const HEADER: &str = r#"#ifndef KILN_GEMM_PRELUDE
#define KILN_GEMM_PRELUDE
#include <stdlib.h>
#include <string.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__clang__)
#pragma clang fp contract(fast)
#endif
@WIDTH@
typedef float kiln_vf __attribute__((vector_size(KILN_VBYTES)));

/* Vector load/store at any float address (memcpy: no alignment or aliasing assumption;
   compilers turn it into one vector move). */
static inline kiln_vf kiln_vload(const float* p)
{
    kiln_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void kiln_vstore(float* p, kiln_vf v)
{
    memcpy(p, &v, sizeof v);
}

/* A 64-byte aligned packing buffer of `floats` floats (NULL when memory is short). */
static float* kiln_gemm_alloc(long floats)
{
    size_t bytes = ((size_t)(floats > 0 ? floats : 1) * sizeof(float) + 63) / 64 * 64;
    return (float*)aligned_alloc(64, bytes);
}

/* Grows the number of M and N blocks (*mb, *nb; at most mpan and npan panels) until the
   batch * mb * nb tasks divide evenly among the OpenMP threads or are plentiful. Each M block
   packs its own copy of B and each N block its own copy of A, so it splits N when A is not
   packed (prefer_n), else the dimension whose blocks are larger (rows * mr vs columns * nr).
   Blocks get panel counts that differ by at most one, so equal task counts mean equal work. */
static void kiln_gemm_split(long batch, long mpan, long npan, long mr, long nr, int prefer_n,
                            long* mb, long* nb)
{
    long threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    for (;;) {
        const long tasks = batch * *mb * *nb;
        if (tasks % threads == 0 || tasks >= 16 * threads)
            return;
        const long rows = (mpan + *mb - 1) / *mb * mr, cols = (npan + *nb - 1) / *nb * nr;
        const int split_n = *nb < npan && (prefer_n || rows < cols || *mb >= mpan);
        if (split_n)
            ++*nb;
        else if (*mb < mpan)
            ++*mb;
        else
            return;
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
    // GCC contracts `x * y + z` into FMAs by default, but not in ISO C mode (-std=c11, which
    // defines __STRICT_ANSI__): there the kernels ask for it themselves.
    let iso_gcc = "#if defined(__GNUC__) && !defined(__clang__) && defined(__STRICT_ANSI__)";
    w.directive(iso_gcc);
    w.directive("#pragma GCC push_options");
    w.directive("#pragma GCC optimize(\"fp-contract=fast\")");
    w.directive("#endif");
    for_each_target(&mut w, |w, target| {
        for rated in target.shapes {
            for source in ASource::ALL {
                emit_ukernel(w, rated.shape, target.vector_len(), source);
            }
        }
    });
    w.directive(iso_gcc);
    w.directive("#pragma GCC pop_options");
    w.directive("#endif");
    w.directive("#endif /* KILN_GEMM_PRELUDE */");
    w.finish()
}

/// `#define KILN_VBYTES` from the first target whose condition holds.
fn emit_width_selection(w: &mut CWriter) {
    for (index, target) in TARGETS.iter().enumerate() {
        let keyword = if index == 0 { "#if" } else { "#elif" };
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

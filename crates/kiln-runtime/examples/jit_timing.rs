//! Measures the JIT driver: cold compile of N synthetic kernel pieces with 1 and with all
//! threads, and the cache hit. `cargo run --release -p kiln-runtime --example jit_timing -- [N]`
//! uses fresh temporary caches under $TMPDIR, never the user's; `-- N DIR` compiles once into
//! the cache DIR (run it twice to time a hit in a new process, as a second `kiln run` would).

use kiln_runtime::jit::{compile, CompilerConfig};

/// A kernel piece in the style of generated code: a vectorised, OpenMP-parallel loop nest.
fn piece(k: usize) -> String {
    format!(
        "#include <stddef.h>\n#include <string.h>\n\
         #if defined(__AVX512F__)\n#define VB 64\n#elif defined(__AVX__)\n#define VB 32\n#else\n#define VB 16\n#endif\n\
         typedef float vf __attribute__((vector_size(VB)));\n\
         #define VL (VB / 4)\n\
         void kernel_{k}(const float *restrict a, const float *restrict b, float *restrict c, long m, long n, long kk) {{\n\
           #pragma omp parallel for\n\
           for (long i = 0; i < m; ++i) {{\n\
             for (long j = 0; j + VL <= n; j += VL) {{\n\
               vf acc = {{0}};\n\
               for (long p = 0; p < kk; ++p) {{\n\
                 vf bv; memcpy(&bv, b + p * n + j, sizeof bv);\n\
                 acc += a[i * kk + p] * bv;\n\
               }}\n\
               memcpy(c + i * n + j, &acc, sizeof acc);\n\
             }}\n\
           }}\n\
         }}\n"
    )
}

fn main() -> kiln_ir::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(16);
    let pieces: Vec<String> = (0..n).map(piece).collect();
    let threads = kiln_runtime::available_threads();
    if let Some(dir) = std::env::args().nth(2) {
        let config = CompilerConfig {
            cache_dir: dir.into(),
            ..CompilerConfig::from_env()
        };
        let (_, report) = compile(&config, &pieces, threads)?;
        println!("{report:?}");
        return Ok(());
    }
    println!(
        "{} pieces, {} ({} threads)",
        n,
        kiln_runtime::cpu_model_name(),
        threads
    );
    for t in [1, threads] {
        let cache =
            std::env::temp_dir().join(format!("kiln-jit-timing-{}-{t}", std::process::id()));
        let config = CompilerConfig {
            cache_dir: cache.clone(),
            ..CompilerConfig::from_env()
        };
        let (_, cold) = compile(&config, &pieces, t)?;
        let (_, hot) = compile(&config, &pieces, t)?;
        println!(
            "threads {t}: cold {:.3} s, cached {:.4} s (cached={})",
            cold.seconds, hot.seconds, hot.cached
        );
        let _ = std::fs::remove_dir_all(cache);
    }
    Ok(())
}

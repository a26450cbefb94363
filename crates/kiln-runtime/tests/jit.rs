//! JIT driver against the real system C compiler: cross-piece linking, OpenMP, the cache (a hit
//! runs no compiler), and the error messages. Every test uses its own temporary cache.

use std::path::{Path, PathBuf};

use kiln_runtime::jit::{compile, CompilerConfig};

fn config_in(cache: &Path) -> CompilerConfig {
    CompilerConfig {
        cache_dir: cache.to_path_buf(),
        ..CompilerConfig::from_env()
    }
}

/// Piece 0 defines a helper; piece 1 calls it across the translation-unit boundary.
fn two_pieces(scale: f32) -> Vec<String> {
    let helper = format!("float kiln_test_scale(float x) {{ return x * {scale:?}f; }}\n");
    let user = "#include <stddef.h>\n\
        float kiln_test_scale(float x);\n\
        float kiln_test_dot_scaled(const float *restrict a, const float *restrict b, size_t n) {\n\
            float acc = 0.0f;\n\
            for (size_t i = 0; i < n; ++i) acc += a[i] * b[i];\n\
            return kiln_test_scale(acc);\n\
        }\n";
    vec![helper, user.to_string()]
}

type DotFn = unsafe extern "C" fn(*const f32, *const f32, usize) -> f32;

fn call_dot(library: &kiln_runtime::Library, a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: the symbol is defined above with exactly this C signature.
    unsafe {
        let dot: DotFn = library.symbol("kiln_test_dot_scaled").unwrap();
        dot(a.as_ptr(), b.as_ptr(), a.len())
    }
}

fn oracle_dot_scaled(a: &[f32], b: &[f32], scale: f32) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() * scale
}

/// An executable shell script `dir/name` with the given body after the `#!/bin/sh` line.
fn shell_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join(name);
    std::fs::write(&script, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// A compiler that appends a line to `log` on every run, then runs the real one.
fn counting_compiler(dir: &Path, log: &Path) -> PathBuf {
    let real = CompilerConfig::from_env().cc;
    let body = format!("echo run >> '{}'\nexec {real} \"$@\"\n", log.display());
    shell_script(dir, "counting-cc", &body)
}

/// A double sum in an OpenMP loop; `kiln_test_threads` too when `with_runtime` (needs omp.h).
fn openmp_sum_source(with_runtime: bool) -> String {
    let runtime = "#include <omp.h>\n\
        int kiln_test_threads(void) { return omp_get_max_threads(); }\n";
    let sum = "double kiln_test_sum(const double *restrict x, long n) {\n\
            double s = 0.0;\n\
            #pragma omp parallel for reduction(+:s)\n\
            for (long i = 0; i < n; ++i) s += x[i];\n\
            return s;\n\
        }\n";
    format!("{}{sum}", if with_runtime { runtime } else { "" })
}

fn call_sum(library: &kiln_runtime::Library, x: &[f64]) -> f64 {
    // SAFETY: signature as defined in `openmp_sum_source`.
    unsafe {
        let sum: unsafe extern "C" fn(*const f64, i64) -> f64 =
            library.symbol("kiln_test_sum").unwrap();
        sum(x.as_ptr(), x.len() as i64)
    }
}

fn runs_logged(log: &Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |t| t.lines().count())
}

#[test]
fn two_pieces_link_into_one_library_and_compute() {
    let cache = tempfile::tempdir().unwrap();
    let (library, report) = compile(&config_in(cache.path()), &two_pieces(0.5), 2).unwrap();
    assert!(!report.cached);
    assert_eq!(report.pieces, 2);
    let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.25).collect();
    let b: Vec<f32> = (0..37).map(|i| 3.0 - i as f32 * 0.5).collect();
    let got = call_dot(&library, &a, &b);
    let want = oracle_dot_scaled(&a, &b, 0.5);
    assert!(
        (got - want).abs() <= 1e-4 * want.abs().max(1.0),
        "{got} vs {want}"
    );
    // The sources are kept beside the library for people to read.
    let stem = library.path().file_stem().unwrap().to_owned();
    let kept = cache.path().join(stem).join("piece_1.c");
    assert_eq!(std::fs::read_to_string(kept).unwrap(), two_pieces(0.5)[1]);
}

#[test]
fn second_compile_is_a_fast_cache_hit_that_runs_no_compiler() {
    use std::os::unix::fs::PermissionsExt;
    let cache = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    let log = tools.path().join("runs.log");
    let cc = counting_compiler(tools.path(), &log);
    let config = CompilerConfig {
        cc: cc.display().to_string(),
        ..config_in(cache.path())
    };
    let (_, cold) = compile(&config, &two_pieces(2.0), 2).unwrap();
    assert!(!cold.cached);
    let cold_runs = runs_logged(&log);
    assert_eq!(cold_runs, 3, "two compiles and one link");

    let (library, hot) = compile(&config, &two_pieces(2.0), 2).unwrap();
    assert!(hot.cached);
    assert!(hot.seconds < 0.1, "cache hit took {} s", hot.seconds);
    assert_eq!(
        runs_logged(&log),
        cold_runs,
        "a hit must not run the compiler"
    );
    let (a, b) = ([1.0f32, 2.0, 3.0], [4.0f32, 5.0, 6.0]);
    assert_eq!(call_dot(&library, &a, &b), oracle_dot_scaled(&a, &b, 2.0));

    // The compiler can no longer run (same file, same size and time): a hit still loads.
    std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (_, unrunnable) = compile(&config, &two_pieces(2.0), 2).unwrap();
    assert!(unrunnable.cached);
    // ... while a miss reports that it cannot run the compiler.
    let err = compile(&config, &two_pieces(3.0), 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot run C compiler"), "{err}");
}

#[test]
fn different_sources_or_flags_miss_the_cache() {
    let cache = tempfile::tempdir().unwrap();
    let config = config_in(cache.path());
    let (first, _) = compile(&config, &two_pieces(1.0), 1).unwrap();
    let (other, report) = compile(&config, &two_pieces(4.0), 1).unwrap();
    assert!(!report.cached);
    assert_ne!(first.path(), other.path());
    let (a, b) = ([1.5f32, -2.0], [2.0f32, 0.25]);
    assert_eq!(call_dot(&other, &a, &b), oracle_dot_scaled(&a, &b, 4.0));
    let mut flags = config.flags.clone();
    flags.push("-DKILN_TEST_VARIANT=1".to_string());
    let (_, with_flag) = compile(&CompilerConfig { flags, ..config }, &two_pieces(1.0), 1).unwrap();
    assert!(!with_flag.cached);
}

#[test]
fn openmp_parallel_loop_computes_the_same_sum() {
    let cache = tempfile::tempdir().unwrap();
    let (library, _) = compile(&config_in(cache.path()), &[openmp_sum_source(true)], 1).unwrap();
    let x: Vec<f64> = (0..10_000).map(|i| (i % 17) as f64).collect();
    assert_eq!(call_sum(&library, &x), x.iter().sum::<f64>());
    // SAFETY: signature as defined in `openmp_sum_source`.
    let threads = unsafe {
        let threads: unsafe extern "C" fn() -> i32 = library.symbol("kiln_test_threads").unwrap();
        threads()
    };
    assert!(threads >= 1);
}

#[test]
fn missing_compiler_gives_a_clear_error() {
    let cache = tempfile::tempdir().unwrap();
    for cc in ["kiln-no-such-compiler", "/nonexistent/dir/cc"] {
        let config = CompilerConfig {
            cc: cc.to_string(),
            ..config_in(cache.path())
        };
        let err = compile(&config, &two_pieces(1.0), 1)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!("no C compiler found: tried `{cc}`; set $CC to a C11 compiler (gcc or clang)")
        );
    }
}

#[test]
fn syntax_error_reports_compiler_stderr_and_kept_source() {
    let cache = tempfile::tempdir().unwrap();
    let pieces = vec![
        "int kiln_test_ok(void) { return 1; }\n".to_string(),
        "int kiln_test_broken(void) { return 1 +; }\n".to_string(),
    ];
    let err = compile(&config_in(cache.path()), &pieces, 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("failed compiling"), "{err}");
    assert!(err.contains("piece_1.c"), "{err}");
    assert!(err.contains("error"), "compiler stderr missing: {err}");
    // The named source exists and is the broken piece.
    let kept = err
        .split_whitespace()
        .find(|word| word.ends_with("piece_1.c:"))
        .map(|word| PathBuf::from(word.trim_end_matches(':')))
        .unwrap();
    assert_eq!(std::fs::read_to_string(kept).unwrap(), pieces[1]);
    // Nothing half-built is left in the cache.
    let leftovers: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".so") || name.starts_with(".build"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn link_error_names_the_missing_symbol() {
    let cache = tempfile::tempdir().unwrap();
    let pieces = vec![
        "int kiln_test_missing(void);\nint kiln_test_f(void) { return kiln_test_missing(); }\n"
            .to_string(),
    ];
    let mut config = config_in(cache.path());
    // Shared objects normally allow undefined symbols; ask the linker to refuse them.
    config.flags.push("-Wl,--no-undefined".to_string());
    let err = compile(&config, &pieces, 1).unwrap_err().to_string();
    assert!(err.contains("failed linking"), "{err}");
    assert!(err.contains("kiln_test_missing"), "{err}");
}

#[test]
fn concurrent_compiles_of_one_model_agree() {
    let cache = tempfile::tempdir().unwrap();
    let config = config_in(cache.path());
    let paths: Vec<PathBuf> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let (library, _) = compile(&config, &two_pieces(1.5), 1).unwrap();
                    let (a, b) = ([2.0f32, 3.0], [5.0f32, 7.0]);
                    assert_eq!(call_dot(&library, &a, &b), oracle_dot_scaled(&a, &b, 1.5));
                    library.path().to_path_buf()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(paths.windows(2).all(|w| w[0] == w[1]));
    let (_, again) = compile(&config, &two_pieces(1.5), 1).unwrap();
    assert!(again.cached);
}

#[test]
fn compiler_without_openmp_gets_a_serial_build() {
    let tools = tempfile::tempdir().unwrap();
    let real = CompilerConfig::from_env().cc;
    let body = format!(
        "for a in \"$@\"; do\n  if [ \"$a\" = -fopenmp ]; then\n    \
         echo \"clang: error: unsupported option '-fopenmp'\" >&2; exit 1\n  fi\ndone\n\
         exec {real} \"$@\"\n"
    );
    let script = shell_script(tools.path(), "no-openmp-cc", &body);
    let cache = tempfile::tempdir().unwrap();
    let config = CompilerConfig {
        cc: script.display().to_string(),
        ..config_in(cache.path())
    };
    assert!(config.flags.iter().any(|f| f == "-fopenmp"));
    let (library, _) = compile(&config, &[openmp_sum_source(false)], 1).unwrap();
    let x: Vec<f64> = (0..1000).map(|i| i as f64 * 0.5).collect();
    assert_eq!(call_sum(&library, &x), x.iter().sum::<f64>());
    let (_, again) = compile(&config, &[openmp_sum_source(false)], 1).unwrap();
    assert!(
        again.cached,
        "the serial build is cached under the requested flags"
    );
}

#[test]
fn a_damaged_cache_entry_is_rebuilt() {
    // Learn the entry's name from a build elsewhere: a path loaded once stays loaded in this
    // process (dlopen answers by name), so the damaged file must be at a path never loaded.
    let scratch = tempfile::tempdir().unwrap();
    let (library, _) = compile(&config_in(scratch.path()), &two_pieces(0.25), 1).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let damaged = cache.path().join(library.path().file_name().unwrap());
    std::fs::write(&damaged, b"not an ELF file").unwrap();
    let (rebuilt, report) = compile(&config_in(cache.path()), &two_pieces(0.25), 1).unwrap();
    assert!(!report.cached);
    assert_eq!(rebuilt.path(), damaged);
    let (a, b) = ([4.0f32], [8.0f32]);
    assert_eq!(call_dot(&rebuilt, &a, &b), oracle_dot_scaled(&a, &b, 0.25));
}

#[test]
fn empty_input_and_symbol_errors() {
    let cache = tempfile::tempdir().unwrap();
    let config = config_in(cache.path());
    assert!(compile(&config, &[], 1).is_err());
    let (library, _) = compile(&config, &two_pieces(1.0), 0).unwrap();
    // SAFETY: the lookup fails before any value of the type is produced.
    let missing = unsafe { library.symbol::<DotFn>("kiln_test_absent") };
    assert!(missing
        .unwrap_err()
        .to_string()
        .contains("kiln_test_absent"));
}

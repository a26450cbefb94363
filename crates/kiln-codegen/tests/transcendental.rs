//! Accuracy of the generated C's own `kiln_expf`, `kiln_sigmoidf`, `kiln_tanhf` and
//! `kiln_erff` (scalar_c.rs) against libm in double precision: a dense
//! sweep through a vectorized loop compiled with kiln's flags
//! (`CompilerConfig::default_flags`), plus the
//! special values (NaN, ±0, ±inf, saturation).

mod common;

use std::process::Command;

const PROGRAM: &str = r#"
#include <stdio.h>
static float xs[200001], ys[200001];
static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
/* The worst error of `f` against double-precision `ref` on n points of [lo, hi],
   computed through a vectorized loop: |f - ref| over `unit`, an expression of the
   reference value r (RELATIVE: r itself; SUBNORMAL: 2^-149, the smallest subnormal,
   so a result that underflows gradually is within one). */
#define RELATIVE (fabs(r) > 1e-30 ? fabs(r) : 1e-30)
#define SUBNORMAL 0x1p-149
#define SWEEP(name, f, ref, lo, hi, unit) do { \
    const int n = 200001; \
    for (int i = 0; i < n; i++) xs[i] = (lo) + ((hi) - (lo)) * (float)i / (float)(n - 1); \
    _Pragma("omp simd") \
    for (int i = 0; i < n; i++) ys[i] = f(xs[i]); \
    double w = 0.0; \
    for (int i = 0; i < n; i++) { \
        const double r = ref((double)xs[i]); \
        const double e = fabs(ys[i] - r) / (unit); \
        if (e > w) w = e; \
    } \
    printf("%s %.3e\n", name, w); \
} while (0)
int main(void) {
    SWEEP("erf", kiln_erff, erf, -6.0f, 6.0f, RELATIVE);
    SWEEP("tanh", kiln_tanhf, tanh, -12.0f, 12.0f, RELATIVE);
    SWEEP("exp", kiln_expf, exp, -80.0f, 80.0f, RELATIVE);
    /* up to where e^x overflows, and down to where it leaves the normal range */
    SWEEP("exp_edges", kiln_expf, exp, -87.3f, 88.72f, RELATIVE);
    /* the softmax form, down to where e^x leaves the normal range */
    SWEEP("exp_nonpos", kiln_expf_nonpos, exp, -87.3f, 0.0f, RELATIVE);
    SWEEP("exp_subnormal", kiln_expf, exp, -110.0f, -87.4f, SUBNORMAL);
    SWEEP("exp_nonpos_subnormal", kiln_expf_nonpos, exp, -110.0f, -87.4f, SUBNORMAL);
    /* through the clamps at -x = -86 and 88: e^x is still normal at -87 */
    SWEEP("sigmoid", kiln_sigmoidf, sigmoid, -87.0f, 100.0f, RELATIVE);
    const float nan = NAN, inf = INFINITY;
    /* gradual underflow: e^-100 is a subnormal (within its last place), e^-104 rounds to 0 */
    const double sub = exp(-100.0);
    printf("special %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d\n",
        kiln_erff(nan) != kiln_erff(nan), kiln_tanhf(nan) != kiln_tanhf(nan),
        kiln_expf(nan) != kiln_expf(nan),
        kiln_erff(inf) == 1.0f, kiln_erff(-inf) == -1.0f,
        kiln_tanhf(inf) == 1.0f, kiln_tanhf(-inf) == -1.0f,
        signbit(kiln_erff(-0.0f)) != 0, signbit(kiln_tanhf(-0.0f)) != 0,
        kiln_expf(inf) == inf, kiln_expf(-inf) == 0.0f,
        kiln_erff(3.9f) <= 1.0f && kiln_tanhf(8.9f) <= 1.0f,
        fabs(kiln_expf(-100.0f) - sub) <= 0x1p-149, kiln_expf(-104.0f) == 0.0f,
        kiln_expf(88.73f) == inf,
        /* the clamps compare bits: a negative NaN and negative zero too */
        kiln_expf(-nan) != kiln_expf(-nan), kiln_expf(-0.0f) == 1.0f,
        kiln_sigmoidf(nan) != kiln_sigmoidf(nan), kiln_sigmoidf(-nan) != kiln_sigmoidf(-nan),
        kiln_sigmoidf(inf) == 1.0f, kiln_sigmoidf(-inf) == 0.0f, kiln_sigmoidf(0.0f) == 0.5f,
        kiln_expf_nonpos(nan) != kiln_expf_nonpos(nan), kiln_expf_nonpos(-nan) != kiln_expf_nonpos(-nan),
        kiln_expf_nonpos(-inf) == 0.0f, fabs(kiln_expf_nonpos(-100.0f) - sub) <= 0x1p-149,
        kiln_expf_nonpos(-104.0f) == 0.0f, kiln_expf_nonpos(-0.0f) == 1.0f && kiln_expf_nonpos(0.0f) == 1.0f);
    return 0;
}
"#;

#[test]
fn transcendentals_match_libm() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        eprintln!("note: no C compiler `{cc}` found; transcendental test skipped");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("t.c");
    let exe = dir.path().join("t");
    std::fs::write(&source, kiln_codegen::c::prelude() + PROGRAM).expect("write C");
    // kiln's own flags, as its JIT compiles generated C.
    let flags = kiln_runtime::jit::CompilerConfig::default_flags("native");
    common::compile(&cc, &flags, &source, &exe);
    let run = Command::new(&exe).output().expect("run test program");
    let text = String::from_utf8_lossy(&run.stdout).to_string();
    eprintln!("{text}");
    let value = |name: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} line in:\n{text}"));
        line[name.len() + 1..].trim().parse().expect("a number")
    };
    for (name, bound) in [
        ("erf", 3e-6),
        ("tanh", 3e-6),
        ("exp", 1e-6),
        ("exp_edges", 1e-6),
        ("exp_nonpos", 1e-6),
        ("exp_subnormal", 1.0),
        ("exp_nonpos_subnormal", 1.0),
        ("sigmoid", 1e-6),
    ] {
        let err = value(name);
        assert!(
            err < bound,
            "{name}: max error {err:e} over {bound:e} (relative, or in subnormal units)\n{text}"
        );
    }
    let special = text
        .lines()
        .find(|l| l.starts_with("special "))
        .expect("special values line");
    assert!(
        special["special ".len()..]
            .split_whitespace()
            .all(|v| v == "1"),
        "NaN, infinities, signed zero or saturation wrong: {special}"
    );
}

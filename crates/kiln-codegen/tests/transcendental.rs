//! Accuracy of the generated C's own `kiln_expf`, `kiln_tanhf` and
//! `kiln_erff` (scalar_c.rs) against libm in double precision: a dense
//! sweep through a vectorized loop compiled with kiln's flags, plus the
//! special values (NaN, ±0, ±inf, saturation).

use std::process::Command;

const PROGRAM: &str = r#"
#include <stdio.h>
static float xs[200001], ys[200001];
typedef float (*fn)(float);
static double worst(const char* name, fn f, double (*ref)(double), float lo, float hi) {
    const int n = 200001;
    for (int i = 0; i < n; i++) xs[i] = lo + (hi - lo) * (float)i / (float)(n - 1);
    if (f == kiln_erff) {
#pragma omp simd
        for (int i = 0; i < n; i++) ys[i] = kiln_erff(xs[i]);
    } else if (f == kiln_tanhf) {
#pragma omp simd
        for (int i = 0; i < n; i++) ys[i] = kiln_tanhf(xs[i]);
    } else {
#pragma omp simd
        for (int i = 0; i < n; i++) ys[i] = kiln_expf(xs[i]);
    }
    double w = 0.0;
    for (int i = 0; i < n; i++) {
        const double r = ref((double)xs[i]);
        const double e = fabs(ys[i] - r) / (fabs(r) > 1e-30 ? fabs(r) : 1e-30);
        if (e > w) w = e;
    }
    printf("%s %.3e\n", name, w);
    return w;
}
static float scalar_erf(float x) { return kiln_erff(x); }
static float scalar_tanh(float x) { return kiln_tanhf(x); }
static float scalar_exp(float x) { return kiln_expf(x); }
int main(void) {
    worst("erf", kiln_erff, erf, -6.0f, 6.0f);
    worst("tanh", kiln_tanhf, tanh, -12.0f, 12.0f);
    worst("exp", kiln_expf, exp, -80.0f, 80.0f);
    const float nan = NAN, inf = INFINITY;
    printf("special %d %d %d %d %d %d %d %d %d %d %d %d\n",
        scalar_erf(nan) != scalar_erf(nan), scalar_tanh(nan) != scalar_tanh(nan),
        scalar_exp(nan) != scalar_exp(nan),
        scalar_erf(inf) == 1.0f, scalar_erf(-inf) == -1.0f,
        scalar_tanh(inf) == 1.0f, scalar_tanh(-inf) == -1.0f,
        signbit(scalar_erf(-0.0f)) != 0, signbit(scalar_tanh(-0.0f)) != 0,
        scalar_exp(inf) == inf, scalar_exp(-inf) == 0.0f,
        scalar_erf(3.9f) <= 1.0f && scalar_tanh(8.9f) <= 1.0f);
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
    let flags = [
        "-O3",
        "-march=native",
        "-fopenmp",
        "-ffp-contract=fast",
        "-fno-trapping-math",
    ];
    let out = Command::new(&cc)
        .args(flags)
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .arg("-lm")
        .output()
        .expect("run C compiler");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    for (name, bound) in [("erf", 3e-6), ("tanh", 3e-6), ("exp", 1e-6)] {
        let err = value(name);
        assert!(
            err < bound,
            "{name}: max relative error {err:e} over {bound:e}\n{text}"
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

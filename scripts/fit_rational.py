#!/usr/bin/env python3
"""Fits the approximations behind the generated C's kiln_expf, kiln_tanhf and
kiln_erff (crates/kiln-codegen/src/scalar_c.rs).

exp: e^r ~ 1 + r (1 + r q(r)) on [-ln2/2, ln2/2] (what is left after the
range reduction x = n ln2 + r), q of degree 4, fitted on the relative error
of e^r by iteratively reweighted least squares (Lawson's weights approach
the minimax fit); printed highest degree first, as the C's Horner form.

tanh, erf: f(x) ~ x * P(x^2) / Q(x^2)
with Q(0) = 1 on [0, hi] (odd functions), minimizing the relative error by
iteratively reweighted linear least squares (solve P(t) x - f (Q(t) - 1) = f
weighted by 1 / (|f| |Q|), Q from the previous step). Prints the float32
coefficients (highest degree first, as the C's Horner form uses them) and
the maximum relative error of that float32 evaluation on a dense grid.

    python3 scripts/fit_rational.py            # needs numpy
"""
import math

import numpy as np


def fit(f, hi, num_terms, den_terms, iterations=30):
    x = np.concatenate([np.linspace(0.0, hi, 20000),
                        hi * (1 - np.cos(np.linspace(0, np.pi / 2, 5000)))])
    x = x[x > 1e-6]
    y, t = f(x), x * x
    weight = np.ones_like(x)
    for _ in range(iterations):
        num = np.stack([x * t**i for i in range(num_terms)], 1)
        den = np.stack([-y * t**i for i in range(1, den_terms + 1)], 1)
        a = np.hstack([num, den]) / np.abs(y)[:, None] * weight[:, None]
        b = np.sign(y) * weight
        sol, *_ = np.linalg.lstsq(a, b, rcond=None)
        p, q = sol[:num_terms], np.concatenate([[1.0], sol[num_terms:]])
        weight = 1 / np.abs(np.polyval(q[::-1], t))
    return p.astype(np.float32), q.astype(np.float32)


def horner_f32(coeffs, t):
    acc = np.float32(0)
    for c in coeffs[::-1]:
        acc = np.float32(acc * t + c)
    return acc


def max_relative_error(f, p, q, hi):
    worst = 0.0
    for v in np.linspace(0, hi, 40001, dtype=np.float32)[1:]:
        t = np.float32(v * v)
        got = min(np.float32(v * horner_f32(p, t) / horner_f32(q, t)), np.float32(1))
        ref = float(f(np.float64(v)))
        worst = max(worst, abs(float(got) - ref) / abs(ref))
    return worst


def fit_exp(iterations=30):
    half = math.log(2) / 2
    r = half * np.cos(np.linspace(0, np.pi, 4001))
    r = r[np.abs(r) > 1e-9]
    # e^r = 1 + r + r^2 q(r): fit q to (e^r - 1 - r) / r^2, weighted so the
    # residual is the relative error of e^r.
    target = (np.exp(r) - 1 - r) / r**2
    base = r**2 / np.exp(r)
    weight = np.ones_like(r)
    for _ in range(iterations):
        a = np.stack([r**k for k in range(5)], 1) * (base * weight)[:, None]
        q, *_ = np.linalg.lstsq(a, target * base * weight, rcond=None)
        residual = np.abs(a @ q - target * base * weight)
        weight = weight * (1 + residual / residual.max())
    q = q.astype(np.float32)
    grid = np.linspace(-half, half, 200001)
    approx = 1 + grid * (1 + grid * np.polyval(q[::-1].astype(np.float64), grid))
    return q, np.max(np.abs(approx / np.exp(grid) - 1))


def main():
    q, err = fit_exp()
    print(f"exp on [-ln2/2, ln2/2]: max relative error {err:.2e}")
    print("  q (r powers, highest first):", [repr(float(c)) for c in q[::-1]])
    erf = np.vectorize(math.erf)
    for name, f, hi, num_terms, den_terms in [("tanh", np.tanh, 9.0, 5, 3),
                                              ("erf", erf, 4.0, 6, 4)]:
        p, q = fit(f, hi, num_terms, den_terms)
        print(f"{name} on [-{hi}, {hi}]: max relative error "
              f"{max_relative_error(f, p, q, hi):.2e}")
        print("  P (x^2 powers, highest first):", [repr(float(c)) for c in p[::-1]])
        print("  Q (x^2 powers, highest first):", [repr(float(c)) for c in q[::-1]])


if __name__ == "__main__":
    main()

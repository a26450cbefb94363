"""kiln models used from several Python threads at once.

``Model.run`` releases the GIL; a model may be called from several threads
at once (runs of one model take turns, separate models run in parallel).
Every result is compared with numpy.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import helper

import kiln
from conftest import make_model

THREADS = 8
CALLS = 20


def _matmul_model(m: int, k: int, n: int, seed: int, relu: bool):
    """x: float32[m, k] -> x @ w (+ b, relu when ``relu``), with w (and b)
    random initializers; returns (model, w, b)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, n).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul")]
    inits = {"w": w}
    out = "xw"
    if relu:
        nodes += [
            helper.make_node("Add", ["xw", "b"], ["xwb"], name="add"),
            helper.make_node("Relu", ["xwb"], ["y"], name="relu"),
        ]
        inits["b"] = b
        out = "y"
    model = make_model(nodes, [("x", np.float32, [m, k])], [(out, np.float32, [m, n])], inits)
    return model, w, b


def _reference(x, w, b, relu):
    y = x.astype(np.float64) @ w.astype(np.float64)
    return np.maximum(y + b, 0) if relu else y


def _input(shape, thread: int, call: int, salt: int = 0) -> np.ndarray:
    """The distinct input of one call of one thread."""
    rng = np.random.default_rng([salt, thread, call])
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def big_matmul():
    """MatMul 256x256 @ 256x256 (large enough that concurrent runs overlap),
    compiled for the CPU backend with its default thread count."""
    model, w, b = _matmul_model(256, 256, 256, seed=1, relu=False)
    return kiln.compile(model), w, b


def _check_calls(model, w, b, relu, thread, salt, shape):
    """CALLS runs of ``model`` on this thread's inputs; returns the largest
    deviation from numpy (relative to the output's scale)."""
    worst = 0.0
    for call in range(CALLS):
        x = _input(shape, thread, call, salt)
        y = model(x)
        ref = _reference(x, w, b, relu)
        assert y.shape == ref.shape and y.dtype == np.float32
        err = float(np.max(np.abs(y - ref)))
        worst = max(worst, err)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4,
                                   err_msg=f"thread {thread}, call {call}")
    return worst


def test_one_model_from_eight_threads(big_matmul):
    """One model called 20 times from each of 8 threads at once, each call
    on its own input: every result equals numpy's."""
    model, w, b = big_matmul
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        futures = [pool.submit(_check_calls, model, w, b, False, t, 0, (256, 256))
                   for t in range(THREADS)]
        results = [f.result() for f in futures]
    assert len(results) == THREADS


def test_results_differ_per_input(big_matmul):
    """Sanity check of the test above: the threads' inputs (and so their
    outputs) really are distinct, so a mixed-up result would be caught."""
    model, _, _ = big_matmul
    outs = [model(_input((256, 256), t, 0)) for t in range(3)]
    assert not np.allclose(outs[0], outs[1]) and not np.allclose(outs[1], outs[2])


def test_two_models_concurrently(big_matmul):
    """Two different models (a 256x256 MatMul and a 128x300 @ 300x200
    MatMul+Add+Relu) run at once from 8 threads, 4 on each: every result
    equals numpy's."""
    model_a, wa, ba = big_matmul
    proto_b, wb, bb = _matmul_model(128, 300, 200, seed=2, relu=True)
    model_b = kiln.compile(proto_b)
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        futures = []
        for t in range(THREADS):
            if t % 2 == 0:
                futures.append(pool.submit(_check_calls, model_a, wa, ba, False, t, 1, (256, 256)))
            else:
                futures.append(pool.submit(_check_calls, model_b, wb, bb, True, t, 2, (128, 300)))
        for f in futures:
            f.result()


def test_reference_backend_from_threads():
    """The reference backend is safe to call from several threads too."""
    proto, w, b = _matmul_model(16, 24, 8, seed=3, relu=True)
    model = kiln.compile(proto, backend="reference")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(_check_calls, model, w, b, True, t, 3, (16, 24)) for t in range(4)]
        for f in futures:
            f.result()


def test_concurrent_compiles_into_one_cache(tmp_path):
    """Four threads compiling the same new model into one (empty) cache
    directory at once all get a working model (no torn cache entry)."""
    proto, w, b = _matmul_model(8, 16, 12, seed=4, relu=True)
    cache = tmp_path / "cache"

    def compile_and_run(t):
        m = kiln.compile(proto, cache_dir=cache)
        return _check_calls(m, w, b, True, t, 4, (8, 16))

    with ThreadPoolExecutor(max_workers=4) as pool:
        for f in [pool.submit(compile_and_run, t) for t in range(4)]:
            f.result()
    assert any(cache.iterdir()), "nothing was cached in cache_dir"


def test_cache_dir_reuse(tmp_path):
    """compile(cache_dir=...) writes the compiled code there; a second
    compile of the same model loads it from there and computes the same."""
    proto, w, b = _matmul_model(4, 6, 5, seed=5, relu=True)
    cache = tmp_path / "cache"
    first = kiln.compile(proto, cache_dir=cache)
    assert "compiled" in first.summary and "loaded from cache" not in first.summary
    assert any(cache.iterdir())
    second = kiln.compile(proto, cache_dir=str(cache))
    assert "loaded from cache" in second.summary
    x = _input((4, 6), 0, 0, 5)
    np.testing.assert_allclose(second(x), _reference(x, w, b, True), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(first(x), second(x))

"""``torch.compile(module, backend="kiln")`` against eager PyTorch.

Outputs must match eager within the model-comparison tolerance the suite
uses (scripts/models/compare.py): max|kiln - eager| <= 1e-3 * max|eager| + 1e-5.
"""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import kiln  # noqa: E402
from kiln.torch_backend import make_backend  # noqa: E402


def assert_close(got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        bound = 1e-3 * w.abs().max().item() + 1e-5
        diff = (g - w).abs().max().item()
        assert diff <= bound, f"max |kiln - eager| = {diff} > {bound}"


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled_matches_eager(module, *inputs, backend="kiln"):
    module = module.eval()
    with torch.no_grad():
        want = module(*inputs)
        got = torch.compile(module, backend=backend)(*inputs)
    assert_close(got, want)
    return got


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(32, 64)
        self.norm = torch.nn.LayerNorm(64)
        self.l2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        return torch.softmax(self.l2(torch.nn.functional.gelu(self.norm(self.l1(x)))), dim=-1)


class Unsupported(torch.nn.Module):
    """Linear layers around two ops kiln cannot take: an FFT (the ONNX
    exporter has no translation for it) and Bernoulli (kiln does not
    implement the ONNX op; with probabilities 0 and 1 it is deterministic)."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 8)
        self.l2 = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        mask = torch.bernoulli((h > 0).float())
        spectrum = torch.fft.rfft(h).abs().sum(-1, keepdim=True)
        return self.l2(h * mask) + spectrum


def test_registered_as_a_dynamo_backend():
    assert "kiln" in torch._dynamo.list_backends()


@pytest.mark.parametrize(
    "name, make, shape",
    [
        ("resnet18", lambda: torchvision.models.resnet18(), (1, 3, 64, 64)),
        ("mobilenet_v3_small", lambda: torchvision.models.mobilenet_v3_small(), (2, 3, 64, 64)),
        ("squeezenet1_1", lambda: torchvision.models.squeezenet1_1(), (1, 3, 64, 64)),
    ],
)
def test_torchvision_models_match_eager(name, make, shape):
    torch.manual_seed(0)
    compiled_matches_eager(make(), torch.randn(shape))


def test_transformer_encoder_compiles_whole(caplog):
    """nn.TransformerEncoder's fused inference path is decomposed: one graph."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    with caplog.at_level(logging.INFO, logger="kiln.torch"), torch.inference_mode():
        compiled_matches_eager(encoder, torch.randn(2, 16, 64))
    assert "partitioning" not in " ".join(r.getMessage() for r in caplog.records)


def test_mlp_matches_eager_with_every_planner():
    torch.manual_seed(0)
    x = torch.randn(4, 32)
    for fusion in kiln.FUSION_PLANNERS:
        torch._dynamo.reset()
        compiled_matches_eager(MLP(), x, backend=make_backend(fusion=fusion, threads=1))


def test_options_reach_the_backend():
    torch.manual_seed(0)
    m = MLP().eval()
    x = torch.randn(4, 32)
    with torch.no_grad():
        got = torch.compile(m, backend="kiln", options={"fusion": "none", "threads": 1})(x)
        assert_close(got, m(x))


def test_unsupported_ops_fall_back_to_eager(caplog):
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="kiln.torch"):
        compiled_matches_eager(Unsupported(), torch.randn(4, 8))
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "partitioning it" in messages
    assert "kiln compiles" in messages


def test_new_shapes_recompile():
    torch.manual_seed(0)
    m = MLP().eval()
    c = torch.compile(m, backend="kiln")
    with torch.no_grad():
        for batch in (1, 3, 5, 3):
            x = torch.randn(batch, 32)
            assert_close(c(x), m(x))


def test_training_mode_keeps_gradients():
    """With autograd recording the graph runs eagerly: gradients are right."""
    torch.manual_seed(0)
    m = MLP()
    x = torch.randn(4, 32)
    y = torch.compile(m, backend="kiln")(x)
    assert y.grad_fn is not None
    y[:, 0].sum().backward()
    got = m.l1.weight.grad.clone()
    m.zero_grad()
    m(x)[:, 0].sum().backward()
    assert torch.allclose(got, m.l1.weight.grad, rtol=1e-4, atol=1e-6)


def test_inference_mode():
    torch.manual_seed(0)
    m = MLP().eval()
    x = torch.randn(4, 32)
    with torch.inference_mode():
        assert_close(torch.compile(m, backend="kiln")(x), m(x))


def test_parameters_changed_in_place_recompile():
    torch.manual_seed(0)
    m = MLP().eval()
    c = torch.compile(m, backend="kiln")
    x = torch.randn(4, 32)
    with torch.no_grad():
        assert_close(c(x), m(x))
        m.l2.weight.mul_(-2.0)
        assert_close(c(x), m(x))


def test_disk_cache_serves_a_second_compile(tmp_path, caplog):
    torch.manual_seed(0)
    m = MLP().eval()
    x = torch.randn(4, 32)
    backend = make_backend(cache_dir=str(tmp_path))
    with torch.no_grad():
        want = m(x)
        assert_close(torch.compile(m, backend=backend)(x), want)
        assert len(list((tmp_path / "torch").glob("*.onnx"))) == 1
        torch._dynamo.reset()
        with caplog.at_level(logging.DEBUG, logger="kiln.torch"):
            assert_close(torch.compile(m, backend=backend)(x), want)
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "ONNX from the disk cache" in messages
    assert "loaded from cache" in messages


class WritesInput(torch.nn.Module):
    def forward(self, x):
        x.mul_(2.0)
        x[0] = 0.0
        return torch.relu(x) + 1.0


def test_writes_into_inputs_stay_visible():
    """A graph writing into its input runs eagerly: the caller sees the write."""
    m = WritesInput()
    x = torch.randn(4, 8)
    a, b = x.clone(), x.clone()
    with torch.no_grad():
        want = m(a)
        got = torch.compile(m, backend="kiln")(b)
    assert_close(got, want)
    assert torch.equal(a, b)


def test_in_place_activations_on_intermediates_still_compile(caplog):
    """torchvision's ReLU(inplace=True) on intermediate values is no write
    into an input: the whole graph goes to kiln."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(inplace=True), torch.nn.Linear(8, 4))
    with caplog.at_level(logging.INFO, logger="kiln.torch"):
        compiled_matches_eager(m, torch.randn(2, 8))
    assert "runs eagerly" not in " ".join(r.getMessage() for r in caplog.records)


class UsesVmap(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 8)

    def forward(self, x):
        rows = torch.vmap(lambda r: r * r.sum())(x)
        return self.l(rows)


def test_vmap_graphs_run_eagerly():
    torch.manual_seed(0)
    compiled_matches_eager(UsesVmap(), torch.randn(3, 8))


@pytest.mark.parametrize("need_weights, average", [(False, True), (True, True), (True, False)])
def test_attention_decomposition_matches_the_fused_kernel(need_weights, average):
    """kiln exports torch._native_multi_head_attention as plain ops: they
    compute what the fused kernel computes."""
    from kiln._torch_decompose import native_mha

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    q, k, v = torch.randn(2, 5, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    args = (q, k, v, 16, 4, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias,
            None, need_weights, average)
    with torch.inference_mode():
        want = torch._native_multi_head_attention(*args)
        got = native_mha(*args)
    assert_close(got[0], want[0])
    if need_weights:
        assert_close(got[1], want[1])
    else:
        assert got[1] is None and want[1] is None


def test_vision_transformer_compiles_whole(caplog):
    """A small ViT: its attention takes PyTorch's fused path under
    inference_mode, which kiln decomposes, so no partitioning is needed."""
    torch.manual_seed(0)
    vit = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
    ).eval()
    x = torch.randn(2, 3, 32, 32)
    with caplog.at_level(logging.INFO, logger="kiln.torch"), torch.inference_mode():
        want = vit(x)
        assert_close(torch.compile(vit, backend="kiln")(x), want)
    assert "partitioning" not in " ".join(r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
def test_encoder_layer_decomposition_matches_the_fused_kernel(norm_first, activation):
    from kiln._torch_decompose import encoder_layer

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=16, nhead=4, dim_feedforward=32, batch_first=True, norm_first=norm_first, activation=activation
    ).eval()
    x = torch.randn(2, 5, 16)
    a = layer.self_attn
    args = (x, 16, 4, a.in_proj_weight, a.in_proj_bias, a.out_proj.weight, a.out_proj.bias,
            activation == "gelu", norm_first, layer.norm1.eps, layer.norm1.weight, layer.norm1.bias,
            layer.norm2.weight, layer.norm2.bias, layer.linear1.weight, layer.linear1.bias,
            layer.linear2.weight, layer.linear2.bias)
    with torch.inference_mode():
        assert_close(encoder_layer(*args), torch._transformer_encoder_layer_fwd(*args))

#!/usr/bin/env python3
"""Export the kiln model suite to ONNX.

Writes <out>/<name>/model.onnx for each model, using the legacy TorchScript
exporter (torch.onnx.export(..., dynamo=False)), opset 17, static shapes,
batch 1, random weights (torch.manual_seed(0)), eval mode. Every model is
< 2 GB and is saved as a single self-contained file (no external data).

Usage:
    python scripts/models/export.py                       # the five suite models
    python scripts/models/export.py --wide                # the wider set (issue 19)
    python scripts/models/export.py --probe               # other model families (issue 19)
    python scripts/models/export.py --only bert,gpt2
    python scripts/models/export.py --out /tmp/models
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OPSET = 17
SEQ_LEN = 128


def calibrate_batchnorm(model, input_shape, batches: int = 2, batch_size: int = 8) -> None:
    """Set BatchNorm running statistics from random-input batch statistics.

    torchvision initialises BatchNorm to the identity (mean 0, var 1). With
    random conv weights that makes activations drift: MobileNetV2's depthwise
    convs (kaiming fan_out init) shrink them so much that the logits are
    ~1e-9, which would make any numerical comparison vacuous. Running a few
    seeded standard-normal batches in train mode with a cumulative average
    (momentum=None) gives every BN layer the statistics of its actual input,
    i.e. unit-scale activations throughout, as in a trained network.
    """
    import torch

    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    g = torch.Generator().manual_seed(1234)
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn((batch_size, *input_shape[1:]), generator=g))
    model.eval()


def _vision(ctor_name: str, batch: int = 1, size: int = 224, **kwargs):
    def build():
        import torch
        import torchvision

        model = getattr(torchvision.models, ctor_name)(weights=None, **kwargs)
        if ctor_name.startswith("vit"):
            # torchvision zero-initialises the classification head, which
            # would make the logits identically 0; give it random weights.
            for m in model.heads.modules():
                if isinstance(m, torch.nn.Linear):
                    torch.nn.init.normal_(m.weight, std=0.02)
                    torch.nn.init.normal_(m.bias, std=0.02)
        calibrate_batchnorm(model, (batch, 3, size, size))
        inputs = (torch.randn(batch, 3, size, size),)
        return model, inputs, ["input"], ["logits"]

    return build


class _HFWrapper:
    """Builds a torch.nn.Module that returns a plain tuple of tensors."""

    @staticmethod
    def wrap(model, keys):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, *args):
                out = self.inner(*args, return_dict=True)
                return tuple(out[k] for k in keys)

        return Wrapped(model)


def build_bert(batch: int = 1, **config):
    """BERT (bert-base unless `config` overrides BertConfig fields)."""
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(**config)
    cfg._attn_implementation = "eager"
    model = BertModel(cfg, add_pooling_layer=True)
    ids = torch.randint(0, cfg.vocab_size, (batch, SEQ_LEN), dtype=torch.int64)
    mask = torch.ones(batch, SEQ_LEN, dtype=torch.int64)
    wrapped = _HFWrapper.wrap(model, ["last_hidden_state", "pooler_output"])
    return (
        wrapped,
        (ids, mask),
        ["input_ids", "attention_mask"],
        ["last_hidden_state", "pooler_output"],
    )


def build_gpt2(batch: int = 1, **config):
    """GPT-2 (124M unless `config` overrides GPT2Config fields)."""
    import torch
    import transformers.models.gpt2.modeling_gpt2 as gpt2_mod
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(use_cache=False, **config)
    cfg._attn_implementation = "eager"
    model = GPT2Model(cfg)
    ids = torch.randint(0, cfg.vocab_size, (batch, SEQ_LEN), dtype=torch.int64)
    wrapped = _HFWrapper.wrap(model, ["last_hidden_state"])

    # transformers >= 4.53 builds an additive 4-D mask with
    # masking_utils.create_causal_mask, which relies on torch.vmap and cannot be
    # traced by the TorchScript exporter. The eager GPT-2 attention already
    # applies the causal mask itself (Where over the tril `bias` buffer, the
    # classic GPT-2 export pattern), and there is no attention_mask input, so
    # that extra mask is redundant: replace it with None while tracing.
    # export_one() checks that the patched model gives the same output.
    class NoExtraMask(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            orig = getattr(gpt2_mod, "create_causal_mask", None)
            if orig is None:
                return self.inner(*args)
            gpt2_mod.create_causal_mask = lambda *a, **k: None
            try:
                return self.inner(*args)
            finally:
                gpt2_mod.create_causal_mask = orig

    return NoExtraMask(wrapped), (ids,), ["input_ids"], ["last_hidden_state"], wrapped


MODELS = {
    "resnet50": _vision("resnet50"),
    "mobilenet_v2": _vision("mobilenet_v2"),
    "bert": build_bert,
    "gpt2": build_gpt2,
    "vit": _vision("vit_b_16"),
}


def _wide_suite() -> dict:
    """Models beyond the five, for finding cliffs (issue 19; not the tuned
    suite): convolutional networks with grouped, depthwise, dilated and
    squeeze-excitation convolutions, many concatenations, VGG- and
    inception-like ones; transformer encoders and decoders of several
    widths and windowed attention. Each at batch 1 and 8 (`<name>_b8`).
    Small enough that the whole set measures in well under an hour."""
    small_bert = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                      intermediate_size=1024)
    mid_bert = dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                    intermediate_size=2048)
    small_gpt2 = dict(n_embd=256, n_layer=4, n_head=4)
    mid_gpt2 = dict(n_embd=512, n_layer=6, n_head=8)
    makers = {
        "resnext50": lambda b: _vision("resnext50_32x4d", b),
        "regnet_y_400mf": lambda b: _vision("regnet_y_400mf", b),
        "shufflenet_v2": lambda b: _vision("shufflenet_v2_x1_0", b),
        "efficientnet_b0": lambda b: _vision("efficientnet_b0", b),
        "mobilenet_v3_large": lambda b: _vision("mobilenet_v3_large", b),
        "mnasnet1_0": lambda b: _vision("mnasnet1_0", b),
        "densenet121": lambda b: _vision("densenet121", b),
        "googlenet": lambda b: _vision("googlenet", b, aux_logits=False, init_weights=True),
        "squeezenet1_1": lambda b: _vision("squeezenet1_1", b),
        "vgg11_bn": lambda b: _vision("vgg11_bn", b),
        "resnet18": lambda b: _vision("resnet18", b),
        "convnext_tiny": lambda b: _vision("convnext_tiny", b),
        "swin_t": lambda b: _vision("swin_t", b),
        "vit_b_32": lambda b: _vision("vit_b_32", b),
        "dilated_resnet18": lambda b: _dilated_resnet18(b),
        "bert_small": lambda b: (lambda: build_bert(b, **small_bert)),
        "bert_mid": lambda b: (lambda: build_bert(b, **mid_bert)),
        "gpt2_small": lambda b: (lambda: build_gpt2(b, **small_gpt2)),
        "gpt2_mid": lambda b: (lambda: build_gpt2(b, **mid_gpt2)),
        "distilbert_like": lambda b: (lambda: build_bert(b, num_hidden_layers=6)),
    }
    suite = {}
    for name, make in makers.items():
        suite[name] = make(1)
        suite[f"{name}_b8"] = make(8)
    return suite


def _dilated_resnet18(batch: int):
    """ResNet-18 whose last two stages use dilation instead of stride (as
    segmentation backbones do): dilated 3x3 convolutions."""
    def build():
        import torch
        import torchvision

        model = torchvision.models.resnet18(weights=None)
        for stage, rate in ((model.layer3, 2), (model.layer4, 4)):
            for block in stage:
                for conv in (block.conv1, block.conv2):
                    if conv.kernel_size == (3, 3):
                        conv.stride, conv.dilation, conv.padding = (1, 1), (rate, rate), (rate, rate)
                if block.downsample is not None:
                    block.downsample[0].stride = (1, 1)
        calibrate_batchnorm(model, (batch, 3, 224, 224))
        return model, (torch.randn(batch, 3, 224, 224),), ["input"], ["logits"]

    return build


def _probe_suite() -> dict:
    """Model families beyond the wide suite, tried as a new user would to
    find what falls off a cliff (issue 19, session 29): recurrent layers,
    1-D and 3-D convolutions, a U-Net's transposed convolutions,
    segmentation heads (atrous convolutions, bilinear resizes), MaxViT's
    einsum attention, and a few more torchvision classifiers. Batch 1."""
    def vision(name: str, size: int = 224, **kwargs):
        return _vision(name, 1, size, **kwargs)

    def segmentation(name: str, **kwargs):
        def build():
            import torch
            import torchvision

            ctor = getattr(torchvision.models.segmentation, name)
            model = ctor(weights=None, weights_backbone=None, **kwargs)
            wrapped = _probe_wrap(model, lambda out: out["out"])
            return wrapped, (torch.randn(1, 3, 224, 224),), ["input"], ["out"]
        return build

    def video(name: str):
        def build():
            import torch
            import torchvision

            model = getattr(torchvision.models.video, name)(weights=None)
            return model, (torch.randn(1, 3, 16, 112, 112),), ["input"], ["logits"]
        return build

    def module(make, shape):
        def build():
            import torch

            return make(), (torch.randn(*shape),), ["input"], ["output"]
        return build

    return {
        "lstm": module(lambda: _probe_modules()["lstm"](), (1, 64, 64)),
        "gru": module(lambda: _probe_modules()["gru"](), (1, 64, 128)),
        "conv1d": module(lambda: _probe_modules()["conv1d"](), (1, 1, 16000)),
        "unet": module(lambda: _probe_modules()["unet"](), (1, 3, 256, 256)),
        "r3d_18": video("r3d_18"),
        "deeplabv3_mbv3": segmentation("deeplabv3_mobilenet_v3_large", aux_loss=False),
        "lraspp": segmentation("lraspp_mobilenet_v3_large"),
        "maxvit_t": vision("maxvit_t"),
        "resnet34": vision("resnet34"),
        "mobilenet_v3_small": vision("mobilenet_v3_small"),
        "efficientnet_b2": vision("efficientnet_b2", 260),
        "efficientnet_v2_s": vision("efficientnet_v2_s"),
        "regnet_x_1_6gf": vision("regnet_x_1_6gf"),
        "wide_resnet50_2": vision("wide_resnet50_2"),
        "inception_v3": vision("inception_v3", 299, aux_logits=False, init_weights=True),
    }


def _probe_wrap(model, pick):
    import torch

    class Picked(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return pick(self.inner(x))

    return Picked(model)


def _probe_modules() -> dict:
    """The probe suite's small hand-written modules."""
    import torch
    from torch import nn

    class Lstm(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(64, 256)
            self.lstm = nn.LSTM(256, 256, num_layers=2, batch_first=True)
            self.head = nn.Linear(256, 10)

        def forward(self, x):
            y, _ = self.lstm(self.embed(x))
            return self.head(y[:, -1])

    class Gru(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(128, 256, batch_first=True, bidirectional=True)
            self.head = nn.Linear(512, 10)

        def forward(self, x):
            y, _ = self.gru(x)
            return self.head(y[:, -1])

    class Conv1d(nn.Module):
        """A wav2vec-like feature extractor over one second of 16 kHz audio."""
        def __init__(self):
            super().__init__()
            layers, c = [], 1
            for out, k, stride in [(64, 10, 5), (128, 3, 2), (128, 3, 2), (256, 3, 2),
                                   (256, 3, 2), (512, 2, 2)]:
                norm = nn.GroupNorm(1, out) if c == 1 else nn.BatchNorm1d(out)
                layers += [nn.Conv1d(c, out, k, stride), norm, nn.GELU()]
                c = out
            self.features = nn.Sequential(*layers)
            self.head = nn.Linear(512, 10)

        def forward(self, x):
            return self.head(self.features(x).mean(-1))

    class UNet(nn.Module):
        """Three levels, 2x2 stride-2 transposed convolutions up."""
        def __init__(self):
            super().__init__()

            def block(i, o):
                return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                                     nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
            self.d1, self.d2, self.d3 = block(3, 32), block(32, 64), block(64, 128)
            self.up2, self.u2 = nn.ConvTranspose2d(128, 64, 2, 2), block(128, 64)
            self.up1, self.u1 = nn.ConvTranspose2d(64, 32, 2, 2), block(64, 32)
            self.out = nn.Conv2d(32, 2, 1)

        def forward(self, x):
            pool = nn.functional.max_pool2d
            a = self.d1(x)
            b = self.d2(pool(a, 2))
            c = self.d3(pool(b, 2))
            u = self.u2(torch.cat([self.up2(c), b], 1))
            return self.out(self.u1(torch.cat([self.up1(u), a], 1)))

    return {"lstm": Lstm, "gru": Gru, "conv1d": Conv1d, "unet": UNet}


SUITE = list(MODELS)
WIDE = _wide_suite()
MODELS.update(WIDE)
PROBE = _probe_suite()
MODELS.update(PROBE)


def export_one(name: str, out_dir: Path) -> Path:
    import torch

    torch.manual_seed(0)
    model, inputs, input_names, output_names, *unpatched = MODELS[name]()
    model.eval()
    if unpatched:
        # The model was wrapped to make it traceable; outputs must not change.
        with torch.no_grad():
            a, b = model(*inputs), unpatched[0].eval()(*inputs)
        diff = max(float((x - y).abs().max()) for x, y in zip(a, b))
        if diff != 0.0:
            raise RuntimeError(f"{name}: traceable wrapper changes outputs (max diff {diff})")
    dst = out_dir / name
    dst.mkdir(parents=True, exist_ok=True)
    path = dst / "model.onnx"
    tmp = dst / "model.onnx.tmp"
    t0 = time.perf_counter()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings etc.
        # Keep nn.MultiheadAttention (ViT) on the plain, decomposed path.
        if hasattr(torch.backends, "mha"):
            torch.backends.mha.set_fastpath_enabled(False)
        torch.onnx.export(
            model,
            inputs,
            str(tmp),
            dynamo=False,
            export_params=True,
            opset_version=OPSET,
            do_constant_folding=True,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=None,  # static shapes
        )
    os.replace(tmp, path)
    _check_single_file(path)
    size = path.stat().st_size / 2**20
    print(f"[export] {name}: wrote {path} ({size:.1f} MiB) in {time.perf_counter() - t0:.1f}s",
          flush=True)
    return path


def _check_single_file(path: Path) -> None:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    ext = [t.name for t in m.graph.initializer
           if t.data_location == onnx.TensorProto.EXTERNAL]
    if ext:
        raise RuntimeError(f"{path}: {len(ext)} initializers use external data")
    onnx.checker.check_model(m)
    opset = {o.domain or "ai.onnx": o.version for o in m.opset_import}
    ins = [(i.name, [d.dim_value if d.HasField("dim_value") else d.dim_param
                     for d in i.type.tensor_type.shape.dim]) for i in m.graph.input]
    outs = [(o.name, [d.dim_value if d.HasField("dim_value") else d.dim_param
                      for d in o.type.tensor_type.shape.dim]) for o in m.graph.output]
    print(f"[export]   opset={opset} nodes={len(m.graph.node)} inputs={ins} outputs={outs}",
          flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="",
                   help="comma-separated subset of: " + ",".join(MODELS))
    p.add_argument("--wide", action="store_true",
                    help="the wider set beyond the five (issue 19): " + ",".join(WIDE))
    p.add_argument("--probe", action="store_true",
                   help="other model families, for cliffs (issue 19): " + ",".join(PROBE))
    p.add_argument("--out", default=str(REPO / "models"),
                   help="output directory (default: <repo>/models)")
    args = p.parse_args(argv)

    names = [n.strip() for n in args.only.split(",") if n.strip()] or (
        list(WIDE) if args.wide else list(PROBE) if args.probe else SUITE)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(MODELS)}")

    import torch

    torch.set_num_threads(max(1, min(os.cpu_count() or 1, 4)))
    out = Path(args.out)
    print(f"[export] torch {torch.__version__}, opset {OPSET}, out={out}", flush=True)
    for i, name in enumerate(names, 1):
        print(f"[export] ({i}/{len(names)}) {name} ...", flush=True)
        export_one(name, out)
    print("[export] done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

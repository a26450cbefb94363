"""PyTorch's fused inference kernels as plain ops the ONNX exporter knows.

In eval mode without autograd, ``nn.MultiheadAttention`` (ViT, many
transformers) calls ``torch._native_multi_head_attention`` and
``nn.TransformerEncoderLayer`` calls ``torch._transformer_encoder_layer_fwd``,
which the TorchScript exporter cannot export: the graph would be split
around every attention. :func:`decomposed` rewrites such calls, in a copy of the graph,
into projections, a softmax and matmuls computing the same values; kiln
then fuses those itself. Calls this module cannot reproduce exactly (with a
mask) are left as they are.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.fx
import torch.nn.functional as F


def native_mha(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    embed_dim: int,
    num_head: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    need_weights: bool = True,
    average_attn_weights: bool = True,
    mask_type: Optional[int] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``torch._native_multi_head_attention`` without a mask, batch first:
    query [B, L, E], key and value [B, S, E]."""
    batch, length, _ = query.shape
    source = key.shape[1]
    head_dim = embed_dim // num_head
    wq, wk, wv = qkv_weight.chunk(3)
    bq, bk, bv = qkv_bias.chunk(3)

    def heads(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, n: int) -> torch.Tensor:
        return F.linear(x, w, b).reshape(batch, n, num_head, head_dim).transpose(1, 2)

    q = heads(query, wq, bq, length)
    k = heads(key, wk, bk, source)
    v = heads(value, wv, bv, source)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_dim)
    weights = torch.softmax(scores, dim=-1)
    attended = torch.matmul(weights, v).transpose(1, 2).reshape(batch, length, embed_dim)
    out = F.linear(attended, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    return out, weights.mean(dim=1) if average_attn_weights else weights


def encoder_layer(
    src: torch.Tensor,
    embed_dim: int,
    num_heads: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    use_gelu: bool,
    norm_first: bool,
    eps: float,
    norm_weight_1: torch.Tensor,
    norm_bias_1: torch.Tensor,
    norm_weight_2: torch.Tensor,
    norm_bias_2: torch.Tensor,
    ffn_weight_1: torch.Tensor,
    ffn_bias_1: torch.Tensor,
    ffn_weight_2: torch.Tensor,
    ffn_bias_2: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    mask_type: Optional[int] = None,
) -> torch.Tensor:
    """``torch._transformer_encoder_layer_fwd`` (``nn.TransformerEncoderLayer``'s
    fused path) without a mask, batch first."""

    def attention(x: torch.Tensor) -> torch.Tensor:
        return native_mha(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias,
                          proj_weight, proj_bias, need_weights=False)[0]

    def feed_forward(x: torch.Tensor) -> torch.Tensor:
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        hidden = F.gelu(hidden) if use_gelu else F.relu(hidden)
        return F.linear(hidden, ffn_weight_2, ffn_bias_2)

    def norm1(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (embed_dim,), norm_weight_1, norm_bias_1, eps)

    def norm2(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (embed_dim,), norm_weight_2, norm_bias_2, eps)

    if norm_first:
        x = src + attention(norm1(src))
        return x + feed_forward(norm2(x))
    x = norm1(src + attention(src))
    return norm2(x + feed_forward(x))


def _without(position: int) -> Callable[[torch.fx.Node], bool]:
    """Whether a call leaves its mask (argument ``position``) unset."""

    def check(node: torch.fx.Node) -> bool:
        mask = node.args[position] if len(node.args) > position else node.kwargs.get("mask")
        return mask is None

    return check


# Fused op -> (its decomposition, whether a call can use it).
_DECOMPOSITIONS: Dict[Any, Tuple[Callable[..., Any], Callable[[torch.fx.Node], bool]]] = {
    torch._native_multi_head_attention: (native_mha, _without(9)),
    torch._transformer_encoder_layer_fwd: (encoder_layer, _without(18)),
}


def decomposed(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm``, or a copy sharing its parameters in which every fused call
    this module knows is replaced by its decomposition."""
    todo = [
        n for n in gm.graph.nodes
        if n.op == "call_function" and n.target in _DECOMPOSITIONS and _DECOMPOSITIONS[n.target][1](n)
    ]
    if not todo:
        return gm
    graph = torch.fx.Graph()
    remap: Dict[torch.fx.Node, torch.fx.Node] = {}
    for n in gm.graph.nodes:
        copy = graph.node_copy(n, lambda a: remap[a])
        if n in todo:
            copy.target = _DECOMPOSITIONS[n.target][0]
        remap[n] = copy
    return torch.fx.GraphModule(gm, graph)

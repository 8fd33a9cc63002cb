"""The inference forward over a static cache with fewer torch calls per layer: on the CPU the tiny models are
overhead-bound (a few µs per call), so the call count is the cost.

Per layer: q/k/v one matmul over their concatenated weights, RoPE once over all of it (v's part with cos 1,
sin 0: unchanged), gate/up one matmul, no module calls, and the cache's per-layer views
taken once per forward instead of per layer. The same floating-point operations as the module forward
(``Attention.forward`` etc., which training and the other paths keep): bitwise-equal logits
(tests/exec/test_lean_forward.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from saguaro_exec.model.kv_cache import KVCache

_HAS_GQA_SDPA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)   # and F.rms_norm (2.4)


class _Fused:
    """Row-concatenated weights (and biases) of some Linears, rebuilt when any of them changes (a load,
    ``.to``, an in-place update): the key is every source's storage and version."""

    def __init__(self, *linears: nn.Linear) -> None:
        self.linears = linears
        self.key: tuple | None = None
        self.weight = self.bias = None

    def get(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        key = tuple((t.data_ptr(), t._version) for lin in self.linears for t in (lin.weight, lin.bias)
                    if t is not None)
        if key != self.key:
            self.weight = torch.cat([lin.weight.detach() for lin in self.linears])
            biases = [lin.bias for lin in self.linears]
            self.bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
            self.key = key
        return self.weight, self.bias


def _norm(mod: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.float32 and mod.weight.dtype == torch.float32:
        return F.rms_norm(x, mod.weight.shape, mod.weight, mod.eps)
    return mod(x)


def _residual(x: torch.Tensor, lin: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """x + lin(h): F.linear on a plain Linear (no module call), else the module (a tensor-parallel wrapper).
    Not ``addmm(x, h, W.t())``: its accumulation into x differs in the last bit at some shapes."""
    if type(lin) is nn.Linear:
        return x + F.linear(h, lin.weight, lin.bias)
    return x + lin(h)


def lean_eligible(model: nn.Module, cache: KVCache | None, mask: torch.Tensor | None, seqlens) -> bool:
    """Whether ``lean_hidden`` serves this call: inference (no grad) over a cache with a mask, no QK-norm."""
    return (cache is not None and mask is not None and seqlens is None and not torch.is_grad_enabled()
            and not model.config.qk_norm and _HAS_GQA_SDPA)


def _layer_fused(layer: nn.Module) -> tuple[_Fused, _Fused]:
    fused = layer.__dict__.get("_lean_fused")
    if fused is None:
        a, m = layer.self_attn, layer.mlp
        fused = layer.__dict__["_lean_fused"] = (_Fused(a.q_proj, a.k_proj, a.v_proj),
                                                 _Fused(m.gate_proj, m.up_proj))
    return fused


def lean_hidden(model: nn.Module, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                slots: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``Transformer.hidden_states`` for a ``lean_eligible`` call (inputs checked there): [B, T, hidden]."""
    c = model.config
    b, t = tokens.shape
    h, kvh, d = c.num_heads, c.num_kv_heads, c.head_dim
    x = F.embedding(tokens, model.model.embed_tokens.weight).view(b * t, -1)
    cos, sin = model.rotary.cos_sin_heads(positions, x.dtype, h + kvh, kvh)   # [B, T, heads, D]
    n_slots = mask.shape[-1]
    k_all, v_all = cache.k.unbind(0), cache.v.unbind(0)                  # per layer, written in place
    k_seen, v_seen = cache.k[:, :, :, :n_slots].unbind(0), cache.v[:, :, :, :n_slots].unbind(0)
    index = slots.to(cache.k.device).view(b, 1, t, 1).expand(b, kvh, t, d)
    mask4 = mask.unsqueeze(1)
    gqa, cast = h != kvh, cache.k.dtype != x.dtype
    for i, layer in enumerate(model.model.layers):
        qkv_f, gu_f = _layer_fused(layer)
        a = layer.self_attn
        w, bias = qkv_f.get()
        qkv = F.linear(_norm(layer.input_layernorm, x), w, bias).view(b, t, h + 2 * kvh, d)
        qkv = qkv * cos + qkv.roll(d // 2, -1) * sin                     # RoPE on q, k (v: * 1 + 0)
        q, k, v = qkv.transpose(1, 2).split((h, kvh, kvh), 1)            # [B, heads, T, D]
        if cast:
            k, v = k.to(cache.k.dtype), v.to(cache.v.dtype)
        k_all[i].scatter_(2, index, k)
        v_all[i].scatter_(2, index, v)
        out = F.scaled_dot_product_attention(q, k_seen[i], v_seen[i], attn_mask=mask4, enable_gqa=gqa)
        x = _residual(x, a.o_proj, out.transpose(1, 2).reshape(b * t, h * d))
        w, _ = gu_f.get()
        gate, up = F.linear(_norm(layer.post_attention_layernorm, x), w).chunk(2, -1)
        x = _residual(x, layer.mlp.down_proj, F.silu(gate) * up)
    return _norm(model.model.norm, x).view(b, t, -1)

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


def lean_eligible(model: nn.Module, cache: KVCache | None, mask: torch.Tensor | None, seqlens) -> bool:
    """Whether ``lean_hidden`` serves this call: inference (no grad) over a cache with a mask, no QK-norm."""
    return (cache is not None and mask is not None and seqlens is None and not torch.is_grad_enabled()
            and not model.config.qk_norm and _HAS_GQA_SDPA)


class _Plan:
    """Per layer the tensors (or, for a tensor-parallel wrapper or a half-precision norm, the module) the
    lean forward reads, and what was true of every source parameter when gathered."""

    def __init__(self, model: nn.Module) -> None:
        self.watch: list[tuple] = []        # (module._parameters, name, parameter, data_ptr or None, version)
        self.embed = self._ref(model.model.embed_tokens, "weight")
        self.norm = self._norm(model.model.norm)
        self.layers = []
        for layer in model.model.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((self._norm(layer.input_layernorm), *self._cat(a.q_proj, a.k_proj, a.v_proj),
                                self._linear(a.o_proj), self._norm(layer.post_attention_layernorm),
                                self._cat(m.gate_proj, m.up_proj)[0], self._linear(m.down_proj)))

    def _ref(self, mod: nn.Module, name: str, copied: bool = False) -> torch.Tensor | None:
        p = mod._parameters.get(name)
        if p is not None:                   # a copied source is also watched for new data and in-place updates
            self.watch.append((mod._parameters, name, p, p.data_ptr() if copied else None, p._version))
        return p

    def _norm(self, mod: nn.Module):
        w = self._ref(mod, "weight")
        return (w, mod.eps) if w.dtype == torch.float32 else mod

    def _linear(self, lin: nn.Module):
        if type(lin) is not nn.Linear:
            return lin
        return self._ref(lin, "weight"), self._ref(lin, "bias")

    def _cat(self, *lins: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
        ws = [self._ref(lin, "weight", True) for lin in lins]
        bs = [self._ref(lin, "bias", True) for lin in lins]
        bias = None if bs[0] is None else torch.cat([b.detach() for b in bs])
        return torch.cat([w.detach() for w in ws]), bias

    def current(self) -> bool:
        for params, name, p, ptr, version in self.watch:
            if params.get(name) is not p or (ptr is not None and (p.data_ptr() != ptr or p._version != version)):
                return False
        return True


def _plan(model: nn.Module) -> _Plan:
    plan = model.__dict__.get("_lean_plan")
    if plan is None or not plan.current():
        plan = model.__dict__["_lean_plan"] = _Plan(model)
    return plan


def _norm(norm, x: torch.Tensor) -> torch.Tensor:
    if type(norm) is tuple:
        w, eps = norm
        if x.dtype == torch.float32:
            return F.rms_norm(x, w.shape, w, eps)
    return norm(x)


def _residual(x: torch.Tensor, lin, h: torch.Tensor) -> torch.Tensor:
    """x + lin(h). Not ``addmm(x, h, W.t())``: its accumulation into x differs in the last bit at some
    shapes."""
    if type(lin) is tuple:
        return x + F.linear(h, lin[0], lin[1])
    return x + lin(h)


def lean_hidden(model: nn.Module, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                slots: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``Transformer.hidden_states`` for a ``lean_eligible`` call (inputs checked there): [B, T, hidden]."""
    c, plan = model.config, _plan(model)
    b, t = tokens.shape
    h, kvh, d = c.num_heads, c.num_kv_heads, c.head_dim
    x = F.embedding(tokens, plan.embed).view(b * t, -1)
    cos, sin = model.rotary.cos_sin_heads(positions, x.dtype, h + kvh, kvh, cache.capacity)   # [B, T, heads, D]
    n_slots = mask.shape[-1]
    k_all, v_all = cache.layers()                                        # per layer, written in place
    k_seen, v_seen = cache.k[:, :, :, :n_slots].unbind(0), cache.v[:, :, :, :n_slots].unbind(0)
    index = slots.to(cache.k.device).view(b, 1, t, 1).expand(b, kvh, t, d)
    mask4 = mask.unsqueeze(1)
    gqa, cast = h != kvh, cache.k.dtype != x.dtype
    for i, (norm1, w_qkv, b_qkv, o_proj, norm2, w_gu, down) in enumerate(plan.layers):
        qkv = F.linear(_norm(norm1, x), w_qkv, b_qkv).view(b, t, h + 2 * kvh, d)
        qkv = qkv * cos + qkv.roll(d // 2, -1) * sin                     # RoPE on q, k (v: * 1 + 0)
        q, k, v = qkv.transpose(1, 2).split((h, kvh, kvh), 1)            # [B, heads, T, D]
        if cast:
            k, v = k.to(cache.k.dtype), v.to(cache.v.dtype)
        k_all[i].scatter_(2, index, k)
        v_all[i].scatter_(2, index, v)
        out = F.scaled_dot_product_attention(q, k_seen[i], v_seen[i], attn_mask=mask4, enable_gqa=gqa)
        x = _residual(x, o_proj, out.transpose(1, 2).reshape(b * t, h * d))
        gate, up = F.linear(_norm(norm2, x), w_gu).chunk(2, -1)
        x = _residual(x, down, F.silu(gate) * up)
    return _norm(plan.norm, x).view(b, t, -1)

"""The inference forward over a static cache with fewer torch calls per layer: on the CPU the tiny models are
overhead-bound (a few µs per call), so the call count is the cost.

Per layer: q/k/v one matmul over their concatenated weights, RoPE once over all of it (v's part with cos 1,
sin 0: unchanged), gate/up one matmul, no module calls, bias-free weights held transposed (no ``t()`` per
matmul), and the cache's per-layer views taken once per forward instead of per layer; with a small vocabulary
the first layer's input norm is a lookup in a table of every embedding row's norm (rows are normed apart).
A bool mask becomes SDPA's additive mask once per forward (SDPA would convert it in every layer); callers that
step many times (the draft's tree and jit) hand in the additive mask, RoPE tables (``rope_of``) and write indices
made once for all their steps. The same floating-point operations
as the module forward (``Attention.forward`` etc., which training and the other paths keep): bitwise-equal
logits (tests/exec/test_lean_forward.py).
"""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F
from torch import nn

from saguaro_exec.model.kv_cache import KVCache

_HAS_GQA_SDPA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)   # and F.rms_norm (2.4)
_NORMED_MAX = 1 << 20     # elements of the first layer's normed-embedding table (4 MiB in float32)


def lean_capable(model: nn.Module) -> bool:
    """Whether the model has a lean forward: no QK-norm, a GQA-capable SDPA, and on the CPU only (the fused
    weights are copies beside the module's own, which a large model on a GPU cannot afford twice; there CUDA
    graphs take the per-call overhead away instead)."""
    return not model.config.qk_norm and _HAS_GQA_SDPA and model.model.embed_tokens.weight.device.type == "cpu"


def lean_eligible(model: nn.Module, cache: KVCache | None, mask: torch.Tensor | None, seqlens) -> bool:
    """Whether ``lean_hidden`` serves this call: inference (no grad) over a cache with a mask, no QK-norm."""
    return (cache is not None and mask is not None and seqlens is None and not torch.is_grad_enabled()
            and lean_capable(model))


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True = attend) as the additive mask SDPA makes of it (0 / -inf in ``dtype``): the same
    values, so the same attention, converted once instead of once per layer; a float mask passes as is."""
    if mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask.logical_not(), float("-inf"))


def rope_of(model: nn.Module, positions: torch.Tensor, dtype: torch.dtype, bound: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The lean forward's cos, sin [*positions.shape, heads, D] for positions of any shape (all < ``bound``):
    a caller stepping many times makes them once (e.g. [K, B, N] for the tree) and hands in views."""
    c = model.config
    flat = positions.reshape(-1, positions.shape[-1])
    cos, sin = model.rotary.cos_sin_heads(flat, dtype, c.num_heads + c.num_kv_heads, c.num_kv_heads, bound)
    return cos.view(*positions.shape, *cos.shape[-2:]), sin.view(*positions.shape, *sin.shape[-2:])


def write_index(cache: KVCache, slots: torch.Tensor) -> torch.Tensor:
    """Slots [..., B, T] as the lean forward's K/V scatter index [..., B, KVH, T, D] (a view)."""
    *lead, b, t = slots.shape
    _, _, kvh, _, d = cache.k.shape
    return slots.to(cache.k.device).view(*lead, b, 1, t, 1).expand(*lead, b, kvh, t, d)


class _Plan:
    """Per layer the tensors (or, for a tensor-parallel wrapper or a half-precision norm, the module) the
    lean forward reads, and what was true of every source parameter when gathered. Bias-free weights are
    held as their transposed views (what ``mm`` takes: no ``t()`` per call); with a small vocabulary the first
    layer's input norm of every token's embedding is a table (``normed``: the norm's rows do not depend on
    each other, so a lookup is the per-step norm)."""

    def __init__(self, model: nn.Module) -> None:
        self.watch: list[tuple] = []        # (module._parameters, name, parameter, data_ptr or None, version)
        self.embed = self._ref(model.model.embed_tokens, "weight")
        self.norm = self._norm(model.model.norm)
        self.head = self._linear(model.lm_head)
        self.layers = []
        for layer in model.model.layers:
            a, m = layer.self_attn, layer.mlp
            w_qkv, b_qkv = self._cat(a.q_proj, a.k_proj, a.v_proj)
            self.layers.append((self._norm(layer.input_layernorm), w_qkv, b_qkv, w_qkv.t(),
                                self._linear(a.o_proj), self._norm(layer.post_attention_layernorm),
                                self._cat(m.gate_proj, m.up_proj)[0].t(), self._linear(m.down_proj)))
        self.normed = self._normed(model)

    def _ref(self, mod: nn.Module, name: str, copied: bool = False) -> torch.Tensor | None:
        p = mod._parameters.get(name)
        if p is not None:                   # a copied source is also watched for new data and in-place updates
            self.watch.append((mod._parameters, name, p, p.data_ptr() if copied else None, p._version))
        return p

    def _norm(self, mod: nn.Module):
        w = self._ref(mod, "weight")
        return (w, mod.eps) if w.dtype == torch.float32 else mod

    def _linear(self, lin: nn.Module):
        """(weight, bias, weight.t()) of a plain Linear (its weight watched for new data: the view is of it)."""
        if type(lin) is not nn.Linear:
            return lin
        w = self._ref(lin, "weight", True)
        return w, self._ref(lin, "bias"), w.t()

    def _normed(self, model: nn.Module) -> torch.Tensor | None:
        """Layer 0's float32 input norm of every embedding row [V, hidden] when that is small, else None."""
        if not self.layers or type(self.layers[0][0]) is not tuple or self.embed is None:
            return None
        emb = self.embed
        if emb.dtype != torch.float32 or emb.numel() > _NORMED_MAX:
            return None
        norm = model.model.layers[0].input_layernorm
        self._ref(model.model.embed_tokens, "weight", True)       # the table is a copy of both: watched
        self._ref(norm, "weight", True)
        return _norm(self.layers[0][0], emb.detach())

    def _cat(self, *lins: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
        ws = [self._ref(lin, "weight", True) for lin in lins]
        bs = [self._ref(lin, "bias", True) for lin in lins]
        bias = None if bs[0] is None else torch.cat([b.detach() for b in bs])
        return torch.cat([w.detach() for w in ws]), bias

    def current(self) -> bool:
        """Every source still the module's parameter, the copied ones with their data and version: checked
        every forward, so as C-level maps over lists made once (a 12-layer plan watches ~100 parameters)."""
        got = self.__dict__.get("_lists")
        if got is None:
            copied = [w for w in self.watch if w[3] is not None]
            got = self._lists = ([w[0] for w in self.watch], [w[1] for w in self.watch], [w[2] for w in self.watch],
                                 [w[2] for w in copied], [(w[3], w[4]) for w in copied])
        dicts, names, params, copied, state = got
        return (all(map(operator.is_, map(dict.get, dicts, names), params))
                and [(p.data_ptr(), p._version) for p in copied] == state)


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


def _linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, wt: torch.Tensor) -> torch.Tensor:
    """``F.linear`` of a 2-D x: without a bias the ``mm(x, w.t())`` it runs (two dispatch levels fewer), with
    the transposed view ``wt`` made once."""
    return F.linear(x, w, bias) if bias is not None else torch.mm(x, wt)


def _residual(x: torch.Tensor, lin, h: torch.Tensor) -> torch.Tensor:
    """x + lin(h). Not ``addmm(x, h, W.t())``: its accumulation into x differs in the last bit at some
    shapes."""
    if type(lin) is tuple:
        return x + _linear(h, *lin)
    return x + lin(h)


def lean_logits(model: nn.Module, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                slots: torch.Tensor, mask: torch.Tensor, rope: tuple | None = None,
                index: torch.Tensor | None = None) -> torch.Tensor:
    """``Transformer.forward`` for a ``lean_eligible`` call, without the module call and its checks (the
    caller's inputs are of the shapes ``lean_hidden`` takes): float32 logits [B, T, V]."""
    plan = _plan(model)
    h = _hidden(model, plan, tokens, positions, cache, slots, mask, rope, index)      # [B*T, hidden]
    head = plan.head
    logits = _linear(h, *head) if type(head) is tuple else head(h)                # 3-D F.linear folds so
    logits = logits.view(*tokens.shape, -1)
    return logits if logits.dtype == torch.float32 else logits.float()


def lean_hidden(model: nn.Module, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                slots: torch.Tensor, mask: torch.Tensor, rope: tuple | None = None,
                index: torch.Tensor | None = None) -> torch.Tensor:
    """``Transformer.hidden_states`` for a ``lean_eligible`` call (inputs checked there): [B, T, hidden].
    ``mask`` bool or additive (``additive_mask``); ``rope``: ``rope_of(positions)`` made ahead; ``index``:
    ``write_index(slots)`` made ahead (then ``slots`` is not read)."""
    return _hidden(model, _plan(model), tokens, positions, cache, slots, mask, rope, index).view(*tokens.shape, -1)


def _hidden(model: nn.Module, plan: _Plan, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
            slots: torch.Tensor, mask: torch.Tensor, rope: tuple | None, index: torch.Tensor | None
            ) -> torch.Tensor:
    """The hidden states [B*T, hidden]."""
    c = model.config
    b, t = tokens.shape
    h, kvh, d = c.num_heads, c.num_kv_heads, c.head_dim
    flat = tokens.reshape(-1)
    x = plan.embed.index_select(0, flat)                                 # F.embedding's own lookup
    normed = None if plan.normed is None else plan.normed.index_select(0, flat)   # layer 0's first norm
    if rope is None:                                                     # [B, T, heads, D]
        rope = model.rotary.cos_sin_heads(positions, x.dtype, h + kvh, kvh, cache.capacity)
    cos, sin = rope
    n_slots = mask.shape[-1]
    k_all, v_all = cache.layers()                                        # per layer, written in place
    k_seen, v_seen = cache.seen(n_slots)
    if index is None:
        index = slots.to(cache.k.device).view(b, 1, t, 1).expand(b, kvh, t, d)
    mask4 = additive_mask(mask, x.dtype).unsqueeze(1)
    gqa, cast = h != kvh, cache.k.dtype != x.dtype
    for i, (norm1, w_qkv, b_qkv, wt_qkv, o_proj, norm2, wt_gu, down) in enumerate(plan.layers):
        xn = normed if i == 0 and normed is not None else _norm(norm1, x)
        qkv = _linear(xn, w_qkv, b_qkv, wt_qkv).view(b, t, h + 2 * kvh, d)
        qkv = qkv * cos + qkv.roll(d // 2, -1) * sin                     # RoPE on q, k (v: * 1 + 0)
        q, k, v = qkv.transpose(1, 2).split((h, kvh, kvh), 1)            # [B, heads, T, D]
        if cast:
            k, v = k.to(cache.k.dtype), v.to(cache.v.dtype)
        k_all[i].scatter_(2, index, k)
        v_all[i].scatter_(2, index, v)
        out = F.scaled_dot_product_attention(q, k_seen[i], v_seen[i], attn_mask=mask4, enable_gqa=gqa)
        x = _residual(x, o_proj, out.transpose(1, 2).reshape(b * t, h * d))
        gate, up = torch.mm(_norm(norm2, x), wt_gu).chunk(2, -1)
        # silu of the strided half took another kernel than the module's contiguous gate on an AVX-512 host
        # (last-bit differences, 2026-12-02); the copy costs ~0.1 us at one token, ~1.4 us at 8 x 352
        x = _residual(x, down, F.silu(gate.contiguous()) * up)
    return _norm(plan.norm, x)

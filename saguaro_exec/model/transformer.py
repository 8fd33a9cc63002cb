"""Decoder-only Llama / Qwen2 / Qwen3 transformer: RMSNorm, RoPE, SwiGLU, GQA, optional QK-norm and attention
biases (Llama / Qwen3: q/k/v/o with attention_bias; Qwen2: q/k/v), static KV cache.

forward(tokens, positions, cache, slots, mask) writes the new tokens' K/V into the cache at `slots`,
then lets query t of row b attend cache slot s < S where mask[b, t, s] is True. One call serves
decode (T=1), verification (T=K+1) and tree steps (T=branches, mask = prefix + own branch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from saguaro_exec.model.config import ModelConfig
from saguaro_exec.model.flash import flash_attend
from saguaro_exec.model.kv_cache import KVCache
from saguaro_exec.model.lean_forward import lean_eligible, lean_hidden
from saguaro_exec.model.rope import Rotary, apply_rope

_HAS_GQA_SDPA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:   # one fused op (overhead-bound)
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        dtype = x.dtype                               # half precision: normalise in float32, as HF does
        return self.weight * F.rms_norm(x.to(torch.float32), self.weight.shape, eps=self.eps).to(dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        c = config
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=c.o_bias)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x, cos, sin, cache: KVCache | None, slots, mask, seqlens=None) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin)  # [B, H, T, D]
        k = apply_rope(k.transpose(1, 2), cos, sin)
        v = v.transpose(1, 2)
        if cache is not None:
            cache.write(self.layer_idx, slots, k, v)
            if seqlens is not None:  # contiguous causal chunk: flash-attn over the cache (model/flash.py)
                out = flash_attend(q, cache, self.layer_idx, seqlens)  # [B, T, H, D]
                return self.o_proj(out.reshape(b, t, self.num_heads * self.head_dim))
            if mask is None:
                raise ValueError("forward with a cache needs a mask [B, T, S]")
            k, v = cache.view(self.layer_idx, mask.shape[-1])
        out = self._attend(q, k, v, mask)  # [B, H, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim))

    def _attend(self, q, k, v, mask) -> torch.Tensor:
        if mask is None:  # no cache: plain causal self-attention over the T new tokens (training)
            return self._sdpa(q, k, v, None, is_causal=True)
        return self._sdpa(q, k, v, mask.unsqueeze(1), is_causal=False)

    def _sdpa(self, q, k, v, mask, is_causal: bool) -> torch.Tensor:
        groups = self.num_heads // self.num_kv_heads
        if groups > 1 and _HAS_GQA_SDPA:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True)
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = Attention(config, layer_idx)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, cos, sin, cache, slots, mask, seqlens=None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, slots, mask, seqlens)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """HF's `model.*` submodule (so state_dict names match HF checkpoints)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        # an explicit weight skips nn.Embedding's default init, which under the meta device (how loading and
        # random_model build models) imports torch._dynamo: ~1-3 s on the first load of every process
        weight = torch.empty(config.vocab_size, config.hidden_size)
        if weight.device.type != "meta":
            nn.init.normal_(weight)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, _weight=weight)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rotary = Rotary(config)

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def hidden_states(self, tokens, positions=None, cache=None, slots=None, mask=None,
                      seqlens=None) -> torch.Tensor:
        b, t = tokens.shape
        if positions is None:
            if cache is not None:
                raise ValueError("forward with a cache needs explicit positions [B, T]")
            positions = torch.arange(t, device=tokens.device).expand(b, t)
        if cache is not None:
            if slots is None or (mask is None and seqlens is None):
                raise ValueError("forward with a cache needs slots [B, T] and mask [B, T, S] (or seqlens [B])")
            if cache.batch != b:
                raise ValueError(f"cache batch {cache.batch} != tokens batch {b}")
            if mask is not None and (mask.shape[0] != b or mask.shape[1] != t or mask.shape[2] > cache.capacity):
                raise ValueError(f"mask shape {tuple(mask.shape)} does not fit tokens {b}x{t} / capacity {cache.capacity}")
        if lean_eligible(self, cache, mask, seqlens):
            return lean_hidden(self, tokens, positions, cache, slots, mask)
        x = self.model.embed_tokens(tokens)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, cache, slots, mask, seqlens)
        return self.model.norm(x)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None, cache: KVCache | None = None,
                slots: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                seqlens: torch.Tensor | None = None) -> torch.Tensor:
        """tokens, positions, slots: [B, T]; mask: Bool [B, T, S] -> float32 logits [B, T, V].

        ``seqlens`` (int32 [B], CUDA, bf16/fp16; instead of ``mask``): the step is a contiguous causal chunk
        ending at slot seqlens[b] - 1 of each row, attended with flash-attn (model/flash.py).

        With cache=None: plain causal self-attention over the T tokens (training / scoring), positions
        default to 0..T-1 and `mask`, if given, is a [B, T, T] mask over the new tokens themselves.
        Every query must see at least one slot (normally its own), else its output is undefined.
        """
        return self.lm_head(self.hidden_states(tokens, positions, cache, slots, mask, seqlens)).float()

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        return KVCache(self.config, batch, capacity, self.device, self.dtype)

"""flash-attn's ``flash_attn_with_kvcache`` over the static cache, for contiguous causal chunks (decode, verify).

The step's K/V are already written into the cache (``KVCache.write``); query t of row b then attends slots
< seqlens[b] - T + t + 1, which is ``causal_mask(start, T, S)`` with seqlens = start + T (flash aligns the
causal mask to the bottom right). Tree steps keep SDPA with their explicit mask.
"""

from __future__ import annotations

import functools

import torch

from saguaro_exec.model.kv_cache import KVCache


@functools.cache
def flash_available() -> bool:
    """True when the flash_attn package imports (with its CUDA extension)."""
    try:
        from flash_attn import flash_attn_with_kvcache  # noqa: F401
    except Exception:  # ImportError, or a broken build raising at import
        return False
    return True


def flash_attend(q: torch.Tensor, cache: KVCache, layer: int, seqlens: torch.Tensor) -> torch.Tensor:
    """q [B, H, T, D] (bf16/fp16, CUDA), seqlens int32 [B] -> attention output [B, T, H, D]."""
    from flash_attn import flash_attn_with_kvcache

    k = cache.k[layer].transpose(1, 2)          # [B, capacity, KVH, D]: last dim contiguous, as flash needs
    v = cache.v[layer].transpose(1, 2)
    return flash_attn_with_kvcache(q.transpose(1, 2).contiguous(), k, v, cache_seqlens=seqlens, causal=True)

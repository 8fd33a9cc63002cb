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


@functools.cache
def _kernel():
    """flash_attn's kernel, imported once: flash_attend runs per layer, and an import statement there would
    go through the CLI's interrupt-deferring import hook (calibration.interrupts) every time."""
    from flash_attn import flash_attn_with_kvcache

    return flash_attn_with_kvcache


def flash_attend(q: torch.Tensor, cache: KVCache, layer: int, seqlens: torch.Tensor) -> torch.Tensor:
    """q [B, H, T, D] (bf16/fp16, CUDA), seqlens int32 [B] -> attention output [B, T, H, D]."""
    flash_attn_with_kvcache = _kernel()
    k = cache.k[layer].transpose(1, 2)          # [B, capacity, KVH, D]: last dim contiguous, as flash needs
    v = cache.v[layer].transpose(1, 2)
    return flash_attn_with_kvcache(q.transpose(1, 2).contiguous(), k, v, cache_seqlens=seqlens, causal=True)

"""CUDA-graph replay of one forward shape: removes Python/launch overhead from decode and verify steps.

A Transformer forward has static shapes and no host syncs, so a (batch, T, S) step can be captured once
and replayed with new tokens/positions/slots/mask copied into static input buffers. At an 8B shape on one
H200 eager decode is launch-bound (~25 ms/step); replay runs at the memory-bandwidth floor.
"""

from __future__ import annotations

import torch

from saguaro_exec.model.kv_cache import KVCache
from saguaro_exec.model.transformer import Transformer


class GraphedForward:
    """Captured `model(tokens, positions, cache, slots, mask)` for fixed batch = cache.batch, T and S.

    Call with tensors of shape [B, T] (tokens, positions, slots) and a bool mask [B, T, S'] with S' <= S
    (columns beyond S' are treated as masked). Returns the static float32 logits buffer [B, T, V]: it is
    overwritten by the next call, so clone it if you need to keep it.

    ``flash=True`` captures the flash-attn form instead: no mask, ``seqlens`` [B] (int32, valid slots per
    row after the step's writes) bound each row's causal attention. ``capture=False`` keeps the static
    buffers but runs the forward eagerly on each call (any device; used to test the pool on CPU).
    ``pool`` shares a CUDA graph memory pool (``torch.cuda.graph_pool_handle()``) between captures.
    """

    def __init__(self, model: Transformer, cache: KVCache, T: int, S: int, warmup: int = 2, *,
                 flash: bool = False, capture: bool = True, pool=None) -> None:
        if capture and cache.device.type != "cuda":
            raise ValueError("GraphedForward needs the model and cache on a CUDA device")
        if not 0 < S <= cache.capacity:
            raise ValueError(f"S={S} must be in [1, cache capacity {cache.capacity}]")
        b, dev = cache.batch, cache.device
        self.model, self.cache, self.T, self.S, self.flash = model, cache, T, S, flash
        self.tokens = torch.zeros(b, T, dtype=torch.long, device=dev)
        self.positions = torch.zeros(b, T, dtype=torch.long, device=dev)
        self.slots = torch.full((b, T), cache.capacity - 1, dtype=torch.long, device=dev)
        if flash:
            self.mask, self.seqlens = None, torch.full((b,), cache.capacity, dtype=torch.int32, device=dev)
        else:
            self.mask, self.seqlens = torch.zeros(b, T, S, dtype=torch.bool, device=dev), None
            self.mask[..., 0] = True
        self.graph = None
        if not capture:
            return
        # warm-up runs really execute and write K/V at the last slot: keep that slot's contents
        saved = cache.k[:, :, :, -1].clone(), cache.v[:, :, :, -1].clone()
        stream = torch.cuda.Stream(device=dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(warmup):
                self._run()
        torch.cuda.current_stream(dev).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's syncs (the verifier beside a draft_placement "stream" build) must not
        # invalidate this capture; the capturing thread is held to the same rules as in "global" mode
        with torch.no_grad(), torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
            self.logits = self._run()
        cache.k[:, :, :, -1].copy_(saved[0])
        cache.v[:, :, :, -1].copy_(saved[1])

    def _run(self) -> torch.Tensor:
        if self.flash:
            return self.model(self.tokens, self.positions, self.cache, self.slots, None, seqlens=self.seqlens)
        return self.model(self.tokens, self.positions, self.cache, self.slots, self.mask)

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                 mask: torch.Tensor | None = None, seqlens: torch.Tensor | None = None) -> torch.Tensor:
        self.tokens.copy_(tokens, non_blocking=True)
        self.positions.copy_(positions, non_blocking=True)
        self.slots.copy_(slots, non_blocking=True)
        if self.flash:
            self.seqlens.copy_(seqlens, non_blocking=True)
        else:
            s = mask.shape[-1]
            if s > self.S:
                raise ValueError(f"mask covers {s} slots, graph was captured for S={self.S}")
            if s < self.S:
                self.mask[..., s:].zero_()
            self.mask[..., :s].copy_(mask, non_blocking=True)
        if self.graph is None:
            return self._run()
        self.graph.replay()
        return self.logits

"""CUDA-graph replay of one forward shape: removes Python/launch overhead from decode and verify steps.

A Transformer forward has static shapes and no host syncs, so a (batch, T, S) step can be captured once
and replayed with new tokens/positions/slots/mask copied into static input buffers. At an 8B shape on one
H200 eager decode is launch-bound (~25 ms/step); replay runs at the memory-bandwidth floor.
"""

from __future__ import annotations

import torch

from .kv_cache import KVCache
from .transformer import Transformer


class GraphedForward:
    """Captured `model(tokens, positions, cache, slots, mask)` for fixed batch = cache.batch, T and S.

    Call with tensors of shape [B, T] (tokens, positions, slots) and a bool mask [B, T, S'] with S' <= S
    (columns beyond S' are treated as masked). Returns the static float32 logits buffer [B, T, V]: it is
    overwritten by the next call, so clone it if you need to keep it.
    """

    def __init__(self, model: Transformer, cache: KVCache, T: int, S: int, warmup: int = 2) -> None:
        if cache.device.type != "cuda":
            raise ValueError("GraphedForward needs the model and cache on a CUDA device")
        if not 0 < S <= cache.capacity:
            raise ValueError(f"S={S} must be in [1, cache capacity {cache.capacity}]")
        b, dev = cache.batch, cache.device
        self.model, self.cache, self.T, self.S = model, cache, T, S
        self.tokens = torch.zeros(b, T, dtype=torch.long, device=dev)
        self.positions = torch.zeros(b, T, dtype=torch.long, device=dev)
        self.slots = torch.full((b, T), cache.capacity - 1, dtype=torch.long, device=dev)
        self.mask = torch.zeros(b, T, S, dtype=torch.bool, device=dev)
        self.mask[..., 0] = True
        # warm-up runs really execute and write K/V at the last slot: keep that slot's contents
        saved = cache.k[:, :, :, -1].clone(), cache.v[:, :, :, -1].clone()
        stream = torch.cuda.Stream(device=dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(warmup):
                self._run()
        torch.cuda.current_stream(dev).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            self.logits = self._run()
        cache.k[:, :, :, -1].copy_(saved[0])
        cache.v[:, :, :, -1].copy_(saved[1])

    def _run(self) -> torch.Tensor:
        return self.model(self.tokens, self.positions, self.cache, self.slots, self.mask)

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                 mask: torch.Tensor) -> torch.Tensor:
        s = mask.shape[-1]
        if s > self.S:
            raise ValueError(f"mask covers {s} slots, graph was captured for S={self.S}")
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        self.slots.copy_(slots)
        if s < self.S:
            self.mask[..., s:].zero_()
        self.mask[..., :s].copy_(mask)
        self.graph.replay()
        return self.logits

"""A model plus its static KV cache, with the two forward shapes every engine needs.

Slot layout per sequence: slot i holds logical position i for the true prefix (and for the linear
speculation right after it); the draft's tree region sits beyond that, see ``tree.py``.
"""

from __future__ import annotations

import torch

from .model import Transformer, causal_mask


class CachedModel:
    """``model`` with a preallocated cache of ``capacity`` slots for ``batch`` sequences."""

    def __init__(self, model: Transformer, batch: int, capacity: int) -> None:
        self.model = model
        self.device = model.device
        self.cache = model.new_cache(batch, capacity)     # a TPTarget (tp.py) makes its sharded cache here
        self.batch, self.capacity = batch, capacity

    @torch.inference_mode()
    def extend(self, chunks: list[list[int]], start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append chunk b at slots/positions start[b].. (causal); returns (logits [B, T, V], lengths [B]).

        Chunks of different lengths are right-padded with token 0; padded rows write K/V beyond the
        chunk, which no later query sees before it is overwritten.
        """
        sizes = [len(c) for c in chunks]
        lengths = torch.tensor(sizes, dtype=torch.long)
        width = max(1, max(sizes))
        if min(sizes) == width:                                   # common case: no padding needed
            toks = torch.tensor(chunks, dtype=torch.long)
        else:
            toks = torch.zeros(len(chunks), width, dtype=torch.long)
            for b, c in enumerate(chunks):
                if c:
                    toks[b, : len(c)] = torch.tensor(c, dtype=torch.long)
        start = start.to(torch.long).cpu()
        positions = start.view(-1, 1) + torch.arange(width).view(1, -1)
        need = int(positions.max()) + 1
        if need > self.capacity:
            raise RuntimeError(f"KV cache overflow: need {need} slots, capacity {self.capacity}")
        mask = causal_mask(start, width, need)
        dev = self.device
        logits = self.model(toks.to(dev), positions.to(dev), self.cache, positions.to(dev), mask.to(dev))
        return logits, lengths

    @torch.inference_mode()
    def last_logits(self, chunks: list[list[int]], start: torch.Tensor) -> torch.Tensor:
        """``extend`` and keep only the logits after each chunk's last real token: [B, V]."""
        logits, lengths = self.extend(chunks, start)
        if bool((lengths == logits.shape[1]).all()):
            return logits[:, -1]
        idx = (lengths - 1).clamp_min(0).to(logits.device)
        return logits[torch.arange(len(chunks), device=logits.device), idx]

    @torch.inference_mode()
    def tail_logits(self, chunks: list[list[int]], start: torch.Tensor, n: int) -> torch.Tensor:
        """``extend`` and keep the logits of each chunk's last ``n`` real tokens: [B, n, V]."""
        logits, lengths = self.extend(chunks, start)
        if bool((lengths == logits.shape[1]).all()) and logits.shape[1] >= n:
            return logits[:, logits.shape[1] - n:]
        idx = (lengths.view(-1, 1) - n + torch.arange(n).view(1, -1)).clamp_min(0).to(logits.device)
        return logits.gather(1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """Raw forward with explicit slots and mask (tree steps)."""
        dev = self.device
        return self.model(tokens.to(dev), positions.to(dev), self.cache, slots.to(dev), mask.to(dev))

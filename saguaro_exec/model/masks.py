"""Boolean attention masks [B, T, S]: True = query t of row b may attend cache slot s."""

from __future__ import annotations

import torch


def causal_mask(start: torch.Tensor, T: int, S: int) -> torch.Tensor:
    """Query t of row b sees slots < start[b] + t + 1 (new tokens stored contiguously at start[b])."""
    start = torch.as_tensor(start, dtype=torch.long)
    s = torch.arange(S, device=start.device).view(1, 1, S)
    t = torch.arange(T, device=start.device).view(1, T, 1)
    return s < (start.view(-1, 1, 1) + t + 1)


def prefix_mask(lengths: torch.Tensor, T: int, S: int) -> torch.Tensor:
    """Every query of row b sees slots < lengths[b] (the shared prefix), nothing else."""
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    s = torch.arange(S, device=lengths.device).view(1, 1, S)
    return (s < lengths.view(-1, 1, 1)).expand(lengths.numel(), T, S).clone()


def allow(mask: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Set mask[b, t, visible[b, t, n]] = True in place for every entry >= 0 (-1 = padding); returns mask.

    visible: LongTensor [B, T, N]. Used for tree steps: each branch's query additionally sees its glue
    tokens and its own earlier tree tokens.
    """
    visible = visible.to(mask.device, torch.long)
    hits = torch.zeros(mask.shape, dtype=torch.int32, device=mask.device)
    hits.scatter_add_(2, visible.clamp(min=0), (visible >= 0).to(torch.int32))
    mask |= hits > 0
    return mask


def contiguous_slots(start: torch.Tensor, T: int) -> torch.Tensor:
    """Slots [B, T] = start[b] + t: where T new tokens go when stored right after the prefix."""
    start = torch.as_tensor(start, dtype=torch.long)
    return start.view(-1, 1) + torch.arange(T, device=start.device).view(1, T)

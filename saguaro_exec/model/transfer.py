"""Host <-> device moves that do not stall the host: inputs go up through pinned memory without waiting,
results come down in one transfer per round (the one sync a round needs). On CPU both are no-ops."""

from __future__ import annotations

import torch


def to_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``t`` on ``device``; a CPU -> CUDA copy is staged in pinned memory and does not block the host."""
    device = torch.device(device)
    if t.device.type == "cpu" and device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def to_host(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The integer/bool ``tensors`` on the CPU, copied in one device -> host transfer (CPU ones pass as is)."""
    if all(t.device.type == "cpu" for t in tensors):
        return tensors
    dev = next(t.device for t in tensors if t.device.type != "cpu")
    flat = torch.cat([to_device(t.reshape(-1), dev).to(torch.long) for t in tensors]).cpu()
    out, i = [], 0
    for t in tensors:
        n = t.numel()
        out.append(flat[i:i + n].view(t.shape).to(t.dtype))
        i += n
    return tuple(out)

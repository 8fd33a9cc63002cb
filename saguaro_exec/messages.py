"""Fixed-shape tensors for the two SSD messages, so each is one point-to-point send.

outcome (verifier -> speculator): int64 [B, 4] = (accepted k, bonus token, done, stop).
reply (speculator -> verifier): float64 [B+1, W]: row b = (hit, bonus rank, from_backup, K tokens);
the last row = phase (start, end) pairs. At temperature > 0 a second float32 [B, K, V] message
carries q rows (the verifier needs the full row at the rejection position for the residual).
"""

from __future__ import annotations

import math

import torch

from .draft_worker import Reply

PHASES = ("reply", "backup", "glue", "fork", "tree")


def outcome_tensor(acc: torch.Tensor, bonus: torch.Tensor, done: list[bool], stop: bool) -> torch.Tensor:
    """Pack the verifier's per-sequence outcome key (k, t*) plus done/stop flags."""
    bsz = acc.shape[0]
    out = torch.zeros(bsz, 4, dtype=torch.long)
    out[:, 0], out[:, 1] = acc.cpu(), bonus.cpu()
    out[:, 2] = torch.tensor(done, dtype=torch.long)
    out[:, 3] = int(stop)
    return out


def unpack_outcome(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[bool], bool]:
    return t[:, 0].clone(), t[:, 1].clone(), [bool(x) for x in t[:, 2]], bool(t[0, 3])


def reply_width(k: int) -> int:
    return max(3 + k, 2 * len(PHASES))


def reply_tensor(r: Reply) -> torch.Tensor:
    """Pack everything but q into one float64 tensor."""
    bsz, k = r.tokens.shape
    width = reply_width(k)
    rows = [[float(h), float(rk), float(fb), *map(float, t)] + [math.nan] * (width - 3 - k)
            for h, rk, fb, t in zip(r.hit.tolist(), r.rank.tolist(), r.from_backup.tolist(), r.tokens.tolist())]
    times = [math.nan] * width
    for i, name in enumerate(PHASES):
        if name in r.times:
            times[2 * i], times[2 * i + 1] = r.times[name]
    return torch.tensor(rows + [times], dtype=torch.float64)


def unpack_reply(t: torch.Tensor, k: int, q: torch.Tensor | None) -> Reply:
    bsz = t.shape[0] - 1
    times = {}
    for i, name in enumerate(PHASES):
        s, e = float(t[bsz, 2 * i]), float(t[bsz, 2 * i + 1])
        if not math.isnan(s):
            times[name] = (s, e)
    return Reply(hit=t[:bsz, 0] > 0.5, rank=t[:bsz, 1].long(), from_backup=t[:bsz, 2] > 0.5,
                 tokens=t[:bsz, 3:3 + k].long(), q=q, times=times)

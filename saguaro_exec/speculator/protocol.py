"""Fixed-shape tensors for the two SSD messages, so each is one point-to-point send.

outcome (verifier -> speculator): int64 [B, 4] = (accepted k, bonus token, done, stop).
reply (speculator -> verifier): float64 [B+1, W]: row b = (hit, bonus rank, from_backup, K tokens);
the last row = phase (start, end) pairs. At temperature > 0 a second float32 [B, K, V] message
carries q rows (the verifier needs the full row at the rejection position for the residual).
"""

from __future__ import annotations

import math

import torch

from saguaro_exec.speculator.worker import Reply

PHASES = ("reply", "backup", "glue", "fork", "tree")


def outcome_tensor(acc: torch.Tensor, bonus: torch.Tensor, done: list[bool], stop: bool) -> torch.Tensor:
    """Pack the verifier's per-sequence outcome key (k, t*) plus done/stop flags (one tensor build:
    this is on every round's critical path)."""
    st = int(stop)
    return torch.tensor([[a, t, int(d), st] for a, t, d in zip(acc.tolist(), bonus.tolist(), done)],
                        dtype=torch.long)


def unpack_outcome(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[bool], bool]:
    rows = t.tolist()
    return (torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows]),
            [bool(r[2]) for r in rows], bool(rows[0][3]))


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


def unpack_reply(t: torch.Tensor | list, k: int, q: torch.Tensor | None) -> Reply:
    """The Reply in a received head (the tensor or its ``tolist()`` rows)."""
    rows = t.tolist() if isinstance(t, torch.Tensor) else t
    body, last = rows[:-1], rows[-1]
    times = {name: (last[2 * i], last[2 * i + 1]) for i, name in enumerate(PHASES) if not math.isnan(last[2 * i])}
    return Reply(hit=torch.tensor([r[0] > 0.5 for r in body]), rank=torch.tensor([int(r[1]) for r in body]),
                 from_backup=torch.tensor([r[2] > 0.5 for r in body]),
                 tokens=torch.tensor([r[3:3 + k] for r in body], dtype=torch.long).view(len(body), k),
                 q=q, times=times)


# ---- "push" protocol: the draft sends its whole speculation cache to the verifier as soon as it is
# built, so the verifier looks the outcome up itself and a hit costs no message round trip at all.

def cache_shape(bsz: int, k: int, n_max: int, r_max: int) -> tuple[int, int]:
    """int64 [B+1, W]: row b = branch_k, branch_t, valid (n_max each), tokens (n_max*K), top and rank
    ((K+1)*r_max each); the last row = (branches used, then phase start/end pairs in ns)."""
    return bsz + 1, max(3 * n_max + n_max * k + 2 * (k + 1) * r_max, 1 + 2 * len(PHASES))


def cache_tensor(cache, k: int, n_max: int, r_max: int, times: dict) -> torch.Tensor:
    """Pack a ``tree.SpecCache`` (without q) and the build's phase times."""
    f = cache.fork
    bsz, n = f.branch_k.shape
    r = f.top.shape[-1]
    out = torch.full(cache_shape(bsz, k, n_max, r_max), -1, dtype=torch.long)
    body = out[:bsz]
    body[:, :n], body[:, n_max:n_max + n] = f.branch_k, f.branch_t
    body[:, 2 * n_max:2 * n_max + n] = f.valid.long()
    body[:, 3 * n_max:3 * n_max + n * k] = cache.tokens.reshape(bsz, n * k)
    o = 3 * n_max + n_max * k
    w = (k + 1) * r_max
    body[:, o:o + w].view(bsz, k + 1, r_max)[..., :r] = f.top              # padding stays -1
    body[:, o + w:o + 2 * w].view(bsz, k + 1, r_max)[..., :r] = f.rank
    out[bsz, 0] = n
    for i, name in enumerate(PHASES):
        if name in times:
            s, e = times[name]
            out[bsz, 1 + 2 * i], out[bsz, 2 + 2 * i] = round(s * 1e9), round(e * 1e9)
    return out


def cache_q(q: torch.Tensor, n_max: int) -> torch.Tensor:
    """q [B, N, K, V] padded to n_max branches, float32 on the CPU."""
    bsz, n, k, v = q.shape
    out = torch.zeros(bsz, n_max, k, v, dtype=torch.float32)
    out[:, :n] = q.detach().to("cpu", torch.float32)
    return out


def unpack_cache(t: torch.Tensor, k: int, n_max: int, r_max: int, q: torch.Tensor | None):
    """(``tree.SpecCache``, phase times) from a received cache message."""
    from saguaro_exec.speculator.cache import Fork, SpecCache

    bsz = t.shape[0] - 1
    last = t[bsz].tolist()
    n = last[0]
    body = t[:bsz]
    o, w = 3 * n_max + n_max * k, (k + 1) * r_max
    fork = Fork(branch_k=body[:, :n], branch_t=body[:, n_max:n_max + n],
                valid=body[:, 2 * n_max:2 * n_max + n] > 0, top=body[:, o:o + w].view(bsz, k + 1, r_max),
                rank=body[:, o + w:o + 2 * w].view(bsz, k + 1, r_max))
    tokens = body[:, 3 * n_max:3 * n_max + n * k].reshape(bsz, n, k)
    times = {name: (last[1 + 2 * i] / 1e9, last[2 + 2 * i] / 1e9) for i, name in enumerate(PHASES)
             if last[1 + 2 * i] >= 0}
    return SpecCache(fork=fork, tokens=tokens, q=None if q is None else q[:, :n]), times


def lookup_rows(rows: list, k: int, n_max: int, r_max: int, acc: list[int], bonus: list[int], n_rank: int
                ) -> tuple[list[bool], list[int], list[list[int]], list[int], dict]:
    """The verifier's own lookup in a received cache's ``tolist()`` rows, in plain Python (a few
    microseconds per row: it sits between two verifications): (hit, bonus rank (-1 beyond top-n_rank or
    excluded), K tokens (zeros on a miss), branch index (-1 on a miss), phase times) per row."""
    last = rows[-1]
    n = last[0]
    o, w = 3 * n_max + n_max * k, (k + 1) * r_max
    hits, ranks, toks, js = [], [], [], []
    for row, a, t in zip(rows[:-1], acc, bonus):
        j = next((i for i in range(n) if row[2 * n_max + i] == 1 and row[i] == a and row[n_max + i] == t), -1)
        top = row[o + a * r_max:o + (a + 1) * r_max]
        r = row[o + w + a * r_max + top.index(t)] if t in top else -1
        hits.append(j >= 0)
        ranks.append(r if 0 <= r < n_rank else -1)
        toks.append(row[3 * n_max + j * k:3 * n_max + (j + 1) * k] if j >= 0 else [0] * k)
        js.append(j)
    times = {name: (last[1 + 2 * i] / 1e9, last[2 + 2 * i] / 1e9) for i, name in enumerate(PHASES)
             if last[1 + 2 * i] >= 0}
    return hits, ranks, toks, js, times

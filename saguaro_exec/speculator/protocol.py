"""The SSD wire protocol between the verifier (rank 0) and the draft process (rank 1): one module for
the tags, the message formats, their pack/unpack, and the one cache lookup both sides use.

Every message is one fixed-shape tensor, so each is a single gloo point-to-point send, and each kind has
its own tag, so a receiver can post all its receives before the sender is ready:

- outcome (verifier -> draft, TAG): int64 [B, 4] = (accepted k, bonus token t*, done, stop) per row; done is
  2 for a finished row that takes the next request of the queue now (a refill; load mode admits only
  requests that have arrived, so the draft cannot infer how many from the done flags alone).
- reply (draft -> verifier, TAG): float64 [B+1, W]; row b = (hit, bonus rank, from_backup, K tokens),
  the last row = phase (start, end) pairs in seconds since the run start (NaN: phase absent). At
  temperature > 0 a second float32 [B, K, V] message (TAG_Q) carries the q rows: the verifier needs the
  full row at the rejection position for the residual distribution.
- cache (push protocol, draft -> verifier, TAG_CACHE): the whole speculation cache as soon as it is built,
  int64 [B+1, W], laid out by ``CacheLayout``; the verifier looks its outcome up itself, so a hit costs no
  round trip. At T > 0 the q rows follow as float32 [B, n_max, K, V] (TAG_CACHE_Q).

Start-up: rank 0 hosts a TCPStore; the draft connects (``connect``) and the two ranks form a gloo group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from saguaro_exec.speculator.cache import Fork, SpecCache

TAG = 0
TAG_Q = 1                       # q rows at temperature > 0: their own tag, so both receives can be posted early
TAG_CACHE, TAG_CACHE_Q = 2, 3   # push protocol: the speculation cache (and its q rows)
PHASES = ("reply", "backup", "glue", "fork", "tree")       # (start, end) pairs in a reply's last row
CACHE_PHASES = PHASES + ("outcome_seen", "cache_sent", "answer", "settle", "pack")   # a cache message's: + the
# hand-off stamps (waiting for / seeing the outcome it was built from; tree end / send start; the draft's
# answer to that outcome; the build's settling of it; the tree's host copy and packing)


@dataclass
class Reply:
    """What the speculator sends back each round (hit/rank refer to the previous outcome)."""

    hit: torch.Tensor          # [B] bool
    rank: torch.Tensor         # [B] long, -1 beyond top-N
    from_backup: torch.Tensor  # [B] bool: this speculation came from the backup
    tokens: torch.Tensor       # [B, K]
    q: torch.Tensor | None     # [B, K, V] at temperature > 0
    times: dict = field(default_factory=dict)  # phase -> (start, end) seconds since run start


def connect(port: int, rank: int, timeout_s: float, store: dist.Store | None = None) -> dist.ProcessGroup:
    """The two-rank gloo group over the TCP store on 127.0.0.1:port (rank 0 passes the store it hosts)."""
    timeout = timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, 2, False, timeout=timeout)
        store.set("draft_up", "1")               # lets the parent stop watching for a failed start
    return dist.ProcessGroupGloo(store, rank, 2, timeout)


def max_branches(fanout: tuple[int, ...], fanout_miss: tuple[int, ...]) -> int:
    """Most branches a speculation cache holds per sequence: the larger schedule's total (at least 1)."""
    return max(sum(fanout), sum(fanout_miss), 1)


# ---- outcome and reply ----

def outcome_tensor(acc: torch.Tensor, bonus: torch.Tensor, done: list[bool], stop: bool,
                   fresh: tuple = (), out: torch.Tensor | None = None) -> torch.Tensor:
    """Pack the verifier's per-sequence outcome key (k, t*) plus done/stop flags, done = 2 on the rows in
    ``fresh`` (refilled now), into ``out`` (int64 [B, 4], reused round after round; None: a new one). A few
    numpy writes: this is on every round's critical path (a tensor built from nested lists costs ~20 us)."""
    msg = torch.empty(len(done), 4, dtype=torch.long) if out is None else out
    a = msg.numpy()
    a[:, 0] = acc.numpy() if isinstance(acc, torch.Tensor) else acc
    a[:, 1] = bonus.numpy() if isinstance(bonus, torch.Tensor) else bonus
    a[:, 2] = [2 if b in fresh else int(d) for b, d in enumerate(done)]
    a[:, 3] = int(stop)
    return msg


def unpack_outcome(t: torch.Tensor) -> tuple[list[int], list[int], list[bool], bool, int]:
    """(accepted k, bonus, done per row, stop, how many rows take a new request now) as plain lists: no
    tensor built on the draft's hot path."""
    rows = t.tolist()
    return ([r[0] for r in rows], [r[1] for r in rows], [r[2] != 0 for r in rows], rows[0][3] != 0,
            sum(r[2] == 2 for r in rows))


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


# ---- the speculation cache message (push protocol; also the draft's own lookup table) ----

@dataclass(frozen=True)
class CacheLayout:
    """Where each field lives in a cache message, int64 [B+1, width]. Row b holds, for up to n_max
    branches: branch_k, branch_t, valid (n_max each), the K drafted tokens of each branch (n_max*K),
    then the draft's ranked top tokens and their ranks at each position 0..K ((K+1)*r_max each; padding
    -1). The last row holds the number of branches used, then phase start/end pairs in ns (-1: absent)."""

    k: int
    n_max: int      # most branches per row (``max_branches``)
    r_max: int      # widest ranked list per position

    @classmethod
    def of(cls, ws, vocab: int) -> CacheLayout:
        """The layout of every cache message of a run with WorkerSpec ``ws``."""
        r_max = min(vocab, max(ws.n_rank, max(ws.fanout), max(ws.fanout_miss)) + 1)
        return cls(ws.k, max_branches(ws.fanout, ws.fanout_miss), r_max)

    @property
    def branch_k(self) -> slice:
        return slice(0, self.n_max)

    @property
    def branch_t(self) -> slice:
        return slice(self.n_max, 2 * self.n_max)

    @property
    def valid(self) -> slice:
        return slice(2 * self.n_max, 3 * self.n_max)

    @property
    def tokens(self) -> slice:
        return slice(3 * self.n_max, 3 * self.n_max + self.n_max * self.k)

    @property
    def top(self) -> slice:
        o = self.tokens.stop
        return slice(o, o + (self.k + 1) * self.r_max)

    @property
    def rank(self) -> slice:
        o = self.top.stop
        return slice(o, o + (self.k + 1) * self.r_max)

    def shape(self, bsz: int) -> tuple[int, int]:
        return bsz + 1, max(self.rank.stop, 1 + 2 * len(CACHE_PHASES))

    def pack(self, cache: SpecCache, times: dict | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
        """The message for a host-side ``SpecCache`` (without q), with the build's phase times, written into
        ``out`` (a preallocated message of ``shape``; None: a new one) through numpy views: a handful of
        buffer copies, not a torch op per field, between the tree's end and the send."""
        f = cache.fork
        bsz, n = f.branch_k.shape
        r, k = f.top.shape[-1], self.k
        msg = torch.empty(self.shape(bsz), dtype=torch.long) if out is None else out
        a = msg.numpy()
        a.fill(-1)
        body = a[:bsz]
        for where, what in ((self.branch_k, f.branch_k), (self.branch_t, f.branch_t), (self.valid, f.valid)):
            body[:, where.start:where.start + n] = what.numpy()
        body[:, self.tokens.start:self.tokens.start + n * k] = cache.tokens.numpy().reshape(bsz, n * k)
        body[:, self.top].reshape(bsz, k + 1, self.r_max)[..., :r] = f.top.numpy()     # views: reshape of a
        body[:, self.rank].reshape(bsz, k + 1, self.r_max)[..., :r] = f.rank.numpy()   # row slice splits its axis
        a[bsz, 0] = n
        return self.stamp(msg, times or {})

    def stamp(self, t: torch.Tensor | np.ndarray, times: dict) -> torch.Tensor | np.ndarray:
        """Write the phase times into the message's last row (in place, one numpy write); returns ``t``."""
        vals = [-1] * (2 * len(CACHE_PHASES))
        for i, name in enumerate(CACHE_PHASES):
            if name in times:
                s, e = times[name]
                vals[2 * i], vals[2 * i + 1] = round(s * 1e9), round(e * 1e9)
        last = (t.numpy() if isinstance(t, torch.Tensor) else t)[-1]
        last[1:1 + len(vals)] = vals
        last[1 + len(vals):] = -1
        return t

    @staticmethod
    def times(last: list[int] | CacheRows) -> dict:
        """Phase times from a message's last row (``tolist()``, or read from ``CacheRows``)."""
        last = last.last if isinstance(last, CacheRows) else last
        return {name: (last[1 + 2 * i] / 1e9, last[2 + 2 * i] / 1e9) for i, name in enumerate(CACHE_PHASES)
                if last[1 + 2 * i] >= 0}

    def unpack(self, t: torch.Tensor, q: torch.Tensor | None) -> tuple[SpecCache, dict]:
        """(``SpecCache``, phase times) from a received message (q: its padded q rows, or None)."""
        bsz = t.shape[0] - 1
        last = t[bsz].tolist()
        n, body = last[0], t[:bsz]
        span = lambda s: body[:, s.start:s.start + n]  # noqa: E731
        fork = Fork(branch_k=span(self.branch_k), branch_t=span(self.branch_t), valid=span(self.valid) > 0,
                    top=body[:, self.top].view(bsz, self.k + 1, self.r_max),
                    rank=body[:, self.rank].view(bsz, self.k + 1, self.r_max))
        tokens = body[:, self.tokens.start:self.tokens.start + n * self.k].reshape(bsz, n, self.k)
        return SpecCache(fork=fork, tokens=tokens, q=None if q is None else q[:, :n]), self.times(last)

    def lookup(self, msg: torch.Tensor | np.ndarray | list | CacheRows, acc: list[int], bonus: list[int],
               n_rank: int) -> tuple[list[bool], list[int], list[list[int]], list[int]]:
        """The one outcome lookup on a message (the draft's answer and the push verifier's own lookup both
        use it): per row, hit, bonus rank (-1: excluded, absent or beyond top-n_rank), the K cached tokens
        (zeros on a miss) and the branch index (-1 on a miss). Plain Python over list slices of the rows'
        branch head and the one ranked list each row needs: microseconds per row, on the critical path
        between two verifications."""
        rows = msg if isinstance(msg, CacheRows) else CacheRows(self, msg)
        n, k, r_max = rows.n, self.k, self.r_max
        ko, to, vo, so = self.branch_k.start, self.branch_t.start, self.valid.start, self.tokens.start
        top0, rank0 = self.top.start, self.rank.start
        hits, ranks, toks, js = [], [], [], []
        for b, (row, a, t) in enumerate(zip(rows.head, acc, bonus)):
            j, i = -1, to
            while t in row[i:to + n]:                  # the branches with bonus t (list.index: in C)
                i = row.index(t, i, to + n)
                if row[ko + i - to] == a and row[vo + i - to] == 1:
                    j = i - to
                    break
                i += 1
            top = rows.span(b, top0 + a * r_max, top0 + (a + 1) * r_max)
            r = rows.at(b, rank0 + a * r_max + top.index(t)) if t in top else -1
            hits.append(j >= 0)
            ranks.append(r if 0 <= r < n_rank else -1)
            toks.append(row[so + j * k:so + (j + 1) * k] if j >= 0 else [0] * k)
            js.append(j)
        return hits, ranks, toks, js

    def q_rows(self, q: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """q [B, N, K, V] padded to n_max branches, float32 on the CPU (the TAG_CACHE_Q message), written
        into ``out`` when given (reused: padding rows beyond N are never read, so not cleared)."""
        bsz, n, k, v = q.shape
        if out is None:
            out = torch.zeros(bsz, self.n_max, k, v, dtype=torch.float32)
        out[:, :n] = q.detach()
        return out


class CacheRows:
    """A cache message read for lookups and checks: per body row its branch head (keys, valid flags and the
    used branches' tokens) as lists, made by one ``tolist()`` of just that region, the ranked lists read
    on demand (``span``, ``at``), the last row's count and phase stamps. Lists of rows work too (tests)."""

    def __init__(self, layout: CacheLayout, msg: torch.Tensor | np.ndarray | list) -> None:
        a = msg.numpy() if isinstance(msg, torch.Tensor) else msg
        self.array = a
        if isinstance(a, np.ndarray):
            self.n = int(a[-1, 0])
            end = layout.tokens.start + max(0, min(self.n, layout.n_max)) * layout.k
            self.head = a[:-1, :end].tolist()
            self.last = a[-1, :1 + 2 * len(CACHE_PHASES)].tolist()
        else:
            self.n, self.head, self.last = a[-1][0], a[:-1], a[-1]

    def span(self, b: int, start: int, stop: int) -> list[int]:
        a = self.array
        return a[b, start:stop].tolist() if isinstance(a, np.ndarray) else a[b][start:stop]

    def at(self, b: int, i: int) -> int:
        return int(self.array[b][i])

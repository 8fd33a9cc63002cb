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
  int64 [B+1, W], laid out by ``cache_message.CacheLayout``; the verifier looks its outcome up itself, so a hit costs no
  round trip. At T > 0 the q rows follow as float32 [B, n_max, K, V] (TAG_CACHE_Q).

Start-up: rank 0 hosts a TCPStore; the draft connects (``connect``) and the two ranks form a gloo group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from saguaro_exec.engine.state import swap_rows

TAG = 0
TAG_Q = 1                       # q rows at temperature > 0: their own tag, so both receives can be posted early
TAG_CACHE, TAG_CACHE_Q = 2, 3   # push protocol: the speculation cache (and its q rows)
PHASES = ("reply", "backup", "glue", "fork", "tree")       # (start, end) pairs in a reply's last row
CACHE_PHASES = PHASES + ("outcome_seen", "cache_sent", "answer", "settle", "pack", "build_cpu")   # a cache
# message's: + the hand-off stamps (waiting for / seeing the outcome it was built from; tree end / send start; the
# draft's answer to that outcome; the build's settling of it; the tree's host copy and packing) and, on one-thread
# CPU runs, the draft thread's CPU time over the build as (0, seconds): whether a build that ran long lost its core
CPU_TIMES = ("build_cpu",)      # (0, seconds) pairs among the stamps, not spans on the clock


@dataclass
class Reply:
    """What the speculator sends back each round (hit/rank refer to the previous outcome)."""

    hit: torch.Tensor | list          # [B] bool (the push verifier's own lookup: plain lists)
    rank: torch.Tensor | list         # [B] long, -1 beyond top-N
    from_backup: torch.Tensor | list  # [B] bool: this speculation came from the backup
    tokens: torch.Tensor       # [B, K]
    q: torch.Tensor | None     # [B, K, V] at temperature > 0
    times: dict = field(default_factory=dict)  # phase -> (start, end) seconds since run start


def reordered(reply: Reply, swaps: list[tuple[int, int]]) -> Reply:
    """``reply`` with its speculation (tokens, q, from_backup) in the row order after ``swaps``
    (``state.compact_rows``: the next round's rows); hit and rank keep the order of the round they answer."""
    if not swaps:
        return reply
    perm = swap_rows(list(range(len(reply.tokens))), swaps)
    idx = torch.tensor(perm, dtype=torch.long)
    fb = reply.from_backup
    fb = fb[idx] if isinstance(fb, torch.Tensor) else swap_rows(fb, swaps)
    q = None if reply.q is None else reply.q[idx.to(reply.q.device)]
    return Reply(reply.hit, reply.rank, fb, reply.tokens[idx.to(reply.tokens.device)], q, reply.times)


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

def words(t: torch.Tensor) -> memoryview:
    """A contiguous int64 CPU tensor's memory as a flat memoryview of int64 words: reads (``tolist``, slices)
    and writes through it are plain buffer operations, the cheapest there are between two forwards (a torch
    op costs tens of microseconds there, on caches the forward has just evicted)."""
    return memoryview(t.numpy()).cast("B").cast("q")


class OutcomeMessage:
    """The outcome message, int64 [B, 4] = (accepted k, bonus t*, done, stop) per row, one per link and
    batch: rewritten in place each round (``write``, once the last send is done) and read back (``read``)
    through its words."""

    def __init__(self, bsz: int) -> None:
        self.tensor = torch.zeros(bsz, 4, dtype=torch.long)
        self.words = words(self.tensor)

    def write(self, acc: list[int], bonus: list[int], done: list[bool], stop: bool, fresh=()) -> torch.Tensor:
        """Per row (k, t*, done, stop), done = 2 on the rows in ``fresh`` (refilled now); returns the tensor."""
        w, st = self.words, int(stop)
        for b, (a, t, d) in enumerate(zip(acc, bonus, done)):
            i = 4 * b
            w[i], w[i + 1], w[i + 2], w[i + 3] = a, t, 2 if b in fresh else int(d), st
        return self.tensor

    def read(self) -> tuple[list[int], list[int], list[bool], bool, int]:
        """(accepted k, bonus, done per row, stop, how many rows take a new request now) as plain lists."""
        flat = self.words.tolist()
        flags = flat[2::4]
        return flat[0::4], flat[1::4], [f != 0 for f in flags], flat[3] != 0, flags.count(2)


def outcome_tensor(acc: torch.Tensor | list[int], bonus: torch.Tensor | list[int], done: list[bool], stop: bool,
                   fresh: tuple = ()) -> torch.Tensor:
    """A new outcome message (see ``OutcomeMessage``; the links reuse one)."""
    as_list = lambda x: x.tolist() if isinstance(x, torch.Tensor) else list(x)  # noqa: E731
    return OutcomeMessage(len(done)).write(as_list(acc), as_list(bonus), done, stop, fresh)


def unpack_outcome(t: torch.Tensor | OutcomeMessage) -> tuple[list[int], list[int], list[bool], bool, int]:
    """(accepted k, bonus, done per row, stop, how many rows take a new request now) as plain lists: no
    tensor built on the draft's hot path."""
    if isinstance(t, OutcomeMessage):
        return t.read()
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

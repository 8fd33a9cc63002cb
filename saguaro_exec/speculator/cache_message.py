"""The push protocol's cache message (TAG_CACHE, see protocol.py): where each field of the speculation
cache lives in one int64 [B+1, W] tensor (``CacheLayout``), its packing into reused buffers, and the one
outcome lookup both sides make on it (``CacheRows``: the rows read through the message's words)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import torch

from saguaro_exec.speculator.cache import Fork, SpecCache
from saguaro_exec.speculator.protocol import CACHE_PHASES, max_branches, words


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

    @property
    def width(self) -> int:
        return max(self.rank.stop, 1 + 2 * len(CACHE_PHASES))

    def shape(self, bsz: int) -> tuple[int, int]:
        return bsz + 1, self.width

    def pack(self, cache: SpecCache, times: dict | None = None, out: torch.Tensor | None = None,
             w: memoryview | None = None) -> torch.Tensor:
        """The message for a host-side ``SpecCache`` (without q), with the build's phase times, written into
        ``out`` (a preallocated message of ``shape``, ``w`` its words; None: a new one) through numpy views:
        a handful of buffer copies, not a torch op per field, between the tree's end and the send."""
        f = cache.fork
        bsz, n = f.branch_k.shape
        r, k = f.top.shape[-1], self.k
        msg = torch.empty(self.shape(bsz), dtype=torch.long) if out is None else out
        a = msg.numpy()
        a.fill(-1)
        a[bsz:-1, :self.top.start] = 0       # rows the build skipped (finished, ``out`` wider): no valid branch
        body = a[:bsz]
        for where, what in ((self.branch_k, f.branch_k), (self.branch_t, f.branch_t), (self.valid, f.valid)):
            body[:, where.start:where.start + n] = what.numpy()
        body[:, self.tokens.start:self.tokens.start + n * k] = cache.tokens.numpy().reshape(bsz, n * k)
        body[:, self.top].reshape(bsz, k + 1, self.r_max)[..., :r] = f.top.numpy()     # views: reshape of a
        body[:, self.rank].reshape(bsz, k + 1, self.r_max)[..., :r] = f.rank.numpy()   # row slice splits its axis
        a[-1, 0] = n
        return self.stamp(msg, times or {}, w)

    def stamp(self, t: torch.Tensor, times: dict, w: memoryview | None = None) -> torch.Tensor:
        """Write the phase times into the message's last row (in place, one buffer write through its words
        ``w``, made here when not given); returns ``t``."""
        vals = array("q", [-1]) * (2 * len(CACHE_PHASES))
        for i, name in enumerate(CACHE_PHASES):
            if name in times:
                s, e = times[name]
                vals[2 * i], vals[2 * i + 1] = round(s * 1e9), round(e * 1e9)
        o = (t.shape[0] - 1) * t.shape[1] + 1
        (words(t) if w is None else w)[o:o + len(vals)] = vals
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

    def lookup(self, msg: torch.Tensor | list | CacheRows, acc: list[int], bonus: list[int],
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

    def q_rows(self, q: torch.Tensor, out: torch.Tensor | None = None, rows: int | None = None) -> torch.Tensor:
        """q [m, N, K, V] padded to n_max branches, float32 on the CPU (the TAG_CACHE_Q message) of ``rows``
        rows (None: m), written into ``out`` when given (reused: padding beyond N or m is never read, so not
        cleared)."""
        bsz, n, k, v = q.shape
        if out is None:
            out = torch.zeros(bsz if rows is None else rows, self.n_max, k, v, dtype=torch.float32)
        out[:bsz, :n] = q.detach()        # rows past bsz (finished, not built): never read
        return out


class CacheRows:
    """A cache message read for lookups and checks: per body row its branch head (keys, valid flags and the
    used branches' tokens) as lists, each one slice of the message's words, the ranked lists read on demand
    (``span``, ``at``), the last row's count and phase stamps. ``msg``: the message tensor, its ``words``
    (made once per reused buffer: no torch call here) or, in tests, its ``tolist()`` rows."""

    def __init__(self, layout: CacheLayout, msg: torch.Tensor | memoryview | list) -> None:
        if isinstance(msg, list):
            self.w, self.n, self.head, self.last = None, msg[-1][0], msg[:-1], msg[-1]
            self.rows = msg
            return
        self.w = w = msg if isinstance(msg, memoryview) else words(msg)
        self.width = width = layout.width
        base = len(w) - width                           # the last row
        self.n = n = w[base]
        end = layout.tokens.start + max(0, min(n, layout.n_max)) * layout.k
        self.head = [w[o:o + end].tolist() for o in range(0, base, width)]
        self.last = w[base:base + 1 + 2 * len(CACHE_PHASES)].tolist()

    def keyed(self, layout: CacheLayout) -> list[dict[tuple[int, int], int]]:
        """Per row, each valid branch key (k, t) -> its first branch index: ``lookup``'s hit and branch as one
        dict lookup (the draft builds these while the outcome is awaited, off its critical path)."""
        n = self.n
        ko, to, vo = layout.branch_k.start, layout.branch_t.start, layout.valid.start
        out = []
        for row in self.head:
            keys: dict[tuple[int, int], int] = {}
            for j, (kk, tt, ok) in enumerate(zip(row[ko:ko + n], row[to:to + n], row[vo:vo + n])):
                if ok == 1 and (kk, tt) not in keys:
                    keys[kk, tt] = j
            out.append(keys)
        return out

    def span(self, b: int, start: int, stop: int) -> list[int]:
        if self.w is None:
            return self.rows[b][start:stop]
        o = b * self.width
        return self.w[o + start:o + stop].tolist()

    def at(self, b: int, i: int) -> int:
        return self.rows[b][i] if self.w is None else self.w[b * self.width + i]

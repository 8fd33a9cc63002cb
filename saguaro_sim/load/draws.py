"""Vectorized decode trajectories: every round's accepted tokens and cache hit, for new rows at once (numpy).

A row's speculation comes from the cache (source 0, primary) or, after a miss, from the backup (source 1);
the next round's source is 0 after a hit and 1 after a miss (the chain of saguaro_sim/sim/batch.py, with the
same draws: one uniform for the accepted length under either source, one for the hit). The chain is solved
for a whole window at once: a round whose hit does not depend on the source resets it, one that hits only
from the backup flips it, one that hits only from the cache keeps it. A row's future does not depend on the
other rows, so it is drawn once, when the row joins (again only when the live batch changes configuration).
"""

from __future__ import annotations

import numpy as np

MAX_WINDOW = 4096


def chain_sources(s0: np.ndarray, hit_p: np.ndarray, hit_b: np.ndarray) -> np.ndarray:
    """Source (0/1) of each row's speculation at each round of the window, given the first round's s0 [b]
    and the hit flags [b, L] the round would have from the cache (hit_p) and from the backup (hit_b)."""
    n = hit_p.shape[1]
    reset = hit_p == hit_b
    flip = hit_b & ~hit_p
    last = np.maximum.accumulate(np.where(reset, np.arange(n), -1), axis=1)
    flips = np.cumsum(flip, axis=1)
    rows = np.arange(len(s0))[:, None]
    at = np.clip(last, 0, None)
    start = np.where(last >= 0, 1 - hit_p[rows, at], s0[:, None])
    since = flips - np.where(last >= 0, flips[rows, at], 0)
    after = start ^ (since & 1)  # source of the round after each round
    return np.concatenate([s0[:, None], after[:, :-1]], axis=1)


class RoundDraws:
    """Accepted lengths and hits of one configuration (pmfs and hit table resolved); AR when pmfs are None,
    SD when the hit table is None."""

    def __init__(self, rng: np.random.Generator, pmf_primary: np.ndarray | None, pmf_backup: np.ndarray | None,
                 hit_table: np.ndarray | None) -> None:
        self.rng = rng
        self.cdf_p = None if pmf_primary is None else np.cumsum(pmf_primary)
        self.cdf_b = None if pmf_backup is None else np.cumsum(pmf_backup)
        self.table = hit_table
        self.mean_tokens = 1.0 if pmf_primary is None else float(np.arange(1, len(pmf_primary) + 1) @ pmf_primary)

    def window(self, src: np.ndarray, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens added [b, rounds], hit [b, rounds]) for rows whose next speculation source is `src`."""
        b = len(src)
        if self.cdf_p is None:  # AR: one token a round, nothing to miss
            return np.ones((b, rounds), dtype=np.int64), np.ones((b, rounds), dtype=bool)
        kmax = len(self.cdf_p) - 1
        u = self.rng.random((b, rounds))
        kp = np.minimum(np.searchsorted(self.cdf_p, u, side="right"), kmax)
        if self.table is None:  # SD: every speculation is drafted just in time
            return kp + 1, np.ones((b, rounds), dtype=bool)
        kb = np.minimum(np.searchsorted(self.cdf_b, u, side="right"), kmax)
        uh = self.rng.random((b, rounds))
        hp, hb = uh < self.table[0][kp], uh < self.table[1][kb]
        primary = chain_sources(src, hp, hb) == 0
        return np.where(primary, kp, kb) + 1, np.where(primary, hp, hb)

    def futures(self, src: np.ndarray, left: np.ndarray, put, clip: bool = True) -> np.ndarray:
        """Draw each row's rounds until it has `left` more tokens, starting from speculation source `src`;
        `put(rows, offset, tokens, hits)` receives windows of them (tokens 0 and hits True past a row's
        end; the last round cut to reach exactly `left` unless clip=False). Returns the rounds each needs."""
        todo = np.arange(len(src))
        src, left = src.astype(np.int64).copy(), left.astype(np.int64).copy()
        need = np.zeros(len(src), dtype=np.int64)
        offset = 0
        while len(todo):
            w = int(min(MAX_WINDOW, 8 + 1.25 * left[todo].max() / self.mean_tokens))
            tok, hit = self.window(src[todo], w)
            cum = np.cumsum(tok, axis=1)
            before = cum - tok
            lt = left[todo, None]
            live = before < lt
            put(todo, offset, np.where(live, np.minimum(tok, lt - before) if clip else tok, 0), hit | ~live)
            ends = live.sum(axis=1)
            need[todo] += ends
            more = ends == w
            left[todo] -= cum[:, -1]
            src[todo] = np.where(hit[:, -1], 0, 1)
            todo = todo[more & (left[todo] > 0)]
            offset += w
        return need


class FuturePool:
    """Futures drawn ahead, a block of rows at a time, per starting source (cache / backup), each at least `chunk`
    tokens (whole rounds); `take(src, left)` joins fresh ones (the next starting where the last left the chain) and cuts
    the result where it reaches `left` tokens. Exact: rounds are drawn in order and the chain is Markov."""

    CELLS = 1 << 20  # table cells per block

    def __init__(self, draws: RoundDraws, chunk: int) -> None:
        self.draws, self.chunk = draws, max(1, int(chunk))
        width = 8 + 1.25 * self.chunk / draws.mean_tokens
        self.block = int(max(8, min(256, self.CELLS // width)))
        self._next = [self.block, self.block]  # nothing drawn yet
        self._rows: list = [None, None]

    def _refill(self, src: int) -> None:
        n, parts = self.block, []
        self.draws.futures(np.full(n, src, dtype=np.int64), np.full(n, self.chunk, dtype=np.int64),
                           lambda rows, offset, tok, hit: parts.append((rows, offset, tok, hit)), clip=False)
        width = max(o + t.shape[1] for _, o, t, _ in parts)
        tok, hit = np.zeros((n, width), dtype=np.int32), np.ones((n, width), dtype=bool)
        for rows, offset, t, h in parts:
            tok[rows, offset:offset + t.shape[1]], hit[rows, offset:offset + h.shape[1]] = t, h
        ends = (np.cumsum(tok, axis=1) < self.chunk).sum(axis=1) + 1   # rounds each row has (whole rounds)
        self._rows[src] = (tok, hit, np.cumsum(tok, axis=1), ends)
        self._next[src] = 0

    def _one(self, src: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        if self._next[src] >= self.block:
            self._refill(src)
        i = self._next[src]
        self._next[src] += 1
        tok, hit, cum, ends = self._rows[src]
        n = int(ends[i])
        return tok[i, :n], hit[i, :n], cum[i, :n], n

    def take(self, src: int, left: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, hits) of each round of a fresh future until it has `left` tokens (last round clipped)."""
        toks, hits = [], []
        while True:
            tok, hit, cum, n = self._one(src)
            if cum[n - 1] >= left:
                m = int(np.searchsorted(cum, left)) + 1
                last = tok[:m].copy()
                last[-1] -= cum[m - 1] - left
                toks.append(last)
                hits.append(hit[:m])
                break
            toks.append(tok)
            hits.append(hit)
            left -= int(cum[n - 1])
            src = 0 if hit[n - 1] else 1
        if len(toks) == 1:
            return toks[0], hits[0]
        return np.concatenate(toks), np.concatenate(hits)

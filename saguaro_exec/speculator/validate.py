"""Checks on what the draft process sends, before the verifier trusts it: a reply whose flags, tokens
or draft distributions are impossible is a malformed message (a draft fault), never a silent wrong token.

(The transport itself guarantees shapes: gloo aborts on a size mismatch, so only contents are checked.)
"""

from __future__ import annotations

import math

import torch

from saguaro_exec.faults import DraftFault
from saguaro_exec.speculator.cache_message import CacheLayout, CacheRows


def _bad(detail: str) -> DraftFault:
    return DraftFault("malformed", detail)


def check_reply_head(head: torch.Tensor | list, k: int, vocab: int, live: list[bool] | torch.Tensor) -> None:
    """Rows (hit, rank, from_backup, K tokens) of the ``live`` sequences must be finite, flags 0/1,
    ranks >= -1 and tokens integers in [0, vocab); raise DraftFault("malformed") otherwise. Works on the
    head's ``tolist()`` rows: a few microseconds at small batch, on every round's critical path."""
    rows = head.tolist() if isinstance(head, torch.Tensor) else head
    alive = live.tolist() if isinstance(live, torch.Tensor) else live
    for row, ok in zip(rows, alive):
        if not ok:
            continue
        body = row[:3 + k]
        if not all(math.isfinite(x) for x in body):
            raise _bad("non-finite values in the reply")
        if body[0] not in (0.0, 1.0) or body[2] not in (0.0, 1.0):
            flags = sorted({x for r, a in zip(rows, alive) if a for x in (r[0], r[2])})
            raise _bad(f"hit / from_backup flags must be 0 or 1, got {flags[:4]}")
        if body[1] < -1 or body[1] != round(body[1]):
            raise _bad("bonus ranks must be integers >= -1")
        for t in body[3:]:
            if not (0 <= t < vocab and t == round(t)):
                raise _bad(f"speculated token {t!r} is not a token id in [0, {vocab})")


def check_reply_q(q: torch.Tensor, tokens: torch.Tensor, live: torch.Tensor) -> None:
    """Draft distributions of the ``live`` sequences must be finite, non-negative rows summing to 1 that
    give each sent token positive probability (it was sampled from them). Three reductions read back in
    one transfer: this runs on a miss's critical path at T > 0 (the separate checks took 0.15 ms there)."""
    if not bool(live.all()):
        q, tokens = q[live], tokens[live]
    if q.numel() == 0:
        return
    # NaN fails every comparison (the minimum is NaN) and an inf makes its row's sum inf
    low, off, sent = torch.stack([q.amin(), (q.sum(-1, dtype=torch.float64) - 1).abs().amax().float(),
                                  q.gather(-1, tokens.unsqueeze(-1)).amin()]).tolist()
    if not (low >= 0 and math.isfinite(off)):
        raise _bad("draft distributions hold negative or non-finite values")
    if not off < 1e-3:
        sums = q.double().sum(-1)
        raise _bad(f"draft distributions do not sum to 1 (e.g. {sums.flatten()[0].item():.4f})")
    if not sent > 0:
        raise _bad("a speculated token has zero probability under the draft distribution it came from")


def check_cache(msg, layout: CacheLayout, vocab: int, live: list[bool]) -> None:
    """A pushed speculation cache (the message, its ``tolist()`` or its ``CacheRows``) of the ``live`` rows:
    valid flags 0/1, every branch's k in [0, K] and its tokens (bonus + K drafted) in [0, vocab) (unused
    branches hold real values too); DraftFault otherwise. Builtins over list slices: microseconds."""
    rows = msg if isinstance(msg, CacheRows) else CacheRows(layout, msg)
    n = rows.n
    if not 0 <= n <= layout.n_max:
        raise _bad(f"cache holds {n} branches, allowed 0..{layout.n_max}")
    if n == 0:
        return
    ko, to, vo, so = layout.branch_k.start, layout.branch_t.start, layout.valid.start, layout.tokens.start
    for row, ok in zip(rows.head, live):
        if not ok:
            continue
        flags = row[vo:vo + n]
        if min(flags) < 0 or max(flags) > 1:
            raise _bad("cache valid flags must be 0 or 1")
        ks = row[ko:ko + n]
        if min(ks) < 0 or max(ks) > layout.k:
            raise _bad(f"cache branch positions must be in [0, {layout.k}]")
        for toks in (row[to:to + n], row[so:so + n * layout.k]):
            if min(toks) < 0 or max(toks) >= vocab:
                raise _bad(f"speculated token is not a token id in [0, {vocab})")

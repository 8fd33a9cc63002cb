"""Checks on what the draft process sends, before the verifier trusts it: a reply whose flags, tokens
or draft distributions are impossible is a malformed message (a draft fault), never a silent wrong token.

(The transport itself guarantees shapes: gloo aborts on a size mismatch, so only contents are checked.)
"""

from __future__ import annotations

import torch

from .faults import DraftFault


def _bad(detail: str) -> DraftFault:
    return DraftFault("malformed", detail)


def check_reply_head(head: torch.Tensor, k: int, vocab: int, live: torch.Tensor) -> None:
    """Rows (hit, rank, from_backup, K tokens) of the ``live`` sequences must be finite, flags 0/1,
    ranks >= -1 and tokens integers in [0, vocab); raise DraftFault("malformed") otherwise."""
    body = head[:-1, :3 + k][live]
    if not bool(torch.isfinite(body).all()):
        raise _bad("non-finite values in the reply")
    flags = body[:, [0, 2]]
    if not bool(((flags == 0) | (flags == 1)).all()):
        raise _bad(f"hit / from_backup flags must be 0 or 1, got {sorted(set(flags.flatten().tolist()))[:4]}")
    rank, tokens = body[:, 1], body[:, 3:]
    if not bool(((rank >= -1) & (rank == rank.round())).all()):
        raise _bad("bonus ranks must be integers >= -1")
    ok = (tokens >= 0) & (tokens < vocab) & (tokens == tokens.round())
    if not bool(ok.all()):
        bad = tokens[~ok][0].item()
        raise _bad(f"speculated token {bad!r} is not a token id in [0, {vocab})")


def check_reply_q(q: torch.Tensor, tokens: torch.Tensor, live: torch.Tensor) -> None:
    """Draft distributions of the ``live`` sequences must be finite, non-negative rows summing to 1 that
    give each sent token positive probability (it was sampled from them)."""
    q, tokens = q[live], tokens[live]
    if not bool(torch.isfinite(q).all()) or bool((q < 0).any()):
        raise _bad("draft distributions hold negative or non-finite values")
    sums = q.double().sum(-1)
    if not bool(((sums - 1).abs() < 1e-3).all()):
        raise _bad(f"draft distributions do not sum to 1 (e.g. {sums.flatten()[0].item():.4f})")
    if not bool((q.gather(-1, tokens.unsqueeze(-1)) > 0).all()):
        raise _bad("a speculated token has zero probability under the draft distribution it came from")

"""The fast backup speculator: continue the sequence's own latest matching n-gram, else random tokens.

Tokens are deterministic given the context (and the generator for the random fall-back), so the
verifier uses q = one-hot at each proposed token, which keeps verification exact.
"""

from __future__ import annotations

import torch


def ngram_propose(context: list[int], k: int, vocab: int, gen: torch.Generator | None,
                  max_n: int = 4) -> list[int]:
    """K tokens: after the most recent earlier occurrence of the longest suffix n-gram (n <= max_n),
    copy what followed it; pad with uniformly random tokens when there is no (long enough) match."""
    out: list[int] = []
    seq = list(context)
    while len(out) < k:
        nxt = _follow(seq, max_n)
        if nxt is None:
            nxt = int(torch.randint(vocab, (1,), generator=gen))
        out.append(nxt)
        seq.append(nxt)
    return out


def _follow(seq: list[int], max_n: int) -> int | None:
    """Token that followed the latest earlier occurrence of seq's longest matching suffix."""
    for n in range(min(max_n, len(seq) - 1), 0, -1):
        suffix = seq[-n:]
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start:start + n] == suffix:
                return seq[start + n]
    return None


def one_hot_q(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """q rows [B, K, V] for deterministic proposals."""
    return torch.nn.functional.one_hot(tokens, vocab).float()

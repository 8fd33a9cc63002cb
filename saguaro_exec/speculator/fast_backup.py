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
    """Token that followed the latest earlier occurrence of seq's longest matching suffix (n <= max_n). One
    backward pass over the earlier occurrences of the last token (``list.index`` on the reversed sequence:
    in C), instead of a slice comparison at every position for every n: this runs on a miss, between two
    verifications."""
    top = min(max_n, len(seq) - 1)
    if top < 1:
        return None
    rev = seq[::-1]                        # rev[i] = seq[-1 - i]; a match ending at p = len - 1 - i, i >= 1
    latest = [None] * (top + 1)            # latest[n]: the latest end of an earlier match of length >= n
    i = 0
    while True:
        try:
            i = rev.index(rev[0], i + 1)
        except ValueError:
            break
        m = 1
        while m < top and i + m < len(rev) and rev[i + m] == rev[m]:
            m += 1
        for n in range(1, m + 1):
            if latest[n] is None:
                latest[n] = i
        if m == top:                       # the longest possible match at its latest end: done
            break
    for n in range(top, 0, -1):
        if latest[n] is not None:
            return seq[len(seq) - latest[n]]    # the token after the match that ends at len - 1 - latest[n]
    return None


def one_hot_q(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """q rows [B, K, V] for deterministic proposals."""
    return torch.nn.functional.one_hot(tokens, vocab).float()

"""Plain reference of SD and SSD (Saguaro) decoding, one sequence, no caches, no batching.

Models are callables ``prefix -> logits[V]``. Deliberately slow and obvious: the fast engines are
tested against it, and its output distribution is tested against the target's exact one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Model = Callable[[list[int]], torch.Tensor]


def dist(logits: torch.Tensor, temp: float, top_f: int = 0, c: float = 1.0) -> torch.Tensor:
    """softmax(logits/temp) with the top-``top_f`` tokens' mass scaled by c (c=1: plain); T=0: one-hot."""
    if temp <= 0:
        return torch.nn.functional.one_hot(logits.argmax(), logits.numel()).float()
    w = torch.softmax(logits.float() / temp, -1)
    if c < 1 and top_f > 0:
        w[w.topk(min(top_f, w.numel())).indices] *= c
    return w / w.sum()


def draw(w: torch.Tensor, gen: torch.Generator) -> int:
    return int(torch.multinomial(w, 1, generator=gen))


def verify(target: Model, prefix: list[int], toks: list[int], qs: list[torch.Tensor], temp: float,
           gen: torch.Generator) -> tuple[int, int]:
    """Standard speculative sampling of one speculation: returns (accepted k, bonus token)."""
    for i, t in enumerate(toks):
        p = dist(target(prefix + toks[:i]), temp)
        if temp <= 0:
            if int(p.argmax()) != t:
                return i, int(p.argmax())
        elif float(torch.rand(1, generator=gen)) >= min(1.0, float(p[t] / qs[i][t])):
            return i, draw((p - qs[i]).clamp_min(0), gen)
    return len(toks), draw(dist(target(prefix + toks), temp), gen)


def speculate(draft: Model, prefix: list[int], k: int, fan: tuple[int, ...], c: float, temp: float,
              gen: torch.Generator) -> tuple[list[int], list[torch.Tensor]]:
    """K draft tokens sampled from sigma_{F_i,C} at position i, with the q each was drawn from."""
    toks, qs = [], []
    for i in range(k):
        q = dist(draft(prefix + toks), temp, fan[i], c)
        toks.append(draw(q, gen))
        qs.append(q)
    return toks, qs


def sd_generate(target: Model, draft: Model, prompt: list[int], n: int, k: int, temp: float,
                gen: torch.Generator, fan: tuple[int, ...] = (), c: float = 1.0) -> list[int]:
    """Speculative decoding: n new tokens (the last round may overshoot, then truncated)."""
    out = list(prompt)
    while len(out) - len(prompt) < n:
        toks, qs = speculate(draft, out, k, fan or (0,) * k, c, temp, gen)
        acc, bonus = verify(target, out, toks, qs, temp, gen)
        out += toks[:acc] + [bonus]
    return out[len(prompt):len(prompt) + n]


def ssd_generate(target: Model, draft: Model, prompt: list[int], n: int, k: int, fan: tuple[int, ...],
                 fan_miss: tuple[int, ...], c: float, temp: float, gen: torch.Generator,
                 plain_q: bool = False) -> tuple[list[int], list[bool]]:
    """SSD with the neural backup: per round build the cache {(k, t): speculation}, verify, look up.

    ``plain_q=True`` is a deliberately broken verifier that ignores C (uses the plain softmax as q).
    """
    out, hits = list(prompt), []
    toks, qs = speculate(draft, out, k, fan_miss, c, temp, gen)     # first speculation: backup
    fan_now = fan_miss
    while len(out) - len(prompt) < n:
        cache = {}
        for j in range(k + 1):                                       # fork: top-F_j, minus sent token
            ranked = torch.argsort(draft(out + toks[:j]).float(), descending=True, stable=True).tolist()
            cands = [t for t in ranked if j == k or t != toks[j]][:fan_now[j]]
            for t in cands:
                cache[(j, t)] = speculate(draft, out + toks[:j] + [t], k, fan, c, temp, gen)
        vq = [dist(draft(out + toks[:i]), temp) for i in range(k)] if plain_q else qs
        acc, bonus = verify(target, out, toks, vq, temp, gen)
        out += toks[:acc] + [bonus]
        hits.append((acc, bonus) in cache)
        fan_now = fan if hits[-1] else fan_miss
        toks, qs = cache.get((acc, bonus)) or speculate(draft, out, k, fan_miss, c, temp, gen)
    return out[len(prompt):len(prompt) + n], hits

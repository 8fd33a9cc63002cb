"""Plain reference of SD and SSD (Saguaro) decoding, one sequence, no caches, no batching.

Models are callables ``prefix -> logits[V]``. Deliberately slow and obvious: its output distribution is
tested against the target's exact one (tests/exec/test_exec_distribution.py), and at T = 0 the fast
engines' per-round records (accepted length, cache hit, bonus rank, backup flag: what calibration fits)
are tested equal to ``sd_rounds`` / ``ssd_rounds`` here (tests/exec/test_oracle.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from saguaro_exec.speculator.fast_backup import ngram_propose

Model = Callable[[list[int]], torch.Tensor]


@dataclass(frozen=True)
class Round:
    """One verification of one sequence, as the engines record it."""

    accepted: int
    bonus_rank: int              # the bonus among the draft's ranked tokens at its position (-1: none)
    hit: bool | None = None      # SSD: the outcome (accepted, bonus) was in the speculation cache
    from_backup: bool = False    # SSD: this round's speculation came from the backup


def dist(logits: torch.Tensor, temp: float, top_f: int = 0, c: float = 1.0) -> torch.Tensor:
    """softmax(logits/temp) with the top-``top_f`` tokens' mass scaled by c (c=1: plain); T=0: one-hot."""
    if temp <= 0:
        return torch.nn.functional.one_hot(logits.argmax(), logits.numel()).float()
    w = torch.softmax(logits.float() / temp, -1)
    if c < 1 and top_f > 0:
        w[w.topk(min(top_f, w.numel())).indices] *= c
    return w / w.sum()


def draw(w: torch.Tensor, gen: torch.Generator, temp: float = 1.0) -> int:
    """A token from weights ``w``; at T = 0 the argmax, drawing nothing from ``gen``."""
    return int(w.argmax()) if temp <= 0 else int(torch.multinomial(w, 1, generator=gen))


def rank_of(logits: torch.Tensor, token: int, sent: int | None, n_rank: int = 64) -> int:
    """``token``'s place in the draft's ordering (best first), ``sent`` left out: it was rejected there
    and cannot be the bonus. -1 beyond ``n_rank``."""
    ranked = [t for t in torch.argsort(logits.float(), descending=True, stable=True).tolist() if t != sent]
    r = ranked.index(token)
    return r if r < n_rank else -1


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
    return len(toks), draw(dist(target(prefix + toks), temp), gen, temp)


def speculate(draft: Model, prefix: list[int], k: int, fan: tuple[int, ...], c: float, temp: float,
              gen: torch.Generator) -> tuple[list[int], list[torch.Tensor]]:
    """K draft tokens sampled from sigma_{F_i,C} at position i, with the q each was drawn from."""
    toks, qs = [], []
    for i in range(k):
        q = dist(draft(prefix + toks), temp, fan[i], c)
        toks.append(draw(q, gen, temp))
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


def _running(out: list[int], n_prompt: int, n: int, eos: frozenset[int]) -> bool:
    """Still generating: fewer than n new tokens and no EOS among them."""
    return len(out) - n_prompt < n and not eos.intersection(out[n_prompt:])


def sd_rounds(target: Model, draft: Model, prompt: list[int], n: int, k: int, eos: tuple[int, ...] = (),
              n_rank: int = 64) -> list[Round]:
    """Greedy SD's rounds: K draft tokens, verify; the bonus ranked at the first rejected position (SD has
    no draft row after all K: -1 when all are accepted)."""
    out, rounds, stop = list(prompt), [], frozenset(eos)
    while _running(out, len(prompt), n, stop):
        toks, qs = speculate(draft, out, k, (0,) * k, 1.0, 0.0, None)
        acc, bonus = verify(target, out, toks, qs, 0.0, None)
        rank = rank_of(draft(out + toks[:acc]), bonus, toks[acc], n_rank) if acc < k else -1
        rounds.append(Round(acc, rank))
        out += toks[:acc] + [bonus]
    return rounds


def ssd_rounds(target: Model, draft: Model, prompt: list[int], n: int, k: int, fan: tuple[int, ...],
               fan_miss: tuple[int, ...], backup: str, gen: torch.Generator, vocab: int,
               eos: tuple[int, ...] = (), n_rank: int = 64) -> list[Round]:
    """Greedy SSD's rounds: per round the cache {(j, t): greedy speculation after out + toks[:j] + [t]} over
    the top-F_j tokens t at each position j (F from the miss schedule after a backup speculation), then
    verify and look the outcome up; a miss (and the first round) takes the backup: ``"neural"`` (the
    draft from the true prefix) or ``"fast"`` (the n-gram proposer, random tokens from ``gen``)."""
    def backup_spec(prefix: list[int]) -> list[int]:
        if backup == "fast":
            return ngram_propose(prefix, k, vocab, gen)
        return speculate(draft, prefix, k, fan_miss, 1.0, 0.0, None)[0]

    out, rounds, stop = list(prompt), [], frozenset(eos)
    toks, from_backup = backup_spec(out), True
    while _running(out, len(prompt), n, stop):
        fan_now = fan_miss if from_backup else fan
        cache = {}
        for j in range(k + 1):
            ranked = torch.argsort(draft(out + toks[:j]).float(), descending=True, stable=True).tolist()
            for t in [t for t in ranked if j == k or t != toks[j]][:fan_now[j]]:
                cache[(j, t)] = speculate(draft, out + toks[:j] + [t], k, fan, 1.0, 0.0, None)[0]
        acc, bonus = verify(target, out, toks, [], 0.0, None)
        rank = rank_of(draft(out + toks[:acc]), bonus, toks[acc] if acc < k else None, n_rank)
        hit = (acc, bonus) in cache
        rounds.append(Round(acc, rank, hit, from_backup))
        out += toks[:acc] + [bonus]
        if _running(out, len(prompt), n, stop):
            toks, from_backup = (cache[(acc, bonus)], False) if hit else (backup_spec(out), True)
    return rounds

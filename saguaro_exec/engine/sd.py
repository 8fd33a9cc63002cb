"""Speculative decoding: the draft (in this process) drafts K tokens one by one, then one verification."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from saguaro_exec.engine.drafter import Drafter
from saguaro_exec.engine.rounds import BatchResult, event, finish_times, new_round
from saguaro_exec.engine.verifier import Verifier
from saguaro_exec.model import Transformer
from saguaro_exec.model.accel import Accel
from saguaro_exec.model.transfer import to_device, to_host


def bonus_ranks(d_logits: torch.Tensor, sent: torch.Tensor, acc: torch.Tensor, bonus: torch.Tensor,
                n_rank: int) -> torch.Tensor:
    """Rank of each bonus token in the draft's ordering at its position, excluding the sent token there
    (-1 when beyond ``n_rank`` or when all K were accepted: SD has no draft row at position K): [B],
    computed where ``d_logits`` is, without a host sync."""
    bsz, k = sent.shape
    dev = d_logits.device
    sent, acc, bonus = to_device(sent, dev), to_device(acc, dev), to_device(bonus, dev)
    rows = torch.arange(bsz, device=dev)
    pos = acc.clamp_max(k - 1)
    logits = d_logits[rows, pos].float()                                  # [B, V]
    order = logits.argsort(dim=-1, descending=True, stable=True)
    keep = order != sent[rows, pos].view(-1, 1)
    rank = keep.long().cumsum(-1) - 1
    eq = (order == bonus.view(-1, 1)) & keep
    r = torch.where(eq.any(-1), (rank * eq).sum(-1), torch.full((bsz,), -1, device=dev))
    return torch.where((acc < k) & (r < n_rank), r, torch.full_like(r, -1))


def sd_rounds(ver: Verifier, dr: Drafter, fan: torch.Tensor, k: int, r0: int, now: Callable[[], float],
              n_rank: int = 64, fallback: str | None = None) -> tuple[list[dict], list[dict]]:
    """SD rounds from round ``r0`` until every sequence of ``ver`` is done: K draft steps, one verification.
    ``fallback`` marks rounds that finish an SSD batch in-process after a draft fault (the draft time is
    then the verifier's own). Per round the host waits for the device twice: for the drafted tokens, and
    for (accepted, bonus, bonus rank) together. Returns (round rows, trace events)."""
    rounds, events, r = [], [], r0
    draft_track, extra = ("speculator", {}) if fallback is None else ("verifier", {"fallback": fallback})
    draft_name = "draft" if fallback is None else "draft (fallback)"
    while not ver.state.all_done():
        live = [b for b in range(len(dr.seqs)) if not ver.state.done[b]]
        ctx = [len(ver.state.seqs[b]) for b in live]
        t0 = now()
        tokens, q, d_rows = dr.jit(fan)
        t1 = now()
        toks = tokens.tolist()
        acc, bonus = ver.score(toks, tokens, q)
        acc, bonus, ranks = to_host(acc, bonus, bonus_ranks(d_rows, tokens, acc, bonus, n_rank))
        ver.commit(toks, acc, bonus, r)
        t2 = now()
        ranks = ranks.tolist()
        dr.advance(acc, bonus, tokens, ver.state.done, cached_spec=k - 1)
        t3 = now()
        rounds.append(new_round(r, t0, t3, live, verify_s=t2 - t1, wait_s=t1 - t0, draft_reply_s=t1 - t0,
                                accepted=[int(acc[b]) for b in live],
                                bonus_rank=[ranks[b] for b in live], context=ctx, **extra))
        events += [event(draft_name, draft_track, t0, t1, round=r), event("verify", "verifier", t1, t2, round=r)]
        r += 1
    return rounds, events


def run_sd(target: Transformer, draft: Transformer, prompts: list[list[int]], k: int,
           fanout: tuple[int, ...], sampler_c: float, max_new: int, temperature: float,
           gens: tuple[torch.Generator, torch.Generator], eos_ids: list[int], t_start: float,
           n_rank: int = 64, accel: tuple[Accel | None, Accel | None] = (None, None)) -> BatchResult:
    """SD over a batch; the draft samples from sigma_{F_i,C} (plain softmax when C = 1). ``accel``: the
    (target, draft) GPU fast paths."""
    ver = Verifier(target, prompts, k, temperature, gens[0], max_new, eos_ids, accel[0])
    dr = Drafter(draft, prompts, k, temperature, sampler_c, gens[1], max_new, accel=accel[1])
    fan = torch.tensor(fanout, dtype=torch.long).expand(len(prompts), -1)
    now = lambda: time.perf_counter() - t_start  # noqa: E731
    start_s = now()
    ver.prefill()
    dr.prefill()
    rounds, events = sd_rounds(ver, dr, fan, k, 0, now, n_rank)
    end = now()
    return BatchResult([ver.state.generated(b) for b in range(len(prompts))], rounds, events, start_s,
                       end - start_s, finish_times(ver.state.finish_round, rounds, start_s))

"""Speculative decoding: the draft (in this process) drafts K tokens one by one, then one verification.

Why the round loop looks as it does: drafting and verifying alternate on one process, so a round is
K small draft forwards from the true prefix (``Drafter.jit``) followed by one target forward over the
row's uncached tokens + the K drafted ones (``Verifier.score``). The target's rule accepts a prefix and
picks a bonus token; both sides then advance their caches by the accepted tokens. The bonus token's rank
in the draft's ordering is measured in the same device step, because it is what calibration fits the
SSD hit curve from (an SD run predicts SSD's cache hits). The loop is shared with the fallback that
finishes an SSD batch in-process after a draft fault (``finish_by_sd``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from saguaro_exec.engine.drafter import Drafter
from saguaro_exec.engine.refill import refill
from saguaro_exec.engine.rounds import BatchResult, event, new_round, request_times, thread_cpu
from saguaro_exec.engine.settings import Decoding, Drafting
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


def sd_rounds(ver: Verifier, dr: Drafter, fanout: tuple[int, ...], k: int, r0: int, now: Callable[[], float],
              n_rank: int = 64, fallback: str | None = None) -> tuple[list[dict], list[dict]]:
    """SD rounds from round ``r0`` until every request of ``ver`` is done: refill finished rows (both
    caches), K draft steps, one verification. ``fallback`` marks rounds that finish an SSD batch in-process
    after a draft fault (the draft time is then the verifier's own). Per round the host waits for the
    device twice: for the drafted tokens, and for (accepted, bonus, bonus rank) together. Returns (round
    rows, trace events)."""
    rounds, events, r = [], [], r0
    draft_track, extra = ("speculator", {}) if fallback is None else ("verifier", {"fallback": fallback})
    draft_name = "draft" if fallback is None else "draft (fallback)"
    dr.state = ver.state
    fan_row = torch.tensor(fanout, dtype=torch.long).view(1, -1)
    cpu = thread_cpu(ver.runner.device)
    while True:
        admitted, evs = refill(ver.state, [ver, dr], now, r)
        events += evs
        if ver.state.all_done():
            break
        live = ver.state.live()
        ctx = [len(ver.state.seqs[b]) for b in live]
        t0 = now()
        tokens, q, d_rows = dr.jit(fan_row.expand(len(ver.state), -1))
        t1, c1 = now(), cpu() if cpu else 0.0
        toks = tokens.tolist()
        acc, bonus = ver.score(toks, tokens, q)
        acc, bonus, ranks = to_host(acc, bonus, bonus_ranks(d_rows, tokens, acc, bonus, n_rank))
        ver.commit(toks, acc, bonus, r)
        t2 = now()
        used = {"verify_cpu_s": cpu() - c1} if cpu else {}
        ranks = ranks.tolist()
        dr.advance(acc, bonus, tokens, ver.state.done, cached_spec=k - 1)
        t3 = now()
        rounds.append(new_round(r, t0, t3, live, verify_s=t2 - t1, wait_s=t1 - t0, draft_reply_s=t1 - t0,
                                width=len(ver.state), accepted=[int(acc[b]) for b in live],
                                seq=[ver.state.slots[b].rid for b in live], bonus_rank=[ranks[b] for b in live], context=ctx, **admitted, **extra, **used))
        events += [event(draft_name, draft_track, t0, t1, round=r), event("verify", "verifier", t1, t2, round=r)]
        r += 1
    return rounds, events


def run_sd(target: Transformer, draft: Transformer, prompts: list[list[int]], dec: Decoding, drafting: Drafting,
           gens: tuple[torch.Generator, torch.Generator],
           accel: tuple[Accel | None, Accel | None] = (None, None), n_rank: int = 64,
           width: int | None = None, arrivals: list[float] | None = None,
           out_lens: list[int] | None = None, synthetic=None) -> BatchResult:
    """SD over a queue of prompts, ``width`` rows at a time (default: all at once), finished rows refilled;
    ``gens``: the (target, draft) generators, ``accel``: their GPU fast paths, ``arrivals``: load mode,
    ``out_lens``: per-request max new tokens; ``synthetic``: timing-only outcomes (engine/synthetic.py),
    None for the real rule."""
    width = len(prompts) if width is None else width
    ver = Verifier(target, prompts, drafting.k, dec.temperature, gens[0], dec.max_new, list(dec.eos_ids), accel[0],
                   width=width, out_lens=out_lens)
    ver.synthetic = synthetic
    dr = Drafter(draft, prompts, drafting.k, dec.temperature, drafting.sampler_c, gens[1], dec.max_new,
                 accel=accel[1], width=width)
    start_s = dec.now()
    ver.state.arrive_from(start_s, arrivals)
    rounds, events = sd_rounds(ver, dr, drafting.fanout, drafting.k, 0, dec.now, n_rank)
    end = dec.now()
    return BatchResult(ver.state.outputs(), rounds, events, start_s, end - start_s,
                       **request_times(ver.state, rounds, start_s))


def finish_by_sd(ver: Verifier, draft: Transformer, drafting: Drafting, max_new: int, gen: torch.Generator,
                 r0: int, now: Callable[[], float]) -> tuple[list[dict], list[dict]]:
    """Finish every request of ``ver`` (its live rows, then its queue) by SD with ``draft`` (in this
    process) from round ``r0`` (an SSD batch after a draft fault); returns (round rows, trace events)."""
    st = ver.state
    dr = Drafter(draft, [s.tokens for s in st.requests], drafting.k, ver.temperature, drafting.sampler_c, gen,
                 max_new, width=st.width)
    dr.seqs, dr.done = [list(s) for s in st.seqs], list(st.done)
    dr.n_valid = torch.zeros(len(dr.seqs), dtype=torch.long)
    dr.prefill()
    return sd_rounds(ver, dr, drafting.fanout, drafting.k, r0, now, fallback="sd")

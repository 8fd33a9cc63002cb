"""Autoregressive decoding: one target forward per token, the baseline and the fault fallback.

Why one loop for both: a run's AR baseline starts from an empty cache, while the fallback after an SSD
draft fault continues the verifier's cache and true sequences from the round the fault hit. Either way a
round first refills finished rows from the queue (refill.py: each admitted prompt is cached but its last
token, outside the round), then feeds each row's uncached tokens, takes the next token (greedy at T = 0,
a sample from the target otherwise) and appends it; the round's tokens are its one device -> host transfer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from saguaro_exec.engine.refill import refill
from saguaro_exec.engine.rounds import BatchResult, event, new_round, request_times, thread_cpu
from saguaro_exec.engine.settings import Decoding
from saguaro_exec.engine.verifier import Verifier
from saguaro_exec.model import Transformer
from saguaro_exec.model.accel import Accel
from saguaro_exec.sampling import greedy, sample, target_probs


def ar_rounds(ver: Verifier, r0: int, now: Callable[[], float], fallback: str | None = None
              ) -> tuple[list[dict], list[dict]]:
    """Decode ``ver``'s batch (its target cache, true sequences and queue) from round ``r0`` until every
    request is done. ``fallback`` marks rounds that finish an SSD batch after a draft fault.
    Returns (round rows, trace events)."""
    rounds, events, r = [], [], r0
    name, extra = ("decode", {}) if fallback is None else ("decode (fallback)", {"fallback": fallback})
    state, runner = ver.state, ver.runner
    cpu = thread_cpu(runner.device)
    while True:
        admitted, evs = refill(state, [ver], now, r)
        events += evs
        if state.all_done():
            break
        t0, c0 = now(), cpu() if cpu else 0.0
        seqs, live = state.seqs, state.live()
        ctx = [len(seqs[b]) for b in live]
        logits = runner.last_logits([s[int(n):] for s, n in zip(seqs, ver.n_valid)], ver.n_valid)
        tok = greedy(logits) if ver.temperature <= 0 else sample(target_probs(logits, ver.temperature), ver.gen)
        tok = tok.tolist()
        for b in live:
            ver.n_valid[b] = len(seqs[b])
            state.append(b, [int(tok[b])], r)
        t1 = now()
        used = {"verify_cpu_s": cpu() - c0} if cpu else {}
        rounds.append(new_round(r, t0, t1, live, verify_s=t1 - t0, context=ctx, seq=[state.slots[b].rid for b in live],
                                width=len(seqs), **admitted, **extra, **used))
        events.append(event(name, "verifier", t0, t1, round=r))
        r += 1
    return rounds, events


def run_ar(model: Transformer, prompts: list[list[int]], dec: Decoding, gen: torch.Generator,
           accel: Accel | None = None, width: int | None = None, arrivals: list[float] | None = None,
           out_lens: list[int] | None = None) -> BatchResult:
    """Decode ``dec.max_new`` tokens per prompt (or to EOS) from an empty cache: ``width`` rows at a time
    (default: every prompt at once), finished rows refilled from the queue; ``arrivals``: load mode, ``out_lens``: per-request lengths."""
    ver = Verifier(model, prompts, 0, dec.temperature, gen, dec.max_new, list(dec.eos_ids), accel,
                   width=len(prompts) if width is None else width, out_lens=out_lens)
    start_s = dec.now()
    ver.state.arrive_from(start_s, arrivals)
    rounds, events = ar_rounds(ver, 0, dec.now)
    end = dec.now()
    return BatchResult(ver.state.outputs(), rounds, events, start_s, end - start_s,
                       **request_times(ver.state, rounds, start_s))

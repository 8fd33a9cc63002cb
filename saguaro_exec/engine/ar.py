"""Autoregressive decoding: one target forward per token, the baseline and the fault fallback.

Why one loop for both: a run's AR baseline starts from an empty cache (its first round is the prefill,
kept out of the CUDA graphs), while the fallback after an SSD draft fault continues the verifier's
cache and true sequences from the round the fault hit. Either way a round feeds each row's uncached
tokens, takes the next token (greedy at T = 0, a sample from the target otherwise) and appends it; the
round's tokens are its one device -> host transfer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from saguaro_exec.engine.cached_model import CachedModel, kv_capacity
from saguaro_exec.engine.rounds import BatchResult, event, finish_times, new_round
from saguaro_exec.engine.settings import Decoding
from saguaro_exec.engine.state import BatchState
from saguaro_exec.model import Transformer
from saguaro_exec.model.accel import Accel
from saguaro_exec.sampling import sample, target_probs


def ar_rounds(runner: CachedModel, state: BatchState, n_valid: torch.Tensor, temperature: float,
              gen: torch.Generator, r0: int, now: Callable[[], float], fallback: str | None = None
              ) -> tuple[list[dict], list[dict]]:
    """Decode from round ``r0`` until every row of ``state`` is done; ``n_valid`` [B] counts each row's
    cached tokens (updated here). ``fallback`` marks rounds that finish an SSD batch after a draft fault.
    Returns (round rows, trace events)."""
    rounds, events, r = [], [], r0
    name, extra = ("decode", {}) if fallback is None else ("decode (fallback)", {"fallback": fallback})
    seqs = state.seqs
    while not state.all_done():
        t0 = now()
        live = state.live()
        ctx = [len(seqs[b]) for b in live]
        logits = runner.last_logits([s[int(n):] for s, n in zip(seqs, n_valid)], n_valid, graphed=r > 0)
        tok = logits.argmax(-1) if temperature <= 0 else sample(target_probs(logits, temperature), gen)
        tok = tok.tolist()
        for b in live:
            n_valid[b] = len(seqs[b])
            state.append(b, [int(tok[b])], r)
        t1 = now()
        rounds.append(new_round(r, t0, t1, live, verify_s=t1 - t0, context=ctx, **extra))
        events.append(event(name, "verifier", t0, t1, round=r))
        r += 1
    return rounds, events


def run_ar(model: Transformer, prompts: list[list[int]], dec: Decoding, gen: torch.Generator,
           accel: Accel | None = None) -> BatchResult:
    """Decode ``dec.max_new`` tokens per prompt (or to EOS), batched, from an empty cache."""
    state = BatchState(prompts, dec.max_new, list(dec.eos_ids))
    runner = CachedModel(model, len(prompts), kv_capacity(prompts, dec.max_new), accel)
    start_s = dec.now()
    n_valid = torch.zeros(len(prompts), dtype=torch.long)
    rounds, events = ar_rounds(runner, state, n_valid, dec.temperature, gen, 0, dec.now)
    end = dec.now()
    return BatchResult(state.outputs(), rounds, events, start_s, end - start_s,
                       finish_times(state.finish_round, rounds, start_s))

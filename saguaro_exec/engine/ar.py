"""Autoregressive baseline: one target forward per token."""

from __future__ import annotations

import time

import torch

from saguaro_exec.engine.cached_model import CachedModel
from saguaro_exec.engine.rounds import BatchResult, event, finish_times, new_round
from saguaro_exec.engine.verifier import Sequences
from saguaro_exec.model import Transformer
from saguaro_exec.model.accel import Accel
from saguaro_exec.sampling import sample, target_probs


def run_ar(model: Transformer, prompts: list[list[int]], max_new: int, temperature: float,
           gen: torch.Generator, eos_ids: list[int], t_start: float, accel: Accel | None = None) -> BatchResult:
    """Decode ``max_new`` tokens per prompt (or to EOS), batched; greedy at T = 0. The first round is the
    prefill (kept out of the CUDA graphs); each round's tokens are its one device -> host transfer."""
    state = Sequences(prompts, max_new, eos_ids)
    runner = CachedModel(model, len(prompts), max(len(p) for p in prompts) + max_new + 2, accel)
    now = lambda: time.perf_counter() - t_start  # noqa: E731
    start_s = now()
    n_valid = torch.zeros(len(prompts), dtype=torch.long)
    rounds, events = [], []
    r = 0
    while not state.all_done():
        t0 = now()
        live = [b for b in range(len(prompts)) if not state.done[b]]
        ctx = [len(s) for s in state.seqs]
        logits = runner.last_logits([s[int(n):] for s, n in zip(state.seqs, n_valid)], n_valid, graphed=r > 0)
        tok = logits.argmax(-1) if temperature <= 0 else sample(target_probs(logits, temperature), gen)
        tok = tok.tolist()
        for b in live:
            n_valid[b] = len(state.seqs[b])
            state.append(b, [tok[b]], r)
        t1 = now()
        rounds.append(new_round(r, t0, t1, live, verify_s=t1 - t0, context=[ctx[b] for b in live]))
        events.append(event("decode", "verifier", t0, t1, round=r))
        r += 1
    end = now()
    return BatchResult([state.generated(b) for b in range(len(prompts))], rounds, events, start_s,
                       end - start_s, finish_times(state.finish_round, rounds, start_s))

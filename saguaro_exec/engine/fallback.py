"""In-process backup after an SSD draft fault: finish the batch the verifier holds (and any later batches)
with SD drafting by the draft model loaded in this process, or with plain AR decoding by the target.

Both are lossless, so at temperature 0 the output equals the fault-free run's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from saguaro_exec.engine.drafter import Drafter
from saguaro_exec.engine.rounds import event, new_round
from saguaro_exec.engine.sd import sd_rounds
from saguaro_exec.engine.verifier import Verifier
from saguaro_exec.faults import DraftFault, FaultRecord
from saguaro_exec.sampling import make_generator, sample, target_probs


def continue_sd(ver: Verifier, draft, k: int, fanout: tuple[int, ...], sampler_c: float, max_new: int,
                gen: torch.Generator, r0: int, now: Callable[[], float]) -> tuple[list[dict], list[dict]]:
    """Finish every sequence of ``ver`` by SD with ``draft`` (in this process) from round ``r0``;
    returns (round rows, trace events)."""
    dr = Drafter(draft, [list(s) for s in ver.state.seqs], k, ver.temperature, sampler_c, gen, max_new)
    dr.done = list(ver.state.done)
    dr.prefill()
    fan = torch.tensor(fanout, dtype=torch.long).expand(len(dr.seqs), -1)
    return sd_rounds(ver, dr, fan, k, r0, now, fallback="sd")


def continue_ar(ver: Verifier, r0: int, now: Callable[[], float]) -> tuple[list[dict], list[dict]]:
    """Finish every sequence of ``ver`` by target-only decoding from its cache (greedy at T = 0, a sample
    from the target otherwise); returns (round rows, trace events)."""
    seqs, rounds, events, r = ver.state.seqs, [], [], r0
    while not ver.state.all_done():
        live = [b for b in range(len(seqs)) if not ver.state.done[b]]
        ctx = [len(seqs[b]) for b in live]
        t0 = now()
        logits = ver.runner.tail_logits([s[int(n):] for s, n in zip(seqs, ver.n_valid)], ver.n_valid, 1)[:, 0]
        nxt = (logits.argmax(-1) if ver.temperature <= 0 else
               sample(target_probs(logits, ver.temperature), ver.gen)).tolist()
        for b in live:
            ver.n_valid[b] = len(seqs[b])
            ver.state.append(b, [int(nxt[b])], r)
        t1 = now()
        rounds.append(new_round(r, t0, t1, live, verify_s=t1 - t0, accepted=[0] * len(live), context=ctx,
                                fallback="ar"))
        events.append(event("decode (fallback)", "verifier", t0, t1, round=r))
        r += 1
    return rounds, events


@dataclass
class Fallback:
    """What a run needs to survive a draft fault: ``how`` ("sd" | "ar"), a loader for the in-process draft
    and the SD settings; ``faults`` collects one FaultRecord per fault."""

    how: str
    load_draft: Callable[[], object]
    k: int
    fanout: tuple[int, ...]
    sampler_c: float
    max_new: int
    seed: int
    device: str
    t_start: float
    faults: list[FaultRecord] = field(default_factory=list)
    _draft: object = None

    def draft(self) -> object:
        """The draft model in this process (loaded on first use)."""
        if self._draft is None:
            self._draft = self.load_draft()
        return self._draft

    def now(self) -> float:
        return time.perf_counter() - self.t_start

    def handler(self, batch: int, on_first: Callable[[], None]) -> Callable:
        """``run_ssd``'s on_fault for batch ``batch``: record the fault, call ``on_first`` (abort the
        link), finish the batch in-process."""

        def on_fault(ver: Verifier, r: int, fault: DraftFault) -> tuple[list[dict], list[dict]]:
            self.faults.append(FaultRecord(fault.kind, batch, r, self.now(), fault.waited_s, self.how,
                                           fault.detail))
            on_first()
            return self.finish(ver, batch, r)

        return on_fault

    def finish(self, ver: Verifier, batch: int, r0: int) -> tuple[list[dict], list[dict]]:
        """Continue ``ver`` to the end with the configured backup."""
        if self.how == "ar":
            return continue_ar(ver, r0, self.now)
        gen = make_generator(self.seed + 7919 * (batch + 1) + 1, self.device)
        return continue_sd(ver, self.draft(), self.k, self.fanout, self.sampler_c, self.max_new, gen, r0,
                           self.now)

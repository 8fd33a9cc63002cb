"""Policy after an SSD draft fault: record it, then finish the batch the verifier holds (and every later
batch) in this process, with SD drafting by the draft model loaded here ("sd") or with plain AR decoding
by the target ("ar"). The mechanisms are the engines' own loops (sd.finish_by_sd, ar.ar_rounds).

Both are lossless, so at temperature 0 the output equals the fault-free run's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from saguaro_exec.engine.ar import ar_rounds, run_ar
from saguaro_exec.engine.rounds import BatchResult
from saguaro_exec.engine.sd import finish_by_sd, run_sd
from saguaro_exec.engine.settings import Decoding, Drafting
from saguaro_exec.engine.verifier import Verifier
from saguaro_exec.faults import DraftFault, FaultRecord
from saguaro_exec.sampling import batch_generator


@dataclass
class Fallback:
    """What a run needs to survive a draft fault: ``how`` ("sd" | "ar"), a loader for the in-process draft
    and the SD settings; ``faults`` collects one FaultRecord per fault."""

    how: str
    load_draft: Callable[[], object]
    drafting: Drafting
    max_new: int
    seed: int
    device: str                     # the in-process draft's device
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
            return ar_rounds(ver, r0, self.now, fallback="ar")
        gen = batch_generator(self.seed, batch, "fallback", self.device)
        return finish_by_sd(ver, self.draft(), self.drafting, self.max_new, gen, r0, self.now)

    def run_batch(self, target, prompts: list[list[int]], batch: int, dec: Decoding, target_device: str,
                  accel: tuple, width: int | None = None) -> BatchResult:
        """A whole batch after the draft process is gone: SD with the in-process draft, or AR
        (``accel``: the target's and the draft's fast paths)."""
        gen = batch_generator(self.seed, batch, "target", target_device)
        if self.how == "ar":
            return run_ar(target, prompts, dec, gen, accel[0], width=width)
        gens = (gen, batch_generator(self.seed, batch, "fallback", self.device))
        return run_sd(target, self.draft(), prompts, dec, self.drafting, gens, accel=accel, width=width)

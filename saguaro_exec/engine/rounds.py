"""Per-round measurement rows (``calibration.Measurements.rounds``) and trace events, shared by engines.

Per-sequence lists cover the rows still generating at that round; ``seq`` names their requests (index in
the run's queue of prompts), ``slot`` their cache rows, ``width`` the rows its forwards ran (SSD's finished
rows ride along once the queue is empty); a round after a refill names the admitted requests in ``refill`` and
their prefill time in ``prefill_s`` (outside t0..t1; the admitted rows' prefills are batched). These, ``draft_times``, SSD's ``handoff``
message stamps and ``verify_cpu_s`` (CPU runs: the verifier thread's CPU time over ``verify_s``) are extra keys
beside the calibration schema's ROUND_FIELDS.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from calibration.measurements import ROUND_FIELDS


def thread_cpu(device: object) -> Callable[[], float] | None:
    """The calling thread's CPU clock on a CPU run with one torch thread, None otherwise (on an accelerator a
    forward's wall time is the device's; with more threads the caller waits for its helpers). An engine records ``verify_cpu_s`` over its verification with it: the wall time beyond it is time the
    host took the core away (another process, the hypervisor), which the executor fits leave out
    (calibration/fit_executor.preempted)."""
    import torch

    one_thread = torch.get_num_threads() == 1     # with more, the thread waits for its helpers: CPU < wall anyway
    return time.thread_time if str(device).startswith("cpu") and one_thread else None


def new_round(idx: int, t0: float, t1: float, live: list[int], **values: object) -> dict:
    """A round row with every ROUND_FIELDS key present (times default to 0, lists to their default)."""
    row: dict = {name: 0.0 for name in ROUND_FIELDS}
    n = len(live)
    row.update(round=idx, t0=t0, t1=t1, batch=n, seq=list(live), slot=list(live), accepted=[0] * n, hit=[None] * n,
               from_backup=[False] * n, bonus_rank=[-1] * n, context=[0] * n)
    row.update(values)
    return row


@dataclass
class BatchResult:
    """What one engine returns for one batch of prompts."""

    tokens: list[list[int]]
    rounds: list[dict]
    events: list[dict] = field(default_factory=list)
    start_s: float = 0.0              # batch start, seconds since run start
    wall_s: float = 0.0
    finish_s: list[float] = field(default_factory=list)   # per request: seconds from batch start to done
    first_s: list[float] = field(default_factory=list)    # per request: ... to its first token
    admit_s: list[float] = field(default_factory=list)    # per request: ... to taking its slot
    arrival_s: list[float] = field(default_factory=list)  # per request: ... to its arrival (0: at the start)


def event(name: str, track: str, start: float, end: float, **args: object) -> dict:
    """One timeline span (seconds since run start) in ``saguaro_sim.trace``'s event format."""
    return {"name": name, "track": track, "start_s": start, "dur_s": max(0.0, end - start), "args": args}


def request_times(state, rounds: list[dict], start_s: float) -> dict:
    """``BatchResult`` keyword arguments of per-request times (finish, first token, admission) from ``state``."""
    return {"finish_s": finish_times(state.finish_round, rounds, start_s),
            "first_s": finish_times([s.first_round for s in state.requests], rounds, start_s),
            "admit_s": [s.admit_s - start_s for s in state.requests],
            "arrival_s": [max(a - start_s, 0.0) for a in state.arrivals]}


def finish_times(finish_round: list[int], rounds: list[dict], start_s: float) -> list[float]:
    """Seconds from batch start until the given rounds ended (one per request)."""
    ends = {r["round"]: r["t1"] for r in rounds}
    last = rounds[-1]["t1"] if rounds else start_s
    return [ends.get(fr, last) - start_s for fr in finish_round]

"""The load simulator's view of the time model: what one decode round and one prefill cost at a live batch.

Nothing is re-derived here: a round's phase times come from saguaro_sim.analytic.round_times (the model the
simpy engines in saguaro_sim/sim/ charge) and an SSD round composes them as analytic.ssd_round_time does
for the reply protocol, with the verifier's own gap (Profile.verifier_gap_s) as the floor the engine keeps.
Round jitter (profile.executor.jitter: measured (verification, draft-side) multipliers of single rounds, mean 1
each) scales a round's target-side and draft-side parts apart (``RoundCost.jittered``); the SSD round is then
the longer of its two overlapped sides, so its mean grows where they are balanced, as in saguaro_sim/sim/ssd.py;
where the draft shares the target's host (``sharing``, saguaro_sim/shared.py) the jittered sides slow each other
as the flat round does (concurrent: both by ``slowdown`` while they overlap; time-sliced: in turn).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.profile import Profile
from saguaro_sim.analytic import round_times, ssd_round_time
from saguaro_sim.config import SpecConfig


@dataclass(frozen=True)
class RoundCost:
    """One decode round at a batch: it lasts max(base_s + miss_s * any_row_missed, floor_s) seconds;
    target_s / draft_s are the busy seconds of the target's devices (SD's drafting included) and of the SSD
    draft device (draft_miss_s more when a neural backup runs)."""

    base_s: float
    miss_s: float
    floor_s: float
    target_s: float
    draft_s: float
    draft_miss_s: float
    kind: str = "ar"            # the parts below compose a jittered round (``jittered``)
    verify_s: float = 0.0       # target side: AR step / SD and SSD verification
    side_s: float = 0.0         # draft side: SD's K draft steps / SSD's cache build (primary schedule)
    side_miss_s: float = 0.0    # SSD: the build after a miss (after-miss schedule)
    up_s: float = 0.0           # SSD: outcome message
    down_s: float = 0.0         # SSD: speculation message
    backup_s: float = 0.0       # SSD: the backup speculation a missed round adds
    loop_s: float = 0.0         # AR / SD: the executor's bookkeeping between rounds (in base_s; not jittered)
    sharing: str = "none"       # SSD: the draft beside the target on one host ("concurrent" / "time-sliced")
    slowdown: float = 1.0       # SSD concurrent: both sides this many times slower while they overlap

    def jittered(self, jv: np.ndarray, jb: np.ndarray, missed: np.ndarray | None) -> np.ndarray:
        """Per-round seconds with the target side scaled by ``jv`` and the draft side by ``jb`` (arrays of
        the rounds' multipliers), ``missed``: which rounds had a row miss (SSD; None: none did)."""
        if self.kind == "ar":
            t = jv * self.verify_s
            t += self.loop_s
            return t
        if self.kind == "sd":
            t = jv * self.verify_s
            t += jb * self.side_s
            t += self.loop_s
            return t
        target = jv * self.verify_s                   # in place below: this runs once per stretch of rounds
        side = jb * self.side_s
        miss = missed is not None and bool(self.miss_s) and bool(missed.any())
        if miss:
            at = np.flatnonzero(missed)
            side[at] = jb[at] * self.side_miss_s
        gap = self.floor_s - self.verify_s            # the verifier's own gap: binds only beyond the messages
        floor = target + gap if gap > self.up_s + self.down_s else None
        if self.sharing == "time-sliced":             # the build and the verification take turns
            t = target + self.up_s
            t += side
        else:
            if self.sharing == "concurrent":          # both slower by the same seconds while they overlap
                extra = np.minimum(target, side)
                extra *= self.slowdown - 1.0
                target += extra
                side += extra
            target += self.up_s
            t = np.maximum(side, target, out=side)
        if miss:
            t[at] += jb[at] * self.backup_s
        t += self.down_s
        if floor is not None:
            np.maximum(t, floor, out=t)
        return t

def round_cost(profile: Profile, spec: SpecConfig, batch: int, context: float, fast: bool) -> RoundCost:
    """Cost of one AR step / SD round / SSD round of `batch` rows at mean context `context`; AR and SD rounds
    also pay the executor's bookkeeping between rounds (the profile's ``loop`` line, calibration/fit_loop.py)."""
    rt = round_times(profile, spec, batch, context, fast)
    ex = profile.executor
    loop = ex("loop", batch, 1) if ex is not None and spec.mode != "ssd" else 0.0
    if spec.mode == "ar":
        return RoundCost(rt.ar_step + loop, 0.0, 0.0, rt.ar_step, 0.0, 0.0, "ar", rt.ar_step, loop_s=loop)
    if spec.mode == "sd":
        t = spec.k * rt.draft_step + rt.verify   # the draft runs on the target's devices, in turn
        return RoundCost(t + loop, 0.0, 0.0, t, 0.0, 0.0, "sd", rt.verify, spec.k * rt.draft_step, loop_s=loop)
    hit_s = ssd_round_time(rt, 1.0, 1)   # every row hit: max(message + verify + message, cache build)
    miss_s = ssd_round_time(rt, 0.0, 1) - hit_s   # some row missed: the backup speculation follows
    return RoundCost(hit_s, miss_s, rt.verify + profile.verifier_gap_s, rt.verify, rt.build,
                     0.0 if fast else rt.backup, "ssd", rt.verify, rt.build, rt.build_miss, rt.msg_up, rt.msg_down,
                     rt.backup, sharing=rt.sharing, slowdown=rt.slowdown)


def prefill_cost(profile: Profile, spec: SpecConfig, rows: int, prompt_tokens: float,
                 backup_s: float | None = None) -> tuple[float, float]:
    """(target seconds, draft seconds) to prefill `rows` new requests of `prompt_tokens` each, as the executor
    does: every prompt but its last token (which the row's first decode round feeds); the draft (SD, SSD)
    prefills too, and in SSD also makes the rows' first speculation with the backup: `backup_s` (the
    backup over the rows the draft forwards), by default K single-token steps of the new rows. The profile's
    executor ``prefill`` / ``draft_prefill`` lines (calibration/fit_prefill.py) add what the executor's prefills
    measured beyond the microbenchmarked forward."""
    prompt = max(0, round(prompt_tokens) - 1)
    ex = profile.executor
    over = (lambda kind: ex(kind, rows, prompt)) if ex is not None and prompt else (lambda kind: 0.0)
    target = max(0.0, profile.target(rows, prompt, 0.0) + over("prefill")) if prompt else 0.0
    if spec.mode == "ar":
        return target, 0.0
    draft = max(0.0, profile.draft(rows, prompt, 0.0) + over("draft_prefill")) if prompt else 0.0
    if spec.mode == "ssd":
        draft += spec.k * profile.draft(rows, 1, float(prompt)) if backup_s is None else backup_s
    return target, draft

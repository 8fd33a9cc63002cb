"""One serving replica under a request stream, as simpy processes: arrivals, the continuous-batching
scheduler, and (SSD prefill) the target and draft devices working side by side.

Continuous batching: arrived requests wait in FIFO order and join when one of `max_batch` slots is free, at a
round boundary, all that have arrived by then in one prefill (the decode batch waits: no chunked prefill); requests
that arrive during it wait for the next boundary, one decode round later (until session 29 they were prefilled
back to back, grouping rows the executor admits a round apart); as in the executor
(saguaro_exec/engine/refill.py) the prefill caches the prompt but its last token, and the row's first decode round
gives its first token(s) (an SD / SSD round up to K + 1 of them); a row leaves at the end of the round that
completes its output tokens. A new SSD row's first speculation is the backup's (the executor's refill).
Charged width: AR and SD rounds at the live rows; SSD at the live rows (`ssd_width="live"`), at every slot up to
the last live one (`"prefix"`: the executor's SSD over a tensor-parallel target, its rows kept in place; elsewhere it
moves live rows over finished ones, `"live"`),
or at every slot while any row is live (`"batch"`: the executor before it skipped finished rows).

Speed: a row's future (tokens and hit of each of its rounds) does not depend on the other rows, so it is
drawn once when it joins (saguaro_sim/load/draws.py) into a slot x round table. The clock then advances one
simpy timeout per stretch of rounds with a fixed batch: up to the next leave, or, when a slot is free, the
first round that ends after the next arrival; a stretch's round times follow from the table's columns.
When the live batch moves to another entry of the config schedule, the live rows' futures are redrawn under
the new configuration from their current state (the chain is Markov, so this is exact).

Round jitter: with the profile's measured (verification, draft-side) multiplier pairs (profile.executor.jitter)
each round draws one pair (its own seeded stream, so the futures do not change) that scales the round's two sides
(costs.RoundCost.jittered); the pairs are drawn a block at a time and a stretch takes the next ones in order.
Speed drift: with the profile's measured slow multipliers (profile.executor.drift, one per 10 ms of a run's
clock) every round and prefill is scaled by the value at its start on the simulated clock, read from a seeded
offset: what moves one request's TPOT against another's (a request averages its rounds' jitter away).
After idle: once the replica sat with no live row for at least IDLE_GAP_S, its next decode rounds take the
profile's extra shares (profile.executor.after_idle: the 1st round x (1 + e0), the 2nd x (1 + e1), ...), the cold
start a load-mode run shows and fixed-batch costs leave out (calibration/fit_idle.py).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

import numpy as np
import simpy

from calibration.errors import check_choice
from calibration.overheads import DRIFT_DT_S, IDLE_GAP_S
from calibration.profile import Profile
from saguaro_sim.analytic import accept_pmfs, hit_table, round_times, uses_fast_backup
from saguaro_sim.config import SpecConfig
from saguaro_sim.load.costs import RoundCost, prefill_cost, round_cost
from saguaro_sim.load.draws import FuturePool, RoundDraws
from saguaro_sim.load.schedule import ConfigSchedule
from saguaro_sim.load.stream import RequestStream
from saguaro_sim.workload import Workload

CONTEXT_STEP = 32   # round costs are evaluated at the mean context rounded to this many tokens
JITTER_BLOCK = 1 << 14   # jitter pairs drawn at a time
JITTER_STREAM = 0x6A17   # the jitter's random stream beside the seed (the futures keep theirs)
DRIFT_STREAM = 0xD21F    # the speed drift's starting offset
SSD_WIDTHS = ("live", "prefix", "batch")


@dataclass
class Band:
    """One schedule entry, resolved: its config, backup kind and random draws."""

    spec: SpecConfig
    fast: bool
    draws: RoundDraws


class Replica:
    """Serve `stream` on one replica; fills per-request first-token / finish times and device busy time."""

    NO_ROUND = np.iinfo(np.int64).max

    def __init__(self, profile: Profile, schedule: ConfigSchedule, stream: RequestStream, max_batch: int,
                 seed: int = 0, ssd_width: str = "live", jitter: bool = True) -> None:
        check_choice("ssd_width", ssd_width, SSD_WIDTHS)
        self.profile, self.schedule, self.stream, self.max_batch = profile, schedule, stream, max_batch
        # rows an SSD round forwards while any is live (None: the live ones); "batch": every one of min(B,
        # requests) slots; "prefix": the slots up to the last live one (rows kept in place: a TP target)
        ssd = schedule.mode == "ssd"
        self.fixed_width = min(max_batch, len(stream)) if ssd_width == "batch" and ssd else None
        self.prefix_width = ssd_width == "prefix" and ssd
        rng = np.random.default_rng(seed)
        self.bands = [self._resolve(b, spec, rng) for b, spec in schedule.entries]
        self._band_of = [schedule.band(max(1, b)) for b in range(max_batch + 1)]   # entry per live batch size
        n = len(stream)
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.first_round = np.full(n, -1, dtype=np.int64)   # global round that gave each request's first token
        self.finish_round = np.full(n, -1, dtype=np.int64)  # ... and its last one
        self.widths: Counter = Counter()                    # rows charged per round -> rounds charged so
        self.batch_time = 0.0       # integral of the live batch size over time
        self.target_busy = self.draft_busy = 0.0
        self.prefills = 0
        self.prefill_s = 0.0        # seconds the decode batch waited for prefills
        self.env = simpy.Environment()
        self.waiting: deque[int] = deque()
        self.arrived = 0
        self._wake: simpy.Event | None = None
        self.band_index = 0
        self.g = 0                                          # next global round
        self.origin = 0                                     # global round of the table's column 0
        self.tok = np.zeros((max_batch, 256), dtype=np.int32)   # tokens each slot adds at each round
        self.hit = np.ones((max_batch, 256), dtype=bool)        # whether it hits (free slots: always)
        self.req = np.full(max_batch, -1, dtype=np.int64)       # request in each slot
        self.live = 0                                           # slots in use
        self.g0 = np.zeros(max_batch, dtype=np.int64)           # round it joined at
        self.last = np.full(max_batch, self.NO_ROUND)           # round it finishes in
        self.fresh = np.zeros(max_batch, dtype=bool)            # joined, first round not run yet
        self.ctx_sum = 0.0                                  # total context of the live rows at round g
        self._costs: dict = {}
        chunk = int(np.percentile(stream.output_tokens, 75))
        self._pools = [FuturePool(band.draws, chunk) for band in self.bands]
        ex = profile.executor
        self._pairs = np.asarray(ex.jitter, dtype=float) if jitter and ex is not None and ex.jitter else None
        self._jit_rng = np.random.default_rng([seed, JITTER_STREAM])
        self._jv = self._jb = np.empty(0)
        self._jcur = 0
        self._drift = np.asarray(ex.drift, dtype=float) if jitter and ex is not None and ex.drift else None
        if self._drift is not None:       # base (unscaled) seconds the clock covers by each step of the series
            self._drift0 = int(np.random.default_rng([seed, DRIFT_STREAM]).integers(len(self._drift)))
            self._dcum = np.concatenate([[0.0], np.cumsum(DRIFT_DT_S / self._drift)])
            self._dcum_list, self._drift_list = self._dcum.tolist(), self._drift.tolist()   # scalar reads
        self._cold = np.asarray(ex.after_idle if ex is not None else (), dtype=float)   # extra shares after idle
        self._since_idle = len(self._cold)                  # decode rounds since the last idle gap (none yet)

    @property
    def rounds(self) -> int:
        return self.g


    def _resolve(self, from_batch: int, spec: SpecConfig, rng: np.random.Generator) -> Band:
        spec = spec.replace(batch_size=from_batch)
        if spec.mode == "ar":
            return Band(spec, False, RoundDraws(rng, None, None, None))
        st = self.stream
        w = Workload(num_sequences=from_batch, output_tokens=max(1, round(float(np.mean(st.output_tokens)))),
                     prompt_tokens=round(float(np.mean(st.prompt_tokens))))
        fast = spec.mode == "ssd" and uses_fast_backup(self.profile, spec, w)
        pmf_p, pmf_b = accept_pmfs(self.profile, spec, fast)
        table = hit_table(self.profile, spec, fast) if spec.mode == "ssd" else None
        return Band(spec, fast, RoundDraws(rng, pmf_p, pmf_b, table))

    def run(self) -> float:
        """Simulate until every request finished; returns the simulated seconds."""
        self.env.process(self._arrivals())
        done = self.env.process(self._scheduler())
        self.env.run(until=done)
        return self.env.now

    # ---- processes ---------------------------------------------------------------------------------
    def _arrivals(self):
        env, times = self.env, self.stream.arrival_s
        for i in range(len(times)):
            if times[i] > env.now:
                yield env.timeout(times[i] - env.now)
            self.waiting.append(i)
            self.arrived = i + 1
            if self._wake is not None:
                wake, self._wake = self._wake, None
                wake.succeed()

    def _scheduler(self):
        env, n = self.env, len(self.stream)
        admitted = False        # the last boundary prefilled: the next one comes after a decode round (refill.py)
        while True:
            live = self.live
            if self.waiting and live < self.max_batch and not (live and admitted):
                yield from self._prefill(live)
                admitted = True
            elif live:
                admitted = False
                yield from self._decode_stretch(live)
            elif self.arrived < n:
                self._wake = env.event()
                idle_from = env.now
                yield self._wake
                if env.now - idle_from >= IDLE_GAP_S:
                    self._since_idle = 0
            else:
                return

    def _busy(self, seconds: float):
        yield self.env.timeout(seconds)

    def _prefill(self, live: int):
        """Admit waiting requests into free slots and prefill them (their prompts but the last token): target
        and draft devices concurrently in SSD (separate GPUs; the draft also makes the rows' first, backup,
        speculation over the rows it forwards), one after the other in SD (the draft shares the target's GPUs)."""
        env, st = self.env, self.stream
        take = min(len(self.waiting), self.max_batch - live)
        new = np.array([self.waiting.popleft() for _ in range(take)], dtype=np.int64)
        band = self._band_of[live + take]
        spec = self.bands[band].spec
        t_target, t_draft = prefill_cost(self.profile, spec, take, float(np.mean(st.prompt_tokens[new])),
                                         self._backup_s(band, live + take))
        start = env.now
        if self._drift is not None:           # the machine's speed now
            f = self._speed(start)
            t_target, t_draft = t_target * f, t_draft * f
        if spec.mode == "ssd":
            yield env.all_of([env.process(self._busy(t_target)), env.process(self._busy(t_draft))])
            self.draft_busy += t_draft
        else:
            yield env.timeout(t_target + t_draft)
            t_target += t_draft
        self.target_busy += t_target
        self.batch_time += live * (env.now - start)
        self.prefills += 1
        self.prefill_s += env.now - start
        left = np.maximum(st.output_tokens[new], 1)          # every token comes from a decode round
        self._set_band(band)
        slots = np.flatnonzero(self.req < 0)[:len(new)]
        self.req[slots], self.g0[slots], self.fresh[slots] = new, self.g, True
        self.live += len(new)
        self.ctx_sum += float(np.sum(st.prompt_tokens[new]))
        src = np.full(len(new), 1 if spec.mode == "ssd" else 0, dtype=np.int64)   # SSD: the backup's speculation
        self._place(slots, src, left)

    def _backup_s(self, band: int, rows: int) -> float | None:
        """SSD: seconds of the backup speculation a refill makes over the rows the draft forwards."""
        b = self.bands[band]
        if b.spec.mode != "ssd":
            return None
        width = self._forwarded(rows)
        key = (band, width, "backup")
        if key not in self._costs:
            ctx = float(np.mean(self.stream.prompt_tokens))
            self._costs[key] = round_times(self.profile, b.spec, width, ctx, b.fast).backup
        return self._costs[key]

    # ---- the slot x round table -------------------------------------------------------------------
    def _fit(self, upto: int) -> None:
        """Make the table reach global round `upto`, dropping the columns of past rounds."""
        c = self.g - self.origin
        if c > 0 and c > self.tok.shape[1] // 2:
            self.tok, self.hit = self.tok[:, c:], self.hit[:, c:]
            self.origin = self.g
        width = upto - self.origin
        if width > self.tok.shape[1]:
            extra = max(width, 2 * self.tok.shape[1]) - self.tok.shape[1]
            self.tok = np.concatenate([self.tok, np.zeros((self.max_batch, extra), dtype=np.int32)], axis=1)
            self.hit = np.concatenate([self.hit, np.ones((self.max_batch, extra), dtype=bool)], axis=1)

    def _place(self, slots: np.ndarray, src: np.ndarray, left: np.ndarray) -> None:
        """Give rows their futures from round g on, under the current configuration (from its pools)."""
        pool = self._pools[self.band_index]
        g = self.g
        for slot, s0, n_left in zip(slots.tolist(), src.tolist(), left.tolist()):
            tok, hit = pool.take(s0, n_left)
            n = len(tok)
            self._fit(g + n)
            c = g - self.origin
            self.tok[slot, c:c + n], self.hit[slot, c:c + n] = tok, hit
            self.last[slot] = g + n - 1

    def _set_band(self, index: int) -> None:
        """Switch configuration; the live rows' remaining futures are redrawn under the new one."""
        if index == self.band_index:
            return
        self.band_index = index
        slots = np.flatnonzero(self.req >= 0)
        if not len(slots):
            return
        c = self.g - self.origin
        left = self.tok[slots, c:].sum(axis=1)
        src = np.where(self.g0[slots] < self.g, ~self.hit[slots, c - 1] if c > 0 else False, False).astype(np.int64)
        self.tok[slots, c:], self.hit[slots, c:] = 0, True
        self._place(slots, src, left)

    def _forwarded(self, live: int) -> int:
        """Rows a round forwards with ``live`` rows live (see ``ssd_width``)."""
        if self.prefix_width:
            slots = np.flatnonzero(self.req >= 0)
            return int(slots[-1]) + 1 if len(slots) else max(1, live)
        return self.fixed_width or live

    def _cost(self, batch: int, context: float) -> RoundCost:
        key = (self.band_index, batch, round(context / CONTEXT_STEP))
        got = self._costs.get(key)
        if got is None:
            band = self.bands[self.band_index]
            got = self._costs[key] = round_cost(self.profile, band.spec, batch, key[2] * CONTEXT_STEP, band.fast)
        return got

    def _speed(self, now: float, base_s: np.ndarray | None = None) -> np.ndarray | float:
        """The machine's speed multiplier for work starting `base_s` unscaled seconds after `now`: the profile's
        drift series (a value per DRIFT_DT_S of the clock, from a seeded offset, wrapping around) read where the
        clock gets to once the work before it ran at the series' speeds (slow steps hold less work, so a
        stretch's rounds do not land evenly on the series); `base_s` None: the value at `now`."""
        cum, n = self._dcum_list, len(self._drift_list)
        step = self._drift0 + now / DRIFT_DT_S                       # where `now` is on the series
        whole = int(step)
        i = whole % n
        if base_s is None:
            return self._drift_list[i]
        at = (whole // n) * cum[-1] + cum[i] + (step - whole) * (cum[i + 1] - cum[i])
        j = np.searchsorted(self._dcum, (base_s + at) % cum[-1], side="right") - 1
        return self._drift[np.minimum(j, n - 1)]

    def _jitter(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The next n rounds' (verification, draft-side) multipliers (not consumed: ``_jcur`` moves on)."""
        if self._jcur + n > len(self._jv):
            idx = self._jit_rng.integers(len(self._pairs), size=max(JITTER_BLOCK, n))
            self._jv, self._jb, self._jcur = self._pairs[idx, 0], self._pairs[idx, 1], 0
        return self._jv[self._jcur:self._jcur + n], self._jb[self._jcur:self._jcur + n]

    def _decode_stretch(self, b: int):
        """Decode the rounds up to the next leave (or join); rows that finished leave."""
        env = self.env
        self._set_band(self._band_of[b])
        g = self.g
        first_leave = int(self.last.min())
        rounds = first_leave - g + 1
        c = g - self.origin
        context = (self.ctx_sum + float(self.tok[:, c:c + rounds // 2].sum())) / b
        width = self._forwarded(b)
        cost = self._cost(width, context)
        if self._pairs is not None:
            missed = ~self.hit[:, c:c + rounds].all(axis=0) if cost.miss_s else None
            times = cost.jittered(*self._jitter(rounds), missed)
        elif cost.miss_s or cost.floor_s:
            missed = ~self.hit[:, c:c + rounds].all(axis=0)
            times = np.maximum(cost.base_s + cost.miss_s * missed, cost.floor_s)
        else:
            missed, times = None, np.full(rounds, cost.base_s)
        if self._since_idle < len(self._cold):              # the rounds after an idle gap
            cold = self._cold[self._since_idle:self._since_idle + rounds]
            times = times.copy()                            # (np.pad here cost ~25 us a gap)
            times[:len(cold)] *= 1.0 + cold
        if self._drift is not None:
            times = times * self._speed(env.now, np.cumsum(times) - times)
        clock = env.now + np.cumsum(times)
        if b < self.max_batch and self.waiting:           # arrived during the last prefill: the next boundary
            rounds = 1
        elif b < self.max_batch and self.arrived < len(self.stream):
            rounds = min(rounds, int(np.searchsorted(clock, self.stream.arrival_s[self.arrived])) + 1)
        start, end = env.now, float(clock[rounds - 1])
        self._jcur += rounds
        self._since_idle += rounds
        fresh = np.flatnonzero(self.fresh)
        self.first_token_s[self.req[fresh]], self.first_round[self.req[fresh]] = float(clock[0]), g
        self.fresh[fresh] = False
        self.widths[width] += rounds
        yield env.timeout(max(0.0, end - start))
        self.batch_time += b * (end - start)
        self.target_busy += rounds * cost.target_s
        self.draft_busy += rounds * cost.draft_s
        if missed is not None and cost.draft_miss_s:
            self.draft_busy += int(missed[:rounds].sum()) * cost.draft_miss_s
        self.ctx_sum += float(self.tok[:, c:c + rounds].sum())
        self.g = g = g + rounds
        if first_leave < g:
            gone = np.flatnonzero(self.last < g)
            reqs = self.req[gone]
            self.finish_s[reqs], self.finish_round[reqs] = end, g - 1
            self.ctx_sum -= float(np.sum(self.stream.prompt_tokens[reqs] + self.stream.output_tokens[reqs]))
            self.req[gone], self.last[gone] = -1, self.NO_ROUND
            self.live -= len(gone)

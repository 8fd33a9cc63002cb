"""What the load-fidelity benchmark (bench_load.py) needs beside the runs: the acceptance of its own requests, and
a phase-by-phase account of one load run against what the load simulator charges for it.

Why the acceptance is refitted: the tiny pair's acceptance depends on how far into its output a request is (SD k3
greedy over the 8 built-in prompts: 3.26 tokens a round over the first 32 tokens, 2.82 over 128, 2.47 over
256), so a profile fitted on runs of a few hundred tokens predicts too few tokens a round for 32-token requests and
every SD / SSD TPOT too slow. The planner's acceptance is a property of the traffic; here it is measured on the
benchmark's own requests by one fixed-batch run per mode (at T = 0 the tokens, so the accepted lengths and cache
hits, do not depend on batching or timing), while every cost term stays the profile's, but for two: the prefill
lines (calibration/fit_prefill.py) come from prefills of the benchmark's own prompts timed on the executor's path
at 1.. batch rows (``timed_prefills``; a fixed-batch run's refills are mostly of the whole batch at once, load
refills of one row), so that no prefill is the latency model extrapolated past its grid; a profile without the
between-round loop line (calibration/fit_loop.py; presets fitted before it) gets it from the same run (AR then
runs too).
The same run's rounds, charged like the load run's (``fixed_phases``), tell a cost the load loop adds from one
the profile's fixed-batch calibration misses at these shapes on this box.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np

from calibration.fit import run_of
from calibration.fit_acceptance import fit_acceptance
from calibration.fit_hits import fit_hits
from calibration.fit_loop import fit_loop
from calibration.fit_prefill import fit_prefill, fit_prefill_points, with_prefill
from calibration.profile import Profile
from saguaro_sim import SpecConfig
from saguaro_sim.load.costs import prefill_cost, round_cost


def workload_profile(profile: Profile, spec: SpecConfig, prompts: list[list[int]], tokens: int, **run_kw) -> Profile:
    """``profile`` with acceptance (and, SSD, hit curves) fitted from one fixed-batch run of ``spec`` over
    ``prompts`` at ``tokens`` output tokens each (AR and T > 0 specs keep the profile's), and, where the profile
    has no prefill lines, those of the same run's refills."""
    return workload_run(profile, spec, prompts, tokens, **run_kw)[0]


def timed_prefills(prompts: list[list[int]], batch: int, threads: int = 1) -> dict:
    """{"target": points, "draft": points} of the tiny pair's prefills of 1..batch of ``prompts`` at a time
    (saguaro_exec.measure.prefill.time_prefills)."""
    from saguaro_exec.io.assets import tiny_pair_paths
    from saguaro_exec.measure.prefill import time_prefills
    from saguaro_exec.model import load_model

    rows = tuple(range(1, batch + 1))
    return {who: time_prefills(load_model(path), prompts, rows, threads=threads)
            for who, path in zip(("target", "draft"), tiny_pair_paths())}


def workload_run(profile: Profile, spec: SpecConfig, prompts: list[list[int]], tokens: int,
                 prefills: dict | None = None, **run_kw) -> tuple[Profile, list[dict]]:
    """``workload_profile`` and the fixed-batch run's round rows; ``prefills`` (``timed_prefills``) give the
    prefill lines (else the run's refills do, where the profile has none)."""
    from saguaro_exec import RunConfig, run

    # SSD's draft in this process: at T = 0 its speculations and hits are the draft process's, with no spawn
    rep = run(RunConfig(spec=spec, prompts=prompts, max_new_tokens=tokens, profile=profile,
                        inline_draft=spec.mode == "ssd", **run_kw))
    rr = run_of(rep.measurements)
    prov = dict(profile.provenance) if isinstance(profile.provenance, dict) else {}
    out = profile
    if spec.mode != "ar" and spec.temperature <= 0:
        acceptance, acc_info = fit_acceptance([rr])
        hits, _ = fit_hits([rr]) if spec.mode == "ssd" else (profile.hits, None)
        prov["workload_acceptance"] = {"mode": spec.mode, "prompts": len(prompts), "tokens": tokens,
                                       "fit": acc_info["by_temperature"]}
        out = dataclasses.replace(out, acceptance=acceptance, hits=hits)
    lines: dict = {}
    if prefills is not None:
        pre, prov["workload_prefill"] = _timed_lines(profile, prefills, spec.mode)
        lines.update(pre)
    elif not has_line(profile, "prefill", "draft_prefill"):
        pre, prov["workload_prefill"] = fit_prefill(profile.target, profile.draft, [rr])
        lines.update(pre)
    if not has_line(profile, "loop") and spec.mode != "ssd":
        loop, prov["workload_loop"] = fit_loop([rr])
        lines.update(loop)
    if lines:
        out = dataclasses.replace(out, executor=with_prefill(profile.executor, lines))
    return dataclasses.replace(out, provenance=prov), rep.measurements.rounds


def _timed_lines(profile: Profile, prefills: dict, mode: str) -> tuple[dict, dict]:
    return fit_prefill_points(profile.target, profile.draft, prefills["target"],
                              prefills["draft"] if mode != "ar" else None)


def with_timed_prefills(profile: Profile, prefills: dict, mode: str) -> Profile:
    """``profile`` with the prefill lines of ``timed_prefills``."""
    lines, info = _timed_lines(profile, prefills, mode)
    prov = {**(profile.provenance if isinstance(profile.provenance, dict) else {}), "workload_prefill": info}
    return dataclasses.replace(profile, executor=with_prefill(profile.executor, lines), provenance=prov)


def has_line(profile: Profile, *kinds: str) -> bool:
    """Whether the profile's executor costs carry a line of any of ``kinds``."""
    ex = profile.executor
    return ex is not None and any(k in by for by in ex.lines.values() for k in kinds)


def sim_phases(res) -> dict:
    """What the load simulator charged (a ``LoadResult``): rounds per charged width, prefills and the seconds
    they held the batch."""
    return {"rounds": int(res.rounds), "rounds_by_width": dict(res.rounds_by_width), "prefills": int(res.prefills),
            "prefill_s": float(res.prefill_s)}


def run_phases(rounds: list[dict], profile: Profile, spec: SpecConfig, prompt_tokens: float, fast: bool) -> dict:
    """One load run's rounds (``report.measurements.rounds``) phase by phase, each against what the load
    simulator's cost model charges for the same round (at the width the round really forwarded, its live
    rows' mean context) or prefill: rounds per width, tokens per live row-round, measured / charged seconds
    of rounds and prefills, the share of the charge that comes from forwarding rows that are not live, and
    the seconds between rounds while rows stay live (bookkeeping nobody charges)."""
    widths = Counter(int(r["width"]) for r in rounds)
    meas_round = sum(r["t1"] - r["t0"] for r in rounds)
    charged = charged_live = loop = 0.0
    for r in rounds:
        ctx = float(np.mean(r["context"])) if r["context"] else prompt_tokens
        cost = round_cost(profile, spec, int(r["width"]), ctx, fast)
        charged += cost.base_s - cost.loop_s         # the round itself; its loop time is charged to the gap after it
        loop += cost.loop_s
        live = round_cost(profile, spec, max(1, int(r["batch"])), ctx, fast)
        charged_live += live.base_s - live.loop_s
    pre = [r for r in rounds if r.get("refill")]
    meas_pre = sum(float(r.get("prefill_s", 0.0)) for r in pre)
    ch_pre = 0.0
    for r in pre:
        t, d = prefill_cost(profile, spec, len(r["refill"]), prompt_tokens)
        ch_pre += t if spec.mode == "ssd" else t + d    # SSD: the verifier's side (the draft's overlaps it)
    gaps = [b["t0"] - a["t1"] - float(b.get("prefill_s", 0.0)) for a, b in zip(rounds, rounds[1:])
            if set(a["seq"]) & set(b["seq"])]
    row_rounds = sum(len(r["accepted"]) for r in rounds)
    return {"rounds": len(rounds), "rounds_by_width": {str(w): n for w, n in sorted(widths.items())},
            "tokens_per_row_round": (sum(a + 1 for r in rounds for a in r["accepted"]) / row_rounds
                                     if row_rounds and spec.mode != "ar" else 1.0),
            "round_measured_over_charged": meas_round / charged if charged > 0 else None,
            "width_over_live_charge": charged / charged_live if charged_live > 0 else None,
            "prefills": len(pre), "prefill_measured_over_charged": meas_pre / ch_pre if ch_pre > 0 else None,
            "prefill_share": meas_pre / (meas_pre + meas_round) if meas_round > 0 else None,
            "gap_share": sum(gaps) / meas_round if meas_round > 0 else None,
            "gap_measured_over_charged": sum(gaps) / (loop * len(gaps) / len(rounds)) if loop > 0 and gaps else None}

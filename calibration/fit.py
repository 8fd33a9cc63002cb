"""calibration.fit: turn microbenchmark grids and executor runs (Measurements) into a Profile with provenance."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np

from calibration.errors import ConfigError
from calibration.fit_acceptance import RunRounds, fit_acceptance, fit_fast_backup, steady_rounds
from calibration.fit_drift import speed_drift
from calibration.fit_executor import fit_executor_costs
from calibration.fit_hits import fit_hits
from calibration.fit_idle import after_idle
from calibration.fit_latency import fit_latency, pool_repeats
from calibration.fit_loop import fit_loop
from calibration.fit_prefill import fit_prefill, with_prefill
from calibration.fit_rows import fit_row_scales
from calibration.fit_ssd_round import draft_round, effective_link_s, round_jitter, verifier_lookup_s
from calibration.measurements import Measurements
from calibration.profile import Profile, placement_of

__all__ = ["fit", "fit_link", "git_commit", "machine_info", "prefer_mode", "run_of", "runs_like"]


def machine_info() -> dict:
    """Which machine this is (host, CPU, cores, OS): recorded in measurements and profiles."""
    return {"host": platform.node(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version()}


def git_commit(repo: str | os.PathLike | None = None) -> str:
    """HEAD commit of the saguaro checkout, or 'unknown' outside git."""
    where = Path(repo) if repo else Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _spec_dict(meta: dict) -> dict:
    for cand in (meta.get("spec"), (meta.get("config") or {}).get("spec") if isinstance(meta.get("config"), dict)
                 else None, meta):
        if isinstance(cand, dict) and "k" in cand:
            return cand
    return {}


def run_of(m: Measurements, where: str = "measurements") -> RunRounds | None:
    """The run in one Measurements (its spec from meta['spec'] or meta), or None when it has no rounds.

    Rounds finished in-process after a draft fault (rows with a 'fallback' key) measure the fallback, not
    the configuration, and are left out."""
    rounds = [r for r in m.rounds if not r.get("fallback")]
    if not rounds:
        return None
    spec = _spec_dict(m.meta)
    if not spec:
        raise ConfigError(f"{where}.meta.spec", "run rounds without the spec they were measured at",
                          "meta['spec'] with k, temperature, sampler_c, mode")
    top_n = m.meta.get("top_n") or spec.get("top_n")
    fan = m.meta.get("fanout") or spec.get("fanout")
    budget = sum(fan) if fan else spec.get("budget")
    return RunRounds(k=int(spec["k"]), temperature=float(spec.get("temperature", 0.0)),
                     budget=int(budget) if budget else None, draft_devices=int(spec.get("draft_devices", 1)),
                     sampler_c=float(spec.get("sampler_c", 1.0)), mode=str(spec.get("mode", "ssd")),
                     backup=str(m.meta.get("backup_resolved") or spec.get("backup", "neural")), rounds=rounds,
                     top_n=int(top_n) if top_n else None, protocol=str(m.meta.get("ssd_protocol") or "reply"),
                     fanout=tuple(fan) if fan else None,
                     fanout_miss=tuple(m.meta["fanout_miss"]) if m.meta.get("fanout_miss") else None,
                     load=bool(m.meta.get("load_mode")), overlap=m.meta.get("transport") != "inline")


def fit_link(rows: list[dict]) -> tuple[float, float, dict]:
    """(one-way latency s, bytes/s, info) from round trips: rt = 2 * (link_s + bytes / bandwidth)."""
    from scipy.optimize import lsq_linear
    b = np.asarray([float(r["bytes"]) for r in rows])
    rt = np.asarray([float(r["round_trip_s"]) for r in rows])
    if len(rows) == 0 or (rt <= 0).any():
        raise ConfigError("link", "need positive round_trip_s rows", "rows {bytes, round_trip_s > 0}")
    if len(np.unique(b)) < 2:
        return float(np.median(rt) / 2), 0.0, {"n": len(rows), "form": "constant"}
    a = np.stack([np.ones_like(b), b], axis=1) / rt[:, None]
    icpt, slope = lsq_linear(a, np.ones_like(rt), bounds=(0.0, np.inf)).x
    pred = icpt + slope * b
    info = {"n": len(rows), "form": "latency+bandwidth", "mape": float(np.mean(np.abs(pred - rt) / rt))}
    return float(icpt / 2), float(2.0 / slope) if slope > 1e-15 else 0.0, info


def beside_of(metas: list[dict], base: Profile | None) -> tuple[float, dict]:
    """Profile.beside_slowdown: the median of the microbenchmarks' beside measurements
    (saguaro_exec/measure/beside.py, meta["beside"]), else the base profile's, else 1 (no interference)."""
    got = [m["beside"] for m in metas if isinstance(m.get("beside"), dict)]
    if got:
        return float(np.median([g["slowdown"] for g in got])), {"from": "microbenchmark", "measured": got}
    if base is not None:
        return base.beside_slowdown, {"from": f"base profile {base.name}"}
    return 1.0, {"from": "default: no beside measurement"}


def _fast_backup_s(runs: list[RunRounds]) -> float | None:
    times = [float(row["backup_s"]) for r in runs if r.backup == "fast" for row in r.rounds
             if row.get("backup_s") and any(row.get("from_backup") or [])]
    return float(np.median(times)) if times else None


def ssd_phases(runs: list[RunRounds]) -> dict:
    """Mean measured phases of steady SSD rounds (s): the verifier's wait, verify and send (msg) and the
    draft's reply; wait + msg is what the effective message time covers when verification binds."""
    rows = [row for r in runs if r.mode == "ssd" for row in steady_rounds(r)]
    keys = ("wait_s", "verify_s", "msg_s", "draft_reply_s", "backup_s")
    return {"n": len(rows), **{f"mean_{k}": float(np.mean([float(row.get(k) or 0.0) for row in rows]))
                               for k in keys if rows}}


def _first(metas: list[dict], key: str) -> object:
    return next((m[key] for m in metas if m.get(key) is not None), None)


def _tradeoff(acc_info: dict, hit_info: dict) -> list[dict]:
    """Acceptance vs hit rate at each (temperature, C) measured: the Saguaro-sampling trade-off."""
    rows = []
    for t, by_c in acc_info.get("by_temperature", {}).items():
        for c, s in by_c.items():
            h = hit_info.get("by_temperature", {}).get(t, {}).get(c, {}).get("primary")
            row = {"temperature": float(t), "sampler_c": float(c), "mean_alpha": s["mean_alpha"], "n": s["n"]}
            if h:
                ph = h["pooled_hit"]
                row.update({f"hit_f{f}": ph[f] for f in (1, 2, 4, 8) if f < len(ph)})
            rows.append(row)
    return sorted(rows, key=lambda r: (r["temperature"], r["sampler_c"]))


def runs_like(runs: list[RunRounds], mode: str | None, temperature: float | None) -> list[RunRounds]:
    """The runs whose executor costs best match (mode, temperature): same mode if any, then the nearest
    temperature among those (None = no preference)."""
    pool = list(runs)
    if mode is not None:
        pool = [r for r in runs if r.mode == mode] or pool
    if temperature is None or not pool:
        return pool
    near = min(abs(r.temperature - temperature) for r in pool)
    return [r for r in pool if abs(r.temperature - temperature) == near]


def same_regime(runs: list[RunRounds], temperature: float) -> list[RunRounds]:
    """The SSD push runs greedy (temperature 0) or sampled (temperature > 0) like `temperature`."""
    return [r for r in runs if r.mode == "ssd" and r.protocol == "push" and (r.temperature > 0) == (temperature > 0)]


def prefer_mode(runs: list[RunRounds], mode: str | None) -> list[RunRounds]:
    """At each temperature, the runs of `mode` if there are any, else all runs at that temperature."""
    if mode is None:
        return list(runs)
    out = []
    for t in sorted({r.temperature for r in runs}):
        at = [r for r in runs if r.temperature == t]
        out += [r for r in at if r.mode == mode] or at
    return out


def fit(*measurements: Measurements, name: str | None = None, base: Profile | None = None,
        executor: bool = True, mode: str | None = None, temperature: float | None = None) -> Profile:
    """Fit a Profile: latency models from grids, link from round trips, acceptance and hits from runs.

    Pass each run as its own Measurements (its meta holds the spec). Parts with no data come from `base`
    when given, else a ConfigError names what is missing. executor=True (default) also calibrates to the
    real runs: Profile.executor (overheads per kind of forward on top of the microbenchmarks, greedy and
    sampled apart, and the SSD draft's own per-round time) and the effective message time of SSD rounds
    (executor=False keeps the bare microbenchmark numbers; the latency models are the microbenchmarks either
    way). Executor costs depend on the mode (on a small machine the draft process competes with the
    target): mode prefers that mode's runs for each kind, temperature picks the SSD runs the draft round and
    message time come from (default: all runs). With mode given, acceptance and
    hits also come from that mode's runs where a temperature has them (SSD's primary speculations follow
    cache hits, so their acceptance differs from SD's). The fast backup's acceptance comes from every SSD
    run with the fast backup (its n-gram proposals do not depend on the mode's costs).
    """
    if not measurements:
        raise ConfigError("measurements", "nothing to fit", "one or more Measurements")
    for i, m in enumerate(measurements):
        if not isinstance(m, Measurements):
            raise ConfigError(f"measurements[{i}]", f"expected Measurements, got {type(m).__name__}", "Measurements")
    metas = [m.meta for m in measurements]
    rows = [r for m in measurements for r in m.latency]
    machines = [m["machine"] for m in metas if m.get("machine")]
    prov: dict = {"source": "measured", "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                  "machine": next((m for m in machines if isinstance(m, dict)), machines[0] if machines else
                                  machine_info()), "device": _first(metas, "device"),
                  "models": {"target": _first(metas, "target"), "draft": _first(metas, "draft")},
                  "git_commit": git_commit(), "fitted_by": "calibration.fit"}
    if placement := placement_of(metas):        # where the runs ran: target_devices, draft_device, tp_size
        prov["placement"] = placement
    models = {}
    for who in ("target", "draft"):
        mine = [r for r in rows if r.get("who") == who]
        if mine:
            models[who], prov[f"{who}_fit"] = fit_latency(pool_repeats(mine), where=f"latency[{who}]")
        elif base is not None:
            models[who] = getattr(base, who)
            prov[f"{who}_fit"] = {"form": "from base profile", "base": base.name}
        else:
            raise ConfigError(f"latency[{who}]", "no latency rows for this model", "a `saguaro profile` grid")
    links = [r for m in measurements for r in m.link]
    link_s, bps = (base.link_s, base.link_bytes_per_s) if base else (0.0, 0.0)
    if links:
        link_s, bps, prov["link_fit"] = fit_link(links)
    runs = [r for i, m in enumerate(measurements) if (r := run_of(m, f"measurements[{i}]")) is not None]
    beside, prov["beside"] = beside_of(metas, base)
    spec_runs = prefer_mode([r for r in runs if r.mode != "ar"], mode)
    if spec_runs:
        acceptance, prov["acceptance_fit"] = fit_acceptance(spec_runs)
        scales, prov["row_scale_fit"] = fit_row_scales(spec_runs, acceptance)
        acceptance = replace(acceptance, row_scale=scales)
        hits, prov["hits_fit"] = fit_hits(spec_runs)
        prov["c_tradeoff"] = _tradeoff(prov["acceptance_fit"], prov["hits_fit"])
    elif base is not None:
        acceptance, hits = base.acceptance, base.hits
        prov["acceptance_fit"] = prov["hits_fit"] = {"form": "from base profile", "base": base.name}
    else:
        raise ConfigError("measurements.rounds", "no SD/SSD run rounds to fit acceptance and hit curves",
                          "Measurements from saguaro_exec.run, or pass base=<Profile>")
    costs, push = None, []
    if executor and runs:
        mine = [r for r in runs if mode is None or r.mode == mode] or runs
        prov["executor_runs"] = {"mode": mode, "temperature": temperature, "n": len(mine),
                                 "used": sorted({f"{r.mode}@T={r.temperature}" for r in mine}),
                                 "kinds_they_lack_from": sorted({f"{r.mode}@T={r.temperature}" for r in runs
                                                                 if r not in mine})}
        costs, prov["executor_fit"] = fit_executor_costs(models["target"], models["draft"], runs, mode, beside)
        ssd_like = runs_like(runs, "ssd", temperature)
        push = [r for r in ssd_like if r.protocol == "push"]
        # the draft's own round is a plane in width and q rows, not in the temperature: every push run of the
        # same regime (T = 0 or T > 0) gives it its lever arm (the T = 1.0 width-4 run too for T = 0.7)
        rnd, prov["draft_round"] = draft_round(push if temperature is None else same_regime(runs, temperature))
        costs = costs.with_draft_round(rnd)
        jit, prov["round_jitter"] = round_jitter(push)
        drift, prov["speed_drift"] = speed_drift(runs)     # the machine's, whatever the mode: every run
        # the slower rounds after idle: only load-mode runs sit idle (a fixed batch's next batch is no idle gap)
        idle, prov["after_idle"] = after_idle([r.rounds for r in mine if r.load])
        costs = costs.with_jitter(jit).with_drift(drift).with_after_idle(idle)
        pre, prov["prefill_fit"] = fit_prefill(models["target"], models["draft"], runs)
        loop, prov["loop_fit"] = fit_loop(runs)
        costs = with_prefill(costs, {**pre, **loop})
        m_eff, prov["link_executor"] = effective_link_s(ssd_like, link_s, costs.draft_round_mean(1))
        prov["link_executor"]["measured"] = ssd_phases(ssd_like)
        if m_eff is not None:
            prov["link_microbench_s"] = link_s
            link_s, bps = m_eff, 0.0
    gap = base.verifier_gap_s if base is not None else 0.0
    if executor and runs:
        gap, prov["verifier_lookup"] = verifier_lookup_s(push)
    fast = _fast_backup_s(runs)
    fast = fast if fast is not None else (base.fast_backup_s if base else 0.0)
    fast_acc, prov["fast_backup_fit"] = fit_fast_backup(runs)
    if fast_acc is None and base is not None:
        fast_acc = base.fast_backup_acceptance
    vocab = _first(metas, "vocab_size") or (base.vocab_size if base else 128256)
    prov["samples"] = {"latency_rows": {w: sum(r.get("who") == w for r in rows) for w in ("target", "draft")},
                       "link_rows": len(links), "runs": len(runs),
                       "rounds": sum(len(r.rounds) for r in runs)}
    if name is None:
        host = prov["machine"].get("host", "machine") if isinstance(prov["machine"], dict) else str(prov["machine"])
        name = f"fit-{host or 'machine'}"
    return Profile(name=name, target=models["target"], draft=models["draft"], link_s=min(link_s, 10.0),
                   acceptance=acceptance, hits=hits, link_bytes_per_s=bps, fast_backup_s=min(fast, 10.0),
                   vocab_size=int(vocab), provenance=prov, fast_backup_acceptance=fast_acc,
                   verifier_gap_s=min(gap, 10.0), executor=costs if costs is not None else
                   (base.executor if base is not None else None), beside_slowdown=beside)

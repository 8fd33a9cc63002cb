"""Figures for a plan: curves computed with the closed forms (cheap) around the chosen configuration.

Shared by `saguaro optimize --out` and the autotune report: every function takes a profile and a spec and
writes PNG + JSON through saguaro_sim.plots.
"""

from __future__ import annotations

from pathlib import Path

from calibration.profile import Profile
from saguaro_sim import plots
from saguaro_sim.analytic import hit_exponent, predict, resolve_fanouts
from saguaro_sim.config import SpecConfig
from saguaro_sim.fanout import geometric_fanout, uniform_fanout
from saguaro_sim.workload import Workload

BATCHES = (1, 2, 4, 8, 16, 32, 64)


def ssd_reference(best: SpecConfig) -> SpecConfig:
    """The SSD configuration the curves vary around: the best one, or a default SSD one at its batch/T."""
    if best.mode == "ssd":
        return best
    return SpecConfig(mode="ssd", k=max(best.k, 4), temperature=best.temperature, batch_size=best.batch_size)


def _speedup(profile: Profile, spec: SpecConfig, workload: Workload) -> float:
    ar = predict(profile, spec.replace(mode="ar", k=0, fanout=None, fanout_miss=None), workload)
    return predict(profile, spec, workload).tokens_per_s_per_seq / ar.tokens_per_s_per_seq


def speedup_vs_k(profile: Profile, best: SpecConfig, workload: Workload, ks: range, path: Path) -> Path:
    """Predicted SD and SSD speedup over AR as K varies (SSD keeps budget per position and backup)."""
    ref = ssd_reference(best)
    per_pos = max(1, ref.budget // (ref.k + 1))
    sd = [_speedup(profile, ref.replace(mode="sd", k=k, fanout=None, fanout_miss=None), workload) for k in ks]
    ssd = [_speedup(profile, ref.replace(k=k, fanout=None, fanout_miss=None, budget=per_pos * (k + 1)), workload)
           for k in ks]
    return plots.plot_speedup_vs_k(list(ks), {"SD": sd, f"SSD ({per_pos} per position, {ref.backup} backup)": ssd},
                                   path, title=f"Predicted speedup vs K ({profile.name}, batch {ref.batch_size})")


def speedup_vs_batch(profile: Profile, best: SpecConfig, workload: Workload, path: Path) -> Path:
    """Predicted per-sequence speedup over AR by batch size: SD, SSD with neural and with fast backup."""
    ref = ssd_reference(best)
    series = {"SD": [_speedup(profile, ref.replace(mode="sd", batch_size=b), workload) for b in BATCHES]}
    for backup in ("neural", "fast"):
        series[f"SSD {backup} backup"] = [_speedup(profile, ref.replace(batch_size=b, backup=backup), workload)
                                          for b in BATCHES]
    return plots.plot_speedup_vs_batch(list(BATCHES), series, path,
                                       title=f"Predicted speedup vs batch size ({profile.name}, K={ref.k})")


def fanout(profile: Profile, best: SpecConfig, path: Path) -> Path:
    """The chosen fan-out schedules next to the geometric (Theorem 12) and uniform ones for its budget."""
    ref = ssd_reference(best)
    primary, after_miss = resolve_fanouts(profile, ref)
    alpha = profile.acceptance.mean_alpha(ref.k, ref.temperature, ref.sampler_c)
    sched = {"chosen": list(primary)}
    if tuple(after_miss) != tuple(primary):
        sched["chosen, after a miss"] = list(after_miss)
    sched["geometric"] = list(geometric_fanout(alpha, hit_exponent(profile, ref.temperature), ref.k, ref.budget))
    sched["uniform"] = list(uniform_fanout(ref.k, ref.budget))
    return plots.plot_fanout(sched, path, title=f"Fan-out per accepted length (K={ref.k}, budget {ref.budget})")


def hit_vs_fanout(profile: Profile, best: SpecConfig, path: Path, max_f: int = 64) -> Path:
    """The profile's hit curve at position 0, primary and backup, at the plan's temperature and C."""
    ref = ssd_reference(best)
    fs = [f for f in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) if f <= max_f]
    series = {}
    for backup in (False, True):
        label = f"{'backup' if backup else 'primary'} speculation, T={ref.temperature}, C={ref.sampler_c}"
        series[label] = [profile.hits.hit(f, 0, ref.temperature, backup, ref.sampler_c) for f in fs]
    return plots.plot_hit_vs_fanout(fs, series, path, title=f"Cache hit rate vs fan-out ({profile.name})")


def pareto(table: list[dict], front: list[dict], path: Path, title: str) -> Path:
    """All confirmed candidates and the frontier, from the optimizer's rows."""
    rows = list(table) + [r for r in front if r not in table]
    front_idx = [rows.index(r) for r in front]
    labels = [f"{r['mode']} k={r['k']} b={r.get('batch_size', 1)}" for r in rows]
    return plots.plot_pareto([r["tokens_per_s_per_seq"] for r in rows], [r["throughput_per_device"] for r in rows],
                             path, frontier=front_idx, labels=labels, title=title)

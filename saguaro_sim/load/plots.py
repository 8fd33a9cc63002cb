"""Figures of a load plan (PNG + JSON of the same numbers, through saguaro_sim.plots.save_figure)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from saguaro_sim.load.planner import LoadPlan
from saguaro_sim.plots import save_figure

COLORS = {"ar": "#7f7f7f", "sd": "#1f77b4", "ssd": "#d62728"}
WIDTHS = {"ar": 5.0, "sd": 2.5, "ssd": 1.5}  # wide to narrow: equal curves stay visible on top of each other
LABELS = {"ar": "AR (no speculation)", "sd": "SD (draft on the target's GPUs)", "ssd": "SSD (draft on its own GPU)"}


def _lines(path: str | os.PathLike, kind: str, plan: LoadPlan, series: dict[str, list], ylabel: str, title: str,
           hline: float | None = None, hline_label: str = "", logy: bool = False, step: bool = False) -> Path:
    fig = Figure(figsize=(7.0, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for mode, ys in series.items():
        pts = [(q, y) for q, y in zip(plan.qps, ys) if y is not None and math.isfinite(y)]
        if pts:
            xs, yv = zip(*pts)
            kw = {"where": "post"} if step else {}
            (ax.step if step else ax.plot)(xs, yv, marker="o", color=COLORS.get(mode), label=LABELS.get(mode, mode),
                                           lw=WIDTHS.get(mode, 1.5), ms=2 * WIDTHS.get(mode, 1.5) + 3, alpha=0.85, **kw)
    if hline is not None:
        ax.axhline(hline, color="black", lw=0.8, ls="--", label=hline_label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(plan.qps)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("offered load (requests / s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    data = {"kind": kind, "title": title, "x_label": "offered load (requests / s)", "y_label": ylabel,
            "x": plan.qps, "series": series}
    if hline is not None:
        data["hline"] = hline
    return save_figure(fig, path, data)


def plot_tpot_vs_load(plan: LoadPlan, path: str | os.PathLike) -> Path:
    """p99 time per output token on ONE replica as load grows, per mode, with the SLO line: where each breaks."""
    modes = list(plan.schedules)
    series = {m: [next(s["tpot_ms"]["p99"] for s in plan.single_replica if s["qps"] == q and s["mode"] == m)
                  for q in plan.qps] for m in modes}
    return _lines(path, "tpot_vs_load", plan, series, "p99 time per output token, one replica (ms)",
                  f"p99 TPOT vs load, one replica ({plan.profile})", hline=plan.slo["tpot_ms"],
                  hline_label=f"SLO {plan.slo['tpot_ms']:g} ms", logy=True)


def plot_gpus_vs_load(plan: LoadPlan, path: str | os.PathLike) -> Path:
    """GPUs of the cheapest deployment meeting the SLOs, per mode."""
    series = {m: [plan.row(q, m)["gpus"] for q in plan.qps] for m in plan.schedules}
    return _lines(path, "gpus_vs_load", plan, series, "GPUs needed (replicas x (target + draft))",
                  f"GPUs needed to meet the SLOs ({plan.profile})", step=True)


def plot_cost_vs_load(plan: LoadPlan, path: str | os.PathLike) -> Path:
    """USD per million output tokens of that deployment, per mode."""
    series = {m: [plan.row(q, m)["usd_per_million_tokens"] for q in plan.qps] for m in plan.schedules}
    return _lines(path, "cost_vs_load", plan, series,
                  f"USD per million output tokens (at ${plan.gpu_hour_usd:g} per GPU-hour)",
                  f"Cost per million tokens meeting the SLOs ({plan.profile})", logy=True)

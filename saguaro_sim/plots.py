"""Plots for plans, simulations and runs: every figure is a PNG plus a JSON of the same numbers beside it.

Functions take plain numbers and lists (not simulator objects) so the simulator, optimizer, executor and
autotune reports share them. Rendering uses matplotlib's Agg canvas directly: no pyplot, no global state.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from calibration.errors import ConfigError
from calibration.jsonio import dump_json

_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]


def _figure(width: float = 7.0, height: float = 4.0) -> tuple[Figure, object]:
    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def save_figure(fig: Figure, path: str | os.PathLike, data: dict) -> Path:
    """Write path (.png added if missing) and the JSON beside it, each atomically; return the PNG path."""
    png = Path(path)
    if png.suffix != ".png":
        png = png.with_name(png.name + ".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(prefix=f".{png.name}.", suffix=".tmp.png", dir=png.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, png)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    dump_json(png.with_suffix(".json"), data)
    return png


def _series(series: Mapping[str, Sequence[float]], n: int, field: str) -> dict[str, list[float]]:
    out = {}
    for label, ys in series.items():
        ys = [float(y) for y in ys]
        if len(ys) != n:
            raise ConfigError(f"{field}[{label!r}]", f"has {len(ys)} values for {n} x values", f"{n} values")
        out[str(label)] = ys
    return out


def _lines(path: str | os.PathLike, kind: str, xs: Sequence[float], series: Mapping[str, Sequence[float]],
           xlabel: str, ylabel: str, title: str, hline: float | None = None, logx: bool = False) -> Path:
    xs = [float(x) for x in xs]
    ys = _series(series, len(xs), "series")
    fig, ax = _figure()
    for i, (label, y) in enumerate(ys.items()):
        ax.plot(xs, y, marker="o", color=_COLORS[i % len(_COLORS)], label=label)
    if hline is not None:
        ax.axhline(hline, color="grey", lw=0.8, ls="--")
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(ys) > 1:
        ax.legend()
    return save_figure(fig, path, {"kind": kind, "title": title, "x_label": xlabel, "y_label": ylabel, "x": xs,
                             "series": ys})


def plot_timeline(events: Sequence[Mapping], path: str | os.PathLike, title: str = "SSD timeline",
                  max_rounds: int = 6, until_s: float | None = None) -> Path:
    """Gantt chart of verifier / speculator / link activity (the paper's Figure 1) from timeline events.

    events: dicts {name, track, start_s, dur_s, args}; tracks top to bottom: verifier, speculators / others,
    link; shows the first `max_rounds` events of the top track (the verifier) unless `until_s` is given.
    """
    for i, e in enumerate(events):
        for key in ("name", "track", "start_s", "dur_s"):
            if key not in e:
                raise ConfigError(f"events[{i}].{key}", "missing", "{name, track, start_s, dur_s, args}")
    evs = sorted((dict(e) for e in events), key=lambda e: float(e["start_s"]))
    if not evs:
        raise ConfigError("events", "no timeline events to plot", "a non-empty list (simulate with trace=True)")
    tracks = sorted(dict.fromkeys(str(e["track"]) for e in evs), key=_track_rank)
    if until_s is None:
        first = [e for e in evs if str(e["track"]) == tracks[0]][:max_rounds]
        until_s = max(float(e["start_s"]) + float(e["dur_s"]) for e in first)
    shown = [e for e in evs if float(e["start_s"]) < until_s]
    t0 = min(float(e["start_s"]) for e in shown)
    names = sorted({str(e["name"]) for e in shown})
    color = {n: _COLORS[i % len(_COLORS)] for i, n in enumerate(names)}
    fig, ax = _figure(9.0, 1.2 + 0.6 * len(tracks))
    for e in shown:
        y = len(tracks) - 1 - tracks.index(str(e["track"]))
        ax.broken_barh([((float(e["start_s"]) - t0) * 1e3, max(float(e["dur_s"]) * 1e3, 1e-6))], (y - 0.35, 0.7),
                       facecolors=color[str(e["name"])], edgecolor="black", linewidth=0.3)
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels(list(reversed(tracks)))
    ax.set_xlabel("time since first event (ms)")
    ax.set_ylabel("device / process")
    ax.set_title(title)
    handles = [Patch(facecolor=color[n], label=n) for n in names]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    data = {"kind": "timeline", "title": title, "x_label": "time since first event (ms)", "tracks": tracks,
            "events": [{"name": str(e["name"]), "track": str(e["track"]), "start_ms": (float(e["start_s"]) - t0) * 1e3,
                        "dur_ms": float(e["dur_s"]) * 1e3, "args": e.get("args", {})} for e in shown]}
    return save_figure(fig, path, data)


def plot_speedup_vs_k(ks: Sequence[int], series: Mapping[str, Sequence[float]], path: str | os.PathLike,
                      title: str = "Speedup over autoregressive vs lookahead K") -> Path:
    """Speedup vs K, one line per mode/config (e.g. {"SD": [...], "SSD": [...]})."""
    return _lines(path, "speedup_vs_k", ks, series, "lookahead K (draft tokens per round)",
                  "speedup over autoregressive (x)", title, hline=1.0)


def plot_speedup_vs_batch(batch_sizes: Sequence[int], series: Mapping[str, Sequence[float]],
                          path: str | os.PathLike, title: str = "Speedup vs batch size per backup") -> Path:
    """Per-sequence speedup vs batch size, one line per backup (e.g. {"neural": [...], "fast": [...]})."""
    return _lines(path, "speedup_vs_batch", batch_sizes, series, "batch size (sequences)",
                  "speedup over autoregressive (x)", title, hline=1.0, logx=True)


def plot_hit_vs_fanout(fanouts: Sequence[int], series: Mapping[str, Sequence[float]], path: str | os.PathLike,
                       title: str = "Cache hit rate vs fan-out") -> Path:
    """P(bonus token cached) vs fan-out F, one line per temperature / position / source."""
    return _lines(path, "hit_vs_fanout", fanouts, series, "fan-out F (cached candidates)", "hit rate (fraction)",
                  title)


def plot_fanout(fanouts: Mapping[str, Sequence[int]], path: str | os.PathLike,
                title: str = "Fan-out per acceptance length") -> Path:
    """Grouped bars of F_0..F_K per schedule (e.g. {"geometric": [...], "uniform": [...]})."""
    sched = {str(k): [int(f) for f in v] for k, v in fanouts.items()}
    if not sched:
        raise ConfigError("fanouts", "nothing to plot", "a mapping label -> F_0..F_K")
    n = max(len(v) for v in sched.values())
    fig, ax = _figure()
    width = 0.8 / len(sched)
    for i, (label, fs) in enumerate(sched.items()):
        xs = [k + (i - (len(sched) - 1) / 2) * width for k in range(len(fs))]
        ax.bar(xs, fs, width=width, color=_COLORS[i % len(_COLORS)], label=f"{label} (budget {sum(fs)})")
    ax.set_xticks(range(n))
    ax.set_xlabel("accepted length k (position)")
    ax.set_ylabel("fan-out F_k (cached candidates)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path, {"kind": "fanout", "title": title, "x_label": "accepted length k",
                             "y_label": "fan-out F_k", "schedules": sched})


def plot_pareto(per_seq_tok_s: Sequence[float], throughput_per_device: Sequence[float], path: str | os.PathLike,
                frontier: Sequence[int] | None = None, labels: Sequence[str] | None = None,
                title: str = "Latency vs throughput (Pareto frontier)") -> Path:
    """Candidates as points (per-sequence tokens/s vs tokens/s per device); frontier indices as a line."""
    xs = [float(x) for x in throughput_per_device]
    ys = [float(y) for y in per_seq_tok_s]
    if len(xs) != len(ys):
        raise ConfigError("throughput_per_device", f"{len(xs)} values for {len(ys)} latency values",
                          "equal lengths")
    labels = [str(s) for s in labels] if labels is not None else [""] * len(xs)
    front = sorted(frontier if frontier is not None else _frontier(xs, ys), key=lambda i: xs[i])
    fig, ax = _figure()
    ax.scatter(xs, ys, s=14, color=_COLORS[0], alpha=0.5, label="candidates")
    ax.plot([xs[i] for i in front], [ys[i] for i in front], marker="o", color=_COLORS[3], label="Pareto frontier")
    for i in front:
        if labels[i]:
            ax.annotate(labels[i], (xs[i], ys[i]), fontsize="x-small", xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("throughput per device (tokens/s/device)")
    ax.set_ylabel("per-sequence speed (tokens/s)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path, {"kind": "pareto", "title": title, "x_label": "tokens/s/device",
                             "y_label": "per-sequence tokens/s", "throughput_per_device": xs,
                             "per_seq_tok_s": ys, "labels": labels, "frontier": front})


def _track_rank(track: str) -> int:
    return 0 if track.startswith("verifier") else 2 if track.startswith("link") else 1


def _frontier(xs: list[float], ys: list[float]) -> list[int]:
    """Indices not dominated in both coordinates (higher is better in both); sweep from the right."""
    best, out = float("-inf"), []
    for i in sorted(range(len(xs)), key=lambda i: (-xs[i], -ys[i])):
        if ys[i] > best:
            out.append(i)
            best = ys[i]
    return out

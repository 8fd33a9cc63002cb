"""Autotune report: report.md (predicted vs measured tables, recommended TOML), PNG plots and autotune.json."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from calibration.errors import ConfigError
from calibration.jsonio import dump_json, load_json, write_atomic
from saguaro_sim.plots import save_figure

METRICS = (("tokens_per_s", "tokens/s"), ("hit_rate", "hit rate"), ("tokens_per_round", "tokens/round"))
_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94"]
REPORT_JSON = "autotune.json"


def rel_error(pred: float | None, meas: float | None) -> float | None:
    """(pred - meas) / meas, None when either is missing or meas is 0."""
    if pred is None or meas is None or meas == 0:
        return None
    return (float(pred) - float(meas)) / float(meas)


def _f(v: object, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_f(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(doc: Mapping) -> str:
    """report.md text from the autotune document (see saguaro.pipeline for its keys)."""
    out = [f"# {doc.get('title', 'saguaro autotune report')}", ""]
    out.append(f"Models: target `{doc['models'].get('target')}`, draft `{doc['models'].get('draft')}`; "
               f"device {doc.get('device')}; created {doc.get('created')}; quick={doc.get('quick')}.")
    w = doc.get("workload", {})
    out.append(f"Workload per run: {w.get('num_sequences')} prompts x {w.get('output_tokens')} new tokens "
               f"(mean prompt {w.get('prompt_tokens')} tokens), batch {doc.get('batch_size')}, "
               f"temperature {doc.get('temperature')}.")
    out += ["", "## Predicted vs measured", ""]
    rows = []
    for c in doc["configs"]:
        p, p2, m = c.get("predicted", {}), c.get("predicted_refit", {}), c.get("measured", {})
        for key, label in METRICS:
            if m.get(key) is None and p.get(key) is None:
                continue
            rows.append([c["name"], label, p.get(key), m.get(key), _pct(rel_error(p.get(key), m.get(key))),
                         p2.get(key), _pct(rel_error(p2.get(key), m.get(key)))])
    out.append(_md_table(["config", "metric", "predicted (fit)", "measured", "error", "predicted (refit)",
                          "error (refit)"], rows))
    err = doc.get("errors", {})
    for which in ("fit", "refit"):
        e = err.get(which)
        if e:
            out.append(f"\ntokens/s error with the {which} profile: median |error| {_pct(e['median_abs'])}, "
                       f"worst {_pct(e['max_abs'])} over {e['n']} configs.")
    out += ["", "## Configurations", ""]
    out.append(_md_table(["config", "mode", "K", "fan-out", "C", "backup", "batch"],
                         [[c["name"], c["spec"]["mode"], c["spec"]["k"], ",".join(map(str, c.get("fanout") or []))
                           or "-", c["spec"]["sampler_c"], c["spec"]["backup"], c["spec"]["batch_size"]]
                          for c in doc["configs"]]))
    out += ["", "## Recommended configuration", "",
            f"Recommended (the best simulated {doc.get('objective', 'latency')} objective): "
            f"{doc.get('recommended_name', '')}; best measured here: {doc.get('measured_best', '-')}."
            + (" A runner-up SSD config simulated within 1% of the best ran beside it; the faster measured of "
               f"the two is the SSD choice: {doc['ssd_choice']}." if "SSD (runner-up)" in
               [c["name"] for c in doc["configs"]] else ""), "",
            "```toml", doc["recommended_toml"].rstrip(), "```"]
    speed = doc.get("speedups", {})
    if speed:
        n = doc.get("repeats", 1)
        out.append("\nMeasured speedup of the SSD config: " +
                   ", ".join(f"{_f(v, 2)}x vs {k.upper()}" for k, v in speed.items()) +
                   (f" (ratios of medians over {n} interleaved runs each)." if n > 1 else " (one run each)."))
    prof = doc.get("profile", {})
    if prof:
        out += ["", "## Fitted profile", ""]
        out.append(_md_table(["part", "fit", "n", "CV error"], [[r[0], str(r[1]), r[2],
                                                                  "-" if r[3] is None else f"{100 * r[3]:.1f}%"]
                                                                 for r in prof.get("rows", [])]))
    opt = doc.get("optimizer", {})
    if opt.get("top"):
        out += ["", f"## Optimizer (simulated; {opt.get('searched')} candidates searched)", ""]
        out.append(_md_table(["rank", "mode", "K", "budget", "shape", "C", "backup", "sim tok/s/seq", "p_hit"],
                             [[r.get("rank"), r.get("mode"), r.get("k"), r.get("budget"), r.get("shape"),
                               r.get("sampler_c"), r.get("backup"), r.get("tokens_per_s_per_seq"),
                               r.get("pred_p_hit")] for r in opt["top"]]))
    st = doc.get("stages_s", {})
    if st:
        out += ["", "## Time spent", "", ", ".join(f"{k} {v:.1f}s" for k, v in st.items()) + "."]
    out += ["", "## Files", "", "autotune.json (every number), recommended.toml, profile.json (fit), "
            "profile_refit.json, measurements/*.json, pred_vs_meas.png, timelines.png, hit_vs_fanout.png "
            "(each PNG has a JSON of its numbers beside it); profile_sd.json / profile_ar.json (and refits) carry the "
            "executor costs of those modes.", ""]
    return "\n".join(out)


def profile_rows(profile) -> list[list]:
    """One row per fitted part of a Profile: [part, form/summary, samples, CV error]."""
    prov = profile.provenance
    rows = []
    for who in ("target", "draft"):
        f = prov.get(f"{who}_fit", {})
        form = f.get("form")
        if f.get("tile"):
            form = f"{form}, +tail off multiples of {f['tile']} rows"
        rows.append([f"{who} latency", form, f.get("n"), f.get("cv_mape")])
    if prov.get("link_executor", {}).get("n"):
        micro = prov.get("link_microbench_s")
        rows.append(["link (SSD rounds)", f"{profile.link_s * 1e6:.1f} us one way effective"
                     + (f"; microbenchmark {micro * 1e6:.1f} us" if micro is not None else ""),
                     prov["link_executor"]["n"], None])
    elif "link_fit" in prov:
        rows.append(["link", f"{profile.link_s * 1e6:.1f} us one way", prov["link_fit"]["n"],
                     prov["link_fit"].get("mape")])
    if prov.get("beside", {}).get("from") == "microbenchmark":
        got = prov["beside"]["measured"]
        rows.append(["draft beside the target", f"x{profile.beside_slowdown:.3f} each while both compute "
                     "(verification and cache build; the median of the measurements)",
                     sum(g.get("cycles", 0) for g in got), None])
    fits = prov.get("executor_fit", {})
    if fits.get("preempted_rounds_left_out"):
        rows.append(["preempted rounds", "left out of the executor fit (the verifier lost its core)",
                     fits["preempted_rounds_left_out"], None])
    for key, o in sorted(fits.items()):   # per kind of forward, greedy / sampled
        if isinstance(o, dict) and o.get("line"):
            base, slope, per_row, per_pos = (list(o["line"]) + [0.0, 0.0])[:4]
            rows.append([f"executor {key}", f"{base * 1e3:+.3f} ms {slope * 1e6:+.3f} us per token"
                         f" {per_row * 1e6:+.3f} us per row {per_pos * 1e6:+.3f} us per position", o["n"], None])
    d = prov.get("draft_round", {})
    if d.get("n"):
        rows.append(["SSD draft round", f"median {d['median_s'] * 1e3:.3f} ms, stalls {d['stall_s'] * 1e3:.2f} ms in "
                     f"{100 * d['stall_frac']:.0f}% of rounds", d["n"], None])
    for t in profile.acceptance.by_temperature:
        rates = ", ".join(f"{a:.2f}" for a in profile.acceptance.by_temperature[t])
        rows.append([f"acceptance T={t}", f"per position {rates}", None, None])
    for t, by_src in profile.hits.by_temperature.items():
        for src, spec in by_src.items():
            rows.append([f"hits T={t} {src}", f"miss = {spec['c']:.3f} F^-{spec['r']:.3f}", None, None])
    return rows


def trim_events(events: Sequence[Mapping], max_rounds: int = 8) -> list[dict]:
    """The events of the first `max_rounds` verifier rounds (start_s, dur_s kept) for the report's timelines."""
    evs = sorted((dict(e) for e in events), key=lambda e: float(e["start_s"]))
    ver = [e for e in evs if e["track"] == "verifier" and e["name"] == "verify"][:max_rounds]
    if not ver:
        return []
    until = float(ver[-1]["start_s"]) + float(ver[-1]["dur_s"])
    return [{k: e.get(k) for k in ("name", "track", "start_s", "dur_s")} for e in evs
            if float(e["start_s"]) < until and e["name"] != "prefill"]


def plot_pred_vs_meas(points: Sequence[Mapping], path: str | os.PathLike,
                      title: str = "Predicted vs measured tokens/s") -> Path:
    """Scatter of predicted vs measured tokens/s (points: {name, predicted, measured, kind}), y = x and +-10%."""
    pts = [p for p in points if p.get("predicted") is not None and p.get("measured") is not None]
    if not pts:
        raise ConfigError("points", "no (predicted, measured) pairs to plot", "dicts with predicted and measured")
    fig = Figure(figsize=(5.5, 5.0), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    lo = min(min(p["predicted"], p["measured"]) for p in pts) * 0.8
    hi = max(max(p["predicted"], p["measured"]) for p in pts) * 1.2
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15, label="+-10%")
    kinds = list(dict.fromkeys(p.get("kind", "fit") for p in pts))
    for i, kind in enumerate(kinds):
        mine = [p for p in pts if p.get("kind", "fit") == kind]
        ax.scatter([p["measured"] for p in mine], [p["predicted"] for p in mine], color=_COLORS[i], label=kind,
                   zorder=3)
        for p in mine:
            ax.annotate(p["name"], (p["measured"], p["predicted"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured tokens/s")
    ax.set_ylabel("predicted tokens/s")
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return save_figure(fig, Path(path), {"kind": "pred_vs_meas", "title": title, "points": [dict(p) for p in pts]})


def _first_rounds(events: Sequence[Mapping], max_rounds: int) -> list[dict]:
    evs = trim_events(events, max_rounds)
    if not evs:
        return []
    t0 = min(float(e["start_s"]) for e in evs)
    return [{**e, "start_ms": (float(e["start_s"]) - t0) * 1e3, "dur_ms": float(e["dur_s"]) * 1e3} for e in evs]


def plot_timelines(panels: Mapping[str, Sequence[Mapping]], path: str | os.PathLike, max_rounds: int = 6,
                   title: str = "First rounds: simulated vs real") -> Path:
    """Gantt charts of simulated and real rounds stacked on one time axis (events in the simulator's format)."""
    shown = {label: _first_rounds(evs, max_rounds) for label, evs in panels.items()}
    shown = {k: v for k, v in shown.items() if v}
    if not shown:
        raise ConfigError("events", "no timeline events to plot", "simulate(trace=True) / RunReport.events")
    names = sorted({e["name"] for evs in shown.values() for e in evs})
    color = {n: _COLORS[i % len(_COLORS)] for i, n in enumerate(names)}
    fig = Figure(figsize=(9.0, 1.6 + 1.4 * len(shown)), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (label, evs) in zip(axes, shown.items()):
        tracks = sorted({e["track"] for e in evs}, key=lambda t: (t != "verifier", t))
        for e in evs:
            y = len(tracks) - 1 - tracks.index(e["track"])
            ax.broken_barh([(e["start_ms"], max(e["dur_ms"], 1e-4))], (y - 0.35, 0.7), facecolors=color[e["name"]],
                           edgecolor="black", linewidth=0.3)
        ax.set_yticks(range(len(tracks)))
        ax.set_yticklabels(list(reversed(tracks)))
        ax.set_title(label, fontsize="small")
    axes[-1].set_xlabel("time since the first round (ms)")
    fig.suptitle(title)
    fig.legend(handles=[Patch(facecolor=color[n], label=n) for n in names], loc="upper right", fontsize="small")
    data = {"kind": "timelines", "title": title,
            "panels": {k: [{key: e.get(key) for key in ("name", "track", "start_ms", "dur_ms")} for e in v]
                       for k, v in shown.items()}}
    return save_figure(fig, Path(path), data)


def write_report(doc: Mapping, out_dir: str | os.PathLike, timelines: Mapping[str, Sequence[Mapping]] | None = None,
                 ) -> list[Path]:
    """Write autotune.json, report.md and the plots into out_dir (each file atomically); returns the paths."""
    from saguaro_sim.plots import plot_hit_vs_fanout

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_json(out / REPORT_JSON, dict(doc))
    write_atomic(out / "recommended.toml", doc["recommended_toml"])
    write_atomic(out / "report.md", render_markdown(doc))
    paths = [out / REPORT_JSON, out / "recommended.toml", out / "report.md"]
    points = [{"name": c["name"], "predicted": c.get(f"predicted{suf}", {}).get("tokens_per_s"),
               "measured": c.get("measured", {}).get("tokens_per_s"), "kind": kind}
              for kind, suf in (("fit", ""), ("refit", "_refit")) for c in doc["configs"]]
    paths.append(plot_pred_vs_meas(points, out / "pred_vs_meas.png"))
    hc = doc.get("hit_curve")
    if hc and hc.get("fanouts"):
        paths.append(plot_hit_vs_fanout(hc["fanouts"], hc["series"], out / "hit_vs_fanout.png",
                                        title="Cache hit rate vs fan-out: measured vs fitted"))
    timelines = timelines or doc.get("timelines")
    if timelines and any(timelines.values()):
        paths.append(plot_timelines(timelines, out / "timelines.png"))
    return paths


def load_report(path: str | os.PathLike) -> dict:
    """The autotune document from a report folder (or its autotune.json)."""
    p = Path(path)
    if p.is_dir():
        p = p / REPORT_JSON
    return load_json(p, "autotune report")

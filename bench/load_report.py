"""What bench_load.py shows of a result: the tables it prints (predicted vs measured per mode and load, the noise
floor and targets met, the phases, the crossover) and the figure of p99 TPOT against load (PNG beside the JSON)."""

from __future__ import annotations

import math
from pathlib import Path

from bench.load_compare import SIGN_ALPHA, TARGETS


def plot(path: Path, rows: list[dict], modes: list[str]) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from saguaro_sim.load.plots import COLORS

    fig = Figure(figsize=(7.0, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for m in modes:
        mine = sorted((r for r in rows if r["mode"] == m), key=lambda r: r["qps"])
        for side, style in (("predicted", "--"), ("measured", "-")):
            pts = [(r["qps"], r["tpot_p99_s"][side] * 1e3) for r in mine
                   if r["tpot_p99_s"][side] is not None and math.isfinite(r["tpot_p99_s"][side])]
            if pts:
                ax.plot(*zip(*pts), style, marker="o" if side == "measured" else None, color=COLORS.get(m),
                        label=f"{m.upper()} {side}")
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("p99 time per output token (ms)")
    ax.set_title("Tiny pair under load: simulator (dashed) vs executor (solid)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return path


def _pct(x: float | None) -> str:
    return "   -  " if x is None else f"{100 * x:+6.1f}%"


def _share(x: float | None) -> str:
    """An unsigned share (a spread, an error beyond noise) as a percentage."""
    return "   -  " if x is None else f"{100 * x:6.1f}%"


def _count(c: dict | None) -> str:
    return "-" if c is None else f"{c['met']}/{c['of']}"


def _print_noise(r: dict) -> None:
    """Per (mode, load): the repeats' spread, the error beyond their range, the speed drift and the drift-adjusted
    errors; then the targets met, plainly and beyond noise."""
    keys = ("tpot_p50_s", "tpot_p99_s", "throughput")
    print("noise (spread: (max - min) / median of the repeats; beyond: the prediction's distance to the repeats' "
          f"range / median; drift ({r['drift']['method']}): {r['drift']['what']}; adj: prediction re-simulated "
          "at that speed; rspd: the cell's rounds measured / charged, median over repeats):")
    print(f"{'mode':4} {'load':10} | {'spread p50 p99 tok/s':>24} | {'beyond p50 p99 tok/s':>24} | {'drift':>5} | "
          f"{'adj err p50 p99 tok/s':>24} | {'adj beyond p50 p99 tok/s':>24} | {'rspd':>4} | "
          f"{'round-adj err p50 p99 tok/s':>27}")
    for row in r["rows"]:
        adj = [row[k].get("drift_adjusted") or {} for k in keys]
        radj = [row[k].get("round_adjusted") or {} for k in keys]
        speed = row.get("round_speed")
        print(f"{row['mode']:4} {row['level']:10} | " + " ".join(_share(row[k]["spread"]) for k in keys) + " | " +
              " ".join(_share(row[k]["beyond_noise"]) for k in keys) + " | " +
              ("  -  " if row["drift"] is None else f"{row['drift']:5.2f}") + " | " +
              " ".join(_pct(a.get("rel_error")) for a in adj) + " | " +
              " ".join(_share(a.get("beyond_noise")) for a in adj) + " | " +
              (" -  " if speed is None else f"{speed:4.2f}") + " | " +
              " ".join(_pct(a.get("rel_error")) for a in radj))
    nf, t = r["noise_floor"], r["targets_met"]
    print("noise floor (median / worst spread): " + ", ".join(
        f"{k} {_share(nf[k]['median_spread']).strip()} / {_share(nf[k]['max_spread']).strip()}" for k in keys))
    print(f"targets met (p50 TPOT {TARGETS['tpot_p50_s']:.0%}, p99 TPOT {TARGETS['tpot_p99_s']:.0%}, throughput "
          f"{TARGETS['throughput']:.0%}): plainly {_count(t.get('plain'))}, beyond noise "
          f"{_count(t.get('plain_beyond_noise'))}; drift-adjusted {_count(t.get('drift_adjusted'))}, beyond noise "
          f"{_count(t.get('drift_adjusted_beyond_noise'))}; at the rounds' own speed (rspd: a diagnostic of the "
          f"load model, not a prediction) {_count(t.get('round_adjusted'))}")
    if "hour_drift" in t:
        _print_hour(r)


def _print_hour(r: dict) -> None:
    """The prediction with the drift series of the benchmark's own fixed-batch runs (this hour's) in place of the
    profile's (the calibration hour's): its errors per cell and the targets it meets."""
    keys, t, h = ("tpot_p50_s", "tpot_p99_s", "throughput"), r["targets_met"], r.get("hour_drift") or {}
    print(f"with this hour's drift series ({h.get('n', 0)} values of {h.get('n_runs', 0)} fixed-batch runs before the "
          f"measurement, p1/p50/p99 " + "/".join(f"{v:.2f}" for v in h.get("p1_p50_p99", [])) + "): err p50 p99 tok/s")
    for row in r["rows"]:
        cells = [row[k].get("hour_drift") or {} for k in keys]
        print(f"  {row['mode']:4} {row['level']:10} " + " ".join(_pct(c.get("rel_error")) for c in cells))
    print(f"targets met with this hour's drift series: {_count(t.get('hour_drift'))}, beyond noise "
          f"{_count(t.get('hour_drift_beyond_noise'))}")


def print_result(r: dict) -> None:
    """The result as the tables bench_load prints: predicted vs measured, noise and targets, phases, crossover."""
    print("capacity (simulated, req/s): " + ", ".join(f"{m} {c:.2f}" for m, c in r["capacity_qps"].items()))
    print("levels (req/s): " + ", ".join(f"{k} {v:.2f}" for k, v in r["levels_qps"].items()))
    print(f"{'mode':4} {'load':10} {'qps':>6} | {'p50 TPOT ms pred/meas':>22} {'err':>7} | "
          f"{'p99 TPOT ms pred/meas':>22} {'err':>7} | {'tok/s pred/meas':>16} {'err':>7}")
    for row in r["rows"]:
        cells = []
        for m, scale in (("tpot_p50_s", 1e3), ("tpot_p99_s", 1e3), ("throughput", 1.0)):
            c = row[m]
            p, q = (f"{v * scale:.2f}" if v is not None else "-" for v in (c["predicted"], c["measured"]))
            cells.append(f"{p + ' / ' + q:>{22 if m != 'throughput' else 16}} {_pct(c['rel_error'])}")
        print(f"{row['mode']:4} {row['level']:10} {row['qps']:6.2f} | " + " | ".join(cells))
    _print_noise(r)
    print("phases (first repeat; measured / charged on the simulator's cost model at the executor's widths; fixed: "
          "the fixed-batch run's rounds so; gap: the time between rounds / its loop charge):")
    print(f"{'mode':4} {'load':10} | {'rounds pred/meas':>16} | {'rows charged pred / forwarded meas':>36} | "
          f"{'tok/row-round':>13} | {'round':>5} {'fixed':>5} {'prefill':>7} {'gaps':>5} {'gap':>5}")
    for row in r["rows"]:
        p, m, f = row["phases"]["predicted"], row["phases"]["measured"], row["phases"]["fixed_batch"] or {}
        wp = ",".join(f"{w}:{n}" for w, n in p["rounds_by_width"].items())
        wm = ",".join(f"{w}:{n}" for w, n in m["rounds_by_width"].items())
        ratio = lambda x: "  -  " if x is None else f"{x:5.2f}"  # noqa: E731
        print(f"{row['mode']:4} {row['level']:10} | {p['rounds']:>7} / {m['rounds']:<6} | {wp + ' / ' + wm:>36} | "
              f"{p['tokens_per_row_round']:5.2f} / {m['tokens_per_row_round']:<5.2f} | "
              f"{ratio(m['round_measured_over_charged'])} {ratio(f.get('round_measured_over_charged'))} "
              f"{ratio(m['prefill_measured_over_charged']):>7} {ratio(m['gap_share']):>5} "
              f"{ratio(m.get('gap_measured_over_charged'))}")
    c = r["crossover"]
    if c:
        fmt = lambda q: "none in range" if q is None else f"{q:.2f} req/s"  # noqa: E731
        print(f"SD vs SSD (p99 TPOT): crossover predicted {fmt(c['predicted_qps'])}, measured "
              f"{fmt(c['measured_qps'])}; winners per level agree {c['levels_agreeing']} (same side: {c['same_side']})")
        sig = [f"{m['level']} {m['paired']['b_lower']}/{m['paired']['n']} (p {m['paired']['p']:.3f})"
               for m in c["measured"] if m.get("paired")]
        if sig:
            print(f"  measured winners, paired repeats (SSD lower / pairs, sign test): {', '.join(sig)}; where p < "
                  f"{SIGN_ALPHA} the prediction agrees {c.get('significant_levels_agreeing', '-')}")
    print(f"load average {r['load_average_start'][0]:.2f} -> {r['load_average_end'][0]:.2f}, steal "
          f"{_pct(r['steal_share'])}, {r['wall_s']:.0f} s")

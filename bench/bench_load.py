"""Fidelity under load on the shipped tiny pair: AR, SD and SSD served a Poisson request stream at three
load levels (light, near the knee, overloaded), measured by ``saguaro_exec.run`` in load mode against the
prediction of ``saguaro_sim.load.simulate_load`` for the same request stream (the same arrival times, prompt
and output lengths, written once as a JSONL trace that both read) and the same resolved spec (fan-outs and
backup pinned by ``saguaro_sim.resolve`` with the profile; the executor resolves with that profile too).

The levels come from the simulator's capacity of each mode (saturated throughput / output tokens, all
requests at t = 0): light = 0.3 x the smallest, knee = 1.0 x the median, overloaded = 1.5 x the largest
(``--fractions``). Per (mode, load): predicted vs measured p50 TPOT, p99 TPOT and throughput with relative
errors (issue 16's targets: 10 %, 20 %, 10 %), the median of ``--repeats`` runs interleaved (every config
once per pass, A B C A B C) with their spread and range as the cell's noise floor, the error beyond it (0 when the
prediction lies inside the repeats' range, else its distance to the nearest repeat / the median) and the targets
met plainly and beyond noise; the SD-vs-SSD crossover (on p99 TPOT) predicted and measured. The machine's speed
drift (``--drift``): by default a short fixed-batch run of the same mode and spec right before and right after
every load run ("beside"), its rounds measured / charged by the same cost model; the cell's drift is the median
of its repeats' (mean of before and after), and the prediction is also given re-simulated at it, beside the plain
one, with its errors and targets. That is still a prediction: it reads calibration runs taken beside the load run,
never the load run itself. ``--drift probe`` is the older probe (``speed_probe``: target and draft forwards of 4
tokens, timed before and after every run and around this run's calibration steps; drift = median probe of the
cell's repeats / of the calibration steps'), which on hosts whose speed swings read the box faster while its
rounds ran slower (2026-12-02: 6 of 27 cells within the targets after it, against 20 of 27 plain).
Rounds after an idle gap (``--after-idle fit``, the default): one light-load run per mode on a trace of its own
seed, before the measurement, fits the extra share of the rounds that follow an idle gap (calibration/fit_idle.py,
``profile.executor.after_idle``), which the prediction then charges.
Both sides mean the same thing: the simulator charges SSD rounds at every row the executor forwards
(``--ssd-width prefix``: its SSD keeps rows in place and forwards those up to the last live one), every output token comes from a decode round
(the prefill caches the prompt but its last token) and TPOT = (finish - first token) / (tokens - 1) on both; the
acceptance and hit curves are fitted on the benchmark's own requests (``--acceptance workload``, one fixed-batch
run per mode: bench/load_phases.py says why), every cost term is the profile's but the prefill's (``--prefill
timed``: fitted on the benchmark's prompts timed at 1..batch rows on the executor's prefill path) and, for a
profile without it, the executor's between-round loop line (from the same fixed-batch run). Per (mode, load) the JSON also
lays the first repeat out phase by phase against what the simulator charges (``phases``; bench/load_phases.py).
Load average and CPU steal (/proc/stat) are recorded at the start and the end. ``--out F.json`` also writes
F.png (p99 TPOT vs load: predicted dashed, measured solid, per mode) and the traces under F-traces/.

    .venv/bin/python bench/bench_load.py --out OUT/bench_load.json          # ~5 min on a quiet 2-core box
    .venv/bin/python bench/bench_load.py --requests 6 --tokens 8 --repeats 1 --out /tmp/x.json   # smoke
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fidelity_stats import speed_drift  # noqa: E402
from bench.load_compare import (  # noqa: E402
    LEVELS,
    TARGETS,
    compare_row,
    crossover,
    load_levels,
    noise_floors,
    summarize,
    target_counts,
)
from bench.load_phases import run_phases, sim_phases, timed_prefills, with_timed_prefills, workload_run  # noqa: E402
from bench.machine_speed import cpu_times, speed_probe, steal_share  # noqa: E402
from calibration.errors import ConfigError  # noqa: E402
from calibration.fit_idle import after_idle  # noqa: E402
from calibration.jsonio import dump_json  # noqa: E402
from calibration.overheads import ExecutorCosts  # noqa: E402
from calibration.profile import Profile, load_preset  # noqa: E402
from saguaro.pipeline import pin  # noqa: E402
from saguaro_sim import SpecConfig, Workload  # noqa: E402
from saguaro_sim.load import RequestStream, load_trace, poisson_stream, simulate_load, write_trace  # noqa: E402

MODES = ("ar", "sd", "ssd")


def _profile(name: str) -> Profile:
    return Profile.from_json(name) if name.endswith(".json") else load_preset(name)


def _prompt_ids() -> list[list[int]]:
    """The built-in prompts as the tiny target's token ids (a trace line's prompt_tokens picks one exactly)."""
    from saguaro_exec.io.assets import tiny_pair_paths
    from saguaro_exec.io.prompts import BUILTIN_PROMPTS
    from saguaro_exec.io.tokenizer import load_tokenizer

    tok = load_tokenizer(tiny_pair_paths()[0])
    return [tok.encode(p) for p in BUILTIN_PROMPTS]


def _specs(profile: Profile, modes: list[str], k: int, batch: int, tokens: int, prompt: int) -> dict[str, SpecConfig]:
    w = Workload(num_sequences=batch, output_tokens=tokens, prompt_tokens=prompt)
    return {m: pin(SpecConfig(mode=m, k=k, batch_size=batch), profile, w) for m in modes}


def _stream(qps: float, n: int, lens: list[int], tokens: int, seed: int) -> RequestStream:
    """n Poisson arrivals at qps (inf: all at t = 0); request i has prompt i of the built-in set (cycled) and ``tokens`` outputs."""
    arr = np.zeros(n) if math.isinf(qps) else poisson_stream(qps, n, 1, tokens, seed).arrival_s
    return RequestStream(arr, np.array([lens[i % len(lens)] for i in range(n)]), np.full(n, tokens))


SIM_SEEDS = 16   # simulations per cell (seeds seed..seed+15), summarised by their median like the measured repeats


def _predict(profile: Profile, spec: SpecConfig, stream: RequestStream, args, f: float = 1.0) -> dict:
    """The simulator's p50 / p99 TPOT and throughput for this stream on a machine ``f`` x slower than the
    profile's costs (every cost x f is the same simulation with the arrivals / f, its times x f: exact, the
    simulator has no other clock), each the median over SIM_SEEDS seeds (phases: the first seed's). One seed's
    p99 of 24 requests is close to their maximum, so where a request meets a slow stretch of the drift series
    decided it (2026-12-02: one seed put AR's light-load p99 at 3.0 ms, the median of 16 seeds at 1.1 ms)."""
    scaled = RequestStream(stream.arrival_s / f, stream.prompt_tokens, stream.output_tokens)
    runs = [simulate_load(profile, spec, scaled, max_batch=args.batch, seed=args.seed + i, ssd_width=args.ssd_width)
            for i in range(SIM_SEEDS)]
    return {"tpot_p50_s": f * float(np.median([r.tpot_s["p50"] for r in runs])),
            "tpot_p99_s": f * float(np.median([r.tpot_s["p99"] for r in runs])),
            "throughput": float(np.median([r.throughput for r in runs])) / f, "phases": sim_phases(runs[0]),
            "seeds": SIM_SEEDS}


def _tokens_per_round(profile: Profile, spec: SpecConfig) -> float:
    """The simulator's mean tokens a row-round (primary speculations) under ``profile``."""
    if spec.mode == "ar":
        return 1.0
    from saguaro_sim.analytic import accept_pmfs

    pmf = accept_pmfs(profile, spec, spec.backup == "fast")[0]
    return float(np.arange(1, len(pmf) + 1) @ pmf)


def _drift_adjusted(profile: Profile, spec: SpecConfig, stream: RequestStream, f: float | None, args) -> dict | None:
    """The prediction on a machine ``f`` x slower than the profile's costs (``_predict`` at f)."""
    if f is None:
        return None
    got = _predict(profile, spec, stream, args, f)
    return {k: got[k] for k in ("tpot_p50_s", "tpot_p99_s", "throughput")}


DRIFT_WHAT = {
    "beside": "a fixed-batch run of the same mode before and after every load run: rounds measured / charged",
    "probe": "bench.machine_speed.speed_probe: target and draft forwards of 4 tokens, median of 15 each; before and "
             "after every run, against the calibration steps' (reference_s)"}


def _cell_drift(samples: list[float | None], reference: list[float], method: str) -> float | None:
    """A cell's speed drift: the median of its repeats' beside-runs (measured / charged), or for the probe the
    median probe of its repeats over the calibration steps' (``speed_drift``)."""
    if method == "probe":
        return speed_drift(samples, reference)
    got = [x for x in samples if x is not None and math.isfinite(x) and x > 0]
    return float(np.median(got)) if got else None


def _round_speed(samples: list[dict]) -> float | None:
    """The median over a cell's repeats of its rounds' measured / charged time: the speed the machine ran these
    rounds at against the profile. Re-simulating at it is no prediction (it reads the measured rounds); it tells the
    load model (arrivals, batching, refills, prefills, queueing) apart from the host's speed, which on a host whose
    CPU speed swings (2026-12-02: +-17% at 0.5-s windows) the speed probe around each run does not catch."""
    got = [s["phases"].get("round_measured_over_charged") for s in samples]
    got = [x for x in got if x is not None and math.isfinite(x) and x > 0]
    return float(np.median(got)) if got else None


IDLE_SEED = 7919   # the after-idle calibration run's trace seed offset (its arrivals are not any level's)
IDLE_LONGER = 2    # its requests are this many times the benchmark's output tokens (SD: ~20 rounds each)
IDLE_MIN_REQUESTS = 48   # ~30 idle gaps at the light level (3 runs of 96 gave 136-160)


def _with_after_idle(profile: Profile, spec: SpecConfig, ids: list[list[int]], trace: Path, args
                     ) -> tuple[Profile, dict]:
    """``profile`` with the extra round shares after an idle gap (``executor.after_idle``) fitted on one load-mode
    run of ``spec`` over ``trace`` (calibration/fit_idle.py), and the fit's info."""
    import dataclasses

    from saguaro_exec import RunConfig, run

    rep = run(RunConfig(spec=spec, prompts=ids, max_new_tokens=args.tokens * IDLE_LONGER,
                        arrivals={"trace": str(trace)}, profile=profile, ssd_protocol=args.protocol,
                        threads=args.threads, seed=args.seed))
    excess, info = after_idle([rep.measurements.rounds])
    ex = profile.executor if profile.executor is not None else ExecutorCosts()
    return dataclasses.replace(profile, executor=ex.with_after_idle(excess)), {"after_idle": excess, **info}


def _beside(spec: SpecConfig, profile: Profile, ids: list[list[int]], args) -> float | None:
    """The machine's speed now for this mode against ``profile``: a fixed-batch run of ``spec`` (2 x batch of the
    benchmark's prompts, refilled as rows finish; ~0.1-0.3 s), its rounds measured / charged by the load
    simulator's cost model (``run_phases``), the number the round-speed diagnostic reads off a load run."""
    from saguaro_exec import RunConfig, run

    rep = run(RunConfig(spec=spec, prompts=ids[: 2 * args.batch], max_new_tokens=args.tokens, profile=profile,
                        ssd_protocol=args.protocol, threads=args.threads, seed=args.seed))
    return run_phases(rep.measurements.rounds, profile, spec, float(np.mean([len(p) for p in ids])),
                      spec.backup == "fast")["round_measured_over_charged"]


def _measure(spec: SpecConfig, profile: Profile, ids: list[list[int]], trace: Path, tokens: int, args,
             probe) -> dict:
    """One real load-mode run; its metrics, whether every request made the stream's output tokens, its
    phases against the simulator's charges, and the drift measurement around it (``probe(spec, profile)``:
    the mean of before and after)."""
    from saguaro_exec import RunConfig, run

    before = probe(spec, profile)
    rep = run(RunConfig(spec=spec, prompts=ids, max_new_tokens=tokens, arrivals={"trace": str(trace)},
                        profile=profile, ssd_protocol=args.protocol, threads=args.threads, seed=args.seed))
    after = probe(spec, profile)
    tr = load_trace(trace)
    return {"tpot_p50_s": rep.tpot_s["p50"], "tpot_p99_s": rep.tpot_s["p99"], "throughput": rep.throughput,
            "ttft_p99_s": rep.ttft_s["p99"],
            "drift_sample": None if before is None or after is None else (before + after) / 2,
            "full_outputs": all(len(t) == o for t, o in zip(rep.token_ids, tr.output_tokens)), "wall_s": rep.wall_s,
            "phases": run_phases(rep.measurements.rounds, profile, spec, float(np.mean(tr.prompt_tokens)),
                                 spec.backup == "fast")}


def _plot(path: Path, rows: list[dict], modes: list[str]) -> Path:
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


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--profile", default="cpu-tinypair", help="preset name or profile JSON (default cpu-tinypair)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma list of ar, sd, ssd")
    ap.add_argument("--k", type=int, default=3, help="speculation length of SD and SSD")
    ap.add_argument("--batch", type=int, default=4, help="rows (max batch) of every mode")
    ap.add_argument("--requests", type=int, default=96,
                    help="requests per load level (96: an overloaded run lasts ~1 s; runs of 24, 0.2 s, spread 20-30%%)")
    ap.add_argument("--tokens", type=int, default=32, help="output tokens per request")
    ap.add_argument("--fractions", default="0.3,1.0,1.5", help="light, knee, overloaded (see the module note)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--protocol", default="reply", choices=("reply", "push", "auto"),
                    help="SSD messages (the load simulator composes SSD rounds as the reply protocol)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--acceptance", default="workload", choices=("workload", "profile"),
                    help="acceptance / hit curves: fitted on this benchmark's requests (default) or the profile's")
    ap.add_argument("--prefill", default="timed", choices=("timed", "profile"),
                    help="prefill cost: lines fitted on this benchmark's prompts timed at 1..batch rows (default), or "
                         "the profile's (with --acceptance workload, its run's refills where it has none)")
    ap.add_argument("--ssd-width", default="prefix", choices=("prefix", "batch", "live"),
                    help="rows the simulator charges an SSD round: up to the last live one, as the executor "
                         "forwards (default)")
    ap.add_argument("--after-idle", default="fit", choices=("fit", "none"),
                    help="the slower rounds after an idle gap: fitted on one light-load run per mode before the "
                         "measurement (default), or left out")
    ap.add_argument("--drift", default="beside", choices=("beside", "probe"),
                    help="how the drift-adjusted prediction measures the machine's speed: a fixed-batch run of the "
                         "same mode beside every load run (default), or the bare-forward speed probe")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="JSON result (the PNG goes beside it)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in MODES]
    if bad or not args.modes:
        ap.error(f"--modes: {bad or 'empty'} not in {', '.join(MODES)}")
    for name, lo in (("k", 1), ("batch", 1), ("requests", 2), ("tokens", 2), ("repeats", 1), ("threads", 1)):
        if getattr(args, name) < lo:
            ap.error(f"--{name}: {getattr(args, name)} is below {lo}")
    try:
        args.fractions = [float(x) for x in args.fractions.split(",")]
    except ValueError:
        ap.error(f"--fractions: {args.fractions!r} is not three numbers")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from tqdm import tqdm

    try:
        from saguaro_exec.io.assets import tiny_pair_paths

        profile = _profile(args.profile)
        load0, cpu0, t0 = os.getloadavg(), cpu_times(), time.perf_counter()
        ids = _prompt_ids()
        reference: list[float] = []     # probe: the machine's speed at each calibration step (prefills, fixed runs)
        if args.drift == "probe":
            bare = speed_probe(*map(str, tiny_pair_paths()), args.threads)
            bare()                      # warm-up: a cold first call would read as a slow machine
            probe = lambda spec, prof: bare()  # noqa: E731
            mark = lambda: reference.append(bare())  # noqa: E731
        else:
            probe = lambda spec, prof: _beside(spec, prof, ids, args)  # noqa: E731
            mark = lambda: None  # noqa: E731
        mark()
        lens = [len(p) for p in ids]
        specs = _specs(profile, args.modes, args.k, args.batch, args.tokens, round(float(np.mean(lens))))
        prefills = timed_prefills(ids, args.batch, args.threads) if args.prefill == "timed" else None
        mark()
        fixed = {}
        for m, s in specs.items():
            fixed[m] = workload_run(profile, s, ids, args.tokens, prefills, ssd_protocol=args.protocol,
                                    threads=args.threads, seed=args.seed) if args.acceptance == "workload" \
                else (profile, None)
            mark()
        profiles = {m: p if rows is not None or prefills is None else with_timed_prefills(p, prefills, m)
                    for m, (p, rows) in fixed.items()}
        # the fixed-batch run's rounds charged as the load runs' are (SSD's not: its draft ran in this process)
        fixed_phases = {m: None if rows is None or m == "ssd" else
                        run_phases(rows, profiles[m], specs[m], float(np.mean(lens)), specs[m].backup == "fast")
                        for m, (_, rows) in fixed.items()}
        capacity = {m: simulate_load(profiles[m], s, _stream(math.inf, args.requests, lens, args.tokens, args.seed),
                                     max_batch=args.batch, seed=args.seed, ssd_width=args.ssd_width).throughput
                    / args.tokens for m, s in specs.items()}
        levels = load_levels(capacity, args.fractions)
        idle_fits = {}
        if args.after_idle == "fit":   # a light-load run of every mode on its own trace (another seed): the cold rounds
            # requests IDLE_LONGER x as long (at 1 / IDLE_LONGER the rate: the same load), so that SD and SSD
            # requests, ~3 tokens a round, reach the steady rounds the fit reads the excess against
            n_cal = max(IDLE_MIN_REQUESTS, args.requests // IDLE_LONGER)
            cal = write_trace(_stream(levels["light"] / IDLE_LONGER, n_cal, lens, args.tokens * IDLE_LONGER,
                                      args.seed + IDLE_SEED),
                              Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_load-idle-{os.getpid()}.jsonl")
            try:
                for m in args.modes:
                    profiles[m], idle_fits[m] = _with_after_idle(profiles[m], specs[m], ids, cal, args)
            finally:
                cal.unlink(missing_ok=True)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tdir = args.out.with_name(args.out.stem + "-traces") if args.out else Path(os.environ.get("TMPDIR", "/tmp")) / \
        f"bench_load-{os.getpid()}"
    tdir.mkdir(parents=True, exist_ok=True)
    traces = {lvl: write_trace(_stream(q, args.requests, lens, args.tokens, args.seed + i), tdir / f"{lvl}.jsonl")
              for i, (lvl, q) in enumerate(levels.items())}
    predicted = {(m, lvl): _predict(profiles[m], specs[m], load_trace(traces[lvl]), args)
                 for m in args.modes for lvl in LEVELS}
    for (m, _lvl), pred in predicted.items():
        pred["phases"]["tokens_per_row_round"] = _tokens_per_round(profiles[m], specs[m])
    configs = [(m, lvl) for lvl in LEVELS for m in args.modes]
    order = [c for _ in range(args.repeats) for c in configs]          # interleaved passes: A B C A B C
    samples: dict = {c: [] for c in configs}
    with tqdm(total=len(order), desc="load runs", disable=args.no_progress) as bar:
        for m, lvl in order:
            bar.set_postfix_str(f"{m} {lvl}")
            samples[(m, lvl)].append(_measure(specs[m], profiles[m], ids, traces[lvl], args.tokens, args, probe))
            bar.update()
    rows = []
    for m, lvl in configs:
        med, spread = summarize(samples[(m, lvl)])
        f = _cell_drift([s["drift_sample"] for s in samples[(m, lvl)]], reference, args.drift)
        adjusted = _drift_adjusted(profiles[m], specs[m], load_trace(traces[lvl]), f, args)
        g = _round_speed(samples[(m, lvl)])
        by_rounds = _drift_adjusted(profiles[m], specs[m], load_trace(traces[lvl]), g, args)
        row = compare_row(m, lvl, levels[lvl], predicted[(m, lvl)], med, spread, samples[(m, lvl)], adjusted, f,
                          by_rounds, g)
        row["repeats"] = samples[(m, lvl)]
        row["phases"] = {"predicted": predicted[(m, lvl)]["phases"], "measured": samples[(m, lvl)][0]["phases"],
                         "fixed_batch": fixed_phases[m]}
        rows.append(row)
    cross = crossover(rows) if {"sd", "ssd"} <= set(args.modes) else None
    result = {"profile": profile.name, "modes": args.modes, "specs": {m: s.to_dict() for m, s in specs.items()},
              "ssd_protocol": args.protocol, "acceptance": args.acceptance, "ssd_width": args.ssd_width,
              "prefill": args.prefill, "prefill_timings": prefills,
              "workload_acceptance": {m: p.acceptance.to_dict() for m, p in profiles.items() if p is not profile},
              "workload_executor_lines": {m: p.executor.lines for m, p in profiles.items()
                                          if p is not profile and p.executor is not None},
              "after_idle": idle_fits,
              "batch": args.batch, "requests": args.requests, "tokens": args.tokens,
              "capacity_qps": capacity, "levels_qps": levels, "fractions": args.fractions, "targets": TARGETS,
              "repeats": args.repeats, "order": [list(c) for c in order], "rows": rows, "crossover": cross,
              "noise_floor": noise_floors(rows), "targets_met": target_counts(rows),
              "drift": {"method": args.drift, "reference_s": reference, "what": DRIFT_WHAT[args.drift]},
              "load_average_start": load0, "load_average_end": os.getloadavg(), "cpu_start": cpu0,
              "cpu_end": (cpu1 := cpu_times()), "steal_share": steal_share(cpu0, cpu1),
              "wall_s": time.perf_counter() - t0, "traces": {k: str(v) for k, v in traces.items()}}
    _print(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        result["figure"] = str(_plot(args.out.with_suffix(".png"), rows, args.modes))
        dump_json(args.out, result)
        print(f"wrote {args.out} and {result['figure']}")
    return 0


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


def _print(r: dict) -> None:
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
    print(f"load average {r['load_average_start'][0]:.2f} -> {r['load_average_end'][0]:.2f}, steal "
          f"{_pct(r['steal_share'])}, {r['wall_s']:.0f} s")


if __name__ == "__main__":
    raise SystemExit(main())

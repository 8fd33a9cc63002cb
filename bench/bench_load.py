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
never the load run itself. A third prediction replaces the profile's speed-drift series (the calibration hour's,
which sets the predicted p99) by the series of the fixed-batch runs made right before the measurement
(``hour_drift``: one fixed-batch run per mode of all the benchmark's requests, after the other calibration steps; the
same profile otherwise). ``--drift probe`` is the older probe (``speed_probe``: target and draft forwards of 4
tokens, timed before and after every run and around this run's calibration steps; drift = median probe of the
cell's repeats / of the calibration steps'), which on hosts whose speed swings read the box faster while its
rounds ran slower (2026-12-02: 6 of 27 cells within the targets after it, against 20 of 27 plain).
Rounds after an idle gap (``--after-idle fit``, the default): one light-load run per mode on a trace of its own
seed, before the measurement, fits the extra share of the rounds that follow an idle gap (calibration/fit_idle.py,
``profile.executor.after_idle``), which the prediction then charges. Those calibration runs live in
bench/load_calibrate.py, the printed tables and the figure in bench/load_report.py.
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

from bench.load_calibrate import (  # noqa: E402
    DRIFT_WHAT,
    IDLE_LONGER,
    IDLE_MIN_REQUESTS,
    IDLE_SEED,
    beside_speed,
    cell_drift,
    fit_after_idle,
    hour_drift,
    hour_drift_runs,
    run_once,
    with_drift_series,
)
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
from bench.load_report import plot, print_result  # noqa: E402
from bench.machine_speed import cpu_times, speed_probe, steal_share  # noqa: E402
from calibration.errors import ConfigError  # noqa: E402
from calibration.jsonio import dump_json  # noqa: E402
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


def _round_speed(samples: list[dict]) -> float | None:
    """The median over a cell's repeats of its rounds' measured / charged time: the speed the machine ran these
    rounds at against the profile. Re-simulating at it is no prediction (it reads the measured rounds); it tells the
    load model (arrivals, batching, refills, prefills, queueing) apart from the host's speed, which on a host whose
    CPU speed swings (2026-12-02: +-17% at 0.5-s windows) the speed probe around each run does not catch."""
    got = [s["phases"].get("round_measured_over_charged") for s in samples]
    got = [x for x in got if x is not None and math.isfinite(x) and x > 0]
    return float(np.median(got)) if got else None


def _measure(spec: SpecConfig, profile: Profile, ids: list[list[int]], trace: Path, tokens: int, args,
             probe) -> dict:
    """One real load-mode run; its metrics, whether every request made the stream's output tokens, its
    phases against the simulator's charges, and the drift measurement around it (``probe(spec, profile)``:
    the mean of before and after)."""
    before = probe(spec, profile)
    rep = run_once(spec, profile, ids, tokens, args, trace)
    after = probe(spec, profile)
    tr = load_trace(trace)
    return {"tpot_p50_s": rep.tpot_s["p50"], "tpot_p99_s": rep.tpot_s["p99"], "throughput": rep.throughput,
            "ttft_p99_s": rep.ttft_s["p99"],
            "drift_sample": None if before is None or after is None else (before + after) / 2,
            "full_outputs": all(len(t) == o for t, o in zip(rep.token_ids, tr.output_tokens)), "wall_s": rep.wall_s,
            "phases": run_phases(rep.measurements.rounds, profile, spec, float(np.mean(tr.prompt_tokens)),
                                 spec.backup == "fast")}


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
    ap.add_argument("--ssd-width", default="live", choices=("live", "prefix", "batch"),
                    help="rows the simulator charges an SSD round: the live ones, as the executor forwards since it "
                         "moves live rows over finished ones (default); prefix: up to the last live one (before)")
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
            probe = lambda spec, prof: beside_speed(spec, prof, ids, args)  # noqa: E731
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
            cal = _stream(levels["light"] / IDLE_LONGER, max(IDLE_MIN_REQUESTS, args.requests // IDLE_LONGER), lens,
                          args.tokens * IDLE_LONGER, args.seed + IDLE_SEED)
            profiles, idle_fits = fit_after_idle(profiles, specs, ids, cal, args)
        series, series_info = hour_drift(hour_drift_runs(specs, profiles, ids, args))   # this hour's drift
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
    hour = with_drift_series(profiles, series) if series else None      # the same prediction, this hour's drift
    predicted_hour = {} if hour is None else {(m, lvl): _predict(hour[m], specs[m], load_trace(traces[lvl]), args)
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
        f = cell_drift([s["drift_sample"] for s in samples[(m, lvl)]], reference, args.drift)
        adjusted = _drift_adjusted(profiles[m], specs[m], load_trace(traces[lvl]), f, args)
        g = _round_speed(samples[(m, lvl)])
        by_rounds = _drift_adjusted(profiles[m], specs[m], load_trace(traces[lvl]), g, args)
        row = compare_row(m, lvl, levels[lvl], predicted[(m, lvl)], med, spread, samples[(m, lvl)], adjusted, f,
                          by_rounds, g, predicted_hour.get((m, lvl)))
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
              "predict_profiles": {m: p.to_dict() for m, p in profiles.items()},   # to re-predict the cells later
              "batch": args.batch, "requests": args.requests, "tokens": args.tokens,
              "capacity_qps": capacity, "levels_qps": levels, "fractions": args.fractions, "targets": TARGETS,
              "repeats": args.repeats, "order": [list(c) for c in order], "rows": rows, "crossover": cross,
              "noise_floor": noise_floors(rows), "targets_met": target_counts(rows),
              "drift": {"method": args.drift, "reference_s": reference, "what": DRIFT_WHAT[args.drift]},
              "hour_drift": {**series_info, "what": "the speed-drift series of one fixed-batch run per mode of all the "
                             "benchmark's requests, right before the measurement, in place of the profile's: the "
                             "hour_drift prediction"},
              "load_average_start": load0, "load_average_end": os.getloadavg(), "cpu_start": cpu0,
              "cpu_end": (cpu1 := cpu_times()), "steal_share": steal_share(cpu0, cpu1),
              "wall_s": time.perf_counter() - t0, "traces": {k: str(v) for k, v in traces.items()}}
    print_result(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        result["figure"] = str(plot(args.out.with_suffix(".png"), rows, args.modes))
        dump_json(args.out, result)
        print(f"wrote {args.out} and {result['figure']}")
    return 0




if __name__ == "__main__":
    raise SystemExit(main())

"""Simulator fidelity on the tiny pair: fit on a few calibration runs, then predict configurations the fit
did not see and measure them for real. Reports median / worst |predicted - measured| / measured tokens/s,
the Spearman rank correlation, and the optimizer's choice against the best measured configuration.

    .venv/bin/python bench/bench_fidelity.py [--tokens 64] [--save DIR] [--out fidelity.json]
    .venv/bin/python bench/bench_fidelity.py --replay --save DIR    # refit and compare saved runs only
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration.fit import fit  # noqa: E402
from calibration.jsonio import dump_json  # noqa: E402
from calibration.measurements import Measurements  # noqa: E402
from saguaro.pipeline import by_mode, fit_modes, measured, pin, predicted, spec_of_row  # noqa: E402
from saguaro_sim import SpecConfig, Workload  # noqa: E402

S = SpecConfig
CALIBRATION = [  # what the fit sees: acceptance/hits at both temperatures, C < 1, fast backup, SD and AR steps.
    # the largest SSD K is 6, the largest K tested: the hit table's row at 6 holds all-accepted outcomes
    S(mode="ssd", k=6, budget=24, temperature=0.0),
    S(mode="ssd", k=6, budget=24, temperature=0.7),
    S(mode="ssd", k=2, budget=6, temperature=0.0),  # a small tree too: executor costs at a second width
    S(mode="ssd", k=2, budget=6, temperature=0.7),
    S(mode="ssd", k=6, budget=24, temperature=0.7, sampler_c=0.5),
    S(mode="ssd", k=6, budget=24, temperature=0.7, backup="fast", batch_size=2),
    S(mode="sd", k=4, temperature=0.0),
    S(mode="ar", k=0, batch_size=2),
]
TESTS = [  # configurations the fit did not see
    ("ssd k2 geo T0 b1", S(mode="ssd", k=2, budget=12, temperature=0.0)),
    ("ssd k6 geo T0 b1", S(mode="ssd", k=6, budget=28, temperature=0.0)),
    ("ssd k3 uni T0 b1", S(mode="ssd", k=3, budget=16, fanout_shape="uniform", temperature=0.0)),
    ("ssd k5 geo T0.7 b1", S(mode="ssd", k=5, budget=24, temperature=0.7)),
    ("ssd k3 uni T0.7 b1", S(mode="ssd", k=3, budget=8, fanout_shape="uniform", temperature=0.7)),
    ("ssd k4 C0.7 T0.7 b1", S(mode="ssd", k=4, budget=16, temperature=0.7, sampler_c=0.7)),
    ("ssd k4 fast T0 b1", S(mode="ssd", k=4, budget=16, temperature=0.0, backup="fast")),
    ("ssd k3 neural T0 b2", S(mode="ssd", k=3, budget=16, temperature=0.0, batch_size=2)),
    ("ssd k3 fast T0.7 b4", S(mode="ssd", k=3, budget=16, temperature=0.7, backup="fast", batch_size=4)),
    ("ssd k4 neural T0.7 b4", S(mode="ssd", k=4, budget=20, temperature=0.7, batch_size=4)),
    ("sd k2 T0.7 b1", S(mode="sd", k=2, temperature=0.7)),
    ("sd k6 T0 b1", S(mode="sd", k=6, temperature=0.0)),
    ("sd k3 T0 b4", S(mode="sd", k=3, temperature=0.0, batch_size=4)),
    ("ar T0 b1", S(mode="ar", k=0, temperature=0.0)),
    ("ar T0.7 b4", S(mode="ar", k=0, temperature=0.7, batch_size=4)),
]


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman rank correlation (no ties expected in timings)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _slug(name: str) -> str:
    return name.replace(" ", "_").replace(".", "")


def collect(args: argparse.Namespace, save: Path) -> None:
    """Run everything for real and save every Measurements file under `save` (replayable offline)."""
    from saguaro_exec import RunConfig, run
    from saguaro_exec.microbench import profile_pair
    from saguaro_exec.models import tiny_pair_paths
    from saguaro_sim.optimize import optimize
    from saguaro_sim.search import Constraints

    target, draft = map(str, tiny_pair_paths())
    prompts, workload = _workload(args)

    def real(spec: SpecConfig, name: str) -> None:
        rep = run(RunConfig(spec=spec, target=target, draft=draft, prompts=prompts, max_new_tokens=args.tokens,
                            threads=args.threads, seed=0))
        rep.measurements.to_json(save / f"{name}.json")
        print(f"{name:34s} {measured(rep)['tokens_per_s']:8.1f} tok/s", flush=True)

    load0, t0 = os.getloadavg(), time.perf_counter()
    ctxs = (workload.prompt_tokens, workload.prompt_tokens + args.tokens // 2, workload.prompt_tokens + args.tokens)
    grid = profile_pair(target, draft, contexts=ctxs, threads=args.threads, repeats=7, link=False)
    grid.to_json(save / "grid.json")
    specs = []
    for i in range(args.passes):
        # every pass re-runs the calibration configs and alternates the test order, so drifting load on a
        # shared machine hits the calibration and the test runs alike
        for j, spec in enumerate(CALIBRATION):
            real(spec, f"calib_{j}_p{i}")
        if not specs:  # pin fan-outs / backups once, from the first calibration pass
            profile = fit(grid, *_load(save, "calib_*"), name="fidelity-calibration")
            specs = [(name, pin(spec, profile, workload)) for name, spec in TESTS]
        for name, spec in (specs if i % 2 == 0 else specs[::-1]):
            real(spec, f"test_{_slug(name)}_p{i}")
    profile = fit(grid, *_load(save, "calib_*"), name="fidelity-calibration")
    profiles = fit_modes(grid, _load(save, "calib_*"), "fidelity", 0.0)  # as autotune does: per-mode costs
    predictor, simulator = by_mode(profiles)
    plan = optimize(profiles["ssd"], workload, batch_size=1, temperature=0.0, predictor=predictor,
                    simulator=simulator, constraints=Constraints(k_range=(1, 6), max_budget=64))
    real(pin(spec_of_row(plan.table[0]), profiles["ssd"], workload), "optimizer_choice")
    dump_json(save / "collect.json", {"load_average_start": load0, "load_average_end": os.getloadavg(),
                                      "collect_s": time.perf_counter() - t0, "cpus": os.cpu_count(),
                                      "tokens": args.tokens, "prompts": len(prompts), "threads": args.threads})


def _workload(args: argparse.Namespace) -> tuple[list[str], Workload]:
    from saguaro_exec.prompts import BUILTIN_PROMPTS

    prompts = list(BUILTIN_PROMPTS)[:args.prompts]
    mean_prompt = float(np.mean([len(p.encode()) for p in prompts]))
    return prompts, Workload(num_sequences=len(prompts), output_tokens=args.tokens, prompt_tokens=round(mean_prompt))


def _load(save: Path, pattern: str) -> list[Measurements]:
    return [Measurements.from_json(p) for p in sorted(save.glob(f"{pattern}.json"))]


def evaluate(args: argparse.Namespace, save: Path) -> dict:
    """Fit on the saved calibration runs, predict every saved test config, compare; print and return.

    The calibration runs of all passes are pooled (--paired: each pass's tests are predicted from that pass's
    calibration runs only); predictions and measurements are averaged over passes.
    """
    _, workload = _workload(args)
    grid = Measurements.from_json(save / "grid.json")
    n_pass = len(list(save.glob("calib_0_p*.json"))) or 1
    calib_sets = [_load(save, f"calib_*_p{i}") for i in range(n_pass)]
    if not args.paired:
        calib_sets = [[m for c in calib_sets for m in c]] * n_pass
    cache: dict[tuple, object] = {}

    def profile_for(spec: SpecConfig, i: int):
        key = (i, None, None) if args.single or args.bare else (i, spec.mode, spec.temperature)
        if key not in cache:
            cache[key] = fit(grid, *calib_sets[i], name="fidelity-calibration", executor=not args.bare,
                             mode=key[1], temperature=key[2])
        return cache[key]

    rows = []
    for name, _ in TESTS:
        runs = [Measurements.from_json(save / f"test_{_slug(name)}_p{i}.json") for i in range(n_pass)]
        spec = SpecConfig.from_dict(runs[0].meta["spec"])
        preds = [predicted(profile_for(spec, i), spec, workload, seed=0)[0] for i in range(n_pass)]
        ms = [measured(m) for m in runs]
        avg = lambda ds: {k: float(np.mean([d[k] for d in ds])) if ds[0][k] is not None else None  # noqa: E731
                          for k in ds[0]}
        pred, meas = avg(preds), avg(ms)
        rates = [m["tokens_per_s"] for m in ms]
        spread = (max(rates) - min(rates)) / meas["tokens_per_s"]
        err = (pred["tokens_per_s"] - meas["tokens_per_s"]) / meas["tokens_per_s"]
        rows.append({"name": name, "spec": spec.to_dict(), "predicted": pred, "measured": meas, "rel_error": err,
                     "passes": rates, "predicted_passes": [p["tokens_per_s"] for p in preds],
                     "run_to_run_spread": spread})
        hp = "-" if pred["hit_rate"] is None else f"{pred['hit_rate']:.2f}"
        hm = "-" if meas["hit_rate"] is None else f"{meas['hit_rate']:.2f}"
        print(f"{name:24s} pred {pred['tokens_per_s']:7.1f} meas {meas['tokens_per_s']:7.1f} err {100 * err:+6.1f}%"
              f" spread {100 * spread:4.1f}% tok/rnd {pred['tokens_per_round']:.2f}/{meas['tokens_per_round']:.2f}"
              f" hit {hp}/{hm}")
    errs = np.abs([r["rel_error"] for r in rows])
    rho = spearman([r["predicted"]["tokens_per_s"] for r in rows], [r["measured"]["tokens_per_s"] for r in rows])
    choice = Measurements.from_json(save / "optimizer_choice.json")
    choice_meas = measured(choice)["tokens_per_s"]
    same = [r for r in rows if r["spec"]["batch_size"] == 1 and r["spec"]["temperature"] == 0.0]
    top = max(same, key=lambda r: r["measured"]["tokens_per_s"])
    summary = {"configs": len(rows), "median_abs_rel_error": float(np.median(errs)),
               "max_abs_rel_error": float(errs.max()), "worst": rows[int(errs.argmax())]["name"],
               "spearman": rho, "optimizer_choice": choice.meta["spec"], "optimizer_choice_measured": choice_meas,
               "best_measured_b1_t0": top["name"], "best_measured_b1_t0_tokens_per_s": top["measured"]["tokens_per_s"],
               "optimizer_gap": choice_meas / max(choice_meas, top["measured"]["tokens_per_s"]) - 1,
               "median_run_to_run_spread": float(np.median([r["run_to_run_spread"] for r in rows])),
               "executor_calibration": "none" if args.bare else "all runs" if args.single else "per mode and T",
               "calibration_pairing": "per pass" if args.paired else "pooled",
               **json.loads((save / "collect.json").read_text())}
    print(json.dumps(summary, indent=1))
    return {"summary": summary, "rows": rows, "profiles": {str(k): p.to_dict() for k, p in cache.items()}}


def main(argv: list[str] | None = None) -> int:
    """Collect (unless --replay) into a folder of Measurements, then evaluate; optionally save the numbers."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per prompt (default 64)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per run (default 8, the built-in set)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    ap.add_argument("--passes", type=int, default=2, help="measurements per test config, averaged (default 2)")
    ap.add_argument("--save", default="fidelity-runs", help="folder for the runs' Measurements (default fidelity-runs)")
    ap.add_argument("--replay", action="store_true", help="evaluate the runs saved in --save without running")
    ap.add_argument("--bare", action="store_true", help="fit without executor calibration (microbenchmarks only)")
    ap.add_argument("--paired", action="store_true",
                    help="predict each pass from that pass's calibration runs (default: all passes' runs pooled)")
    ap.add_argument("--single", action="store_true",
                    help="one profile for every config (default: executor costs calibrated per mode and temperature)")
    ap.add_argument("--out", help="write every number as JSON here")
    args = ap.parse_args(argv)
    save = Path(args.save)
    if not args.replay:
        save.mkdir(parents=True, exist_ok=True)
        collect(args, save)
    result = evaluate(args, save)
    if args.out:
        dump_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

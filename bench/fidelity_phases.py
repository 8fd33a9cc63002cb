"""Per-phase breakdown of the fidelity benchmark's misses: for every saved test config, the measured mean seconds
per steady round of each phase next to what the simulator charges for that very round (its width and context),
the charge split into the microbenchmark part and the executor-overhead part.

Phases: AR step (the target forward + sampling); SD draft (K draft steps + the draft's catch-up) and verify;
SSD verifier side (verify, wait, outcome send) and draft side (glue, fork, tree, the draft's own per-round time,
backup). SSD's charged wait is the verifier's lookup of a pushed cache (verifier_gap_s); the rest of the measured
wait is the draft binding the round, which the simulated round (not a phase) holds. Refill prefills run between rounds (outside t0..t1, not in the decode rate) and are listed per
admitted row; "other" is the round's time no phase accounts for. The SSD round itself is the simulated one
(sim time / rounds) because it overlaps both sides.

    .venv/bin/python bench/fidelity_phases.py --save bench/cpu_results/2026-12-01-session3/fidelity-runs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calibration.fit import run_of  # noqa: E402
from calibration.fit_acceptance import RunRounds, steady_rounds  # noqa: E402
from calibration.fit_executor import forward_widths, tree_width  # noqa: E402
from calibration.fit_ssd_round import _own_from_stamps  # noqa: E402
from calibration.measurements import Measurements  # noqa: E402
from calibration.overheads import LOOP_KINDS  # noqa: E402
from calibration.profile import Profile  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402
from saguaro_sim.costs import RoundCosts  # noqa: E402
from saguaro_sim.resolve import resolve  # noqa: E402


def _g(row: dict, key: str) -> float:
    return float(row.get(key) or 0.0)


def _charges(c: RoundCosts, run: RunRounds, row: dict, width: int) -> dict[str, tuple[float, float]]:
    """{phase: (microbenchmark s, executor overhead s)} the simulator charges for this round (a forward never
    below 0 s, as saguaro_sim.costs clamps it: the overhead is cut to -micro there)."""
    raw = _raw_charges(c, run, row, width)
    out = {ph: (mi, max(ov, -mi)) for ph, (mi, ov) in raw.items()}
    s = c.profile.beside_slowdown
    if run.mode == "ssd" and run.overlap and s > 1.0:     # verification and build slowed where they overlap
        build = [ph for ph in ("glue", "fork", "tree") if ph in out]
        v, t = sum(out["verify"]), sum(sum(out[ph]) for ph in build)
        extra = (s - 1.0) * min(v, t)
        out["verify"] = (out["verify"][0], out["verify"][1] + extra)
        for ph in build:                                    # the build's share, phase by phase
            out[ph] = (out[ph][0], out[ph][1] + extra * sum(out[ph]) / t if t > 0 else out[ph][1])
    return out


def _raw_charges(c: RoundCosts, run: RunRounds, row: dict, width: int) -> dict[str, tuple[float, float]]:
    p, k, t = c.profile, run.k, run.temperature
    ctx = float(np.mean(row.get("context") or [0]))
    ex = (lambda kind, n: 0.0) if p.executor is None else (lambda kind, n: p.executor(
        kind, width, n, t, run.sampler_c, k if kind in LOOP_KINDS else None))
    if run.mode == "ar":
        return {"step": (p.target(width, 1, ctx), ex("ar_step", 1))}
    verify = (p.target(width, k + 1, ctx), ex("verify", k + 1))
    if run.mode == "sd":
        return {"draft": (k * p.draft(width, 1, ctx), k * ex("draft_step", 1)), "verify": verify}
    tw = tree_width(run, row)
    out = {"verify": verify, "msg": (c.message(width, False)[1], 0.0), "glue": (p.draft(width, k + 1, ctx),
           ex("glue", k + 1)), "fork": (0.0, ex("fork", k + 1)),
           "tree": (k * p.draft(width, tw, ctx), k * ex("tree_step", tw)), "draft_round": (0.0, c.draft_round_mean(width, tw))}
    if c.resolved.protocol == "push":   # the verifier's own part of its wait (cache in hand -> outcome looked up);
        out["wait"] = (0.0, p.verifier_gap_s)   # the rest of it is the draft binding, in the simulated round
    if _g(row, "backup_s") > 0:     # the backup that made this round's speculation
        fast = run.backup == "fast"
        out["backup"] = ((p.fast_backup_s, 0.0) if fast else (k * p.draft(width, 1, ctx), k * ex("backup_step", 1)))
    return out


def _measured(run: RunRounds, row: dict) -> dict[str, float]:
    """{phase: measured s} of one round (SD's draft includes the catch-up after the verification, as the
    executor fit's draft_step does; SSD's draft_round is the round's time beyond the draft's forwards and the
    outcome send in rounds the draft bound, else 0: runs without hand-off stamps; with them ``breakdown``
    takes the stamps' own time, as calibration.fit_ssd_round.draft_round fits it)."""
    span = _g(row, "t1") - _g(row, "t0")
    if run.mode == "ar":
        return {"step": _g(row, "verify_s"), "other": span - _g(row, "verify_s")}
    if run.mode == "sd":
        return {"draft": span - _g(row, "verify_s"), "verify": _g(row, "verify_s")}
    side = {"verify": _g(row, "verify_s"), "wait": _g(row, "wait_s"), "msg": _g(row, "msg_s"),
            "glue": _g(row, "glue_s"), "fork": _g(row, "fork_s"), "tree": _g(row, "tree_s")}
    if _g(row, "backup_s") > 0:
        side["backup"] = _g(row, "backup_s")
    work = sum(side[p] for p in ("glue", "fork", "tree")) + side.get("backup", 0.0)
    bound = work > side["verify"] + side["msg"]
    side["draft_round"] = max(0.0, span - work - side["msg"]) if bound else 0.0
    return side


def breakdown(profile: Profile, runs: list[Measurements], sim: dict | None = None) -> dict:
    """Mean per steady round of each phase over the repeats `runs` of one config: measured, charged
    (micro + overhead) and their difference; `sim` (optional {"round_s", "tokens_per_round"}) gives the
    simulated round of SSD. Prefills: mean seconds per admitted row, outside the rounds."""
    rr = [r for m in runs if (r := run_of(m)) is not None]
    if not rr:
        return {}
    spec = SpecConfig.from_dict(runs[0].meta["spec"])
    costs = RoundCosts(profile, spec, resolve(spec, profile))
    meas: dict[str, list[float]] = {}
    micro: dict[str, list[float]] = {}
    over: dict[str, list[float]] = {}
    spans, tokens, widths, prefill = [], [], [], []
    n_rounds = 0
    for run in rr:
        width_of = forward_widths(run)
        for row in run.rounds:
            for _ in row.get("refill") or []:
                prefill.append(_g(row, "prefill_s") / len(row["refill"]))
        steady = steady_rounds(run)
        own = _own_from_stamps(run) if run.mode == "ssd" else None   # the draft's stamps, where recorded
        own_mean = float(np.mean([o for o, _, _ in own])) if own else None
        for row in steady:
            width = width_of(row)
            n_rounds += 1
            widths.append(width)
            spans.append(_g(row, "t1") - _g(row, "t0"))
            tokens.append(sum(int(a) + 1 for a in row.get("accepted") or []))
            measured = _measured(run, row)
            if own_mean is not None:
                measured["draft_round"] = own_mean
            for ph, v in measured.items():
                meas.setdefault(ph, []).append(v)
            for ph, (mi, ov) in _charges(costs, run, row, width).items():
                micro.setdefault(ph, []).append(mi)
                over.setdefault(ph, []).append(ov)
    phases = {}
    for ph in dict.fromkeys(list(meas) + list(micro)):
        # phases present in some rounds only (backup) are averaged over every round, like their share of time
        m = float(np.sum(meas.get(ph, [0.0]))) / n_rounds
        mi = float(np.sum(micro.get(ph, [0.0]))) / n_rounds
        ov = float(np.sum(over.get(ph, [0.0]))) / n_rounds
        phases[ph] = {"measured_s": m, "charged_s": mi + ov, "micro_s": mi, "overhead_s": ov, "diff_s": mi + ov - m}
    round_s = float(np.mean(spans))
    if spec.mode == "ssd":
        pred_round = sim.get("round_s") if sim else None
    else:
        pred_round = float(sum(p["charged_s"] for p in phases.values()))
    out = {"mode": spec.mode, "width": float(np.mean(widths)), "rounds": n_rounds, "round_s": round_s,
           "charged_round_s": pred_round, "tokens_per_round": float(np.sum(tokens) / max(1, np.sum(widths))),
           "phases": phases, "prefill_per_row_s": float(np.mean(prefill)) if prefill else None,
           "prefills": len(prefill)}
    if spec.mode == "ssd":
        ver = sum(phases[p]["measured_s"] for p in ("verify", "msg"))
        drf = sum(phases[p]["measured_s"] for p in ("glue", "fork", "tree", "backup") if p in phases)
        out["verifier_side_s"], out["draft_side_s"] = ver, drf
        out["charged_verifier_side_s"] = sum(phases[p]["charged_s"] for p in ("verify", "msg")) + profile.verifier_gap_s
        out["charged_draft_side_s"] = sum(phases[p]["charged_s"] for p in ("glue", "fork", "tree", "draft_round",
                                                                          "backup") if p in phases)
    if pred_round:
        out["round_error"] = pred_round / round_s - 1
    return out


def largest_miss(b: dict) -> tuple[str, float] | None:
    """(phase, charged - measured s per round) of the phase with the largest |difference|."""
    ph = {k: v["diff_s"] for k, v in b.get("phases", {}).items() if k not in ("wait", "other")}
    if not ph:
        return None
    name = max(ph, key=lambda k: abs(ph[k]))
    return name, ph[name]


def format_breakdown(name: str, b: dict) -> str:
    """One config's breakdown as a few aligned lines (ms per steady round)."""
    if not b:
        return f"{name}: no rounds"
    cr = b.get("charged_round_s")
    head = (f"{name:24s} width {b['width']:.1f} round meas {1e3 * b['round_s']:6.2f} ms charged "
            + ("   n/a" if cr is None else f"{1e3 * cr:6.2f}") + " ms"
            + ("" if cr is None else f" ({100 * b['round_error']:+.1f}%)"))
    if b["prefill_per_row_s"] is not None:
        head += f"; prefill {1e3 * b['prefill_per_row_s']:.2f} ms/row x{b['prefills']} (between rounds)"
    cells = [f"{ph} {1e3 * v['measured_s']:.2f}/{1e3 * v['charged_s']:.2f}"
             f" ({1e3 * v['micro_s']:.2f}{1e3 * v['overhead_s']:+.2f})" for ph, v in b["phases"].items()]
    miss = largest_miss(b)
    tail = "" if miss is None else f"  largest: {miss[0]} {1e3 * miss[1]:+.2f} ms"
    return head + "\n    meas/charged (micro+overhead) ms: " + ", ".join(cells) + tail


def main(argv: list[str] | None = None) -> int:
    """Fit as bench_fidelity's evaluate does (pooled calibration, per mode and T) and print every config."""
    from bench.bench_fidelity import CHOICE, _file, _workload, profile_cache
    from bench.fidelity_configs import TESTS
    from saguaro.pipeline import predicted

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", required=True, help="a folder written by bench_fidelity.py --save")
    ap.add_argument("--tokens", type=int, default=96, help="new tokens per prompt of the saved runs (default 96)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per saved run (default 8)")
    ap.add_argument("--out", help="write the breakdowns as JSON here")
    args = ap.parse_args(argv)
    save = Path(args.save)
    _, workload = _workload(args)
    state = json.loads((save / "collect.json").read_text())
    names = [n for n, _ in TESTS if n in state.get("tests_run", [n for n, _ in TESTS])] + [CHOICE]
    profile_for = profile_cache(save)
    result = {}
    for name in names:
        files = sorted(save.glob(_file(name, 0).replace("_p0.json", "_p*.json")))
        if not files:
            continue
        runs = [Measurements.from_json(f) for f in files]
        spec = SpecConfig.from_dict(runs[0].meta["spec"])
        prof = profile_for(spec)
        _, res = predicted(prof, spec, workload, seed=0)
        sim = {"round_s": res.sim_time_s / max(1, res.rounds), "tokens_per_round": res.tokens_per_round}
        result[name] = breakdown(prof, runs, sim)
        print(format_breakdown(name, result[name]))
    if args.out:
        from calibration.jsonio import dump_json

        dump_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

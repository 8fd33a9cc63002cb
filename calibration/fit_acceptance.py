"""Acceptance fit: per-position conditional acceptance by temperature from run rounds, and its C effect."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from calibration.acceptance import AcceptanceModel
from calibration.errors import ConfigError

MIN_TRIALS = 5  # positions reached by fewer sequence-rounds than this are not given their own rate


@dataclass
class RunRounds:
    """One executor run, reduced to what the fits need: its spec values and its round rows."""

    k: int
    temperature: float
    sampler_c: float
    mode: str = "ssd"
    backup: str = "neural"
    rounds: list[dict] = field(default_factory=list)
    top_n: int | None = None
    budget: int | None = None  # SSD tree width per sequence (sum of the primary fan-out)
    draft_devices: int = 1
    protocol: str = "reply"    # SSD message protocol of the run ("push": the verifier looks hits up itself)
    load: bool = False         # a load-mode run (requests on the wall clock): its idle gaps fit after_idle
    fanout: tuple[int, ...] | None = None        # the schedules the run used (meta fanout / fanout_miss)
    fanout_miss: tuple[int, ...] | None = None
    overlap: bool = True       # SSD: the draft built beside the verification (a draft process; not inline)


def _seq_values(row: dict, key: str, n: int, default: object) -> list:
    v = row.get(key, default)
    if isinstance(v, list | tuple):
        return list(v)
    return [v] * n


def steady_rounds(run: RunRounds) -> list[dict]:
    """Rounds after each batch's first one (that one holds the prefill and the first speculation)."""
    seen, out = set(), []
    for row in run.rounds:
        b = row.get("batch_index", 0)
        if b in seen:
            out.append(row)
        seen.add(b)
    return out


def speculation_lengths(run: RunRounds, from_backup: bool = False) -> list[int]:
    """Accepted lengths of sequence-rounds whose speculation came from the primary speculator (or, with
    from_backup=True, from the backup, over steady rounds: the first speculation is left out)."""
    out = []
    steady = {id(row) for row in steady_rounds(run)}
    for i, row in enumerate(run.rounds):
        acc = row.get("accepted")
        if acc is None or (from_backup and id(row) not in steady):
            continue
        acc = acc if isinstance(acc, list | tuple) else [acc]
        backup = _seq_values(row, "from_backup", len(acc), False)
        for a, b in zip(acc, backup):
            if bool(b) != from_backup:
                continue
            if not 0 <= int(a) <= run.k:
                raise ConfigError(f"rounds[{i}].accepted", f"{a} outside 0..k", f"0..{run.k}")
            out.append(int(a))
    return out


def draft_lengths(run: RunRounds) -> list[int]:
    """Accepted lengths of every speculation the draft model made: the primary ones and, with the neural
    backup, the backup's too (fast-backup speculations are the n-gram's). Pooled, since a miss follows hard
    text: the speculation after it accepts less (0.9 vs 1.7 tokens at K = 2, T = 0 here), so primary-only
    rates overstate what a round accepts on average."""
    out = speculation_lengths(run)
    if run.mode == "ssd" and run.backup != "fast":
        out += speculation_lengths(run, from_backup=True)
    return out


def _counts(runs: list[RunRounds], from_backup: bool = False, pooled: bool = False
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Trials and successes per position 1..Kmax (censored at each run's K), plus a length histogram;
    pooled: over draft_lengths (every draft-model speculation)."""
    kmax = max(r.k for r in runs)
    trials, succ, hist = np.zeros(kmax + 1), np.zeros(kmax + 1), np.zeros(kmax + 1)
    for run in runs:
        for a in (draft_lengths(run) if pooled else speculation_lengths(run, from_backup)):
            hist[a] += 1
            for i in range(1, min(a + 1, run.k) + 1):
                trials[i] += 1
                succ[i] += a >= i
    return trials, succ, hist


def rates_from_counts(trials: np.ndarray, succ: np.ndarray, min_trials: int = MIN_TRIALS) -> list[float]:
    """Conditional acceptance per position; stops at the last well-sampled position (the model repeats it)."""
    rates = []
    for i in range(1, len(trials)):
        if trials[i] >= min_trials or (i == 1 and trials[i] > 0):
            rates.append(float(succ[i] / trials[i]))
        else:
            break
    return rates


def _by_k(by_c: dict[float, list[RunRounds]], ref: float) -> tuple[dict[int, tuple[float, ...]], dict]:
    """Rates per lookahead K at the reference C, from the neural-backup SSD and SD runs at that K (pooled
    speculations; fast-backup runs' primaries follow hits only, so they are left out)."""
    ks: dict[int, list[RunRounds]] = defaultdict(list)
    for r in by_c.get(ref, []):
        if r.backup != "fast" or r.mode == "sd":
            ks[r.k].append(r)
    out, info = {}, {}
    for k, rs in sorted(ks.items()):
        trials, succ, hist = _counts(rs, pooled=True)
        rates = rates_from_counts(trials, succ)
        if trials[1] >= MIN_TRIALS and len(rates) == k:
            out[k] = tuple(rates)
            info[str(k)] = {"rates": list(rates), "n": int(hist.sum()),
                            "mean_accepted": float(np.dot(np.arange(len(hist)), hist) / hist.sum())}
    return out, info


def fit_acceptance(runs: list[RunRounds]) -> tuple[AcceptanceModel, dict]:
    """Per-position acceptance at each temperature (from the largest C run there, every draft-model speculation
    pooled), per lookahead K where several were run, and multipliers for lower C.

    Returns the model and info {"by_temperature": {T: {C: {...}}}, "reference_c": {T: C}, "c_effect": {...},
    "by_k": {T: {K: {...}}}}.
    """
    groups: dict[float, dict[float, list[RunRounds]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.mode != "ar":
            groups[float(r.temperature)][float(r.sampler_c)].append(r)
    by_t, info_t, ref_c, by_k, info_k = {}, {}, {}, {}, {}
    ratios: dict[float, list[tuple[float, float]]] = defaultdict(list)
    for t, by_c in sorted(groups.items()):
        stats = {}
        for c, rs in by_c.items():
            # runs at the largest K only: they cover every position from one population of speculations
            # (pooling a short-K run's early positions with a long-K run's later ones skews the product)
            rs = [r for r in rs if r.k == max(x.k for x in rs)]
            trials, succ, hist = _counts(rs, pooled=True)
            if trials[1:].sum() == 0:
                continue
            stats[c] = {"rates": rates_from_counts(trials, succ), "trials": trials[1:].tolist(),
                        "hist": hist.tolist(), "n": int(hist.sum()), "k": sorted({r.k for r in rs}),
                        "mean_alpha": float(succ[1:].sum() / trials[1:].sum())}
        if not stats:
            continue
        ref = max(stats)
        ref_c[t] = ref
        tables, info_k[str(t)] = _by_k(by_c, ref)
        if len(tables) > 1:
            by_k[t] = tables
        by_t[t] = tuple(stats[ref]["rates"])
        info_t[t] = stats
        for c, s in stats.items():
            if c < ref and stats[ref]["mean_alpha"] > 0:
                ratios[c].append((min(1.0, s["mean_alpha"] / stats[ref]["mean_alpha"]), s["n"]))
    if not by_t:
        raise ConfigError("measurements.rounds", "no speculative rounds with accepted lengths to fit acceptance",
                          "runs in mode sd or ssd with per-round 'accepted'")
    c_effect = {c: float(np.average([m for m, _ in v], weights=[w for _, w in v])) for c, v in ratios.items()}
    info = {"by_temperature": {str(t): {str(c): s for c, s in st.items()} for t, st in info_t.items()},
            "reference_c": {str(t): c for t, c in ref_c.items()}, "c_effect": {str(c): m for c, m in c_effect.items()},
            "by_k": info_k}
    return AcceptanceModel(by_t, c_effect, by_k), info


def fit_fast_backup(runs: list[RunRounds]) -> tuple[AcceptanceModel | None, dict]:
    """Per-position acceptance of the fast (n-gram) backup's speculations at each temperature, from SSD runs
    with backup "fast" (rounds with from_backup). Its proposals do not depend on K or C, so every such run
    at a temperature is pooled (censored at its K). Positions past the well-sampled ones get one rate pooled
    over them all (an n-gram copy that got going tends to continue: the last sampled rate would understate
    it). None when no temperature has MIN_TRIALS of them."""
    groups: dict[float, list[RunRounds]] = defaultdict(list)
    for r in runs:
        if r.mode == "ssd" and r.backup == "fast":
            groups[float(r.temperature)].append(r)
    by_t, info = {}, {}
    for t, rs in sorted(groups.items()):
        trials, succ, hist = _counts(rs, from_backup=True)
        if hist.sum() < MIN_TRIALS:
            continue
        rates = rates_from_counts(trials, succ)
        tail = slice(len(rates) + 1, None)
        if trials[tail].sum() > 0:
            rates.append(float(succ[tail].sum() / trials[tail].sum()))
        by_t[t] = tuple(rates)
        info[str(t)] = {"rates": list(by_t[t]), "trials": trials[1:].tolist(), "hist": hist.tolist(),
                        "n": int(hist.sum()), "k": sorted({r.k for r in rs}),
                        "mean_accepted": float(np.dot(np.arange(len(hist)), hist) / hist.sum())}
    return (AcceptanceModel(by_t) if by_t else None), {"by_temperature": info}

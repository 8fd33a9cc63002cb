"""Synthetic-acceptance timing mode (engine/synthetic.py): realised accepted lengths and cache hits follow the
requested AcceptanceModel / HitCurve (fixed seeds, stated power), the forwards are the real ones at the real
shapes, the run is labelled timing-only everywhere, and it is refused together with check_lossless."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
from exec_helpers import tiny_models
from scipy import stats

from calibration import AcceptanceModel, HitCurve
from calibration.errors import ConfigError
from saguaro_exec import RunConfig, run
from saguaro_exec.engine.synthetic import LABEL, SyntheticAcceptance
from saguaro_sim.config import SpecConfig

K = 4
RATES = AcceptanceModel({0.0: (0.9, 0.7, 0.5, 0.3)})       # not geometric: the whole pmf is tested


def _run(mode: str, synthetic=None, batch: int = 8, max_new: int = 96, vocab: int = 64, **kw):
    t, d = tiny_models(vocab=vocab)
    prompts = [[1 + i, 2, 3, 4 + i] for i in range(batch)]
    spec = SpecConfig(mode=mode, k=K, batch_size=batch, **kw.pop("spec", {}))
    return run(RunConfig(spec=spec, target=t, draft=d, prompts=prompts, max_new_tokens=max_new,
                         synthetic=synthetic, **kw)), (t, d)


def _chi2_power(pmf: np.ndarray, alt: np.ndarray, n: int, level: float) -> float:
    """Power of Pearson's chi-square test at ``level`` with n draws when the truth is ``alt``."""
    lam = n * float(np.sum((alt - pmf) ** 2 / pmf))
    crit = stats.chi2.ppf(1 - level, len(pmf) - 1)
    return float(stats.ncx2.sf(crit, len(pmf) - 1, lam))


def test_sd_accepted_lengths_follow_the_acceptance_model():
    rep, _ = _run("sd", SyntheticAcceptance(RATES, seed=3))
    acc = [a for r in rep.measurements.rounds for a in r["accepted"]]
    pmf = RATES.length_pmf(K)
    n = len(acc)
    counts = np.bincount(acc, minlength=K + 1)
    p = stats.chisquare(counts, n * pmf).pvalue
    # power: with every rate 10% lower (AL 2.61 instead of 2.94) the test rejects at 1% with p > 0.9
    # (n ~ 260 draws here)
    alt = AcceptanceModel({0.0: tuple(0.9 * a for a in RATES.rates(K))}).length_pmf(K)
    assert _chi2_power(pmf, alt, n, 0.01) > 0.9, n
    assert p > 0.01, (counts, n * pmf)


def test_mean_acceptance_length_input():
    rep, _ = _run("sd", 2.5, batch=8, max_new=128)
    pmf = AcceptanceModel.from_acceptance_length(2.5, K).length_pmf(K)
    acc = [a for r in rep.measurements.rounds for a in r["accepted"]]
    assert stats.chisquare(np.bincount(acc, minlength=K + 1), len(acc) * pmf).pvalue > 0.01
    assert rep.synthetic["acceptance_length"] == 2.5


def test_forwards_are_the_real_ones_at_the_requested_shapes():
    """One target forward per round (plus the prefill), each over the uncached tokens + K: what a real
    verification runs; and each round's verify time is a plain run's within a loose factor."""
    t, d = tiny_models(vocab=64)
    widths = []
    hook = t.register_forward_hook(lambda m, args, out: widths.append(tuple(args[0].shape)))
    try:
        prompts = [[1, 2, 3, 4]] * 4
        cfg = dict(spec=SpecConfig(mode="sd", k=K, batch_size=4), target=t, draft=d, prompts=prompts,
                   max_new_tokens=48)
        rep = run(RunConfig(**cfg, synthetic=SyntheticAcceptance(RATES, seed=1)))
        n_synth = len(widths)
        plain = run(RunConfig(**cfg))
    finally:
        hook.remove()
    rounds = rep.measurements.rounds
    n_prefill = n_synth - len(rounds)          # the rows admitted together are prefilled in one forward
    assert n_prefill == 1 and widths[0] == (len(prompts), len(prompts[0]) - 1)
    verify = widths[n_prefill:n_synth]
    assert [w[0] for w in verify] == [r["batch"] for r in rounds]     # the live rows, one forward per round
    assert all(w[1] >= K + 1 for w in verify)
    assert all(r["verify_s"] > 0 and r["wait_s"] > 0 for r in rounds)
    med = statistics.median(r["verify_s"] for r in rounds)
    med_plain = statistics.median(r["verify_s"] for r in plain.measurements.rounds)
    assert med_plain / 10 < med < med_plain * 10


def test_refused_with_check_lossless_and_where_it_cannot_work():
    t, d = tiny_models()
    base = dict(target=t, draft=d, prompts=[[1, 2, 3]])
    with pytest.raises(ConfigError) as e:
        RunConfig(spec=SpecConfig(mode="sd", k=K), synthetic=2.0, check_lossless=True, **base)
    assert e.value.field == "synthetic / check_lossless"
    with pytest.raises(ConfigError) as e:                      # SSD needs the hit curve
        RunConfig(spec=SpecConfig(mode="ssd", k=K), synthetic=2.0, **base)
    assert e.value.field == "synthetic.hits"
    with pytest.raises(ConfigError) as e:
        RunConfig(spec=SpecConfig(mode="ssd", k=K), synthetic=SyntheticAcceptance(2.0, HitCurve()),
                  ssd_protocol="reply", **base)
    assert e.value.field == "synthetic / ssd_protocol"
    with pytest.raises(ConfigError) as e:                      # AL must fit K
        RunConfig(spec=SpecConfig(mode="sd", k=2), synthetic=3.5, **base)
    assert e.value.field == "synthetic.acceptance"
    with pytest.raises(ConfigError) as e:
        RunConfig(spec=SpecConfig(mode="sd", k=K), synthetic="no-such-preset", **base)
    assert e.value.field == "profile"
    with pytest.raises(ConfigError) as e:
        RunConfig(spec=SpecConfig(mode="sd", k=K, temperature=0.5), check_lossless=True, **base)
    assert e.value.field == "check_lossless"


def test_check_lossless_passes_on_a_real_run():
    rep, _ = _run("sd", None, batch=2, max_new=12, check_lossless=True)
    assert rep.summary()["lossless"] is True and rep.synthetic is None


def test_report_json_meta_and_trace_say_timing_only(tmp_path):
    rep, _ = _run("sd", SyntheticAcceptance.from_profile("cpu-tinypair", acceptance_length=2.0), batch=2,
                  max_new=12)
    s = rep.summary()
    assert s["lossless"] is False and s["synthetic"]["label"] == LABEL
    assert s["synthetic"]["source"] == "profile cpu-tinypair"
    meta = rep.measurements.meta
    assert meta["lossless"] is False and meta["synthetic"]["label"] == LABEL
    rep.to_json(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["synthetic"]["label"] == LABEL
    rep.chrome_trace(tmp_path / "t.json")
    names = [e["args"]["name"] for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]
             if e["name"] == "process_name"]
    assert any("timing only" in n for n in names)


FAN, FAN_MISS = (3, 2, 2, 1, 1), (2, 1, 1, 1, 1)
HITS = HitCurve.power_law(0.6, 0.5, c_backup=0.8, r_backup=0.3)     # backup speculations hit less


def _hit_check(rep) -> None:
    """Realised hits vs the HitCurve at each round's (accepted k, F_k, source): a Poisson-binomial z-test
    (the p differ by row); power: a hit rate 0.1 lower everywhere is rejected at 1% with p > 0.9."""
    hits, ps = [], []
    for r in rep.measurements.rounds:
        for a, h, fb in zip(r["accepted"], r.get("hit") or [], r["from_backup"]):
            fan = (FAN_MISS if fb else FAN)[a]
            ps.append(HITS.hit(fan, a, backup=fb, k=K))
            hits.append(bool(h))
    ps, n = np.array(ps), len(ps)
    sd = float(np.sqrt(np.sum(ps * (1 - ps))))
    z = (sum(hits) - ps.sum()) / sd
    crit = stats.norm.ppf(0.995)
    assert stats.norm.sf(crit - 0.1 * n / sd) > 0.9, n                   # the power stated above
    assert abs(z) < crit, (sum(hits), ps.sum(), n)
    assert 0 < sum(hits) < n                                            # both outcomes occur


@pytest.mark.parametrize("link", ["inline", "push"])
def test_ssd_hits_follow_the_hit_curve(link):
    extra = {"inline_draft": True} if link == "inline" else {"ssd_protocol": "push"}
    rep, _ = _run("ssd", SyntheticAcceptance(RATES, HITS, seed=5), batch=8, max_new=128,
                  spec={"fanout": FAN, "fanout_miss": FAN_MISS}, **extra)
    assert rep.faults == [] and rep.measurements.meta["ssd_protocol"] == "push"   # inline ignores it
    _hit_check(rep)
    acc = [a for r in rep.measurements.rounds for a in r["accepted"]]
    assert stats.chisquare(np.bincount(acc, minlength=K + 1), len(acc) * RATES.length_pmf(K)).pvalue > 0.01
    assert rep.measurements.meta["synthetic"]["hits"] == HITS.to_dict()


def _cli(*args: str):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "saguaro", "run", *args], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)


def test_cli_flags_label_the_json_and_name_themselves_in_errors(capsys):
    p = _cli("--mode", "sd", "--synthetic-acceptance-length", "2.5", "--max-new-tokens", "8", "--prompt", "hi",
             "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["lossless"] is False and doc["synthetic"]["label"] == LABEL
    assert doc["synthetic"]["acceptance_length"] == 2.5
    # the refusals through the same entry point in this process (one interpreter start-up, not three)
    from saguaro import cli

    for args, needle in ((["--synthetic-acceptance-length", "9"], "--synthetic-acceptance-length"),
                         (["--synthetic-profile", "cpu-tinypair", "--check-lossless"],
                          "--synthetic-profile / --check-lossless")):
        try:
            code = cli.main(["run", "--mode", "sd", *args, "--prompt", "hi"])
        except SystemExit as e:                   # argparse
            code = e.code
        err = capsys.readouterr().err
        assert code == 2 and needle in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err


def test_a_draft_fault_mid_run_finishes_by_sd_still_synthetic():
    """After the draft dies the in-process SD fallback keeps the synthetic lengths (no cache: SD's bonus)."""
    rep, _ = _run("ssd", SyntheticAcceptance(RATES, HITS, seed=2), batch=2, max_new=40, ssd_protocol="push",
                  inject_fault="die@3")
    assert [f["fallback"] for f in rep.faults] == ["sd"]
    assert all(len(t) == 40 for t in rep.token_ids)
    assert rep.summary()["lossless"] is False
    assert any(r.get("fallback") == "sd" for r in rep.measurements.rounds)

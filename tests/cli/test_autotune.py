"""A short autotune on the tiny pair: report files exist and their numbers agree with each other."""

from __future__ import annotations

import json
import tomllib

import pytest

pytest.importorskip("torch")

from cli_helpers import inproc  # noqa: E402

from calibration import Profile  # noqa: E402
from saguaro.cli import main as cli  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    from saguaro.pipeline import autotune
    from saguaro_exec.io.assets import tiny_pair_paths

    target, draft = tiny_pair_paths()
    out = tmp_path_factory.mktemp("at") / "report"
    return autotune(out, target=target, draft=draft, quick=True, max_new_tokens=16, repeats=2), out


def test_report_files_and_numbers(quick_report):
    rep, out = quick_report
    for name in ("report.md", "autotune.json", "recommended.toml", "profile.json", "profile_refit.json",
                 "pred_vs_meas.png", "pred_vs_meas.json", "hit_vs_fanout.png", "timelines.png",
                 "trace_real_ssd.json", "trace_sim_ssd.json", "measurements/grid.json",
                 "measurements/calibration_0_ssd.json", "measurements/calibration_1_ssd.json",
                 "measurements/calibration_2_sd.json", "measurements/calibration_3_sd.json",
                 "measurements/calibration_4_ar.json", "measurements/calibration_5_ssd.json", "profile_sd.json", "profile_refit_ar.json", "measurements/ssd_run.json", "measurements/sd_run.json",
                 "measurements/ar_run.json"):
        assert (out / name).is_file(), name
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # staged folder renamed, no leftovers
    doc = json.loads((out / "autotune.json").read_text())
    names = [c["name"] for c in doc["configs"]]   # a runner-up SSD config when one simulated within 1%
    assert names in (["SSD (best simulated)", "SD", "AR"], ["SSD (best simulated)", "SD", "AR", "SSD (runner-up)"])
    n = len(names)
    if n == 4:
        assert (out / "measurements" / "ssd_runner_up_run.json").is_file()
    choice = next(c for c in doc["configs"] if c["name"] == doc["ssd_choice"])
    assert doc["ssd_choice_spec"] == choice["spec"]
    assert choice["measured"]["tokens_per_s"] == max(c["measured"]["tokens_per_s"] for c in doc["configs"]
                                                     if c["spec"]["mode"] == "ssd")
    for c in doc["configs"]:
        k = c["spec"]["k"]
        for side in ("predicted", "predicted_refit", "measured"):
            assert c[side]["tokens_per_s"] > 0
            assert 1.0 <= c[side]["tokens_per_round"] <= k + 1 + 1e-9
        if c["spec"]["mode"] == "ssd":
            assert 0.0 <= c["measured"]["hit_rate"] <= 1.0 and 0.0 <= c["predicted"]["hit_rate"] <= 1.0
    ar = doc["configs"][2]
    assert ar["measured"]["tokens_per_round"] == 1.0 and ar["predicted"]["tokens_per_round"] == 1.0
    assert doc["errors"]["fit"]["n"] == n and doc["errors"]["refit"]["n"] == n
    assert doc["errors"]["fit"]["max_abs"] >= doc["errors"]["fit"]["median_abs"] >= 0
    ssd_meas = choice["measured"]["tokens_per_s"]
    assert doc["speedups"]["ar"] == pytest.approx(ssd_meas / ar["measured"]["tokens_per_s"])
    # the recommended TOML is a valid SpecConfig equal to the JSON's
    spec = SpecConfig.from_dict(tomllib.loads((out / "recommended.toml").read_text()))
    assert spec.to_dict() == doc["recommended"] == rep.recommended.to_dict()
    # the markdown shows the same numbers as the JSON
    md = (out / "report.md").read_text()
    assert f"{ssd_meas:.1f}" in md and "```toml" in md and doc["recommended_toml"].strip() in md
    # two interleaved real runs per config: the median run's numbers (the lower middle of two: the slower)
    assert doc["repeats"] == 2 and doc["build_margin"] == 0.15   # SSD ranked with builds 15% slower (BUILD_MARGIN)
    for c in doc["configs"]:
        assert len(c["measured_repeats"]) == 2 and c["measured"]["tokens_per_s"] == min(c["measured_repeats"])
    assert "ratios of medians over 2 interleaved runs each" in md
    # the refit profile saw the six calibration runs and the two real runs of each config
    refit = Profile.from_json(out / "profile_refit.json")
    assert refit.provenance["samples"]["runs"] == 6 + 2 * n and rep.refit.provenance["samples"]["runs"] == 6 + 2 * n
    first = Profile.from_json(out / "profile.json")
    assert first.provenance["samples"]["runs"] == 6 and first.provenance["executor_runs"]["used"] == ["ssd@T=0.0"]
    sd_profile = Profile.from_json(out / "profile_sd.json")
    assert sd_profile.provenance["executor_runs"]["used"] == ["sd@T=0.0"]
    # SD calibrated at K/2 and at the largest K: its rates come from runs to K 4 (quick), not K 2's repeated
    assert [c["spec"]["k"] for c in doc["calibration_runs"] if c["spec"]["mode"] == "sd"] == [2, 4]
    assert len(sd_profile.acceptance.by_temperature[0.0]) == 4
    # the last calibration run uses the fast backup, so the planner knows how often its n-gram copy is
    # accepted before it builds after-miss trees for it (without: taken as never, 0.97 hits predicted, 0.75 run)
    assert [c["spec"]["backup"] for c in doc["calibration_runs"]][-1] == "fast"
    assert first.fast_backup_acceptance is not None and "0.0" in first.provenance["fast_backup_fit"]["by_temperature"]
    pts = json.loads((out / "pred_vs_meas.json").read_text())["points"]
    assert len(pts) == 2 * n and {p["kind"] for p in pts} == {"fit", "refit"}


def test_report_command_rerenders(quick_report, capsys):
    _, out = quick_report
    (out / "report.md").unlink()
    assert cli(["report", str(out)]) == 0
    assert (out / "report.md").is_file() and "Predicted vs measured" in capsys.readouterr().out
    assert cli(["report", str(out / "measurements" / "ssd_run.json")]) == 0
    assert "hit rate" in capsys.readouterr().out
    assert cli(["report", str(out / "nope")]) == 2


def test_autotune_bad_input_names_the_flag(tmp_path, capsys):
    assert cli(["autotune", "--out", str(tmp_path / "r"), "--batch-size", "0"]) == 2
    assert "--batch-size" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    code, _, err = inproc(capsys, "autotune", "--out", str(tmp_path / "r"), "--build-margin", "1.5")
    assert code == 2 and "--build-margin" in err and "[0, 1]" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_autotune_reads_the_prompts_it_tunes_for(tmp_path):
    """--prompt-file is read as `saguaro run` reads it (one per line here), --prompt as given; neither: the
    built-in set (None), so the optimizer tunes for the workload that will run."""
    import argparse

    from saguaro.commands.autotune import prompts_from

    f = tmp_path / "prompts.txt"
    f.write_text("def f(x):\\n    return x\nimport os\n")
    ns = argparse.Namespace
    assert prompts_from(ns(prompt=None, prompt_file=str(f))) == ["def f(x):\n    return x", "import os"]
    assert prompts_from(ns(prompt=["a b", "c"], prompt_file=None)) == ["a b", "c"]
    assert prompts_from(ns(prompt=None, prompt_file=None)) is None


def test_runner_up_is_the_next_distinct_ssd_config_within_the_near_tie():
    """A second SSD deployment simulated within NEAR_TIE (1%) of the best runs beside it; SD rows, a copy of
    the best (another shape resolving to the same schedules) and configs further behind do not."""
    from calibration import load_preset
    from saguaro.pipeline import NEAR_TIE, pin, runner_up, spec_of_row
    from saguaro_sim import Workload

    prof, wl = load_preset("cpu-tinypair"), Workload(num_sequences=4, output_tokens=64)
    best = SpecConfig(mode="ssd", k=3, fanout=(3, 2, 2, 1)).to_dict()
    same = dict(best)
    other = SpecConfig(mode="ssd", k=4, fanout=(2, 2, 2, 1, 1)).to_dict()
    sd = SpecConfig(mode="sd", k=3).to_dict()
    row = lambda d, obj: {**d, "objective": obj}  # noqa: E731
    pinned = pin(spec_of_row(row(best, 100.0)), prof, wl)
    table = [row(best, 100.0), row(sd, 99.9), row(same, 99.8), row(other, 100.0 * (1 - NEAR_TIE) + 0.01)]
    got = runner_up(table, pinned, prof, wl)
    assert got is not None and got[1].k == 4 and got[1].fanout == (2, 2, 2, 1, 1)
    table[-1]["objective"] = 100.0 * (1 - NEAR_TIE) - 0.01
    assert runner_up(table, pinned, prof, wl) is None


def test_sampled_calibration_runs_repeat_over_seeds():
    """At T > 0 every non-AR calibration spec runs once per seed (one seeded run gives ~20 rejections per
    position); at T = 0, or for AR, once at the autotune's seed."""
    from saguaro.pipeline import calibration_plan

    specs = [SpecConfig(mode="ssd", k=4, budget=8, temperature=0.7), SpecConfig(mode="ar", k=0, temperature=0.7),
             SpecConfig(mode="sd", k=4, temperature=0.7)]
    plan = calibration_plan(specs, 3, 10)
    assert [(i, s) for i, _, s in plan] == [(0, 10), (0, 11), (0, 12), (1, 10), (2, 10), (2, 11), (2, 12)]
    greedy = [c.replace(temperature=0.0) for c in specs]
    assert [(i, s) for i, _, s in calibration_plan(greedy, 3, 10)] == [(0, 10), (1, 10), (2, 10)]

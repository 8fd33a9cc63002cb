"""--placement / --sharing / --shared-slowdown on `saguaro simulate` and `optimize`: SSD's draft on the
target's GPU counts no extra device; bad values exit 2 with one line naming the flag."""

import json

import pytest
from cli_helpers import inproc as run

EAGER = ("--profile", "h200-llama8b-llama1b-eager", "--num-sequences", "4", "--output-tokens", "64")


def test_simulate_shared_is_slower_than_separate_and_says_where(capsys):
    docs = {}
    for extra in ((), ("--placement", "shared"), ("--placement", "shared", "--sharing", "concurrent",
                                                  "--shared-slowdown", "1.2")):
        code, out, err = run(capsys, "simulate", *EAGER, "--mode", "ssd", "--no-baselines", "--json", *extra)
        assert code == 0, err
        docs[extra[-1] if extra else "separate"] = json.loads(out)["result"]
    assert docs["shared"]["resolved"]["sharing"] == "time-sliced"
    assert docs["1.2"]["resolved"]["slowdown"] == 1.2
    rate = {k: d["tokens_per_s_per_seq"] for k, d in docs.items()}
    assert rate["shared"] < rate["1.2"] < rate["separate"]


def test_optimize_shared_counts_one_gpu(capsys):
    code, out, err = run(capsys, "optimize", *EAGER, "--placement", "shared", "--k-range", "1,5", "--max-budget",
                         "32", "--top-n", "3", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert {r["devices"] for r in plan["table"]} == {1}
    assert plan["best"]["placement"] == "shared"


@pytest.mark.parametrize("cmd,args,flag", [
    ("simulate", ("--placement", "gpu"), "--placement"),
    ("simulate", ("--sharing", "concurrent"), "--sharing"),
    ("simulate", ("--placement", "shared", "--sharing", "mps"), "--sharing"),
    ("simulate", ("--placement", "shared", "--draft-devices", "2"), "--draft-devices"),
    ("simulate", ("--shared-slowdown", "0.5"), "--shared-slowdown"),
    ("optimize", ("--beside-slowdown", "0.9"), "--beside-slowdown"),
    ("optimize", ("--placement", "shared", "--max-draft-devices", "2"), "--max-draft-devices"),
    ("optimize", ("--placement", "both"), "--placement"),
])
def test_bad_values_exit_2_naming_the_flag(capsys, cmd, args, flag):
    code, out, err = run(capsys, cmd, *EAGER, *args)
    assert code == 2 and err.count("\n") == 1 and flag in err and "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize("extra, flag", [(("--placement", "both"), "--placement"),
                                         (("--sharing", "concurrent"), "--sharing")])
def test_plan_placement_flags_are_checked(capsys, extra, flag):
    code, out, err = run(capsys, "plan", "--qps", "1", "--requests", "20", *extra)
    assert code == 2 and err.strip().count("\n") == 0 and flag in err and not out


def test_plan_shared_counts_the_target_gpus_only(capsys):
    code, out, err = run(capsys, "plan", "--profile", "h200-llama8b-llama1b-eager", "--qps", "1", "--requests", "50",
                         "--modes", "ssd", "--placement", "shared", "--workers", "1", "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["gpus"] == row["replicas"]


def test_beside_slowdown_slows_separate_ssd_and_says_so(capsys):
    docs = {}
    for s in ("1", "1.2"):
        code, out, err = run(capsys, "simulate", *EAGER, "--mode", "ssd", "--no-baselines", "--json",
                             "--beside-slowdown", s)
        assert code == 0, err
        docs[s] = json.loads(out)["result"]
    assert docs["1.2"]["resolved"]["sharing"] == "concurrent" and docs["1.2"]["resolved"]["slowdown"] == 1.2
    assert docs["1.2"]["resolved"]["placement"] == "separate" and docs["1"]["resolved"]["sharing"] == "none"
    assert docs["1.2"]["tokens_per_s_per_seq"] < docs["1"]["tokens_per_s_per_seq"]

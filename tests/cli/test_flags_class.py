"""Class "flags accepted that should not be" (issue 15): every numeric flag is parsed by one typed parser
(saguaro.commands.common.integer / number) with its range, every device flag by the executor's one device
rule (saguaro_exec.devices.check_device), and errors name the flag the user wrote."""

from __future__ import annotations

import pytest
import torch
from class_helpers import ROOT, assert_clean_error, inproc

RUN_JSON = ROOT / "saguaro_exec" / "assets" / "tiny" / "eval.json"

CASES = [
    ("profile --quick --threads 0", "--threads"),
    ("profile --quick --threads 2.0", "--threads"),
    ("profile --quick --repeats 0", "--repeats"),
    ("profile --quick --warmup -1", "--warmup"),
    ("profile --quick --device tpu", "--device"),
    ("profile --quick --device cuda:x", "--device"),
    ("autotune --quick --device tpu", "--device"),
    ("autotune --quick --threads 0", "--threads"),
    ("autotune --quick --seed -1", "--seed"),
    ("autotune --quick --repeats 0", "--repeats"),
    ("calibrate {run} --temperature nan", "--temperature"),
    ("calibrate {run} --temperature -5", "--temperature"),
    ("calibrate {run} --temperature 1e9", "--temperature"),
    ("calibrate {run} --temperature inf", "--temperature"),
    ("calibrate {run} --base no-such-preset", "--base"),
    ("simulate --seed -1", "--seed"),
    ("simulate --temperature inf", "--temperature"),
    ("optimize --top 0", "--top"),
    ("optimize --seed 1e3", "--seed"),
    ("run --draft-timeout-s nan", "--draft-timeout-s"),
    ("run --device tpu", "--device"),
    ("run --draft-device cuda:x", "--draft-device"),
]
if not torch.cuda.is_available():
    CASES += [("profile --quick --device cuda", "--device"), ("autotune --quick --device cuda:0", "--device"),
              ("run --mode ar --device cuda", "--device")]


@pytest.mark.parametrize("case, needle", CASES, ids=[c for c, _ in CASES])
def test_flag_refused_before_any_work(tmp_path, capsys, case, needle):
    argv = [a.format(run=RUN_JSON) for a in case.split(" ")]
    out_flag = "-o" if argv[0] in ("profile", "calibrate") else "--out"
    code, err, out = inproc(capsys, argv + [out_flag, tmp_path / "out"])
    assert_clean_error(code, err, needle)
    assert out == "" and list(tmp_path.iterdir()) == []


def test_calibrate_base_error_never_names_profile(tmp_path, capsys):
    code, err, _ = inproc(capsys, ["calibrate", str(RUN_JSON), "--base", "nope", "-o", tmp_path / "p.json"])
    assert code == 2 and "--base" in err and "--profile" not in err, err

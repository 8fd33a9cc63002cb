"""Bad input through the `saguaro` commands: exit status 2, one line on stderr naming the flag / file /
field, and no output written (the --out / -o target never appears). In-process for the many cases, plus
real subprocesses for each kind of command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from calibration.profile import load_preset
from saguaro import cli
from saguaro_exec.model import ModelConfig, random_model, save_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Bad input files, written once, in their own folder (outputs go elsewhere)."""
    d = tmp_path_factory.mktemp("inputs")
    good = load_preset("cpu-tinypair-ssd").to_dict()
    text = json.dumps(good)
    out = {}

    def put(name: str, content: str | bytes) -> None:
        p = d / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        out[name.split(".")[0]] = str(p)

    put("corrupt.json", "{not json")
    put("truncated.json", text[: len(text) // 2])
    put("future.json", json.dumps({**good, "schema_version": 99}))
    neg = json.loads(text)
    # a piecewise latency block whatever form the shipped profile's fit chose (its knots are what is tested)
    neg["target"] = load_preset("h200-llama8b-llama1b-eager").to_dict()["target"]
    neg["target"]["params"]["knots_y"][0] = -1.0
    put("negative.json", json.dumps(neg))
    prob = json.loads(text)
    prob["acceptance"]["by_temperature"]["0.0"][0] = 1.5
    put("prob.json", json.dumps(prob))
    put("unknown.toml", "max_new_tokens = 8\nfrobnicate = 1\n")
    put("syntax.toml", "[spec\nk = 2\n")
    put("spec_bad.toml", "k = 2\nsampler_c = 3.0\n")
    put("latin1.txt", b"caf\xe9\n")
    put("measurements.json", '{"schema_version": 1, "meta": {}, "rounds": 3}')
    cfg = dict(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32)
    save_model(random_model(ModelConfig(**cfg), seed=1), d / "vocab40")
    out["vocab40"] = str(d / "vocab40")
    out["missing"] = str(d / "no-such-thing")
    return out


# (argv with {name} placeholders for files, needle on stderr); outputs are added per command.
CASES = [
    ("run --k 0", "--k"),
    ("run --fallback retry", "--fallback"),
    ("run --ssd-protocol tcp", "--ssd-protocol"),
    ("run --max-new-tokens 0", "--max-new-tokens"),
    ("run --temperature -1", "--temperature"),
    ("run --draft-timeout-s 0", "--draft-timeout-s"),
    ("run --device tpu", "--device"),
    ("run --fanout 1,x", "--fanout"),
    ("run --target {missing}", "--target"),
    ("run --mode sd --draft {vocab40}", "vocabulary"),
    ("run --prompt-file {latin1}", "UTF-8"),
    ("run --prompt-file {missing}", "--prompt-file"),
    ("run --config {unknown}", "frobnicate"),
    ("run --config {syntax}", "syntax error"),
    ("run --config {missing}", "not found"),
    ("run --mode ar --prompt " + "x" * 1500, "context"),
    ("simulate --profile {corrupt}", "corrupt.json"),
    ("simulate --profile {truncated}", "truncated.json"),
    ("simulate --profile {future}", "schema_version"),
    ("simulate --profile {negative}", "knots_y[0]"),
    ("simulate --profile {prob}", "acceptance"),
    ("simulate --config {spec_bad}", "sampler_c"),
    ("simulate --config {syntax}", "syntax error"),
    ("simulate --temperature nan", "--temperature"),
    ("optimize --profile {truncated}", "truncated.json"),
    ("optimize --temperature -1", "--temperature"),
    ("optimize --top-n 0", "--top-n"),
    ("calibrate {missing}", "no-such-thing"),
    ("calibrate {measurements}", "rounds"),
    ("calibrate {corrupt}", "corrupt.json"),
    ("profile --target {missing} --quick", "--target"),
    ("profile --ks 0,x --quick", "--ks"),
    ("autotune --batch-size 0 --quick", "--batch-size"),
    ("autotune --target {missing} --quick", "--target"),
    ("autotune --prompt-file {missing} --quick", "--prompt-file"),
    ("autotune --prompt-file {corrupt} --quick", "--prompt-file"),
    ("autotune --prompt x --prompt-file {corrupt} --quick", "--prompt-file"),
    ("report {missing}", "no-such-thing"),
]
if not torch.cuda.is_available():
    CASES.append(("run --device cuda", "CUDA"))

OUT_FLAG = {"run": "--out", "simulate": "--out", "optimize": "--out", "autotune": "--out",
            "calibrate": "-o", "profile": "-o"}


def _argv(case: str, files: dict, out: Path) -> list[str]:
    argv = [a.format(**files) if "{" in a else a for a in case.split(" ")]
    flag = OUT_FLAG.get(argv[0])
    return argv + ([flag, str(out)] if flag else [])


def inproc(capsys, argv: list[str]) -> tuple[int, str]:
    try:
        code = cli.main(argv)
    except SystemExit as e:                       # argparse errors
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("case, needle", CASES, ids=[c[:60] for c, _ in CASES])
def test_bad_input_exit_2_names_the_field_writes_nothing(tmp_path, capsys, files, case, needle):
    out = tmp_path / "out"
    code, err = inproc(capsys, _argv(case, files, out))
    assert code == 2, err
    assert needle in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []             # no output, no staged temp folder


@pytest.mark.parametrize("case, needle", [
    ("run --k 0", "--k"),
    ("run --mode ar --prompt-file {latin1}", "UTF-8"),
    ("simulate --profile {future}", "schema_version"),
    ("optimize --profile {corrupt}", "corrupt.json"),
    ("calibrate {measurements}", "rounds"),
])
def test_bad_input_subprocess(tmp_path, files, case, needle):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "saguaro", *_argv(case, files, out)], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=120)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert p.stdout == "" and list(tmp_path.iterdir()) == []

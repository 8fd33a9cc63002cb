"""`bash bench/gpu_check.sh --dry-run` runs end to end on a CPU: every step of gpu_check.py succeeds on tiny
shapes and writes its results, the fitted profiles load, the one-device placement runs (tiny pair, draft in a
second process and on a side stream, which on CPU is a helper thread) are lossless, no MPS daemon is started,
and the GPU pytest files skip cleanly."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calibration import Profile

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_dry_run(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(["bash", "bench/gpu_check.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=560)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    steps = json.loads((tmp_path / "results.json").read_text())["steps"]
    for name in ("env", "ceilings", "grid_llama", "fit_llama", "grid_qwen", "fit_qwen", "decode_bandwidth",
                 "link", "exec_runs", "runs_llama", "projection_llama", "runs_qwen", "projection_qwen"):
        assert steps[name]["ok"], (name, steps[name].get("error"))
    grid = steps["grid_llama"]["result"]
    assert {r["who"] for r in grid} == {"target", "draft"} and all(r["median_s"] > 0 for r in grid)
    assert {r["mode"] for r in steps["runs_qwen"]["result"]} == {"ar", "sd", "ssd"}
    assert all(r["predicted_tokens_per_s"] > 0 for r in steps["runs_llama"]["result"])
    prof = Profile.from_json(tmp_path / steps["fit_llama"]["result"]["profile_file"])
    assert prof.target(1, 1, 32) > 0 and prof.provenance["source"] == "measured"
    placement = json.loads((tmp_path / "placement_no-mps.json").read_text())   # draft and target on one device
    runs = {(r["mode"], r["draft_placement"]): r for r in placement["rows"]}
    assert set(runs) == {("ar", "process"), ("sd", "process"), ("ssd", "process"), ("ssd", "stream")}
    assert all(r.get("lossless") and r["tokens_per_s"] > 0 for r in runs.values()), placement["rows"]
    assert "no CUDA stream" in runs[("ssd", "stream")]["where"]
    assert "no MPS run" in p.stdout
    junit = (tmp_path / "pytest_gpu.xml").read_text()  # the GPU tests skip without CUDA, none fails
    assert 'failures="0"' in junit and 'errors="0"' in junit and "<skipped" in junit

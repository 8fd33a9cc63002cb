"""bench/bench_presets.py: the cross-validation table runs, writes JSON, and passes the 15% target."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_presets_writes_rows(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_presets", ROOT / "bench" / "bench_presets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "cv.json"
    assert mod.main(["--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["levels"]) == {"serving", "saguaro"}
    for level in data["levels"].values():
        assert level["median_abs_error"] <= 0.15 and level["rows"]
        assert all(r["predicted_s"] > 0 and r["source"] for r in level["rows"])
    assert "held-out median" in capsys.readouterr().out

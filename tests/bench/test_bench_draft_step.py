"""bench_draft_step runs end to end on the shipped draft: two "versions" (this checkout twice, in
subprocesses) interleaved, a summary per configuration, and the drafted tokens agree between them."""

from __future__ import annotations

import json
from pathlib import Path

from bench.bench_draft_step import main

ROOT = Path(__file__).resolve().parents[2]


def test_bench_draft_step_ab_smoke(tmp_path):
    out = tmp_path / "ab.json"
    rc = main(["--versions", f"a={ROOT},b={ROOT}", "--passes", "1", "--calls", "3", "--warmup", "1",
               "--batches", "1,2", "--temps", "0,0.7", "--sampler-c", "0.5", "--out", str(out)])
    assert rc == 0
    got = json.loads(out.read_text())
    assert got["meta"]["tokens_agree"]
    assert set(got["results"]) == {"b1_t0", "b1_t0.7", "b2_t0", "b2_t0.7"}
    for row in got["results"].values():
        assert row["a"]["ratio_to_first"] == 1.0 and row["b"]["median_cpu_ms"] > 0

"""The zero-drafting ceiling of a real run: AR (no drafting) sits exactly at it; SD and SSD lie between their
throughput and tokens / verification time (which also drops prefills and the verifier's bookkeeping)."""

from __future__ import annotations

import pytest
from exec_helpers import tiny_models

from saguaro_exec import run
from saguaro_exec.config import RunConfig
from saguaro_sim.config import SpecConfig

PROMPTS = [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12]]


def _run(mode: str):
    target, draft = tiny_models()
    spec = SpecConfig(mode=mode, k=3) if mode != "ar" else SpecConfig(mode="ar")
    return run(RunConfig(spec=spec, target=target, draft=draft, prompts=PROMPTS, max_new_tokens=24, threads=1))


def test_ar_runs_at_its_zero_drafting_ceiling():
    rep = _run("ar")
    assert rep.ceiling_tokens_per_s == pytest.approx(rep.tokens_per_s, rel=1e-9)
    assert rep.verify_bound_tokens_per_s > rep.tokens_per_s     # prefills are outside the verify time


@pytest.mark.parametrize("mode", ["sd", "ssd"])
def test_speculative_ceiling_lies_between_throughput_and_verify_bound(mode):
    rep = _run(mode)
    rounds = rep.measurements.rounds
    waited = sum(r["wait_s"] + r["msg_s"] for r in rounds)
    assert waited > 0                                            # the draft costs something here
    assert rep.tokens_per_s < rep.ceiling_tokens_per_s <= rep.verify_bound_tokens_per_s
    total = sum(len(t) for t in rep.token_ids)
    assert rep.ceiling_tokens_per_s == pytest.approx(total / (rep.wall_s - waited), rel=1e-9)
    assert rep.summary()["verify_bound_tokens_per_s"] == rep.verify_bound_tokens_per_s

"""A model loaded from a checkpoint is warmed up (model/warm.py): its lean plan is built at load, not on the first
request, and the warm-up leaves what the model computes unchanged (bitwise); an in-memory model is not touched."""

from __future__ import annotations

from pathlib import Path

import torch

from saguaro_exec.model import load_model
from saguaro_exec.model.lean_forward import lean_capable
from saguaro_exec.model.masks import causal_mask
from saguaro_exec.speculator.process import load_source

DEEP = Path(__file__).resolve().parents[2] / "saguaro_exec" / "assets" / "tiny" / "target-deep"


def _prefill(model, tokens: list[int]) -> torch.Tensor:
    t = len(tokens)
    cache = model.new_cache(1, t + 4)
    pos = torch.arange(t).view(1, -1)
    with torch.inference_mode():
        return model(torch.tensor([tokens]), pos, cache, pos, causal_mask(torch.zeros(1, dtype=torch.long), t, t))


def test_load_source_builds_the_plan_and_keeps_the_logits():
    cold = load_model(DEEP)
    assert "_lean_plan" not in cold.__dict__          # a bare load has not run a forward yet
    warm = load_source(str(DEEP), "cpu", "float32")
    assert lean_capable(warm) and "_lean_plan" in warm.__dict__
    plan = warm.__dict__["_lean_plan"]
    tokens = [5, 17, 200, 3, 99, 42, 7]
    got = _prefill(warm, tokens)
    assert warm.__dict__["_lean_plan"] is plan         # the first request reuses the load's plan
    assert torch.equal(got, _prefill(cold, tokens))


def test_in_memory_source_is_used_as_given():
    """A model the caller passes in runs no forward before the run (its forwards may be instrumented or fail on
    purpose: tests/exec/test_faults.py, test_synthetic.py count and fail them)."""
    model = load_model(DEEP)
    assert "_lean_plan" not in load_source(model, "cpu", "float32").__dict__

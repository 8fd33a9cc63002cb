"""Consecutive single-token decodes of a batch (the draft's jit: K steps from the true prefix) with what each
step would remake made once: on the lean path every step's positions, additive causal mask, RoPE tables and
K/V write index, built for all steps at once, and each step the lean forward called directly
(``CachedModel.tree_step``). Elsewhere (CUDA graphs, flash, a tensor-parallel cache) each step is the plain
``CachedModel.decode``, as it was."""

from __future__ import annotations

from collections.abc import Callable

import torch

from saguaro_exec.engine.cached_model import CachedModel

StepFn = Callable[[torch.Tensor, int], torch.Tensor]


def step_decoder(runner: CachedModel, starts: list[int], steps: int) -> StepFn:
    """``step(tokens, i)``: tokens [B, 1] appended at slot / position starts[b] + i (i < ``steps``, the steps
    taken in order), returning logits [B, V]; bitwise ``runner.decode(tokens, [s + i for s in starts])[:, 0]``
    (tests/exec/test_decode_steps.py)."""
    if not runner.lean or steps <= 0:
        return lambda tokens, i: runner.decode(tokens, [s + i for s in starts])[:, 0]
    need = max(starts) + steps
    if need > runner.capacity:
        raise RuntimeError(f"KV cache overflow: need {need} slots, capacity {runner.capacity}")
    with torch.inference_mode():
        pos = torch.tensor(starts, dtype=torch.long).view(1, -1, 1) + torch.arange(steps).view(-1, 1, 1)  # [S, B, 1]
        seen = torch.arange(need).view(1, 1, 1, need) <= pos.unsqueeze(-1)      # query at p sees slots <= p
        mask = runner.step_mask(seen)                                           # [S, B, 1, need], additive
        width = need - steps + 1                                                # step i attends width + i slots
        made = [(p, mask[i, :, :, :width + i], inputs)
                for i, (p, inputs) in enumerate(zip(pos.unbind(0), runner.step_inputs(pos, pos)))]

    def step(tokens: torch.Tensor, i: int) -> torch.Tensor:
        p, m, inputs = made[i]
        with torch.inference_mode():
            return runner.tree_step(tokens, p, p, m, inputs)[:, 0]

    return step

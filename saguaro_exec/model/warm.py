"""One small forward when a model is loaded from a checkpoint, so that the first request does not pay the cold start.

Why: the first forward of a freshly loaded model builds the lean forward's fused weights (``lean_forward._plan``:
~6 ms for the 12-layer tiny target cold) and touches every kernel and allocator path once. Served inside the run,
that lands on the first request's time to first token (11 ms over a warm prefill on the deep pair, 2026-12-02).
Engines warm up at load for the same reason (vLLM's profile and graph-capture runs); the cost moves to load time.
"""

from __future__ import annotations

import torch

from saguaro_exec.model.masks import causal_mask

WARM_TOKENS = 4     # a prefill-shaped forward (several tokens), over a cache of twice that


@torch.inference_mode()
def warm_up(model: torch.nn.Module) -> None:
    """Run ``WARM_TOKENS`` tokens through ``model`` over a scratch cache (the model's own state is untouched)."""
    cache = model.new_cache(1, 2 * WARM_TOKENS)
    ar = torch.arange(WARM_TOKENS, device=cache.device).view(1, -1)
    start = torch.zeros(1, dtype=torch.long, device=cache.device)
    model(torch.zeros_like(ar), ar, cache, ar, causal_mask(start, WARM_TOKENS, 2 * WARM_TOKENS))

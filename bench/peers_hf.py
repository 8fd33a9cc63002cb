"""Hugging Face transformers as the peer: greedy ``generate``, assisted generation (``assistant_model=``) with
the lookahead matched to ours or left at transformers' defaults, and prompt-lookup decoding. Optional: only
bench/bench_peers.py imports it, and only when transformers is installed."""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

MIN_VERSION = "4.37"   # prompt_lookup_num_tokens (assisted generation itself: 4.29)


@dataclass
class PeerRun:
    """One pass of one peer over all prompts: generated ids per prompt and the timed seconds (model loading
    excluded); forward counts when they were counted (None otherwise)."""

    tokens: list[list[int]]
    seconds: float
    target_forwards: int | None = None
    draft_forwards: int | None = None

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def tokens_per_target_forward(self) -> float | None:
        """Generated tokens per target forward, prefill included (1.0 for AR)."""
        return self.n_tokens / self.target_forwards if self.target_forwards else None

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.seconds if self.seconds > 0 else 0.0


def missing_reason() -> str | None:
    """Why the transformers peer cannot run here (None: it can)."""
    try:
        import transformers
        from packaging.version import Version
    except ImportError:
        return ("transformers is not installed (optional benchmark dependency: "
                "pip install transformers torch==<the installed torch>)")
    if Version(transformers.__version__) < Version(MIN_VERSION):
        return f"transformers {transformers.__version__} is older than {MIN_VERSION} (no prompt-lookup decoding)"
    return None


def versions() -> dict:
    import transformers

    try:
        import sklearn  # noqa: F401 - transformers' adaptive assistant confidence threshold needs it
        has_sklearn = True
    except ImportError:
        has_sklearn = False
    return {"transformers": transformers.__version__, "torch": torch.__version__, "sklearn_available": has_sklearn}


def load(path: str) -> torch.nn.Module:
    """AutoModelForCausalLM from a local HF-layout directory, float32, eval, without progress bars."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.set_verbosity_error()        # assisted generation warns about its own inner generate() call
    logging.disable_progress_bar()
    return AutoModelForCausalLM.from_pretrained(path).to(torch.float32).eval()


def assistant_config(assistant: torch.nn.Module, k: int | None):
    """The assistant's GenerationConfig for one variant. transformers reads the lookahead from the
    *assistant's* generation_config, so K is set there: K drafted tokens every round (constant schedule, no
    confidence-based early stop). k=None keeps transformers' defaults as loaded."""
    cfg = copy.deepcopy(assistant.generation_config)
    if k is not None:
        cfg.num_assistant_tokens = k
        cfg.num_assistant_tokens_schedule = "constant"
        cfg.assistant_confidence_threshold = 0.0
    return cfg


def effective_assistant_settings(cfg) -> dict:
    """num_assistant_tokens / schedule / confidence threshold as transformers resolves them (its global
    defaults fill fields left None, as AssistedCandidateGenerator does), and whether the threshold is used."""
    cfg = copy.deepcopy(cfg)
    if hasattr(cfg, "_get_default_generation_params"):
        cfg.update(**cfg._get_default_generation_params(), defaults_only=True)
    threshold = getattr(cfg, "assistant_confidence_threshold", None)
    return {"num_assistant_tokens": cfg.num_assistant_tokens,
            "num_assistant_tokens_schedule": cfg.num_assistant_tokens_schedule,
            "assistant_confidence_threshold": threshold,
            # transformers applies (and adapts) the threshold only when scikit-learn imports
            "assistant_confidence_threshold_active": bool(threshold) and versions()["sklearn_available"]}


@contextmanager
def count_forwards(model: torch.nn.Module):
    """Counts the model's top-level forward calls inside the block: yields a one-item list."""
    n = [0]

    def hook(module, args):
        n[0] += 1

    handle = model.register_forward_pre_hook(hook)
    try:
        yield n
    finally:
        handle.remove()


class HFPeer:
    """A transformers decoding method: ``run`` decodes each prompt (batch 1) with ``generate`` at T = 0."""

    def __init__(self, name: str, target: torch.nn.Module, eos_id: int, assistant: torch.nn.Module | None = None,
                 assistant_cfg=None, **generate_kwargs) -> None:
        self.name, self.target, self.eos_id = name, target, eos_id
        self.assistant, self.assistant_cfg, self.kwargs = assistant, assistant_cfg, generate_kwargs

    def settings(self) -> dict:
        """The generate() arguments beyond the common ones, and the assistant's resolved lookahead."""
        out = {k: v for k, v in self.kwargs.items()}
        if self.assistant is not None:
            out["assistant_model"] = "draft"
            out.update(effective_assistant_settings(self.assistant_cfg))
        return out

    def _one(self, ids: list[int], max_new: int) -> tuple[list[int], float]:
        x = torch.tensor([ids], dtype=torch.long)
        extra = dict(self.kwargs)
        if self.assistant is not None:
            self.assistant.generation_config = self.assistant_cfg   # this variant's lookahead (and its state)
            extra["assistant_model"] = self.assistant
        t0 = time.perf_counter()
        out = self.target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=False,
                                   eos_token_id=self.eos_id, pad_token_id=self.eos_id, **extra)
        dt = time.perf_counter() - t0
        return out[0, len(ids):].tolist(), dt

    def run(self, prompts: list[list[int]], max_new: int, count: bool = False) -> PeerRun:
        """All prompts one after another; ``count`` also counts target / assistant forwards (warm-up pass)."""
        if not count:
            outs = [self._one(p, max_new) for p in prompts]
            return PeerRun([o[0] for o in outs], sum(o[1] for o in outs))
        with count_forwards(self.target) as nt:
            if self.assistant is not None:
                with count_forwards(self.assistant) as nd:
                    outs = [self._one(p, max_new) for p in prompts]
            else:
                nd = None
                outs = [self._one(p, max_new) for p in prompts]
        return PeerRun([o[0] for o in outs], sum(o[1] for o in outs), nt[0], nd[0] if nd else None)


def make_peers(target: torch.nn.Module, draft: torch.nn.Module, k: int, eos_id: int) -> dict[str, HFPeer]:
    """The four transformers peers, by name."""
    return {
        "hf_greedy": HFPeer("hf_greedy", target, eos_id),
        "hf_assisted_k": HFPeer("hf_assisted_k", target, eos_id, draft, assistant_config(draft, k)),
        "hf_assisted_default": HFPeer("hf_assisted_default", target, eos_id, draft, assistant_config(draft, None)),
        "hf_pld": HFPeer("hf_pld", target, eos_id, prompt_lookup_num_tokens=k),
    }

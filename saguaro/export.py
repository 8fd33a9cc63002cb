"""A recommended configuration in the forms serving engines and `saguaro run` take.

SD: vLLM's and SGLang's draft-model speculative decoding settings. SSD: our TOML (a [spec] table), which
`saguaro run --config FILE` reads as it is. AR: no speculation settings at all.

Flag names, as documented (looked up 2026-12):
- vLLM: `--speculative-config '{"model": ..., "num_speculative_tokens": K, "method": "draft_model"}'`
  https://docs.vllm.ai/en/latest/features/speculative_decoding/draft_model/
- SGLang: `--speculative-algorithm STANDALONE --speculative-draft-model-path ... --speculative-num-steps K
  --speculative-eagle-topk 1 --speculative-num-draft-tokens K+1` (a chain of K drafted tokens plus the root)
  https://docs.sglang.io/docs/advanced_features/speculative_decoding
"""

from __future__ import annotations

import json
import shlex

from calibration.errors import ConfigError
from saguaro_sim.config import SpecConfig

VLLM_DOC = "https://docs.vllm.ai/en/latest/features/speculative_decoding/draft_model/"
SGLANG_DOC = "https://docs.sglang.io/docs/advanced_features/speculative_decoding"


def _sd(spec: SpecConfig, engine: str) -> None:
    if spec.mode != "sd":
        raise ConfigError("spec.mode", f"{engine} settings exist for SD recommendations, got {spec.mode!r}", "sd")


def vllm_speculative_config(spec: SpecConfig, draft_model: str) -> dict:
    """vLLM's speculative_config for an SD recommendation (LLM(speculative_config=...) / --speculative-config)."""
    _sd(spec, "vLLM")
    return {"model": draft_model, "num_speculative_tokens": spec.k, "method": "draft_model"}


def vllm_args(spec: SpecConfig, draft_model: str) -> list[str]:
    """`vllm serve` arguments for an SD recommendation."""
    return ["--speculative-config", json.dumps(vllm_speculative_config(spec, draft_model))]


def sglang_args(spec: SpecConfig, draft_model: str) -> list[str]:
    """`python -m sglang.launch_server` arguments for an SD recommendation (draft-model chain, top-k 1)."""
    _sd(spec, "SGLang")
    return ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", draft_model,
            "--speculative-num-steps", str(spec.k), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(spec.k + 1)]


def ssd_toml(spec: SpecConfig, note: str = "") -> str:
    """Our TOML for an SSD (or any) recommendation: a RunConfig file whose [spec] table is the configuration,
    which `saguaro run --config` takes as it is (and SpecConfig.load reads back)."""
    head = "".join(f"# {line}\n" for line in note.splitlines()) if note else ""
    return head + "[spec]\n" + spec.to_toml()


def export_texts(spec: SpecConfig, draft_model: str = "DRAFT_MODEL", note: str = "") -> dict[str, str]:
    """File name suffix -> text: always `.toml`; SD also `.vllm.txt` and `.sglang.txt` (shell-quoted flags)."""
    out = {".toml": ssd_toml(spec, note)}
    if spec.mode == "sd":
        out[".vllm.txt"] = f"# vLLM, {VLLM_DOC}\nvllm serve TARGET_MODEL {shlex.join(vllm_args(spec, draft_model))}\n"
        out[".sglang.txt"] = (f"# SGLang, {SGLANG_DOC}\npython -m sglang.launch_server --model-path TARGET_MODEL "
                              f"{shlex.join(sglang_args(spec, draft_model))}\n")
    return out

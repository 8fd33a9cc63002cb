"""Model-shape presets (decoder-only transformers) and the per-token byte and FLOP counts derived from them.

Numbers are the models' Hugging Face config.json values (cited per entry).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from calibration.errors import ConfigError, check_number


@dataclass(frozen=True)
class ModelShape:
    """Layer count and widths of a Llama/Qwen-style decoder (GQA attention, SwiGLU MLP)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool

    def __post_init__(self) -> None:
        for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
            check_number(f"shape.{key}", getattr(self, key), 1, 1e9, integer=True)

    def layer_params(self) -> int:
        """Weights in one layer: q, k, v, o projections, gate/up/down MLP, two RMSNorms."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        return attn + mlp + 2 * self.hidden

    def params(self) -> int:
        """Total parameters (embeddings counted once when tied)."""
        emb = self.vocab * self.hidden
        return self.layers * self.layer_params() + emb * (1 if self.tied_embeddings else 2) + self.hidden

    def kv_heads_per_device(self, tp: int) -> int:
        """KV heads held by one device under tensor parallelism (replicated when kv_heads < tp)."""
        return max(1, math.ceil(self.kv_heads / tp))

    def to_dict(self) -> dict:
        """Plain numbers plus the derived parameter count."""
        return {**asdict(self), "params": self.params()}


SHAPES: dict[str, ModelShape] = {
    # meta-llama/Llama-3.1-8B config.json: num_hidden_layers 32, hidden_size 4096, num_attention_heads 32,
    # num_key_value_heads 8, head_dim 128, intermediate_size 14336, vocab_size 128256, tie_word_embeddings false
    "llama-3.1-8b": ModelShape("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, False),
    # meta-llama/Llama-3.1-70B config.json: 80 layers, hidden 8192, 64 heads, 8 KV heads, head_dim 128,
    # intermediate 28672, vocab 128256, untied
    "llama-3.1-70b": ModelShape("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, False),
    # meta-llama/Llama-3.2-1B config.json: 16 layers, hidden 2048, 32 heads, 8 KV heads, head_dim 64,
    # intermediate 8192, vocab 128256, tie_word_embeddings true
    "llama-3.2-1b": ModelShape("llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, True),
    # meta-llama/Llama-3.2-3B config.json: 28 layers, hidden 3072, 24 heads, 8 KV heads, head_dim 128,
    # intermediate 8192, vocab 128256, tied
    "llama-3.2-3b": ModelShape("llama-3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256, True),
    # Qwen/Qwen3-0.6B config.json: 28 layers, hidden 1024, 16 heads, 8 KV heads, head_dim 128,
    # intermediate 3072, vocab 151936, tie_word_embeddings true
    "qwen3-0.6b": ModelShape("qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936, True),
    # Qwen/Qwen3-8B config.json: 36 layers, hidden 4096, 32 heads, 8 KV heads, head_dim 128,
    # intermediate 12288, vocab 151936, untied
    "qwen3-8b": ModelShape("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, False),
    # Qwen/Qwen3-32B config.json: 64 layers, hidden 5120, 64 heads, 8 KV heads, head_dim 128,
    # intermediate 25600, vocab 151936, untied
    "qwen3-32b": ModelShape("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936, False),
}

_ALIASES = {"llama-70b": "llama-3.1-70b", "llama-8b": "llama-3.1-8b", "llama-1b": "llama-3.2-1b",
            "llama-3b": "llama-3.2-3b", "qwen-0.6b": "qwen3-0.6b", "qwen-8b": "qwen3-8b", "qwen-32b": "qwen3-32b"}


def get_shape(name: str | ModelShape, field: str = "model") -> ModelShape:
    """A model-shape preset by name (case-insensitive; a ModelShape passes through); ConfigError lists the known."""
    if isinstance(name, ModelShape):
        return name
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in SHAPES:
        raise ConfigError(field, f"unknown model shape {name!r}", ", ".join(SHAPES))
    return SHAPES[key]

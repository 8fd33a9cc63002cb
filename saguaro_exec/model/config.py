"""ModelConfig: the shape of a Llama / Qwen2 / Qwen3 decoder, read from and written to HF config.json
(the HF layout, its defaults and its checks: hf_config.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from calibration.errors import check_int
from saguaro_exec.model import hf_config
from saguaro_exec.model.errors import ConfigError
from saguaro_exec.model.hf_config import ARCHITECTURES

# API ranges of the shape fields (the same as config.json's)
_RANGES = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
           "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads",
           "intermediate_size": "intermediate_size", "head_dim": "head_dim",
           "max_position_embeddings": "max_position_embeddings"}
ROPE_TYPES = ("default", "linear", "llama3")


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    head_dim: int | None = None  # None: hidden_size // num_heads
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # HF layout, e.g. {"rope_type": "llama3", "factor": 8.0, ...}
    rms_norm_eps: float = 1e-5
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k before RoPE
    attention_bias: bool = False  # Llama / Qwen3: bias on q/k/v/o; Qwen2: always, on q/k/v only
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    architecture: str = "llama"  # "llama" | "qwen2" | "qwen3"
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self) -> None:
        if self.architecture == "qwen2":
            self.attention_bias = True       # Qwen2's q/k/v always carry a bias (o_proj never)
        if self.head_dim is None:
            if isinstance(self.num_heads, int) and self.num_heads > 0 and self.hidden_size % self.num_heads:
                raise ConfigError("ModelConfig.head_dim", f"not given and hidden_size ({self.hidden_size}) is "
                                  f"not divisible by num_heads ({self.num_heads})", "an explicit head_dim")
            self.head_dim = self.hidden_size // max(self.num_heads, 1)
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        for name, hf_key in _RANGES.items():
            lo, hi = hf_config.INT_RANGES[hf_key]
            check_int(f"ModelConfig.{name}", getattr(self, name), lo, hi)
        for name in ("qk_norm", "attention_bias", "tie_word_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"ModelConfig.{name}", f"got {getattr(self, name)!r}", "True | False")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError("ModelConfig.num_kv_heads", f"{self.num_kv_heads} does not divide "
                              f"num_heads ({self.num_heads})", "a divisor of num_heads")
        if self.head_dim % 2:
            raise ConfigError("ModelConfig.head_dim", f"{self.head_dim} is odd", "an even number (RoPE)")
        if self.architecture not in ARCHITECTURES:
            raise ConfigError("ModelConfig.architecture", f"unknown value {self.architecture!r}",
                              " | ".join(ARCHITECTURES))
        for name in ("rope_theta", "rms_norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise ConfigError(f"ModelConfig.{name}", f"got {value!r}", "a finite number > 0")
        for name in ("bos_token_id", "eos_token_id"):
            ids = getattr(self, name)
            ids = [] if ids is None else (ids if isinstance(ids, list) else [ids])
            for i in ids:
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.vocab_size:
                    raise ConfigError(f"ModelConfig.{name}", f"{i!r} is outside the vocabulary",
                                      f"[0, {self.vocab_size})")
        self._validate_rope_scaling()

    def _validate_rope_scaling(self) -> None:
        rs = self.rope_scaling
        if rs is None:
            return
        if not isinstance(rs, dict):
            raise ConfigError("ModelConfig.rope_scaling", f"got {type(rs).__name__}", "a dict or None")
        kind = self.rope_type
        if kind not in ROPE_TYPES:
            raise ConfigError("ModelConfig.rope_scaling", f"rope type {kind!r} is not supported", " | ".join(ROPE_TYPES))
        if kind in ("linear", "llama3"):
            factor = rs.get("factor")
            if isinstance(factor, bool) or not isinstance(factor, int | float) or factor <= 0:
                raise ConfigError("ModelConfig.rope_scaling['factor']", f"got {factor!r}", "a number > 0")
        if kind == "llama3":
            for key in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
                if not isinstance(rs.get(key), int | float):
                    raise ConfigError(f"ModelConfig.rope_scaling['{key}']", "missing", "a number (rope type 'llama3')")
            if not rs["high_freq_factor"] > rs["low_freq_factor"]:
                raise ConfigError("ModelConfig.rope_scaling['high_freq_factor']",
                                  "must exceed low_freq_factor", f"> {rs['low_freq_factor']}")

    @property
    def rope_type(self) -> str:
        if self.rope_scaling is None:
            return "default"
        return str(self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default")))

    @property
    def qkv_bias(self) -> bool:
        """q/k/v projections carry a bias (Qwen2 always; Llama / Qwen3 with attention_bias)."""
        return self.attention_bias or self.architecture == "qwen2"

    @property
    def o_bias(self) -> bool:
        """o_proj carries a bias (Llama / Qwen3 with attention_bias; never Qwen2)."""
        return self.attention_bias and self.architecture != "qwen2"

    @property
    def eos_ids(self) -> list[int]:
        e = self.eos_token_id
        return [] if e is None else (list(e) if isinstance(e, list) else [e])

    def num_params(self) -> int:
        h, hd = self.hidden_size, self.head_dim
        attn = h * hd * (2 * self.num_heads + 2 * self.num_kv_heads)
        mlp = 3 * h * self.intermediate_size
        norms = 2 * h + (2 * hd if self.qk_norm else 0)
        norms += hd * (self.num_heads + 2 * self.num_kv_heads) * self.qkv_bias + h * self.o_bias
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * (attn + mlp + norms) + emb + h

    # ------------------------------------------------------------------ HF layout
    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> ModelConfig:
        """From a parsed config.json; errors name the config.json key (hf_config.model_kwargs)."""
        return cls(**hf_config.model_kwargs(d))

    def to_hf(self) -> dict[str, Any]:
        """The config.json dict (transformers reads it back as the same model)."""
        return hf_config.to_hf(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

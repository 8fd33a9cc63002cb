"""ModelConfig: the shape of a Llama / Qwen3 decoder, read from and written to HF config.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from saguaro_exec.model.errors import ConfigError

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}
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
    attention_bias: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    architecture: str = "llama"  # "llama" | "qwen3"
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self) -> None:
        if self.head_dim is None:
            if isinstance(self.num_heads, int) and self.num_heads > 0 and self.hidden_size % self.num_heads:
                raise ConfigError("ModelConfig.head_dim", f"not given and hidden_size ({self.hidden_size}) is "
                                  f"not divisible by num_heads ({self.num_heads})", "an explicit head_dim")
            self.head_dim = self.hidden_size // max(self.num_heads, 1)
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                     "intermediate_size", "head_dim", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"ModelConfig.{name}", f"got {value!r}", "a positive integer")
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
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"ModelConfig.{name}", f"got {value!r}", "a number > 0")
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
    def eos_ids(self) -> list[int]:
        e = self.eos_token_id
        return [] if e is None else (list(e) if isinstance(e, list) else [e])

    def num_params(self) -> int:
        h, hd = self.hidden_size, self.head_dim
        attn = h * hd * (2 * self.num_heads + 2 * self.num_kv_heads)
        mlp = 3 * h * self.intermediate_size
        norms = 2 * h + (2 * hd if self.qk_norm else 0)
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * (attn + mlp + norms) + emb + h

    # ------------------------------------------------------------------ HF layout
    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> ModelConfig:
        if not isinstance(d, dict):
            raise ConfigError("config.json", f"holds {type(d).__name__}", "a JSON object")
        arch = _architecture_of(d)
        if d.get("hidden_act", "silu") not in ("silu", "swish"):
            raise ConfigError("config.json hidden_act", f"{d['hidden_act']!r} is not supported", "silu")
        if d.get("mlp_bias", False):
            raise ConfigError("config.json mlp_bias", "true is not supported", "false")
        if arch == "qwen3" and d.get("use_sliding_window", False):
            raise ConfigError("config.json use_sliding_window", "true is not supported", "false")
        rope_theta = d.get("rope_theta")
        rope_scaling = d.get("rope_scaling")
        params = d.get("rope_parameters")  # newer transformers layout
        if isinstance(params, dict):
            rope_theta = params.get("rope_theta", rope_theta)
            if params.get("rope_type", "default") != "default" and rope_scaling is None:
                rope_scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        if isinstance(rope_scaling, dict) and rope_scaling.get("rope_type", rope_scaling.get("type")) == "default":
            rope_scaling = None
        missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                               "intermediate_size") if k not in d]
        if missing:
            raise ConfigError(f"config.json {missing[0]}", f"missing required field(s): {', '.join(missing)}")
        return cls(
            vocab_size=d["vocab_size"],
            hidden_size=d["hidden_size"],
            num_layers=d["num_hidden_layers"],
            num_heads=d["num_attention_heads"],
            num_kv_heads=d.get("num_key_value_heads") or d["num_attention_heads"],
            intermediate_size=d["intermediate_size"],
            head_dim=d.get("head_dim"),
            rope_theta=_float("rope_theta", rope_theta if rope_theta is not None else (1e6 if arch == "qwen3" else 1e4)),
            rope_scaling=rope_scaling,
            rms_norm_eps=_float("rms_norm_eps", d.get("rms_norm_eps", 1e-6 if arch == "qwen3" else 1e-5)),
            qk_norm=arch == "qwen3",
            attention_bias=bool(d.get("attention_bias", False)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            max_position_embeddings=d.get("max_position_embeddings", 2048),
            architecture=arch,
            bos_token_id=d.get("bos_token_id"),
            eos_token_id=d.get("eos_token_id"),
        )

    def to_hf(self) -> dict[str, Any]:
        if self.qk_norm != (self.architecture == "qwen3"):
            raise ConfigError("ModelConfig.qk_norm", f"{self.qk_norm} cannot be written as HF architecture "
                              f"{self.architecture!r}", "qk_norm=True exactly when architecture='qwen3'")
        return {
            "architectures": [ARCHITECTURES[self.architecture]],
            "model_type": self.architecture,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "attention_bias": self.attention_bias,
            "attention_dropout": 0.0,
            "mlp_bias": False,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": "float32",
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _float(key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ConfigError(f"config.json {key}", f"expected a number, got {v!r}", "a number > 0")
    return float(v)


def _architecture_of(d: dict[str, Any]) -> str:
    names = d.get("architectures") or []
    if not isinstance(names, list):
        raise ConfigError("config.json architectures", f"expected a list, got {names!r}",
                          "[" + " | ".join(ARCHITECTURES.values()) + "]")
    model_type = d.get("model_type")
    for arch, cls_name in ARCHITECTURES.items():
        if cls_name in names or model_type == arch:
            return arch
    shown = names or model_type
    raise ConfigError("config.json architectures", f"{shown!r} is not supported", " | ".join(ARCHITECTURES.values()))

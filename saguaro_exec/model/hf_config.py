"""Reading a Hugging Face config.json into ModelConfig: every field typed and range-checked (errors name
the config.json key), defaults for absent fields as transformers' config class of that architecture has them."""

from __future__ import annotations

from typing import Any

from calibration.errors import check_bool, check_int, check_number
from saguaro_exec.model.errors import ConfigError

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}

# transformers' defaults (LlamaConfig / Qwen2Config / Qwen3Config) for the fields a config.json may omit;
# head_dim None: hidden_size // num_attention_heads
DEFAULTS = {
    "llama": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 2048, "head_dim": None,
              "tie_word_embeddings": False, "attention_bias": False},
    "qwen2": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 32768, "head_dim": None,
              "tie_word_embeddings": False, "attention_bias": True},       # Qwen2: q/k/v always carry a bias
    "qwen3": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 32768, "head_dim": 128,
              "tie_word_embeddings": False, "attention_bias": False},
}

# sane ranges of the shape fields (integers): anything outside is a corrupt or foreign config.json
INT_RANGES = {"vocab_size": (1, 10_000_000), "hidden_size": (1, 131_072), "num_hidden_layers": (1, 1024),
              "num_attention_heads": (1, 4096), "num_key_value_heads": (1, 4096),
              "intermediate_size": (1, 1_048_576), "head_dim": (2, 4096),
              "max_position_embeddings": (1, 1 << 27)}
FLOAT_RANGES = {"rms_norm_eps": (0.0, 1.0), "rope_theta": (0.0, 1e12)}


def field(key: str) -> str:
    return f"config.json {key}"


def architecture_of(d: dict[str, Any]) -> str:
    """llama | qwen2 | qwen3, from `architectures` (or `model_type`); ConfigError for anything else."""
    names = d.get("architectures") or []
    if not isinstance(names, list):
        raise ConfigError(field("architectures"), f"expected a list, got {names!r}"[:120],
                          "[" + " | ".join(ARCHITECTURES.values()) + "]")
    model_type = d.get("model_type")
    for arch, cls_name in ARCHITECTURES.items():
        if cls_name in names:
            return arch
    for arch in ARCHITECTURES:
        if model_type == arch:
            return arch
    shown = str(names or model_type)[:80]
    raise ConfigError(field("architectures"), f"{shown} is not supported", " | ".join(ARCHITECTURES.values()))


def _unsupported(d: dict[str, Any], arch: str) -> None:
    """Features the executor does not implement: refused, never ignored."""
    if d.get("hidden_act", "silu") not in ("silu", "swish"):
        raise ConfigError(field("hidden_act"), f"{str(d['hidden_act'])[:40]!r} is not supported", "silu")
    if check_bool(field("mlp_bias"), d.get("mlp_bias", False) or False):
        raise ConfigError(field("mlp_bias"), "true is not supported", "false")
    if arch != "llama" and check_bool(field("use_sliding_window"), d.get("use_sliding_window", False) or False):
        raise ConfigError(field("use_sliding_window"), "true is not supported", "false")
    layer_types = d.get("layer_types")
    if layer_types is not None and (not isinstance(layer_types, list)
                                    or any(t != "full_attention" for t in layer_types)):
        raise ConfigError(field("layer_types"), "only full attention is supported", "all \"full_attention\"")
    tp = d.get("pretraining_tp", 1)
    if tp not in (None, 1):
        raise ConfigError(field("pretraining_tp"), f"{str(tp)[:20]} is not supported", "1")


def _rope(d: dict[str, Any]) -> tuple[Any, Any]:
    """(rope_theta, rope_scaling) from the old layout or the newer `rope_parameters` one."""
    rope_theta, rope_scaling = d.get("rope_theta"), d.get("rope_scaling")
    params = d.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise ConfigError(field("rope_parameters"), f"expected an object, got {type(params).__name__}", "{...}")
    if isinstance(params, dict):
        rope_theta = params.get("rope_theta", rope_theta)
        if params.get("rope_type", "default") != "default" and rope_scaling is None:
            rope_scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    if rope_scaling is not None and not isinstance(rope_scaling, dict):
        raise ConfigError(field("rope_scaling"), f"expected an object or null, got {type(rope_scaling).__name__}",
                          "{rope_type, factor, ...} | null")
    if isinstance(rope_scaling, dict) and rope_scaling.get("rope_type", rope_scaling.get("type")) == "default":
        rope_scaling = None
    return rope_theta, rope_scaling


def _token_ids(key: str, v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, list):
        return [check_int(f"{field(key)}[{i}]", x, 0, 10_000_000) for i, x in enumerate(v)] or None
    return check_int(field(key), v, 0, 10_000_000)


def model_kwargs(d: object) -> dict[str, Any]:
    """ModelConfig keyword arguments from a parsed config.json (a dict); ConfigError naming the key."""
    if not isinstance(d, dict):
        raise ConfigError("config.json", f"holds a JSON {type(d).__name__}", "a JSON object")
    arch = architecture_of(d)
    _unsupported(d, arch)
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "intermediate_size") if k not in d]
    if missing:
        raise ConfigError(field(missing[0]), f"missing required field(s): {', '.join(missing)}")
    dflt = DEFAULTS[arch]
    v = {k: d[k] for k in INT_RANGES if d.get(k) is not None}
    v.setdefault("num_key_value_heads", d["num_attention_heads"])
    v.setdefault("max_position_embeddings", dflt["max_position_embeddings"])
    if dflt["head_dim"] is not None:
        v.setdefault("head_dim", dflt["head_dim"])
    for k, (lo, hi) in INT_RANGES.items():
        if k in v:
            check_int(field(k), v[k], lo, hi)
    rope_theta, rope_scaling = _rope(d)
    floats = {"rms_norm_eps": d.get("rms_norm_eps"), "rope_theta": rope_theta}
    for k, (lo, hi) in FLOAT_RANGES.items():
        floats[k] = float(check_number(field(k), dflt[k] if floats[k] is None else floats[k], lo, hi, lo_open=True))
    bools = {}
    for k in ("tie_word_embeddings", "attention_bias"):
        raw = d.get(k)
        bools[k] = dflt[k] if raw is None or arch == "qwen2" and k == "attention_bias" else check_bool(field(k), raw)
    return dict(vocab_size=v["vocab_size"], hidden_size=v["hidden_size"], num_layers=v["num_hidden_layers"],
                num_heads=v["num_attention_heads"], num_kv_heads=v["num_key_value_heads"],
                intermediate_size=v["intermediate_size"], head_dim=v.get("head_dim"),
                rope_theta=floats["rope_theta"], rope_scaling=rope_scaling, rms_norm_eps=floats["rms_norm_eps"],
                qk_norm=arch == "qwen3", architecture=arch, max_position_embeddings=v["max_position_embeddings"],
                bos_token_id=_token_ids("bos_token_id", d.get("bos_token_id")),
                eos_token_id=_token_ids("eos_token_id", d.get("eos_token_id")), **bools)


def to_hf(c: Any) -> dict[str, Any]:
    """The config.json of a ModelConfig (transformers reads it back as the same model)."""
    if c.qk_norm != (c.architecture == "qwen3"):
        raise ConfigError("ModelConfig.qk_norm", f"{c.qk_norm} cannot be written as HF architecture "
                          f"{c.architecture!r}", "qk_norm=True exactly when architecture='qwen3'")
    return {
        "architectures": [ARCHITECTURES[c.architecture]], "model_type": c.architecture,
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim, "hidden_act": "silu",
        "max_position_embeddings": c.max_position_embeddings, "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta, "rope_scaling": c.rope_scaling, "attention_bias": c.attention_bias,
        "attention_dropout": 0.0, "mlp_bias": False, "tie_word_embeddings": c.tie_word_embeddings,
        "bos_token_id": c.bos_token_id, "eos_token_id": c.eos_token_id, "torch_dtype": "float32",
    }

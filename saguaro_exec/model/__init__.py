"""Model layer of the executor: config, static KV cache, transformer, masks, checkpoint I/O."""

from .config import ModelConfig
from .cuda_graph import GraphedForward
from .errors import ConfigError
from .kv_cache import KVCache
from .loading import load_model, random_model, read_config, save_model
from .masks import allow, causal_mask, contiguous_slots, prefix_mask
from .transformer import Transformer

__all__ = [
    "ConfigError", "GraphedForward", "KVCache", "ModelConfig", "Transformer", "allow", "causal_mask", "contiguous_slots",
    "load_model", "prefix_mask", "random_model", "read_config", "save_model",
]

"""Model layer of the executor: config, static KV cache, transformer, masks, checkpoint I/O."""

from saguaro_exec.model.config import ModelConfig
from saguaro_exec.model.cuda_graph import GraphedForward
from saguaro_exec.model.errors import ConfigError
from saguaro_exec.model.kv_cache import KVCache
from saguaro_exec.model.loading import load_model, random_model, read_config, save_model
from saguaro_exec.model.masks import allow, causal_mask, contiguous_slots, prefix_mask
from saguaro_exec.model.transformer import Transformer

__all__ = [
    "ConfigError", "GraphedForward", "KVCache", "ModelConfig", "Transformer", "allow", "causal_mask", "contiguous_slots",
    "load_model", "prefix_mask", "random_model", "read_config", "save_model",
]

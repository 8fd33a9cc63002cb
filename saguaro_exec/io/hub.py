"""Checkpoints named as Hugging Face hub ids (``meta-llama/Llama-3.1-8B``): resolved from the local hub cache
(HF_HOME / HF_HUB_CACHE) through huggingface_hub's own offline lookup, never the network."""

from __future__ import annotations

import os
import re
from pathlib import Path

# not via saguaro_exec.model: that package's __init__ loads loading.py, which imports this module
from calibration.errors import ConfigError

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}(@[A-Za-z0-9._/-]{1,128})?$")
ALLOWED = "a local checkpoint folder (config.json + *.safetensors), or a hub id (org/name) in the local hub cache"


def looks_like_hub_id(value: str) -> bool:
    """org/name[@revision] that is not an existing local path."""
    return bool(_HUB_ID.match(value)) and not os.path.lexists(value)


def resolve_checkpoint(value: str | os.PathLike, field: str = "checkpoint") -> Path:
    """A local folder as it is; a hub id -> its snapshot folder in the local hub cache. ConfigError naming
    ``field`` when it is neither (huggingface_hub missing, or the id is not cached)."""
    text = os.fspath(value)
    try:
        if Path(text).is_dir():
            return Path(text)
        exists = os.path.lexists(text)
    except (OSError, ValueError) as e:          # a name too long, a NUL byte
        raise ConfigError(field, f"not a usable path ({e.__class__.__name__})", ALLOWED) from None
    if exists or not looks_like_hub_id(text):
        raise ConfigError(field, f"checkpoint folder {text[:200]!r} does not exist", ALLOWED)
    return _from_cache(text, field)


def _from_cache(hub_id: str, field: str) -> Path:
    repo_id, _, revision = hub_id.partition("@")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        raise ConfigError(field, f"{hub_id!r} is not a local folder, and resolving hub ids needs huggingface_hub "
                          "(pip install huggingface_hub)", ALLOWED) from None
    try:
        path = snapshot_download(repo_id, revision=revision or None, local_files_only=True,
                                 allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt"])
    except LocalEntryNotFoundError:
        from huggingface_hub.constants import HF_HUB_CACHE

        raise ConfigError(field, f"{hub_id!r} is not in the local hub cache {HF_HUB_CACHE} (offline lookup)",
                          "download it first: huggingface-cli download " + repo_id) from None
    except (OSError, ValueError) as e:           # HFValidationError is a ValueError
        raise ConfigError(field, f"cannot resolve {hub_id!r} from the local hub cache ({e.__class__.__name__})",
                          ALLOWED) from None
    return Path(path)

"""Load / save Hugging Face layout checkpoints (config.json + safetensors), and random init at any shape."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from calibration.jsonio import load_json_any
from saguaro_exec.io.hub import resolve_checkpoint
from saguaro_exec.model.config import ModelConfig
from saguaro_exec.model.errors import ConfigError
from saguaro_exec.model.transformer import Transformer

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


# tensors some checkpoints carry that no model reads (transformers ignores them too)
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def read_config(path: str | os.PathLike) -> ModelConfig:
    """The ModelConfig of a checkpoint folder (or hub id in the local cache); errors name the config.json key."""
    path = resolve_checkpoint(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ConfigError("checkpoint config.json", f"{str(path)!r} has no config.json")
    raw = load_json_any(cfg_file, "checkpoint config", f"checkpoint config.json ({cfg_file})")
    try:
        return ModelConfig.from_hf(raw)
    except ConfigError as e:
        raise ConfigError(e.field, f"{e.problem} (in {cfg_file})", e.allowed) from e


def _shard_map(path: Path) -> dict[str, Path]:
    """tensor name -> shard file."""
    if (path / INDEX_FILE).is_file():
        index = load_json_any(path / INDEX_FILE, "checkpoint index", f"checkpoint {INDEX_FILE}")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
            raise ConfigError(f"checkpoint {INDEX_FILE}", f"malformed index {path / INDEX_FILE} (no weight_map "
                              "of tensor name -> file name)")
        missing = sorted({f for f in weight_map.values() if not (path / f).is_file()})
        if missing:
            raise ConfigError("checkpoint shards", f"file(s) listed in {INDEX_FILE} are missing from {str(path)!r}: {missing}")
        return {name: path / f for name, f in weight_map.items()}
    if (path / SINGLE_FILE).is_file():
        return {name: path / SINGLE_FILE for name in _keys(path / SINGLE_FILE)}
    if any(path.glob("*.bin")) or any(path.glob("*.pt")) or any(path.glob("*.pth")):
        raise ConfigError("checkpoint weights", f"{str(path)!r} has only pickle weights", "safetensors files (never unpickled)")
    raise ConfigError("checkpoint weights", f"{str(path)!r} has neither {SINGLE_FILE} nor {INDEX_FILE}")


def _keys(file: Path) -> list[str]:
    try:
        with safe_open(str(file), framework="pt") as f:
            return list(f.keys())
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ConfigError("checkpoint shards", f"{file} is unreadable or truncated ({e})") from e


def _read_tensors(shards: dict[str, Path], names: list[str]) -> dict[str, torch.Tensor]:
    by_file: dict[Path, list[str]] = {}
    for n in names:
        by_file.setdefault(shards[n], []).append(n)
    out: dict[str, torch.Tensor] = {}
    for file, file_names in by_file.items():
        try:
            with safe_open(str(file), framework="pt") as f:
                present = set(f.keys())
                for n in file_names:
                    if n not in present:
                        raise ConfigError(f"checkpoint tensor {n}", f"listed in the index but absent from {file}")
                    out[n] = f.get_tensor(n)
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001
            raise ConfigError("checkpoint shards", f"{file} is unreadable or truncated ({e})") from e
    return out


def load_model(path: str | os.PathLike, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32) -> Transformer:
    """Build a Transformer from a local HF checkpoint directory or a cached hub id (safetensors only, never
    unpickles). The checkpoint's tensors must be exactly the ones the config.json describes."""
    path = resolve_checkpoint(path)
    config = read_config(path)
    shards = _shard_map(path)
    with torch.device("meta"):
        model = Transformer(config)
    expected = {n: tuple(p.shape) for n, p in model.named_parameters(remove_duplicate=False)}
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    check_tensor_names(expected, shards, config, path)
    tensors = _read_tensors(shards, list(expected))
    state = {}
    for name, shape in expected.items():
        t = tensors[name]
        if tuple(t.shape) != shape:
            raise ConfigError(f"checkpoint tensor {name}", f"shape {tuple(t.shape)} in {str(path)!r} does not match "
                              "config.json", str(shape))
        state[name] = t.to(device=device, dtype=dtype)
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    return model.eval()


def _names(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")


def check_tensor_names(expected: dict, shards: dict, config: ModelConfig, path: Path) -> None:
    """Missing tensors and checkpoint tensors no layer reads are both errors naming them (a config.json with
    fewer layers than the weights, a bias the architecture lacks, a foreign checkpoint)."""
    missing = [n for n in expected if n not in shards]
    if missing:
        raise ConfigError(f"checkpoint tensor {missing[0]}", f"missing from {str(path)!r} (missing: {_names(missing)})",
                          "the tensors config.json describes")
    tied_head = {"lm_head.weight"} if config.tie_word_embeddings else set()   # tied: the head is the embedding
    unused = sorted(n for n in shards if n not in expected and n not in tied_head
                    and not n.endswith(IGNORED_SUFFIXES))
    if unused:
        raise ConfigError(f"checkpoint tensor {unused[0]}", f"in {str(path)!r} but not used by the model its "
                          f"config.json describes (unused: {_names(unused)})", "the tensors config.json describes")


def random_model(config: ModelConfig, seed: int = 0, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32, std: float = 0.02) -> Transformer:
    """Random weights at any shape (latency profiling, tests). Deterministic for a given seed and device."""
    with torch.device("meta"):
        model = Transformer(config)
    model = model.to(dtype).to_empty(device=device)  # cast on meta: no float32 copy of a big model
    model.tie_weights()
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, std, generator=gen)
    return model.eval()


def save_model(model: Transformer, path: str | os.PathLike, extra_files: dict[str, str | bytes] | None = None) -> Path:
    """Write config.json + model.safetensors (HF layout) atomically: a temp dir beside `path`, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = model.config.to_hf()
    cfg["torch_dtype"] = str(model.dtype).removeprefix("torch.")
    tensors = {n: p.detach().to("cpu").contiguous() for n, p in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        save_file(tensors, str(tmp / SINGLE_FILE), metadata={"format": "pt"})
        for name, content in (extra_files or {}).items():
            mode = "wb" if isinstance(content, bytes) else "w"
            with open(tmp / name, mode) as fh:
                fh.write(content)
        for f in tmp.iterdir():  # mkdtemp is 0700 and safetensors may write 0600: use ordinary modes
            f.chmod(0o644)
        tmp.chmod(0o755)
        if path.exists():
            old = path.parent / f".{path.name}.old-{os.getpid()}"
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path

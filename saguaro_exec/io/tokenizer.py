"""Tokenizers: the tiny pair's byte tokenizer, or a Hugging Face tokenizer.json when a checkpoint has one."""

from __future__ import annotations

import json
import os

from calibration.errors import check_text
from calibration.jsonio import load_json_any
from saguaro_exec.model.errors import ConfigError

BYTE_TOKENIZER_FILE = "byte_tokenizer.json"  # marker file shipped with the tiny pair


class ByteTokenizer:
    """Bytes 0..255 are tokens 0..255; BOS and EOS follow (256, 257 by default)."""

    kind = "byte"

    def __init__(self, bos_id: int = 256, eos_id: int = 257, vocab_size: int | None = None) -> None:
        if bos_id < 256 or eos_id < 256 or bos_id == eos_id:
            raise ConfigError("byte tokenizer bos_id/eos_id", f"got {bos_id}, {eos_id}", "distinct ids >= 256")
        self.bos_id, self.eos_id = bos_id, eos_id
        self.vocab_size = vocab_size if vocab_size is not None else max(bos_id, eos_id) + 1

    def encode(self, text: str, bos: bool = False) -> list[int]:
        ids = list(check_text("prompts", text).encode("utf-8"))
        return [self.bos_id, *ids] if bos else ids

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")

    def to_json(self) -> str:
        return json.dumps({"type": "byte", "bos_id": self.bos_id, "eos_id": self.eos_id,
                           "vocab_size": self.vocab_size}, indent=2) + "\n"

    @classmethod
    def from_file(cls, file: str | os.PathLike) -> ByteTokenizer:
        d = load_json_any(file, "byte tokenizer")
        try:
            if not isinstance(d, dict) or d.get("type") != "byte":
                raise ConfigError(f"{file} type", f"got {str(d)[:60] if not isinstance(d, dict) else d.get('type')!r}",
                                  "byte")
            return cls(int(d["bos_id"]), int(d["eos_id"]), d.get("vocab_size"))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(str(file), f"malformed byte tokenizer file ({e!r})") from e


class HFTokenizer:
    """Thin wrapper over `tokenizers.Tokenizer` with the same encode/decode surface as ByteTokenizer."""

    kind = "hf"

    def __init__(self, file: str | os.PathLike, bos_id: int | None = None, eos_id: int | None = None) -> None:
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for a corrupt file
            raise ConfigError(f"checkpoint tokenizer.json ({file})", f"unreadable ({' '.join(str(e).split())[:160]})",
                              "a tokenizer.json written by Hugging Face tokenizers") from None
        self.bos_id, self.eos_id = bos_id, eos_id
        self.vocab_size = self._tok.get_vocab_size()

    def encode(self, text: str, bos: bool = False) -> list[int]:
        ids = self._tok.encode(check_text("prompts", text), add_special_tokens=False).ids
        return [self.bos_id, *ids] if bos and self.bos_id is not None else ids

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)


def load_tokenizer(checkpoint_dir: str | os.PathLike) -> ByteTokenizer | HFTokenizer:
    """tokenizer.json -> HFTokenizer; byte_tokenizer.json (the tiny pair) -> ByteTokenizer; else ConfigError."""
    from saguaro_exec.io.hub import resolve_checkpoint

    path = resolve_checkpoint(checkpoint_dir)
    bos = eos = None
    if (path / "config.json").is_file():
        from saguaro_exec.model.loading import read_config

        cfg = read_config(path)            # the same typed checks as the model's
        bos, eos = cfg.bos_token_id, (cfg.eos_ids or [None])[0]
    if (path / "tokenizer.json").is_file():
        return HFTokenizer(path / "tokenizer.json", bos, eos)
    if (path / BYTE_TOKENIZER_FILE).is_file():
        return ByteTokenizer.from_file(path / BYTE_TOKENIZER_FILE)
    raise ConfigError("checkpoint tokenizer", f"{str(path)!r} has neither tokenizer.json nor {BYTE_TOKENIZER_FILE}")

"""Pieces shared by the CLI subcommands: profile / workload flags, --json output, staged --out folders."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from calibration.acceptance import AcceptanceModel
from calibration.errors import ConfigError
from calibration.profile import Profile, list_presets, load_preset
from saguaro_sim.workload import Workload

DEFAULT_PROFILE = "h100-llama70b-tp4-llama1b"


def add_profile_arg(p: argparse.ArgumentParser) -> None:
    """--profile NAME|PATH and --acceptance-length AL[@K]."""
    p.add_argument("--profile", default=DEFAULT_PROFILE, metavar="NAME|PATH",
                   help=f"preset name (see `saguaro presets`) or a profile JSON path (default {DEFAULT_PROFILE})")
    p.add_argument("--acceptance-length", metavar="AL[@K]",
                   help="replace the profile's acceptance by a geometric one with AL expected tokens per round "
                        "(accepted + bonus) at lookahead K (default K: --k, else 4); 1 < AL < K+1")


def profile_from_args(args: argparse.Namespace) -> Profile:
    """The --profile, with --acceptance-length applied when given; errors name the flag."""
    profile = load_profile(args.profile)
    text = getattr(args, "acceptance_length", None)
    if text is None:
        return profile
    al_text, _, k_text = str(text).partition("@")
    try:
        al = float(al_text)
        k = int(k_text) if k_text else (getattr(args, "k", None) or 4)
    except ValueError:
        raise ConfigError("--acceptance-length", f"expected AL or AL@K, got {text!r}",
                          "a number, optionally @ an integer lookahead, e.g. 3.2@4") from None
    try:
        acc = AcceptanceModel.from_acceptance_length(al, k, c_effect=profile.acceptance.c_effect)
    except ConfigError as e:
        raise ConfigError("--acceptance-length", e.problem, e.allowed) from None
    return profile.with_(acceptance=acc, provenance={**profile.provenance,
                                                      "acceptance": f"--acceptance-length {al:g} at k={k}"})


def add_workload_args(p: argparse.ArgumentParser, sequences: int = 16, output: int = 512) -> None:
    """--num-sequences, --output-tokens, --prompt-tokens."""
    g = p.add_argument_group("workload")
    g.add_argument("--num-sequences", type=int, default=sequences, help=f"sequences to decode (default {sequences})")
    g.add_argument("--output-tokens", type=int, default=output, help=f"tokens generated per sequence (default {output})")
    g.add_argument("--prompt-tokens", type=int, default=128, help="prompt length per sequence (default 128)")


def add_output_args(p: argparse.ArgumentParser) -> None:
    """--json and --out DIR."""
    p.add_argument("--json", action="store_true", help="print machine-readable JSON only (on stdout)")
    p.add_argument("--out", metavar="DIR", help="write results, plots and traces into DIR (replaced atomically)")


def load_profile(name: str) -> Profile:
    """A preset by name or a profile JSON by path; errors name the field (--profile / the file)."""
    if os.path.exists(name) and not name.endswith(".json") and os.sep not in name:
        name = f".{os.sep}{name}"  # a bare file name in the current folder
    try:
        return load_preset(name)
    except ConfigError as e:
        if e.field == "profile":
            raise ConfigError("--profile", e.problem, e.allowed or ", ".join(list_presets())) from None
        raise


def check_checkpoint_flags(args: argparse.Namespace) -> None:
    """--target / --draft, when given, must be existing folders (checked before any work)."""
    for name in ("target", "draft"):
        v = getattr(args, name, None)
        if v is not None and not Path(v).is_dir():
            raise ConfigError(f"--{name}", f"checkpoint folder {v!r} does not exist",
                              "a folder with config.json + *.safetensors")


SPEC_FLAGS = ("mode", "k", "fanout", "fanout_miss", "budget", "sampler_c", "backup", "temperature",
              "batch_size", "draft_devices", "fanout_shape")


def flag(name: str) -> str:
    """The CLI flag of a config field: sampler_c -> --sampler-c."""
    return f"--{name.replace('_', '-')}"


def add_spec_args(g: argparse._ArgumentGroup, show_draft_devices: bool = True) -> None:
    """The SpecConfig flags (all default to None: 'not given', so a --config file's value stands)."""
    g.add_argument("--mode", help="ar | sd | ssd (default ssd)")
    g.add_argument("--k", type=int, help="lookahead K: draft tokens per round (default 4)")
    g.add_argument("--fanout", help="fan-out F_0..F_K, e.g. 4,3,2,1,1 (default: --fanout-shape for the budget)")
    g.add_argument("--fanout-miss", help="fan-out after a backup speculation (default: same as --fanout)")
    g.add_argument("--fanout-shape", help="geometric | uniform, used when --fanout is not given")
    g.add_argument("--budget", type=int, help="cached outcomes per sequence, sum of F_k (default 4*(K+1))")
    g.add_argument("--sampler-c", type=float, help="Saguaro sampling constant C in [0, 1] (default 1)")
    g.add_argument("--backup", help="neural | fast | auto (default neural)")
    g.add_argument("--temperature", type=float, help="sampling temperature (default 0)")
    g.add_argument("--batch-size", type=int, help="sequences decoded together (default 1)")
    g.add_argument("--draft-devices", type=int, help="draft devices sharing the speculation tree (default 1)"
                   if show_draft_devices else argparse.SUPPRESS)


def spec_overrides(args: argparse.Namespace) -> dict:
    """The SpecConfig fields given as flags, fan-out lists parsed; errors name the flag."""
    over = {}
    for name in SPEC_FLAGS:
        v = getattr(args, name)
        if v is not None:
            over[name] = int_list(flag(name), v) if name in ("fanout", "fanout_miss") else v
    return over


def workload_from(args: argparse.Namespace) -> Workload:
    """Workload from the flags; errors name the flag."""
    try:
        return Workload(num_sequences=args.num_sequences, output_tokens=args.output_tokens,
                        prompt_tokens=args.prompt_tokens)
    except ConfigError as e:
        raise ConfigError(f"--{e.field.replace('_', '-')}", e.problem, e.allowed) from None


def int_list(field: str, text: str | None) -> tuple[int, ...] | None:
    """'4,3,2,1,1' -> (4, 3, 2, 1, 1); errors name the flag."""
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x != "")
    except ValueError:
        raise ConfigError(field, f"expected comma-separated integers, got {text!r}", "e.g. 4,3,2,1,1") from None


def print_json(obj: Any) -> None:
    """The only stdout output of a --json run."""
    sys.stdout.write(json.dumps(obj, indent=1, default=_plain) + "\n")


def _plain(o: Any) -> Any:
    if hasattr(o, "tolist"):  # numpy scalars and arrays
        return o.tolist()
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def table(rows: list[list[Any]], header: list[str]) -> str:
    """Plain aligned text table (numbers right-aligned)."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    num = [all(isinstance(r[i], int | float) for r in rows) if rows else False for i in range(len(header))]

    def line(vals: list[str]) -> str:
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(vals, widths, num)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in cells])


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "-" if v is None else str(v)
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    if isinstance(v, list | tuple):
        return ",".join(map(str, v))
    return str(v)


class StagedDir:
    """An --out folder written in a hidden temp folder and renamed into place on success (else removed).

    Usage: `with StagedDir(path) as d: write into d`; nothing appears at `path` unless the block succeeds.
    An existing empty folder, or one a previous run wrote (it holds MARKER), is replaced; anything else at
    `path` is an error, raised before any work.
    """

    MARKER = ".saguaro-out"  # written into every output folder: only such folders (or empty ones) are replaced

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = Path(path) if path else None
        self.tmp: Path | None = None
        p = self.path
        if p is not None and p.exists():
            if not p.is_dir():
                raise ConfigError("--out", f"{p} exists and is not a folder", "a new folder or a saguaro output folder")
            if any(p.iterdir()) and not (p / self.MARKER).is_file():
                raise ConfigError("--out", f"{p} is a non-empty folder saguaro did not write",
                                  "a new or empty folder, or a previous saguaro output folder")

    def __enter__(self) -> Path | None:
        if self.path is None:
            return None
        anchor = self.path.absolute().parent
        while not anchor.exists():
            anchor = anchor.parent
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.tmp-", dir=anchor))
        (self.tmp / self.MARKER).write_text("written by saguaro; this folder is replaced by the next run\n")
        return self.tmp

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.tmp is None:
            return
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        old = None
        if self.path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.old-", dir=self.path.parent))
            os.replace(self.path, old / "x")
        os.replace(self.tmp, self.path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

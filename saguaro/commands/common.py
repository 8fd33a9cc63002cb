"""Pieces shared by the CLI subcommands: the one flag parser (typed numeric flags, errors renamed to the
flag the user wrote), profile / workload / checkpoint flags, --json output; staged outputs: output.py."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

from calibration.acceptance import AcceptanceModel
from calibration.errors import ConfigError, check_number
from calibration.profile import Profile, list_presets, load_preset
from saguaro.commands.output import StagedDir, StagedFile, emit
from saguaro_sim.workload import Workload

__all__ = ["StagedDir", "StagedFile", "emit"]


def integer(lo: int | None = None, hi: int | None = None):
    """argparse type: an integer flag in [lo, hi] (argparse names the flag; exit 2, one line)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text[:40]!r}") from None
        return _checked(value, lo, hi, True)

    parse.__name__ = "integer"
    return parse


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False):
    """argparse type: a finite number flag in [lo, hi] (or (lo, hi])."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
        return _checked(value, lo, hi, False, lo_open)

    parse.__name__ = "number"
    return parse


def _checked(value: float, lo: float | None, hi: float | None, integer: bool, lo_open: bool = False):
    try:
        return check_number("", value, lo, hi, integer=integer, lo_open=lo_open)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(f"{e.problem}; allowed: {e.allowed}") from None


@contextlib.contextmanager
def flag_errors(fields: dict[str, str] | tuple[str, ...]) -> Iterator[None]:
    """Inside: a ConfigError about one of ``fields`` (API field name -> flag; a tuple: --field-name) is
    re-raised naming the flag as the user wrote it."""
    names = fields if isinstance(fields, dict) else {f: flag(f) for f in fields}
    try:
        yield
    except ConfigError as e:
        if e.field in names:
            raise e.renamed(names[e.field]) from None
        raise

DEFAULT_PROFILE = "h100-llama70b-tp4-llama1b"


def add_profile_arg(p: argparse.ArgumentParser) -> None:
    """--profile NAME|PATH and --acceptance-length AL[@K]."""
    p.add_argument("--profile", default=DEFAULT_PROFILE, metavar="NAME|PATH",
                   help=f"preset name (see `saguaro presets`) or a profile JSON path (default {DEFAULT_PROFILE})")
    p.add_argument("--acceptance-length", metavar="AL[@K]",
                   help="replace the profile's acceptance by a geometric one with AL expected tokens per round "
                        "(accepted + bonus) at lookahead K (default K: --k, else 4); 1 < AL < K+1")


def profile_from_args(args: argparse.Namespace) -> Profile:
    """The --profile, with --acceptance-length, --shared-slowdown and --beside-slowdown applied when given; errors
    name the flag."""
    profile = load_profile(args.profile)
    for flag, field in (("--shared-slowdown", "shared_slowdown"), ("--beside-slowdown", "beside_slowdown")):
        if getattr(args, field, None) is not None:
            with flag_errors({f"profile.{field}": flag}):
                profile = profile.with_(**{field: getattr(args, field)})
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


def add_synthetic_args(g: argparse._ArgumentGroup) -> None:
    """--synthetic-acceptance-length AL and --synthetic-profile NAME (executor timing-only mode)."""
    g.add_argument("--synthetic-acceptance-length", type=number(), metavar="AL",
                   help="TIMING ONLY (not lossless): real forwards, accepted lengths drawn with AL expected tokens "
                        "per round at --k (1 < AL < K+1); SSD cache hits from --synthetic-profile's hit curve "
                        f"(default {DEFAULT_PROFILE})")
    g.add_argument("--synthetic-profile", metavar="NAME|PATH",
                   help="TIMING ONLY (not lossless): accepted lengths and SSD cache hits drawn from this profile's "
                        "acceptance model and hit curve (--synthetic-acceptance-length replaces the acceptance)")


SYNTHETIC_FIELDS = {"synthetic": "--synthetic-profile", "synthetic.acceptance": "--synthetic-acceptance-length",
                    "synthetic.hits": "--synthetic-profile", "synthetic.seed": "--seed"}


def synthetic_flag(field: str, args: argparse.Namespace) -> str | None:
    """The flag(s) a RunConfig error about ``synthetic`` names (None: not a synthetic field)."""
    if field in SYNTHETIC_FIELDS:
        return SYNTHETIC_FIELDS[field]
    first, _, other = field.partition(" / ")
    if first != "synthetic" or not other:
        return None
    used = "--synthetic-profile" if getattr(args, "synthetic_profile", None) else "--synthetic-acceptance-length"
    return f"{used} / {flag(other)}"


def synthetic_from_args(args: argparse.Namespace):
    """The SyntheticAcceptance the flags ask for (None when neither is given); errors name the flag."""
    from saguaro_exec.engine.synthetic import SyntheticAcceptance

    al, name = getattr(args, "synthetic_acceptance_length", None), getattr(args, "synthetic_profile", None)
    if al is None and name is None:
        return None
    try:
        s = SyntheticAcceptance.from_profile(load_profile_name(name or DEFAULT_PROFILE), al, args.seed or 0)
    except ConfigError as e:
        raise ConfigError(SYNTHETIC_FIELDS.get(e.field, "--synthetic-profile"), e.problem, e.allowed) from None
    if name is None:
        return SyntheticAcceptance(s.acceptance, s.hits, s.seed,
                                   f"--synthetic-acceptance-length {al:g}, hit curve of {DEFAULT_PROFILE}")
    return s


def load_profile_name(name: str) -> str:
    """A --synthetic-profile value as load_preset reads it (a bare file name in this folder gets ./)."""
    if os.path.exists(name) and not name.endswith(".json") and os.sep not in name:
        return f".{os.sep}{name}"
    return name


def add_workload_args(p: argparse.ArgumentParser, sequences: int = 16, output: int = 512) -> None:
    """--num-sequences, --output-tokens, --prompt-tokens."""
    g = p.add_argument_group("workload")
    g.add_argument("--num-sequences", type=integer(), default=sequences,
                   help=f"sequences to decode (default {sequences})")
    g.add_argument("--output-tokens", type=integer(), default=output,
                   help=f"tokens generated per sequence (default {output})")
    g.add_argument("--prompt-tokens", type=integer(), default=128, help="prompt length per sequence (default 128)")


def add_output_args(p: argparse.ArgumentParser) -> None:
    """--json and --out DIR."""
    p.add_argument("--json", action="store_true", help="print machine-readable JSON only (on stdout)")
    p.add_argument("--out", metavar="DIR", help="write results, plots and traces into DIR (replaced atomically)")


def load_profile(name: str, flag: str = "--profile") -> Profile:
    """A preset by name or a profile JSON by path; errors name the flag (``flag``) or the file."""
    if os.path.exists(name) and not name.endswith(".json") and os.sep not in name:
        name = f".{os.sep}{name}"  # a bare file name in the current folder
    try:
        return load_preset(name)
    except ConfigError as e:
        if e.field == "profile":
            raise ConfigError(flag, e.problem, e.allowed or ", ".join(list_presets())) from None
        raise


def check_checkpoint_flags(args: argparse.Namespace) -> None:
    """--target / --draft, when given, must be checkpoint folders or hub ids in the local hub cache (then
    replaced by their snapshot folder); --device / --draft-device must be usable here. Checked before any work."""
    from saguaro_exec.io.hub import resolve_checkpoint

    for name in ("target", "draft"):
        v = getattr(args, name, None)
        if v is not None:
            setattr(args, name, str(resolve_checkpoint(v, f"--{name}")))
    for name in ("device", "draft_device"):
        v = getattr(args, name, None)
        if v is not None:
            from saguaro_exec.devices import check_device, check_present

            check_device(flag(name), v)                       # the executor's one device rule
            with flag_errors({"device": flag(name)}):
                check_present([v], [v])                       # and the device exists on this machine


SPEC_FLAGS = ("mode", "k", "fanout", "fanout_miss", "budget", "sampler_c", "backup", "temperature",
              "batch_size", "draft_devices", "fanout_shape", "placement", "sharing")


def flag(name: str) -> str:
    """The CLI flag of a config field: sampler_c -> --sampler-c."""
    return f"--{name.replace('_', '-')}"


def add_spec_args(g: argparse._ArgumentGroup, show_draft_devices: bool = True) -> None:
    """The SpecConfig flags (all default to None: 'not given', so a --config file's value stands)."""
    g.add_argument("--mode", help="ar | sd | ssd (default ssd)")
    g.add_argument("--k", type=integer(), help="lookahead K: draft tokens per round (default 4)")
    g.add_argument("--fanout", help="fan-out F_0..F_K, e.g. 4,3,2,1,1 (default: --fanout-shape for the budget)")
    g.add_argument("--fanout-miss", help="fan-out after a backup speculation (default: same as --fanout)")
    g.add_argument("--fanout-shape", help="geometric | uniform, used when --fanout is not given")
    g.add_argument("--budget", type=integer(), help="cached outcomes per sequence, sum of F_k (default 4*(K+1))")
    g.add_argument("--sampler-c", type=number(), help="Saguaro sampling constant C in [0, 1] (default 1)")
    g.add_argument("--backup", help="neural | fast | auto (default neural)")
    g.add_argument("--temperature", type=number(), help="sampling temperature (default 0)")
    g.add_argument("--batch-size", type=integer(), help="sequences decoded together (default 1)")
    g.add_argument("--draft-devices", type=integer(), help="draft devices sharing the speculation tree (default 1)"
                   if show_draft_devices else argparse.SUPPRESS)
    if show_draft_devices:   # planning only: the executor's placement is RunConfig's (draft device, --draft-placement)
        add_placement_args(g)


def add_placement_args(g: argparse._ArgumentGroup) -> None:
    """--placement, --sharing, --shared-slowdown and --beside-slowdown: where SSD's draft runs (planning commands)."""
    g.add_argument("--placement", help="separate (SSD's draft on devices of its own) | shared (on the target's "
                                       "one GPU, no extra device); default separate")
    g.add_argument("--sharing", help="with --placement shared: time-sliced (draft and target forwards serialize) | "
                                     "concurrent (MPS / streams, each slowed by --shared-slowdown); default time-sliced")
    g.add_argument("--shared-slowdown", type=number(), metavar="S",
                   help="concurrent sharing: each of draft and target S times slower while both run, 1 <= S <= 10 "
                        "(default: the profile's shared_slowdown, 1.5 unless measured)")
    g.add_argument("--beside-slowdown", type=number(), metavar="S",
                   help="separate placement on one host (CPU cores): verification and cache build each S times slower "
                        "while both compute, 1 <= S <= 10 (default: the profile's beside_slowdown, measured by "
                        "`saguaro profile`; 1 = no interference)")


def spec_overrides(args: argparse.Namespace) -> dict:
    """The SpecConfig fields given as flags, fan-out lists parsed; errors name the flag."""
    over = {}
    for name in SPEC_FLAGS:
        v = getattr(args, name, None)
        if v is not None:
            over[name] = int_list(flag(name), v) if name in ("fanout", "fanout_miss") else v
    return over


def workload_from(args: argparse.Namespace) -> Workload:
    """Workload from the flags; errors name the flag."""
    with flag_errors(("num_sequences", "output_tokens", "prompt_tokens")):
        return Workload(num_sequences=args.num_sequences, output_tokens=args.output_tokens,
                        prompt_tokens=args.prompt_tokens)


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
    emit(json.dumps(obj, indent=1, default=_plain))


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

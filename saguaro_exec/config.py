"""RunConfig: what ``saguaro_exec.run`` executes (SpecConfig + models + prompts + devices), from TOML, and
every check of a run's input: its fields here (devices through devices.py, the one device-string rule),
and the checks that need the loaded models (prompt ids, draft vocabulary, devices present) as functions."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from calibration.errors import ConfigError, check_choice, check_number
from calibration.hardware import HARDWARE, get_hardware
from calibration.jsonio import load_toml, parse_json
from saguaro_exec.devices import (
    check_device,
    check_draft_placement,
    check_target_devices,
    device_index,
    is_cuda,
)
from saguaro_exec.engine.synthetic import as_synthetic, check_synthetic
from saguaro_exec.faults import FALLBACKS, parse_fault
from saguaro_exec.measure.load import Arrivals
from saguaro_exec.model.accel import check_accel
from saguaro_exec.speculator.shm import supported as shm_supported
from saguaro_sim.config import SpecConfig

DTYPES = ("float32", "bfloat16", "float16")
SSD_PROTOCOLS = ("auto", "push", "reply")
TRANSPORTS = ("auto", "shm", "gloo")


def _check_model(name: str, value: object) -> None:
    from saguaro_exec.model import Transformer

    if value is None or isinstance(value, Transformer):
        return
    if not isinstance(value, str | os.PathLike):
        raise ConfigError(name, f"expected a checkpoint directory, got {type(value).__name__}",
                          "None (tiny pair) | a local Hugging Face checkpoint directory | a Transformer")
    from saguaro_exec.io.hub import resolve_checkpoint

    resolve_checkpoint(value, name)   # a folder, or a hub id already in the local cache (the loader's own rule)


def check_prompts(value: object) -> None:
    if value is None:
        return
    ok = isinstance(value, list | tuple) and len(value) > 0 and (
        all(isinstance(p, str) and p for p in value)
        or all(isinstance(p, list | tuple) and p and all(isinstance(t, int) for t in p) for p in value))
    if not ok:
        raise ConfigError("prompts", "expected a non-empty list of non-empty strings or token-id lists",
                          "list[str] | list[list[int]]")


def check_prompt_ids(ids: list[list[int]], vocab: int, context: int, max_new: int = 0) -> None:
    """Every encoded prompt: at least one token, ids in the vocabulary, shorter than the target's context,
    with room in that context for max_new generated tokens (generation never runs past it)."""
    for i, p in enumerate(ids):
        if not p:
            raise ConfigError(f"prompts[{i}]", "encodes to zero tokens", "at least one token")
        if min(p) < 0 or max(p) >= vocab:
            bad = next(t for t in p if t < 0 or t >= vocab)
            raise ConfigError(f"prompts[{i}]", f"token id {bad} is outside the vocabulary", f"ids in [0, {vocab})")
        if len(p) >= context:
            raise ConfigError(f"prompts[{i}]", f"{len(p)} tokens, longer than the target's context",
                              f"fewer than max_position_embeddings = {context} tokens")
    longest = max(map(len, ids), default=0)
    if longest + max_new > context:
        raise ConfigError("max_new_tokens", f"{max_new} new tokens after a {longest}-token prompt exceed the "
                          "target's context", f"at most max_position_embeddings - prompt = {context - longest}")


def _check_profile(value: object) -> None:
    if value is None or isinstance(value, str):
        return
    from calibration.profile import Profile

    if not isinstance(value, Profile):
        raise ConfigError("profile", f"expected a preset name, a profile JSON path or a Profile, got "
                          f"{type(value).__name__}", "a preset name | a .json path | calibration.Profile")


START_BASE_S, START_PER_GB_S = 60.0, 20.0     # auto start-up bound: interpreter + torch import, then reading


def start_timeout(config: RunConfig, source: object) -> float:
    """Seconds a child process that loads ``source`` may take to start: ``config.start_timeout_s``, else
    START_BASE_S + START_PER_GB_S per GB of its weights; never more than ``config.timeout_s``."""
    if config.start_timeout_s is not None:
        return min(config.start_timeout_s, config.timeout_s)
    if isinstance(source, str | os.PathLike):
        from saguaro_exec.io.hub import resolve_checkpoint

        folder = resolve_checkpoint(source)
        size = sum(f.stat().st_size for f in folder.iterdir() if f.suffix in (".safetensors", ".bin"))
    else:                                                  # an in-memory Transformer
        size = sum(t.numel() * t.element_size() for t in source.state_dict().values())
    return min(START_BASE_S + START_PER_GB_S * size / 1e9, config.timeout_s)


def check_vocab(target_vocab: int, draft_vocab: int) -> None:
    """The draft must share the target's vocabulary (tokens are compared id for id)."""
    if target_vocab != draft_vocab:
        raise ConfigError("draft", f"vocabulary size {draft_vocab} differs from the target's {target_vocab}",
                          f"a draft with vocab_size {target_vocab}")


@dataclass
class RunConfig:
    """A real run: ``spec`` decides AR/SD/SSD; models default to the shipped tiny pair, prompts to the
    built-in set; the prompts are one queue through ``spec.batch_size`` rows, a finished row taking the next
    prompt (continuous batching, engine/refill.py). ``threads``: torch intra-op threads per
    process (default 1). ``inline_draft`` (debugging) runs the SSD speculator in this process, no overlap.
    ``draft_placement`` (SSD): "process" = the draft in a process of its own (default); "stream" = in this
    process, building in a helper thread on a side CUDA stream beside the verification (speculator/stream.py;
    on CPU a thread without a stream, and the report says so); the draft device then defaults to the target's.
    SSD faults: a draft process that dies, sends a malformed reply or does not reply within
    ``draft_timeout_s`` (which must also cover a batch's draft prefill) is killed and the run continues
    in-process by ``fallback`` ("sd": the draft model loaded here; "ar": the target alone; "none": raise);
    ``report.faults`` records it. ``start_timeout_s`` bounds a child process's start-up (the draft process, a
    tensor-parallel worker: interpreter, torch import, connect, load its weights): one still not ready is
    killed, a draft's start-up failure then being a fault like any other; None = 60 s + 20 s per GB of the
    model's weights (``start_timeout``). ``inject_fault`` is test-only (faults.py).
    ``ssd_protocol``: "reply" = the draft answers each outcome (hit flags + speculation); "push" = the
    draft sends each speculation cache once built and the verifier looks hits up itself (no message on
    a hit's critical path); "auto" = push unless the cache's q rows (T > 0) exceed 4 MiB per round. ``profile``:
    the spec's open choices (fan-outs, backup "auto", protocol "auto") are settled by saguaro_sim.resolve with
    this profile, the planner's call; None = the shipped cpu-tinypair preset (meta says which). ``hardware``: a
    calibration.hardware preset whose peaks the achieved bandwidth and FLOP/s are compared with (default:
    detected from the CUDA device name; on CPU none, peak unknown). ``arrivals`` (load mode, AR, SD and SSD): requests
    arrive on the wall clock (Poisson or a trace, measure/load.py) and idle rows wait for them (SSD: the
    outcome tells the draft which rows take an arrived request; with no row live the verifier sleeps). ``target_devices``: the target split
    over these by tensor parallelism (rank 0, the verifier, on ``device`` = target_devices[0]; gloo on CPU,
    NCCL on CUDA); None runs it on ``device`` alone. ``transport``: what carries the SSD messages, "shm" =
    shared memory on this host, "gloo" = a gloo group; "auto" = shm when target and draft run on the CPU
    (Linux x86-64), else gloo. ``synthetic`` (engine/synthetic.py): timing-only mode,
    the real forwards with accepted lengths and cache hits drawn from a SyntheticAcceptance (or a mean
    acceptance length, or a profile name); never lossless. ``check_lossless`` (T = 0): every output is
    compared with the target's own greedy decoding of the same batch, a difference fails the run."""

    spec: SpecConfig = field(default_factory=SpecConfig)
    target: object = None
    draft: object = None
    prompts: list | None = None
    prompt_file: str | None = None
    max_new_tokens: int = 64
    device: str = "cpu"
    draft_device: str | None = None
    target_devices: list[str] | None = None   # tensor parallel over these (None: [device]); see tp.py
    dtype: str = "float32"
    seed: int = 0
    timeout_s: float = 600.0
    profile: object = None        # what the spec is resolved with: Profile | preset | .json (None: cpu-tinypair)
    threads: int | None = None
    inline_draft: bool = False
    draft_placement: str = "process"   # SSD: "process" | "stream" (in this process, side CUDA stream)
    draft_timeout_s: float = 5.0
    start_timeout_s: float | None = None   # child start-up bound (None: from the weights' size)
    fallback: str = "sd"
    inject_fault: str | None = None
    ssd_protocol: str = "auto"
    transport: str = "auto"       # SSD message transport: auto | shm | gloo (speculator/transport.py)
    hardware: str | None = None   # hardware preset for the roofline fractions (None: detected on CUDA)
    cuda_graphs: str = "auto"     # CUDA graphs for the steps: auto (on exactly on CUDA) | on | off; accel.py
    attention: str = "auto"       # auto (flash-attn when it imports, CUDA, bf16/fp16) | sdpa | flash
    synthetic: object = None      # SyntheticAcceptance | acceptance length | profile name: timing only
    check_lossless: bool = False  # T = 0: outputs == the target's greedy decoding, else the run fails
    arrivals: object = None       # load mode: measure/load.py Arrivals (or its dict); None = all at t = 0

    def __post_init__(self) -> None:
        if not isinstance(self.spec, SpecConfig):
            raise ConfigError("spec", f"expected a SpecConfig, got {type(self.spec).__name__}", "SpecConfig")
        _check_model("target", self.target)
        _check_model("draft", self.draft)
        check_prompts(self.prompts)
        if self.prompt_file is not None:
            if self.prompts is not None:
                raise ConfigError("prompt_file", "given together with prompts", "one of prompts | prompt_file")
            if not isinstance(self.prompt_file, str | os.PathLike):
                raise ConfigError("prompt_file", f"expected a path, got {type(self.prompt_file).__name__}",
                                  "an existing text/JSON file")
            if not Path(self.prompt_file).is_file():
                raise ConfigError("prompt_file", f"{self.prompt_file!r} not found", "an existing text/JSON file")
        check_number("max_new_tokens", self.max_new_tokens, 1, 1_000_000, integer=True)
        check_device("device", self.device)
        if self.draft_device is not None:
            check_device("draft_device", self.draft_device)
        self.target_devices = check_target_devices(self.target_devices, self.device, self.target)
        check_choice("dtype", self.dtype, DTYPES)
        check_accel(self.cuda_graphs, self.attention, [self.device] + [d for d in [self.draft_device] if d],
                    self.dtype)
        check_number("seed", self.seed, 0, 2**62, integer=True)
        check_number("timeout_s", self.timeout_s, 0.0, 1e7, lo_open=True)
        _check_profile(self.profile)
        if self.threads is not None:
            check_number("threads", self.threads, 1, 1024, integer=True)
        check_choice("ssd_protocol", self.ssd_protocol, SSD_PROTOCOLS)
        check_choice("transport", self.transport, TRANSPORTS)
        if self.transport == "shm" and not shm_supported():
            raise ConfigError("transport", "shared-memory hand-off needs Linux on x86-64", "auto | gloo")
        if not isinstance(self.inline_draft, bool):
            raise ConfigError("inline_draft", f"got {self.inline_draft!r}", "true | false")
        check_draft_placement(self.draft_placement, self.spec, self.inline_draft)
        in_process = self.inline_draft or self.draft_placement == "stream"   # SSD's speculator in this process
        check_number("draft_timeout_s", self.draft_timeout_s, 0.0, 1e7, lo_open=True)
        if self.start_timeout_s is not None:
            check_number("start_timeout_s", self.start_timeout_s, 0.0, 1e7, lo_open=True)
        check_choice("fallback", self.fallback, FALLBACKS)
        if parse_fault(self.inject_fault) is not None and (self.spec.mode != "ssd" or in_process):
            raise ConfigError("inject_fault", "needs a draft process", "mode = \"ssd\", draft_placement = \"process\"")
        self.arrivals = Arrivals.of(self.arrivals)
        if self.hardware is not None:
            if not isinstance(self.hardware, str):
                raise ConfigError("hardware", f"expected a preset name, got {type(self.hardware).__name__}",
                                  ", ".join(HARDWARE))
            get_hardware(self.hardware)      # ConfigError("hardware", ...) names the known presets
        if not isinstance(self.check_lossless, bool):
            raise ConfigError("check_lossless", f"got {self.check_lossless!r}", "true | false")
        if self.check_lossless and self.spec.temperature > 0:
            raise ConfigError("check_lossless", "compares with greedy decoding", "spec.temperature = 0")
        self.synthetic = as_synthetic(self.synthetic)
        check_synthetic(self.synthetic, self.spec, self.ssd_protocol, in_process, self.check_lossless)

    @property
    def resolved_draft_device(self) -> str:
        """Draft device: as given, else the target's (the GPU after the target's last one when it exists,
        unless draft_placement is "stream": a side stream of the target's GPU)."""
        if self.draft_device is not None:
            return self.draft_device
        if is_cuda(self.device) and self.draft_placement != "stream":
            import torch

            idx = max(device_index(d) for d in self.resolved_target_devices)
            if torch.cuda.device_count() > idx + 1:
                return f"cuda:{idx + 1}"
        return self.device

    @property
    def resolved_target_devices(self) -> list[str]:
        """The target's ranks: ``target_devices``, else [device]."""
        return list(self.target_devices) if self.target_devices else [self.device]

    def load_prompts(self) -> list:
        """The prompts to run: given, from ``prompt_file`` (.json list, .jsonl, or one per line with
        \\n escapes), or the built-in set."""
        if self.prompts is not None:
            return list(self.prompts)
        if self.prompt_file is None:
            from saguaro_exec.io.prompts import BUILTIN_PROMPTS

            return list(BUILTIN_PROMPTS)
        path = Path(self.prompt_file)
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError("prompt_file", f"{path}: invalid UTF-8 at byte {e.start}", "UTF-8 text") from None
        try:
            if path.suffix == ".json":
                prompts = parse_json(text, "prompt", "prompt_file")
            elif path.suffix == ".jsonl":
                prompts = [parse_json(line, "prompt", "prompt_file") for line in text.splitlines() if line.strip()]
            else:
                prompts = [line.replace("\\n", "\n") for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise ConfigError("prompt_file", f"{path}: invalid JSON ({e})", "a JSON list of strings") from None
        check_prompts(prompts)
        return prompts

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> RunConfig:
        """Top-level keys are RunConfig fields; the ``[spec]`` table is a SpecConfig."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(str(path), "config file not found", "an existing .toml file")
        data = load_toml(path)
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise ConfigError(f"{path}: {key}", "unknown key", ", ".join(sorted(known)))
        data = dict(data)
        data["spec"] = SpecConfig.from_dict(data.get("spec", {}), where=f"{path}: spec.")
        base = path.parent
        for key in ("target", "draft", "prompt_file", "profile"):
            if key == "profile" and not str(data.get(key, "")).endswith(".json"):
                continue                                  # a preset name, not a path
            if isinstance(data.get(key), str) and not os.path.isabs(data[key]):
                data[key] = str(base / data[key])
        arr = data.get("arrivals")
        if isinstance(arr, dict) and isinstance(arr.get("trace"), str) and not os.path.isabs(arr["trace"]):
            data["arrivals"] = {**arr, "trace": str(base / arr["trace"])}
        try:
            return cls(**data)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e.field}", e.problem, e.allowed) from None

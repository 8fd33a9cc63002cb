"""A RunConfig made concrete before any batch runs: model sources, prompt ids, the loaded target, the
fast paths, and the executor's resolved choices (fan-out, backup, message protocol), all checked."""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass

from calibration.errors import ConfigError
from saguaro_exec.config import RunConfig, check_prompt_ids, check_vocab, start_timeout
from saguaro_exec.devices import check_present
from saguaro_exec.model.accel import Accel, resolve_accel
from saguaro_exec.speculator.process import load_source
from saguaro_exec.tp.protocol import TPArgs
from saguaro_exec.tp.target import TPTarget
from saguaro_sim.resolve import ResolvedSpec, resolve, run_profile


def resolve_run(config: RunConfig) -> tuple[ResolvedSpec, str]:
    """The spec as this run executes it: saguaro_sim.resolve with config.profile (the planner's call, so
    what is planned is what runs), and a line saying which profile (the stated default when none is given)."""
    profile, resolved_with = run_profile(config.profile)
    protocol = config.ssd_protocol
    if config.synthetic is not None and protocol == "auto":
        protocol = "push"        # synthetic bonus tokens are chosen from the pushed cache rows (engine/synthetic.py)
    return resolve(config.spec, profile, protocol=protocol), resolved_with


@dataclass
class Prepared:
    """What every mode's batches share: the loaded target, the draft's source and config (None in AR),
    the prompts as token ids, one queue through spec.batch_size refilled rows (and the tokenizer when they were text)."""

    target: object                  # a Transformer, or a TPTarget over several devices
    target_src: object
    draft_src: object
    draft_config: object            # the draft's ModelConfig (None in AR)
    ids: list[list[int]]
    tokenizer: object
    accel: Accel                    # the target's fast path
    daccel: Accel                   # the draft's
    draft_device: str
    fanout: tuple[int, ...]         # primary F_0..F_K ((): AR)
    fanout_miss: tuple[int, ...]
    backup: str
    protocol: str | None            # SSD's message protocol (None otherwise)
    resolved: ResolvedSpec          # all of the above, as saguaro_sim.resolve settled them
    resolved_with: str              # which profile they were resolved with
    threads: int


def prepare(config: RunConfig, stack: ExitStack) -> Prepared:
    """Check the devices are here, encode the prompts, load the target (a TPTarget enters ``stack``) and
    settle the open choices; any bad input raises ConfigError before a batch runs."""
    spec = config.spec
    ddev = config.resolved_draft_device
    check_present([*config.resolved_target_devices, ddev], config.resolved_target_devices)
    target_src, draft_src = _sources(config)
    ids, tok = _encode(config.load_prompts(), target_src)
    accel = resolve_accel(config.cuda_graphs, config.attention, config.device, config.dtype)
    daccel = resolve_accel(config.cuda_graphs, config.attention, ddev, config.dtype)
    target = _load_target(config, target_src, stack)
    vocab = target.config.vocab_size
    check_prompt_ids(ids, vocab, target.config.max_position_embeddings, config.max_new_tokens)
    draft_config = config_of(draft_src) if spec.mode != "ar" else None
    if draft_config is not None:
        check_vocab(vocab, draft_config.vocab_size)
    rs, resolved_with = resolve_run(config)   # the planner's one resolver
    protocol = rs.protocol if spec.mode == "ssd" else None
    return Prepared(target, target_src, draft_src, draft_config, ids, tok, accel, daccel, ddev, rs.fanout,
                    rs.fanout_miss, rs.backup, protocol, rs, resolved_with,
                    config.threads or 1)      # tiny models: extra intra-op threads only add contention


def source_name(src: object) -> str:
    """A model source as the report names it: its path, or "in-memory <type>"."""
    return os.fspath(src) if isinstance(src, str | os.PathLike) else f"in-memory {type(src).__name__}"


def config_of(src: object):
    """The ModelConfig of a checkpoint directory (read, not loaded) or an in-memory model."""
    if isinstance(src, str | os.PathLike):
        from saguaro_exec.model import read_config

        return read_config(src)
    return src.config


def _sources(config: RunConfig) -> tuple[object, object]:
    if config.target is not None and config.draft is not None:
        return config.target, config.draft
    from saguaro_exec.io.assets import tiny_pair_paths

    tiny_t, tiny_d = tiny_pair_paths()
    return (config.target if config.target is not None else str(tiny_t),
            config.draft if config.draft is not None else str(tiny_d))


def _encode(prompts: list, target_src: object) -> tuple[list[list[int]], object]:
    if all(isinstance(p, list | tuple) for p in prompts):
        return [list(p) for p in prompts], None
    if not isinstance(target_src, str | os.PathLike):
        raise ConfigError("prompts", "text prompts need the target checkpoint's tokenizer",
                          "token-id lists (list[list[int]]) for in-memory models")
    from saguaro_exec.io.tokenizer import load_tokenizer

    tok = load_tokenizer(target_src)
    return [tok.encode(p) for p in prompts], tok


def _load_target(config: RunConfig, src: object, stack: ExitStack):
    """The target on ``config.device``, or split over ``config.target_devices`` (a TPTarget whose worker
    processes ``stack`` stops, or kills on an error or interrupt)."""
    devices = config.resolved_target_devices
    if len(devices) == 1:
        return load_source(src, config.device, config.dtype)
    args = TPArgs(source=src, devices=devices, dtype=config.dtype, threads=config.threads or 1,
                  timeout_s=config.timeout_s, start_timeout_s=start_timeout(config, src))
    return stack.enter_context(TPTarget(args))

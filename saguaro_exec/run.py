"""``run(config)``: load models and prompts, run AR / SD / SSD batch by batch, build the RunReport."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import signal
import threading
import time
from contextlib import ExitStack, contextmanager

import torch

from calibration.errors import ConfigError
from calibration.measurements import Measurements
from saguaro_exec.config import PUSH_Q_BYTES, RunConfig
from saguaro_exec.devices import device_index
from saguaro_exec.engine.ar import run_ar
from saguaro_exec.engine.fallback import Fallback
from saguaro_exec.engine.rounds import BatchResult
from saguaro_exec.engine.sd import run_sd
from saguaro_exec.engine.ssd import run_ssd
from saguaro_exec.faults import DraftFault, RunError
from saguaro_exec.measure.achieved import achieved, resolve_hardware, shape_dict
from saguaro_exec.measure.report import RunReport, summarize
from saguaro_exec.model.accel import resolve_accel
from saguaro_exec.sampling import make_generator
from saguaro_exec.speculator.cache import max_branches
from saguaro_exec.speculator.links import DraftProcessError, InlineLink, ProcessLink, PushLink
from saguaro_exec.speculator.process import DraftArgs, load_source
from saguaro_exec.speculator.worker import WorkerSpec
from saguaro_exec.tp.protocol import TPArgs
from saguaro_exec.tp.target import TPTarget


def _sources(config: RunConfig) -> tuple[object, object]:
    if config.target is not None and config.draft is not None:
        return config.target, config.draft
    from saguaro_exec.io.assets import tiny_pair_paths

    tiny_t, tiny_d = tiny_pair_paths()
    return (config.target if config.target is not None else str(tiny_t),
            config.draft if config.draft is not None else str(tiny_d))


def _name(src: object) -> str:
    return os.fspath(src) if isinstance(src, str | os.PathLike) else f"in-memory {type(src).__name__}"


def _encode(prompts: list, target_src: object) -> tuple[list[list[int]], object]:
    if all(isinstance(p, list | tuple) for p in prompts):
        return [list(p) for p in prompts], None
    if not isinstance(target_src, str | os.PathLike):
        raise ConfigError("prompts", "text prompts need the target checkpoint's tokenizer",
                          "token-id lists (list[list[int]]) for in-memory models")
    from saguaro_exec.io.tokenizer import load_tokenizer

    tok = load_tokenizer(target_src)
    return [tok.encode(p) for p in prompts], tok


def _check_devices(*devices: str) -> None:
    for d in devices:
        if d.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError("device", f"{d!r} requested but CUDA is not available", "cpu")


def resolve_backup(backup: str, batch_size: int, b_star: float) -> str:
    """auto -> neural at batch sizes up to b*, fast above (Theorem 17's rule)."""
    if backup != "auto":
        return backup
    return "neural" if batch_size <= b_star else "fast"


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt during a run (main thread, default handler only), so the draft
    process and temp files are cleaned up as on Ctrl-C."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run(config: RunConfig) -> RunReport:
    """Run ``config.spec`` for real on the prompts; returns the measured RunReport. A draft-process fault
    in SSD is survived in-process (``config.fallback``) and recorded in ``report.faults``; any other
    failure raises RunError (or DraftProcessError) whose ``partial`` holds the batches that completed."""
    with _sigterm_as_interrupt(), ExitStack() as stack:     # the stack closes a tensor-parallel target
        return _run(config, stack)


def _run(config: RunConfig, stack: ExitStack) -> RunReport:
    spec = config.spec
    ddev = config.resolved_draft_device
    _check_devices(*config.resolved_target_devices, ddev)
    target_src, draft_src = _sources(config)
    ids, tok = _encode(config.load_prompts(), target_src)
    dtype = getattr(torch, config.dtype)
    accel = resolve_accel(config.cuda_graphs, config.attention, config.device, config.dtype)
    daccel = resolve_accel(config.cuda_graphs, config.attention, ddev, config.dtype)
    target = _load_target(config, target_src, stack)
    vocab = target.config.vocab_size
    _check_prompt_ids(ids, vocab, target.config.max_position_embeddings)
    eos = target.config.eos_ids
    primary, miss = spec.resolve_fanout() if spec.mode != "ar" else ((), ())
    backup = resolve_backup(spec.backup, spec.batch_size, config.b_star)
    batches = [ids[i:i + spec.batch_size] for i in range(0, len(ids), spec.batch_size)]
    threads = config.threads or 1        # tiny models: extra intra-op threads only add contention
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    t_start = time.perf_counter()
    results: list[BatchResult] = []
    draft_pid = None
    fb = Fallback(config.fallback, lambda: load_source(draft_src, ddev, config.dtype), spec.k, primary,
                  spec.sampler_c, config.max_new_tokens, config.seed, ddev, t_start)
    meta = {"spec": spec.to_dict(), "mode": spec.mode, "fanout": list(primary), "fanout_miss": list(miss),
            "backup_resolved": backup if spec.mode == "ssd" else None, "target": _name(target_src),
            "draft": _name(draft_src) if spec.mode != "ar" else None, "device": config.device,
            "draft_device": ddev, "target_devices": config.resolved_target_devices,
            "tp_size": len(config.resolved_target_devices), "dtype": str(dtype), "threads": threads, "seed": config.seed,
            "max_new_tokens": config.max_new_tokens, "draft_pid": draft_pid,
            "draft_processes": 1 if spec.mode == "ssd" else 0,   # draft_devices > 1 still runs one
            "machine": platform.node(), "dtype_bytes": dtype.itemsize,
            "target_shape": shape_dict(target.config, "target"),
            "draft_shape": shape_dict(_config_of(draft_src), "draft") if spec.mode != "ar" else None,
            "hardware": resolve_hardware(config.hardware, config.device),
            "draft_hardware": resolve_hardware(config.hardware, ddev) if spec.mode != "ar" else None,
            "cuda_graphs": accel.graphs, "attention": accel.attention,
            "draft_cuda_graphs": daccel.graphs if spec.mode != "ar" else None,
            "draft_attention": daccel.attention if spec.mode != "ar" else None,
            "torch": torch.__version__, "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
    try:
        if spec.mode == "ar":
            for bi, batch in enumerate(batches):
                gen = make_generator(config.seed + 104729 * bi, config.device)
                results.append(run_ar(target, batch, config.max_new_tokens, spec.temperature, gen, eos, t_start,
                                      accel))
        elif spec.mode == "sd":
            draft = load_source(draft_src, ddev, config.dtype)
            _check_vocab(vocab, draft.config.vocab_size)
            for bi, batch in enumerate(batches):
                gens = (make_generator(config.seed + 104729 * bi, config.device),
                        make_generator(config.seed + 7919 * (bi + 1), ddev))
                results.append(run_sd(target, draft, batch, spec.k, primary, spec.sampler_c,
                                      config.max_new_tokens, spec.temperature, gens, eos, t_start,
                                      accel=(accel, daccel)))
        else:
            _check_vocab(vocab, _vocab_of(draft_src))
            ws = WorkerSpec(k=spec.k, fanout=primary, fanout_miss=miss, sampler_c=spec.sampler_c, backup=backup,
                            temperature=spec.temperature, max_new=config.max_new_tokens, accel=daccel)
            args = DraftArgs(source=draft_src, device=ddev, dtype=config.dtype, batches=batches, ws=ws,
                             seed=config.seed, t_start=t_start, threads=threads, timeout_s=config.timeout_s,
                             fault=config.inject_fault)
            args.protocol = meta["ssd_protocol"] = resolve_protocol(config.ssd_protocol, spec, vocab)
            if config.inline_draft:
                link = InlineLink(args, vocab)
            else:
                cls = PushLink if args.protocol == "push" else ProcessLink
                link = cls(args, vocab, reply_timeout_s=config.draft_timeout_s)
            with link:
                meta["draft_pid"] = link.pid
                for bi, batch in enumerate(batches):
                    if fb.faults:                       # the draft process is gone: the rest in-process
                        results.append(_fallback_batch(fb, target, batch, bi, config, eos, (accel, daccel)))
                        continue
                    gen = make_generator(config.seed + 104729 * bi, config.device)
                    on_fault = None if config.fallback == "none" else fb.handler(bi, link.abort)
                    results.append(run_ssd(target, link, batch, spec.k, config.max_new_tokens, spec.temperature,
                                           gen, eos, t_start, on_fault=on_fault, accel=accel))
    except ConfigError:
        raise
    except Exception as e:
        partial = _report(spec.mode, spec.k, results, tok, meta, fb) if results else None
        cls = DraftProcessError if isinstance(e, DraftProcessError | DraftFault) or fb.faults else RunError
        what = f"draft fault ({fb.faults[0].detail}), then the in-process {fb.how} fallback failed: " \
            if fb.faults else ""
        raise cls(f"{what}{e}\n({len(results)} of {len(batches)} batches complete: see .partial)",
                  partial, [f.to_dict() for f in fb.faults]) from e
    finally:
        torch.set_num_threads(old_threads)
        meta["graph_captures"] = accel.captures + daccel.captures    # this process's (not the draft process's)
    return _report(spec.mode, spec.k, results, tok, meta, fb)


def resolve_protocol(choice: str, spec, vocab: int) -> str:
    """RunConfig.ssd_protocol "auto" -> "push" unless the pushed cache's q rows (T > 0) would exceed
    PUSH_Q_BYTES per round, then "reply"; "push" / "reply" stay. Also what the planner simulates."""
    if choice != "auto":
        return choice
    if spec.temperature <= 0:
        return "push"
    primary, miss = spec.resolve_fanout()
    n_max = max_branches(primary, miss)
    return "push" if spec.batch_size * n_max * spec.k * vocab * 4 <= PUSH_Q_BYTES else "reply"


def _fallback_batch(fb: Fallback, target, batch: list[list[int]], bi: int, config: RunConfig,
                    eos: list[int], accel: tuple) -> BatchResult:
    """A whole batch after a draft fault: SD with the in-process draft, or AR (``accel``: target, draft)."""
    spec, gen = config.spec, make_generator(config.seed + 104729 * bi, config.device)
    if fb.how == "ar":
        return run_ar(target, batch, config.max_new_tokens, spec.temperature, gen, eos, fb.t_start, accel[0])
    gens = (gen, make_generator(config.seed + 7919 * (bi + 1) + 1, fb.device))
    return run_sd(target, fb.draft(), batch, spec.k, fb.fanout, spec.sampler_c, config.max_new_tokens,
                  spec.temperature, gens, eos, fb.t_start, accel=accel)


def _load_target(config: RunConfig, src: object, stack: ExitStack):
    """The target on ``config.device``, or split over ``config.target_devices`` (a TPTarget whose worker
    processes ``stack`` stops, or kills on an error or interrupt)."""
    devices = config.resolved_target_devices
    if len(devices) == 1:
        return load_source(src, config.device, config.dtype)
    if devices[0].startswith("cuda") and torch.cuda.device_count() <= max(device_index(d) for d in devices):
        raise ConfigError("target_devices", f"{devices} needs more GPUs than the {torch.cuda.device_count()} visible",
                          "cuda:N with N < torch.cuda.device_count()")
    args = TPArgs(source=src, devices=devices, dtype=config.dtype, threads=config.threads or 1,
                  timeout_s=config.timeout_s)
    return stack.enter_context(TPTarget(args))


def _check_prompt_ids(ids: list[list[int]], vocab: int, context: int) -> None:
    """Every prompt: at least one token, ids in the vocabulary, shorter than the target's context."""
    for i, p in enumerate(ids):
        if not p:
            raise ConfigError(f"prompts[{i}]", "encodes to zero tokens", "at least one token")
        if min(p) < 0 or max(p) >= vocab:
            bad = next(t for t in p if t < 0 or t >= vocab)
            raise ConfigError(f"prompts[{i}]", f"token id {bad} is outside the vocabulary", f"ids in [0, {vocab})")
        if len(p) >= context:
            raise ConfigError(f"prompts[{i}]", f"{len(p)} tokens, longer than the target's context",
                              f"fewer than max_position_embeddings = {context} tokens")


def _config_of(src: object):
    if isinstance(src, str | os.PathLike):
        from saguaro_exec.model import read_config

        return read_config(src)
    return src.config


def _vocab_of(src: object) -> int:
    return _config_of(src).vocab_size


def _check_vocab(target_vocab: int, draft_vocab: int) -> None:
    if target_vocab != draft_vocab:
        raise ConfigError("draft", f"vocabulary size {draft_vocab} differs from the target's {target_vocab}",
                          f"a draft with vocab_size {target_vocab}")


def _report(mode: str, k: int, results: list[BatchResult], tok, meta: dict, fb: Fallback) -> RunReport:
    tokens = [t for r in results for t in r.tokens]
    per_seq = [s for r in results for s in r.finish_s]
    rounds = []
    for bi, r in enumerate(results):
        rounds += [{**row, "batch_index": bi} for row in r.rounds]
    wall = sum(r.wall_s for r in results)
    s = summarize(mode, k, rounds, wall, tokens, per_seq)
    texts = [tok.decode(t) for t in tokens] if tok is not None else [""] * len(tokens)
    totals = {key: v for key, v in s.items() if key != "tokens_per_s_per_seq"}
    totals.update(tokens=sum(len(t) for t in tokens), wall_s=wall, rounds=len(rounds))
    faults = [f.to_dict() for f in fb.faults]
    meas = Measurements(meta={**meta, "faults": faults}, rounds=rounds, totals=totals)
    return RunReport(mode=mode, texts=texts, token_ids=tokens, wall_s=wall, measurements=meas,
                     events=[e for r in results for e in r.events], faults=faults,
                     achieved=achieved(mode, k, rounds, meta), **s)

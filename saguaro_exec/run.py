"""``run(config)``: load models and prompts, run AR / SD / SSD batch by batch, build the RunReport."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time

import torch

from calibration.errors import ConfigError
from calibration.measurements import Measurements

from .ar import run_ar
from .draft_process import DraftArgs, load_source
from .draft_worker import WorkerSpec
from .link import InlineLink, ProcessLink
from .report import RunReport, summarize
from .rounds import BatchResult
from .runconfig import RunConfig
from .sampling import make_generator
from .sd import run_sd
from .ssd import run_ssd


def _sources(config: RunConfig) -> tuple[object, object]:
    if config.target is not None and config.draft is not None:
        return config.target, config.draft
    from .models import tiny_pair_paths

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
    from .tokenizer import load_tokenizer

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


def run(config: RunConfig) -> RunReport:
    """Run ``config.spec`` for real on the prompts; returns the measured RunReport."""
    spec = config.spec
    ddev = config.resolved_draft_device
    _check_devices(config.device, ddev)
    target_src, draft_src = _sources(config)
    ids, tok = _encode(config.load_prompts(), target_src)
    dtype = getattr(torch, config.dtype)
    target = load_source(target_src, config.device, config.dtype)
    vocab = target.config.vocab_size
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
    try:
        if spec.mode == "ar":
            for bi, batch in enumerate(batches):
                gen = make_generator(config.seed + 104729 * bi, config.device)
                results.append(run_ar(target, batch, config.max_new_tokens, spec.temperature, gen, eos, t_start))
        elif spec.mode == "sd":
            draft = load_source(draft_src, ddev, config.dtype)
            _check_vocab(vocab, draft.config.vocab_size)
            for bi, batch in enumerate(batches):
                gens = (make_generator(config.seed + 104729 * bi, config.device),
                        make_generator(config.seed + 7919 * (bi + 1), ddev))
                results.append(run_sd(target, draft, batch, spec.k, primary, spec.sampler_c,
                                      config.max_new_tokens, spec.temperature, gens, eos, t_start))
        else:
            _check_vocab(vocab, _vocab_of(draft_src))
            ws = WorkerSpec(k=spec.k, fanout=primary, fanout_miss=miss, sampler_c=spec.sampler_c, backup=backup,
                            temperature=spec.temperature, max_new=config.max_new_tokens)
            args = DraftArgs(source=draft_src, device=ddev, dtype=config.dtype, batches=batches, ws=ws,
                             seed=config.seed, t_start=t_start, threads=threads, timeout_s=config.timeout_s)
            link_cls = InlineLink if config.inline_draft else ProcessLink
            with link_cls(args, vocab) as link:
                draft_pid = link.pid
                for bi, batch in enumerate(batches):
                    gen = make_generator(config.seed + 104729 * bi, config.device)
                    results.append(run_ssd(target, link, batch, spec.k, config.max_new_tokens, spec.temperature,
                                           gen, eos, t_start))
    finally:
        torch.set_num_threads(old_threads)
    meta = {"spec": spec.to_dict(), "mode": spec.mode, "fanout": list(primary), "fanout_miss": list(miss),
            "backup_resolved": backup if spec.mode == "ssd" else None, "target": _name(target_src),
            "draft": _name(draft_src) if spec.mode != "ar" else None, "device": config.device,
            "draft_device": ddev, "dtype": str(dtype), "threads": threads, "seed": config.seed,
            "max_new_tokens": config.max_new_tokens, "draft_pid": draft_pid,
            "draft_processes": 1 if spec.mode == "ssd" else 0,   # draft_devices > 1 still runs one
            "machine": platform.node(),
            "torch": torch.__version__, "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
    return _report(spec.mode, spec.k, results, tok, meta)


def _vocab_of(src: object) -> int:
    if isinstance(src, str | os.PathLike):
        from .model import read_config

        return read_config(src).vocab_size
    return src.config.vocab_size


def _check_vocab(target_vocab: int, draft_vocab: int) -> None:
    if target_vocab != draft_vocab:
        raise ConfigError("draft", f"vocabulary size {draft_vocab} differs from the target's {target_vocab}",
                          f"a draft with vocab_size {target_vocab}")


def _report(mode: str, k: int, results: list[BatchResult], tok, meta: dict) -> RunReport:
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
    meas = Measurements(meta=meta, rounds=rounds, totals=totals)
    return RunReport(mode=mode, texts=texts, token_ids=tokens, wall_s=wall, measurements=meas,
                     events=[e for r in results for e in r.events], **s)

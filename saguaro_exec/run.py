"""``run(config)``: prepare the models and prompts, run AR / SD / SSD batch by batch, build the RunReport."""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial

import torch

from calibration.errors import ConfigError
from calibration.measurements import Measurements
from saguaro_exec.config import RunConfig, check_prompt_ids, start_timeout
from saguaro_exec.engine.ar import run_ar
from saguaro_exec.engine.fallback import Fallback
from saguaro_exec.engine.rounds import BatchResult
from saguaro_exec.engine.sd import run_sd
from saguaro_exec.engine.settings import Decoding, Drafting
from saguaro_exec.engine.ssd import run_ssd
from saguaro_exec.engine.synthetic import batch_outcomes, link_candidates
from saguaro_exec.faults import DraftFault, RunError
from saguaro_exec.measure.achieved import achieved
from saguaro_exec.measure.load import request_metrics, schedule
from saguaro_exec.measure.meta import run_meta
from saguaro_exec.measure.report import RunReport, summarize
from saguaro_exec.prepare import Prepared, prepare, resolve_run
from saguaro_exec.sampling import batch_generator
from saguaro_exec.speculator.inline import InlineLink
from saguaro_exec.speculator.links import DraftProcessError, ProcessLink, PushLink
from saguaro_exec.speculator.process import DraftArgs, load_source
from saguaro_exec.speculator.stream import StreamLink
from saguaro_exec.speculator.transport import resolve_transport
from saguaro_exec.speculator.worker import WorkerSpec
from saguaro_exec.tp.target import TPTarget

__all__ = ["resolve_run", "run"]


def run(config: RunConfig) -> RunReport:
    """Run ``config.spec`` for real on the prompts; returns the measured RunReport. A draft-process fault
    in SSD is survived in-process (``config.fallback``) and recorded in ``report.faults``; any other
    failure raises RunError (or DraftProcessError) whose ``partial`` holds the batches that completed."""
    with _sigterm_as_interrupt(), ExitStack() as stack:     # the stack closes a tensor-parallel target
        p = prepare(config, stack)
        meta = run_meta(config, p)
        results: list[BatchResult] = []
        with _torch_threads(p.threads), frozen_gc():
            dec = Decoding(config.max_new_tokens, config.spec.temperature, tuple(p.target.config.eos_ids),
                           t_start=time.perf_counter())
            fb = _fallback(config, p, dec.t_start)
            try:
                for result in _MODES[config.spec.mode](config, p, dec, fb, meta):
                    results.append(result)
                if config.check_lossless:
                    check_lossless(config, p, results, dec)
            except ConfigError:
                raise
            except Exception as e:
                partial = _report(config, p, results, meta, fb) if results else None
                raise _run_error(e, len(results), 1, fb, partial) from e      # one refilled queue
            finally:
                meta["graph_captures"] = p.accel.captures + p.daccel.captures   # this process's only
        return _report(config, p, results, meta, fb)


def _fallback(config: RunConfig, p: Prepared, t_start: float) -> Fallback:
    """The in-process backup after an SSD draft fault (the draft is loaded only if a fault needs it)."""
    spec = config.spec
    return Fallback(config.fallback, lambda: load_source(p.draft_src, p.draft_device, config.dtype),
                    Drafting(spec.k, p.fanout, spec.sampler_c), config.max_new_tokens, config.seed,
                    p.draft_device, t_start)


def _queue(config: RunConfig, p: Prepared, dec: Decoding) -> tuple[Decoding, dict]:
    """The run's queue of requests for AR / SD: every prompt at t = 0, or as ``config.arrivals`` has them
    arrive (a trace gives its own prompt and output lengths); the Decoding sized to the longest output."""
    if config.arrivals is None:
        return dec, {"width": config.spec.batch_size}
    prompts, times, out_lens = schedule(config.arrivals, p.ids, config.max_new_tokens)
    check_prompt_ids(prompts, p.target.config.vocab_size, p.target.config.max_position_embeddings)
    if out_lens is not None:
        dec = dataclasses.replace(dec, max_new=max(out_lens))
    return dec, {"width": config.spec.batch_size, "arrivals": times, "out_lens": out_lens, "prompts": prompts}


def _ar_batches(config: RunConfig, p: Prepared, dec: Decoding, fb: Fallback, meta: dict) -> Iterator[BatchResult]:
    """Every prompt as one queue through spec.batch_size rows, finished rows refilled (continuous batching)."""
    gen = batch_generator(config.seed, 0, "target", config.device)
    dec, q = _queue(config, p, dec)
    yield run_ar(p.target, q.pop("prompts", p.ids), dec, gen, p.accel, **q)


def _sd_batches(config: RunConfig, p: Prepared, dec: Decoding, fb: Fallback, meta: dict) -> Iterator[BatchResult]:
    draft = load_source(p.draft_src, p.draft_device, config.dtype)
    gens = (batch_generator(config.seed, 0, "target", config.device),
            batch_generator(config.seed, 0, "draft", p.draft_device))
    dec, q = _queue(config, p, dec)
    synth = batch_outcomes(config, 0, p.target.config.vocab_size, list(dec.eos_ids))
    yield run_sd(p.target, draft, q.pop("prompts", p.ids), dec, fb.drafting, gens, accel=(p.accel, p.daccel),
                 synthetic=synth, **q)


def _compacts(target) -> bool:
    """Whether SSD moves live rows over finished ones (WorkerSpec.compact): not over a tensor-parallel cache,
    which cannot move rows; ``SAGUARO_SSD_COMPACT=0`` keeps rows in place (the A/B switch of the benchmarks)."""
    return not isinstance(target, TPTarget) and os.environ.get("SAGUARO_SSD_COMPACT", "1") != "0"


def _ssd_batches(config: RunConfig, p: Prepared, dec: Decoding, fb: Fallback, meta: dict) -> Iterator[BatchResult]:
    """Batches through the draft process (or in this process: ``inline_draft``, draft_placement "stream");
    after a draft fault the rest run in-process by ``fb``."""
    spec = config.spec
    dec, q = _queue(config, p, dec)
    prompts, arrivals, out_lens = q.get("prompts", p.ids), q.get("arrivals"), q.get("out_lens")
    ws = WorkerSpec(k=spec.k, fanout=p.fanout, fanout_miss=p.fanout_miss, sampler_c=spec.sampler_c, backup=p.backup,
                    temperature=spec.temperature, max_new=dec.max_new, accel=p.daccel,
                    compact=_compacts(p.target))
    queue, width = [prompts], min(spec.batch_size, len(prompts))   # one queue, refilled rows (both sides)
    first = None if arrivals is None else min(width, sum(a <= 0.0 for a in arrivals))   # rows taken at t = 0
    fb.max_new = dec.max_new                                      # a trace's longest output sizes every cache
    args = DraftArgs(source=p.draft_src, device=p.draft_device, dtype=config.dtype, batches=queue, ws=ws,
                     seed=config.seed, t_start=dec.t_start, threads=p.threads, timeout_s=config.timeout_s,
                     fault=config.inject_fault, width=width, first_rows=first,
                     start_timeout_s=start_timeout(config, p.draft_src))
    args.protocol = p.protocol
    link, vocab = _open_link(config, args, p, meta), p.target.config.vocab_size
    with link:
        meta["draft_pid"] = link.pid
        for bi, batch in enumerate(queue):
            if fb.faults:                       # the draft process is gone: the rest in-process
                yield fb.run_batch(p.target, batch, bi, dec, config.device, (p.accel, p.daccel), width=width)
                continue
            gen = batch_generator(config.seed, bi, "target", config.device)
            on_fault = None if config.fallback == "none" else fb.handler(bi, link.abort)
            synth = batch_outcomes(config, bi, vocab, list(dec.eos_ids), config.synthetic and partial(link_candidates, link))
            yield run_ssd(p.target, link, batch, dec, spec.k, gen, on_fault=on_fault, accel=p.accel, synthetic=synth,
                          width=width, arrivals=arrivals, out_lens=out_lens, compact=ws.compact)


def _open_link(config: RunConfig, args: DraftArgs, p: Prepared, meta: dict):
    """SSD's link to its speculator: a draft process (push or reply), the inline debugging link, or the
    stream link (this process, side CUDA stream); meta records the transport and where the draft runs."""
    vocab = p.target.config.vocab_size
    if config.inline_draft:
        args.transport = meta["transport"] = "inline"
        meta["draft_placement"] = "inline: draft called synchronously in the verifier's process (no overlap)"
        return InlineLink(args, vocab)
    if config.draft_placement == "stream":
        args.transport = meta["transport"] = "stream"
        link = StreamLink(args, vocab)
        meta["draft_placement"] = link.label
        return link
    args.transport = meta["transport"] = resolve_transport(config.transport,
                                                           [*config.resolved_target_devices, p.draft_device])
    meta["draft_placement"] = f"process: draft in its own process on {p.draft_device}"
    return (PushLink if p.protocol == "push" else ProcessLink)(args, vocab, reply_timeout_s=config.draft_timeout_s)


_MODES = {"ar": _ar_batches, "sd": _sd_batches, "ssd": _ssd_batches}


def _run_error(e: Exception, n_done: int, n_batches: int, fb: Fallback, partial: RunReport | None) -> RunError:
    """The error a failed run raises: DraftProcessError for draft faults (or a failed fallback after one),
    else RunError; ``partial`` is the report of the ``n_done`` batches that completed."""
    cls = DraftProcessError if isinstance(e, DraftProcessError | DraftFault) or fb.faults else RunError
    what = f"draft fault ({fb.faults[0].detail}), then the in-process {fb.how} fallback failed: " \
        if fb.faults else ""
    return cls(f"{what}{e}\n({n_done} of {n_batches} batches complete: see .partial)", partial,
               [f.to_dict() for f in fb.faults])


@contextmanager
def frozen_gc() -> Iterator[None]:
    """No cyclic-GC pass inside the run: what is alive when decoding starts (models, caches, the caller's objects)
    is frozen out of the collector's walks and automatic collection is off until the run ends, when both are
    restored (unless the caller had frozen or disabled already). A pass stalls a round (generation 1 up to ~2 ms
    on the 6 ms deep-pair round; rounds waiting > 1 ms 2.0% with passes, 0.0% without: bench/bench_handoff.py); the
    loop makes almost no reference cycles, and what cyclic garbage it makes waits for the run's end."""
    frozen, enabled = gc.get_freeze_count() == 0, gc.isenabled()
    if frozen:              # no gc.collect() first: a full pass costs ~0.1 s in a big process, and garbage
        gc.freeze()         # frozen with the rest goes back to the collector at the end
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        if frozen:
            gc.unfreeze()


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for the run, restored after."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
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


def _report(config: RunConfig, p: Prepared, results: list[BatchResult], meta: dict, fb: Fallback) -> RunReport:
    mode, k, tok = config.spec.mode, config.spec.k, p.tokenizer
    tokens = [t for r in results for t in r.tokens]
    per_seq = [f - a for r in results for f, a in zip(r.finish_s, r.admit_s or [0.0] * len(r.finish_s))]
    on_clock = [[r.start_s + t for r in results for t in getattr(r, name)] for name in ("arrival_s", "first_s", "finish_s")]
    load = request_metrics(*on_clock, [len(t) for t in tokens])
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
    return RunReport(mode=mode, texts=texts, token_ids=tokens, wall_s=wall, measurements=meas, resolved=meta["resolved"],
                     events=[e for r in results for e in r.events], faults=faults,
                     achieved=achieved(mode, k, rounds, meta), synthetic=meta.get("synthetic"), **s, **load,
                     offered_qps=None if config.arrivals is None else config.arrivals.qps)


def check_lossless(config: RunConfig, p: Prepared, results: list[BatchResult], dec: Decoding) -> None:
    """RunConfig.check_lossless: every request's output equals the target's greedy AR decoding of it (the same
    requests through the same refilled rows, arrivals ignored: greedy output does not depend on timing)."""
    dec, q = _queue(config, p, dec)
    prompts = q.pop("prompts", p.ids)
    q.pop("arrivals", None)
    ref = run_ar(p.target, prompts, dec, batch_generator(config.seed, 0, "target", config.device), p.accel, **q).tokens
    got = [t for r in results for t in r.tokens]
    for i, (g, w) in enumerate(zip(got, ref)):
        if g != w:
            n = next((j for j, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
            raise RunError(f"not lossless: request {i} differs from greedy decoding at token {n}")

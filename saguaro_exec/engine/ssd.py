"""SSD verifier loop: wait for the speculation, verify, send the outcome key; the speculator builds its
cache for the next round meanwhile (in its own process with ``ProcessLink``).

Why the loop is this thin: in SSD the verifier's only critical path is wait -> verify -> send. While the
target verifies round r, the speculator guesses the outcome (accepted count, bonus token) and drafts a
speculation for each guess (its cache); the outcome then either hits the cache (the next speculation is
ready at once) or misses (a backup speculation: the neural draft from the true prefix, or the n-gram fast
backup). The link hides which message protocol carries this (reply: the draft answers each outcome;
push: the cache comes ahead and the verifier looks the outcome up). Round rows and trace events are
built after the batch from a small log, off the critical path; the reply that follows round r says
whether r's outcome hit.
"""

from __future__ import annotations

import time

import torch

from saguaro_exec.engine.rounds import BatchResult, event, new_round, request_times, thread_cpu
from saguaro_exec.engine.settings import Decoding
from saguaro_exec.engine.state import forwarded_rows, next_swaps
from saguaro_exec.engine.verifier import Verifier
from saguaro_exec.faults import DraftFault
from saguaro_exec.model import Transformer
from saguaro_exec.speculator.protocol import CPU_TIMES, Reply

DRAFT_PHASES = ("glue", "fork", "tree")
# message stamps (push): see bench/handoff_stats.py
HANDOFF = ("outcome_seen", "answer", "settle", "pack", "cache_sent", "cache_seen")
VERIFIER_STAMPS = ("cache_seen",)                        # taken by the verifier's link, not the draft


def _draft_events(reply: Reply, r: int) -> list[dict]:
    return [event(name, "verifier" if name in VERIFIER_STAMPS else "speculator", s, e, round=r)
            for name, (s, e) in sorted(reply.times.items(), key=lambda kv: kv[1][0]) if name not in CPU_TIMES]


def _fill_outcome(row: dict, reply: Reply) -> None:
    """The reply to round r's outcome says whether it hit the cache built during round r."""
    live = row["slot"]
    row["hit"] = [bool(reply.hit[b]) for b in live]
    row["bonus_rank"] = [int(reply.rank[b]) for b in live]
    for name in DRAFT_PHASES + CPU_TIMES:         # build_cpu_s: the draft thread's CPU time over glue..tree
        if name in reply.times:
            s, e = reply.times[name]
            row[f"{name}_s"] = e - s


def _rows(log: list[tuple], replies: list[Reply], events: list[dict]) -> tuple[list[dict], list[dict]]:
    """Round rows and trace events of a batch from its log: round r verified ``replies[r]``; the reply
    after it (``replies[r + 1]``, when one came) says whether r's outcome hit."""
    rounds = []
    for (r, t0, t1, t2, t3, live, ctx, acc, rids, admitted, width, used), reply in zip(log, replies):
        events += _draft_events(reply, r)
        reply_s = reply.times.get("reply", (0.0, 0.0))
        backup_s = reply.times.get("backup", (0.0, 0.0))
        acc_l = acc.tolist()
        rounds.append(new_round(r, t0, t3, live, wait_s=t1 - t0, verify_s=t2 - t1, msg_s=t3 - t2,
                                draft_reply_s=reply_s[1] - reply_s[0], backup_s=backup_s[1] - backup_s[0],
                                accepted=[int(acc_l[b]) for b in live],
                                from_backup=[bool(reply.from_backup[b]) for b in live], context=ctx,
                                handoff={n: list(reply.times[n]) for n in HANDOFF if n in reply.times},
                                seq=rids, width=width, **admitted, **used))
        events += [event("wait", "verifier", t0, t1, round=r), event("verify", "verifier", t1, t2, round=r),
                   event("send", "verifier", t2, t3, round=r)]
        if r + 1 < len(replies):
            _fill_outcome(rounds[-1], replies[r + 1])
    if len(replies) > len(log):
        events += _draft_events(replies[len(log)], len(log))
    return rounds, events


def run_ssd(target: Transformer, link, prompts: list[list[int]], dec: Decoding, k: int, gen: torch.Generator,
            on_fault=None, accel=None, synthetic=None, width: int | None = None, arrivals: list[float] | None = None,
            out_lens: list[int] | None = None, compact: bool = False) -> BatchResult:
    """One batch through SSD; ``link`` is an open ProcessLink or InlineLink already serving this batch.
    ``width`` rows (default: one per prompt) work through ``prompts``: a finished row takes the next arrived
    prompt at the round boundary (in place, row order; the outcome marks the refilled rows and the draft
    applies the same rule, state.refill_rows). ``arrivals`` (load mode, seconds from the start): rows not
    yet taken idle as finished one-token rows, and with no row live the verifier sleeps until the next
    arrival before it sends the outcome; ``out_lens``: per-request max new tokens.
    A DraftFault from the link goes to ``on_fault(verifier, round, fault) -> (rounds, events)``, which
    finishes the batch in-process (re-raised when None). ``accel``: the target's GPU fast path (accel.py).
    ``synthetic``: timing-only outcomes whose bonus tokens come from the link's cache (engine/synthetic.py).
    ``compact`` (the link's WorkerSpec.compact): after each outcome live rows move over finished ones on both
    sides (state.compact_rows), so forwards cover the live rows only; the link, told the moves with the
    outcome, hands the next speculation over in the moved order."""
    ver = Verifier(target, prompts, k, dec.temperature, gen, dec.max_new, list(dec.eos_ids), accel,
                   width=len(prompts) if width is None else width, out_lens=out_lens)
    ver.synthetic = synthetic
    now = dec.now
    start_s = now()
    ver.state.arrive_from(start_s, arrivals)
    moves, first = ver.state.refill(start_s, movable=False)    # the draft starts the same rows (first_rows)
    ver.state.pad_idle()
    ver.apply_refill(moves, first)
    events = [event("prefill", "verifier", start_s, now())]
    log: list[tuple] = []       # per round: times, live rows, outcome and the reply it verified; rows and
    replies: list[Reply] = []   # events are built after the batch, off the critical path between verifies
    t0, r, stop, admitted = now(), 0, False, {}
    cpu = thread_cpu(ver.runner.device)
    fault_rounds: tuple[list, list] = ([], [])
    try:
        reply = link.start(len(ver.state))
        while True:
            replies.append(reply)
            if stop:
                break
            t1, c1 = now(), cpu() if cpu else 0.0
            live = ver.state.live()
            ctx = [len(ver.state.seqs[b]) for b in live]
            rids = [ver.state.slots[b].rid for b in live]
            width = forwarded_rows([s.done for s in ver.state.slots])   # the rows this round's forwards cover
            acc, bonus = ver.verify(reply.tokens, reply.q, r)
            # the CPU clock is read where the verification ends, before the send: taking the send's wall time off
            # a later read clamped rows to 0 whenever the send was descheduled (2 of 15 in a CI run, session 33),
            # and the read (a syscall, ~0.6 us here) is 0.03% of a round
            c2, t2 = cpu() if cpu else 0.0, now()
            stop = ver.state.all_done()
            done = ver.state.done                # a new list
            # the slots' new prompts, prefilled after the send (most rounds: nothing to refill, and its ~5 us
            # stay off the outcome's path)
            fresh = ver.state.refill(t2, movable=False)[1] if ver.state.needs_refill(t2) else []
            # load mode's wait for a request, only when no row is live (no refill made one live)
            idle = _await_arrival(ver.state, fresh, now, events, r) if not stop and not fresh and all(done) else 0.0
            swaps = next_swaps(done, fresh) if compact else []     # the draft finds the same moves
            try:
                link.send(acc, bonus, done, stop, tuple(fresh), swaps)
            finally:
                t3 = now()
                used = {"verify_cpu_s": c2 - c1} if cpu else {}
                log.append((r, t0, t1, t2, t3 - idle, live, ctx, acc, rids, admitted, width, used))
                ver.apply_refill([], fresh)                     # overlaps the draft's answer
                if swaps:                                       # ... as does the move (a row finished)
                    ver.compact(swaps)
            t0, r = now(), r + 1
            admitted = {"refill": [ver.state.slots[b].rid for b in fresh], "prefill_s": t0 - t3} if fresh else {}
            reply = link.recv()      # the speculator's next speculation (push: looked up in its cache)
    except DraftFault as fault:
        if on_fault is None:
            raise
        if synthetic is not None:
            synthetic.lookup = None         # the cache went with the draft: SD's bonus rule from here
        fault_rounds = on_fault(ver, r, fault)
    rounds, events = _rows(log, replies, events)
    rounds += fault_rounds[0]
    events += fault_rounds[1]
    end = now()
    return BatchResult(ver.state.outputs(), rounds, events, start_s, end - start_s,
                       **request_times(ver.state, rounds, start_s))


def _await_arrival(state, fresh: list[int], now, events: list[dict], r: int) -> float:
    """With no row live (load mode, the queue not empty), sleep until the next request arrives and admit
    it into ``fresh`` (the outcome then carries it): no round runs on idle rows alone. Returns the seconds
    slept, which the round's own time leaves out (its finished requests ended before)."""
    if state.live() or state.next_arrival() is None:
        return 0.0
    t0 = now()
    while not state.live():
        time.sleep(max(0.0, state.next_arrival() - now()))
        fresh += state.refill(now(), movable=False)[1]
    t1 = now()
    events.append(event("idle", "verifier", t0, t1, round=r))
    return t1 - t0

"""Faults in the SSD draft process, injected for real (the draft SIGKILLs itself, sleeps, sends garbage,
raises) at a chosen reply: the verifier notices within draft_timeout_s, finishes every sequence in-process,
the greedy output equals the fault-free run's, the report records the fault, and no process is left."""

from __future__ import annotations

import os
import re
import time

import pytest
from exec_helpers import handoff_held, plain_greedy, tiny_models
from test_exec_processes import alive, children

from saguaro_exec import RunConfig, run
from saguaro_exec.faults import RunError
from saguaro_exec.model import Transformer
from saguaro_exec.speculator.links import DraftProcessError
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
PROMPTS = [[1, 2], [3], [4, 5, 6]]          # one queue through 2 rows: the third prompt refills a row
MAX_NEW = 20
SPEC = SpecConfig(mode="ssd", k=2, batch_size=2, fanout=(2, 1, 1))


def _cfg(**kw) -> RunConfig:
    base = dict(spec=SPEC, target=TARGET, draft=DRAFT, prompts=PROMPTS, max_new_tokens=MAX_NEW,
                draft_timeout_s=1.0, ssd_protocol="reply")    # message numbering below is the reply protocol's
    return RunConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def clean():
    """A fault-free SSD run (one reply is slow but within the timeout)."""
    return run(_cfg(inject_fault="sleep=0.4@2", draft_timeout_s=2.0))


def test_slow_reply_within_the_timeout_is_not_a_fault(clean):
    assert clean.faults == []
    assert clean.token_ids == [plain_greedy(TARGET, p, MAX_NEW) for p in PROMPTS]   # lossless
    assert max(r["wait_s"] for r in clean.measurements.rounds) >= 0.35   # the verifier did wait for it


def _replies_in_batch0(rep) -> int:
    """Replies the draft sends for batch 0: the first speculation plus one per round."""
    return 1 + sum(1 for r in rep.measurements.rounds if r["batch_index"] == 0)


def _assert_clean_exit(rep, before: set[int]) -> None:
    pid = rep.measurements.meta["draft_pid"]
    assert pid is not None and not alive(pid)
    assert children(os.getpid()) <= before
    assert not handoff_held()                # the shared-memory channel went with the link


@pytest.mark.parametrize("transport", ["shm", "gloo"])
@pytest.mark.parametrize("protocol", ["reply", "push"])
@pytest.mark.parametrize("inject, fallback, kind", [
    ("die@3", "sd", "died"),
    ("sleep=60@2", "sd", "timeout"),           # stops answering
    ("garble@4", "ar", "malformed"),
    ("raise@1", "sd", "error"),
])
def test_fault_is_survived_losslessly(clean, inject, fallback, kind, protocol, transport):
    before = children(os.getpid())
    t0 = time.perf_counter()
    rep = run(_cfg(inject_fault=inject, fallback=fallback, ssd_protocol=protocol, transport=transport))
    wall = time.perf_counter() - t0
    assert rep.token_ids == clean.token_ids                      # identical to the fault-free greedy run
    assert [len(t) for t in rep.token_ids] == [MAX_NEW] * len(PROMPTS)
    [f] = rep.faults
    assert f["kind"] == kind and f["batch"] == 0 and f["fallback"] == fallback
    n = int(inject.split("@")[1])
    if protocol == "reply":
        assert f["round"] == n                                   # reply N answers round N-1: noticed in round N
    else:                                                        # push: message N is cache N-1 or a backup
        assert f["round"] <= n
    assert 0 <= f["time_s"] <= wall and f["waited_s"] <= 1.0 + 0.5   # bounded by draft_timeout_s (+ slack)
    if kind == "timeout":
        assert f["waited_s"] >= 0.9 and wall < 15                # did not wait for the 60 s sleep
    if kind == "error":
        assert "injected draft failure" in f["detail"]           # the draft's traceback reaches the report
    assert rep.measurements.meta["faults"] == rep.faults
    fb_rounds = [r for r in rep.measurements.rounds if r.get("fallback")]
    assert fb_rounds and {r["fallback"] for r in fb_rounds} == {fallback}
    _assert_clean_exit(rep, before)


def test_death_before_the_first_reply_finishes_the_queue_in_process(clean):
    before = children(os.getpid())
    rep = run(_cfg(inject_fault="die@0", fallback="ar"))
    assert rep.token_ids == clean.token_ids
    [f] = rep.faults
    assert f["kind"] == "died" and f["batch"] == 0 and f["round"] == 0
    rows = rep.measurements.rounds
    assert all(r.get("fallback") == "ar" for r in rows) and any(r.get("refill") for r in rows)
    _assert_clean_exit(rep, before)


@pytest.mark.parametrize("fallback", ["sd", "ar"])
def test_fault_at_temperature_finishes_every_sequence(fallback):
    spec = SPEC.replace(temperature=0.8, sampler_c=0.5)
    rep = run(_cfg(spec=spec, inject_fault="garble@3", fallback=fallback))
    [f] = rep.faults
    assert f["kind"] == "malformed" and f["fallback"] == fallback
    eos = set(TARGET.config.eos_ids)
    for toks in rep.token_ids:
        assert len(toks) == MAX_NEW or (toks and toks[-1] in eos)
        assert all(0 <= t < TARGET.config.vocab_size for t in toks)


def test_fallback_none_raises_and_cleans_up(clean):
    """Without a fallback a draft fault fails the run; the one refilled queue had not completed, so
    there is no partial report (partial reports hold completed batches)."""
    before = children(os.getpid())
    at = _replies_in_batch0(clean) // 2
    with pytest.raises(DraftProcessError, match="died") as ei:
        run(_cfg(inject_fault=f"die@{at}", fallback="none"))
    assert ei.value.partial is None and "0 of 1 batches complete" in str(ei.value)
    assert children(os.getpid()) <= before


class FailingTarget(Transformer):
    """A target whose forward fails on one row (the first prompt's prefill: rows are prefilled alone)."""

    def forward(self, tokens, *args, **kwargs):
        if tokens.shape[0] == 1:
            raise RuntimeError("deliberate target failure")
        return super().forward(tokens, *args, **kwargs)


def test_target_failure_is_a_run_error_and_stops_the_draft(clean):
    before = children(os.getpid())
    failing = FailingTarget(TARGET.config)
    failing.load_state_dict(TARGET.state_dict())
    with pytest.raises(RunError, match="deliberate target failure") as ei:
        run(_cfg(target=failing))
    assert not isinstance(ei.value, DraftProcessError)
    assert ei.value.partial is None and "0 of 1 batches complete" in str(ei.value)
    assert children(os.getpid()) <= before                     # the draft process was shut down


def test_push_fault_while_awaiting_a_backup_names_the_verifiers_decision(clean):
    """Push: a fault met while the verifier waits for a backup reply records which rows it found missed and the
    outcome it looked up (message 2 is round 1's backup here; the draft dies before sending it): a draft that
    took the same outcome otherwise, the session 29-31 flake, is then named by the record itself."""
    rep = run(_cfg(inject_fault="die@2", ssd_protocol="push", transport="shm"))
    assert rep.token_ids == clean.token_ids
    [f] = rep.faults
    assert f["kind"] == "died"
    assert re.search(r"the verifier waited for a backup for rows \[\d(, \d)*\] \(acc \[\d+, \d+\], bonus "
                     r"\[\d+, \d+\], refilled \[\]\)$", f["detail"]), f["detail"]

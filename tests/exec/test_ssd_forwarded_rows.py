"""SSD keeps a fixed row count on both sides (fixed-shape messages) and forwards only the rows up to the last live
one; after each outcome both sides move live rows over finished ones by the same rule (``compact_rows``, no
message), so the forwards cover the live rows alone: a batch whose first or last rows finished early runs narrower
rounds, every output stays the target's greedy one (push, reply, inline, stream; T > 0 through the distribution
tests, whose batch compacts after its first round), and each round records the rows it forwarded as its width
(what calibration and the simulator charge)."""

import json

import pytest
from exec_helpers import plain_greedy, tiny_models

from saguaro_exec import RunConfig, run
from saguaro_exec.engine.state import compact_rows, forwarded_rows, next_swaps, swap_rows
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3, 9]]
SHAPE = [(0.0, 5, 24), (0.0, 3, 5), (0.0, 8, 9)]     # row 0 outlives rows 1 and 2
FIRST_GOES = [(0.0, 5, 4), (0.0, 3, 24), (0.0, 8, 9)]   # row 0 finishes first: rows 1 and 2 move over it


def test_forwarded_rows_is_the_last_live_row_plus_one():
    assert forwarded_rows([False, False, False]) == 3
    assert forwarded_rows([False, True, True]) == 1
    assert forwarded_rows([True, False, True]) == 2      # a finished row before a live one is still forwarded
    assert forwarded_rows([True, True]) == 1


def test_compact_rows_moves_live_rows_over_finished_ones():
    assert compact_rows([False, False]) == [] and compact_rows([False, True, True]) == []
    assert compact_rows([True, False, False]) == [(2, 0)]
    assert compact_rows([True, False, True, False]) == [(3, 0)]
    assert compact_rows([True, True, False, False]) == [(3, 0), (2, 1)]
    for done in ([True, False, True, False, False], [False, True, False, True, False, True], [True] * 3):
        after = swap_rows(done, compact_rows(done))
        n = done.count(False)
        assert after == [False] * n + [True] * (len(done) - n)          # the live rows first, in one block
    assert next_swaps([True, True, False], {0}) == [(2, 1)]             # row 0 refilled: row 2 fills row 1
    assert next_swaps([False, False], set()) == []


def _run(tmp_path, shape, protocol, inline, placement="process", draft=DRAFT):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": a, "prompt_tokens": n, "output_tokens": o}) + "\n"
                             for a, n, o in shape))
    spec = SpecConfig(mode="ssd", k=3, batch_size=3, fanout=(2, 1, 1, 1))
    rep = run(RunConfig(spec=spec, target=TARGET, draft=draft, prompts=PROMPTS, max_new_tokens=24,
                        arrivals={"trace": str(trace)}, ssd_protocol=protocol, inline_draft=inline,
                        draft_placement=placement, check_lossless=True))
    prompts = [(PROMPTS[i] * 3)[:n] for i, (_, n, _) in enumerate(shape)]
    assert rep.token_ids == [plain_greedy(TARGET, p, o) for p, (_, _, o) in zip(prompts, shape)]
    assert not rep.measurements.meta["faults"]
    return rep.measurements.rounds


CASES = [("push", False, "process"), ("reply", False, "process"), ("push", True, "process"),
         ("push", False, "stream")]


@pytest.mark.parametrize("protocol,inline,placement", CASES)
def test_finished_first_row_is_not_forwarded(tmp_path, protocol, inline, placement):
    """Row 0 finishes first: the live rows move over it on both sides (the draft by the same rule, or its
    speculations would land on the wrong rows and the outputs differ), and every round forwards its live rows."""
    rows = _run(tmp_path, FIRST_GOES, protocol, inline, placement)
    assert rows[0]["width"] == 3
    assert all(r["width"] == len(r["slot"]) and r["slot"] == list(range(len(r["slot"]))) for r in rows)
    after = [r for r in rows if 0 not in r["seq"]]
    assert after and all(r["width"] < 3 for r in after)
    assert any(r["seq"][0] != 0 and r["slot"][0] == 0 for r in after)   # a later request now sits in row 0


@pytest.mark.parametrize("protocol,inline,placement", CASES)
def test_moved_rows_keep_their_speculations(tmp_path, protocol, inline, placement):
    """The target as its own draft accepts every token of every speculation, the moved rows' too, only if the
    draft moved its rows (its sequences, its cache, the outstanding speculation) exactly as the verifier did:
    a row left behind on either side gets another request's speculation and accepts almost nothing."""
    rows = _run(tmp_path, FIRST_GOES, protocol, inline, placement, draft=TARGET)
    assert any(0 not in r["seq"] and len(r["seq"]) == 2 for r in rows)
    assert all(a == 3 for r in rows for a in r["accepted"])


@pytest.mark.parametrize("protocol,inline", [("push", False), ("reply", False), ("push", True)])
def test_finished_last_rows_are_not_forwarded(tmp_path, protocol, inline):
    rows = _run(tmp_path, SHAPE, protocol, inline)
    assert rows[0]["width"] == 3
    alone = [r for r in rows if r["seq"] == [0]]
    assert alone and all(r["width"] == 1 for r in alone)             # rows 1 and 2 done: one row forwarded
    assert all(r["width"] == max(r["slot"]) + 1 for r in rows)

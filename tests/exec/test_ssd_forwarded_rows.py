"""SSD keeps every row in place (fixed-shape messages, no moves) but forwards only the rows up to the last live
one, on both sides: a batch whose last rows finished early runs narrower rounds, every output stays the
target's greedy one (push, reply, inline; T > 0 through the distribution tests), and each round records the
rows it forwarded as its width (what calibration and the simulator charge)."""

import json

import pytest
from exec_helpers import plain_greedy, tiny_models

from saguaro_exec import RunConfig, run
from saguaro_exec.engine.state import forwarded_rows
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3, 9]]
SHAPE = [(0.0, 5, 24), (0.0, 3, 5), (0.0, 8, 9)]     # row 0 outlives rows 1 and 2


def test_forwarded_rows_is_the_last_live_row_plus_one():
    assert forwarded_rows([False, False, False]) == 3
    assert forwarded_rows([False, True, True]) == 1
    assert forwarded_rows([True, False, True]) == 2      # a finished row before a live one is still forwarded
    assert forwarded_rows([True, True]) == 1


@pytest.mark.parametrize("protocol,inline", [("push", False), ("reply", False), ("push", True)])
def test_finished_last_rows_are_not_forwarded(tmp_path, protocol, inline):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": a, "prompt_tokens": n, "output_tokens": o}) + "\n"
                             for a, n, o in SHAPE))
    spec = SpecConfig(mode="ssd", k=3, batch_size=3, fanout=(2, 1, 1, 1))
    rep = run(RunConfig(spec=spec, target=TARGET, draft=DRAFT, prompts=PROMPTS, max_new_tokens=24,
                        arrivals={"trace": str(trace)}, ssd_protocol=protocol, inline_draft=inline,
                        check_lossless=True))
    prompts = [(PROMPTS[i] * 3)[:n] for i, (_, n, _) in enumerate(SHAPE)]
    assert rep.token_ids == [plain_greedy(TARGET, p, o) for p, (_, _, o) in zip(prompts, SHAPE)]
    rows = rep.measurements.rounds
    assert rows[0]["width"] == 3
    alone = [r for r in rows if r["seq"] == [0]]
    assert alone and all(r["width"] == 1 for r in alone)             # rows 1 and 2 done: one row forwarded
    assert all(r["width"] == max(r["slot"]) + 1 for r in rows)

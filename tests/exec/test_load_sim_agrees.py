"""The load simulator and the executor's load mode mean the same thing, on one recorded trace: the rows each round
is charged for are the rows it forwarded, each request's first token comes with its first decode round (the prefill
caches the prompt but its last token) and its last with the round that completes it, and TPOT spans exactly the
rounds and other rows' prefills between those two on both sides. Requests all arrive at t = 0, so the AR schedule
does not depend on timing and both sides must agree round for round."""

import json
from collections import Counter

import numpy as np
import pytest
from exec_helpers import tiny_models

from calibration import AcceptanceModel, HitCurve, LatencyModel, Profile
from saguaro_exec import RunConfig, run
from saguaro_sim import SpecConfig
from saguaro_sim.load import ConfigSchedule, load_trace, simulate_load
from saguaro_sim.load.engine import Replica

TARGET, DRAFT = tiny_models()
STEP = 0.001      # the toy profile: every forward (round or prefill) costs one millisecond
TOY = Profile(name="toy", target=LatencyModel.constant(STEP), draft=LatencyModel.constant(1e-6), link_s=0.0,
              acceptance=AcceptanceModel.geometric(0.7), hits=HitCurve.power_law(c=0.3, r=0.5))
REQUESTS = [(5, 3), (9, 6), (4, 2), (3, 5), (8, 4), (6, 1), (7, 3)]   # (prompt tokens, output tokens)


def _trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"arrival_s": 0.0, "prompt_tokens": n, "output_tokens": o}) + "\n"
                            for n, o in REQUESTS))
    return path


def _executor_rounds(rep) -> tuple[list[int], list[int], Counter]:
    rows = rep.measurements.rounds
    first = [min(r["round"] for r in rows if rid in r["seq"]) for rid in range(len(REQUESTS))]
    last = [max(r["round"] for r in rows if rid in r["seq"]) for rid in range(len(REQUESTS))]
    return first, last, Counter(r["width"] for r in rows)


def test_ar_rounds_widths_and_tpot_agree_round_for_round(tmp_path):
    trace = _trace(tmp_path)
    spec = SpecConfig(mode="ar", k=0, budget=0, batch_size=3)
    rep = run(RunConfig(spec=spec, target=TARGET, draft=DRAFT, prompts=[[1, 2, 3]], max_new_tokens=8,
                        arrivals={"trace": str(trace)}))
    assert [len(t) for t in rep.token_ids] == [o for _, o in REQUESTS]
    first, last, widths = _executor_rounds(rep)
    sim = Replica(TOY, ConfigSchedule.fixed(spec), load_trace(trace), max_batch=3)
    sim.run()
    assert sim.first_round.tolist() == first and sim.finish_round.tolist() == last
    assert dict(sim.widths) == dict(widths)                  # each round charged at the rows it forwarded
    rows = {r["round"]: r for r in rep.measurements.rounds}
    res = simulate_load(TOY, spec, load_trace(trace), max_batch=3)
    for rid, (_, out) in enumerate(REQUESTS):
        if out < 2:
            assert rep.per_request["tpot_s"][rid] is None and np.isnan(res.per_request["tpot_s"][rid])
            continue
        span = rows[last[rid]]["t1"] - rows[first[rid]]["t1"]  # the executor: first round's end to last round's
        assert rep.per_request["tpot_s"][rid] == pytest.approx(span / (out - 1))
        prefills = sum(1 for g in range(first[rid] + 1, last[rid] + 1) if rows[g].get("refill"))
        charged = (last[rid] - first[rid] + prefills) * STEP   # the same rounds and prefills, a step each
        assert res.per_request["tpot_s"][rid] == pytest.approx(charged / (out - 1))


def test_ssd_is_charged_every_row_it_forwards(tmp_path):
    """The executor's SSD keeps B rows under load (fixed-shape messages) but moves live rows over finished ones
    after each outcome, so it forwards its live rows only: its recorded width is the live count, narrower once
    rows finish; ssd_width="live" charges the same rule, "prefix" every slot up to the last live one (a TP
    target, whose rows stay in place), "batch" every row."""
    trace = _trace(tmp_path)
    spec = SpecConfig(mode="ssd", k=3, batch_size=3, fanout=(2, 1, 1, 1), backup="neural")
    rep = run(RunConfig(spec=spec, target=TARGET, draft=DRAFT, prompts=[[1, 2, 3]], max_new_tokens=8,
                        arrivals={"trace": str(trace)}, inline_draft=True))
    rows = rep.measurements.rounds
    assert all(r["width"] == len(r["slot"]) == max(r["slot"]) + 1 for r in rows)
    assert rows[0]["width"] == 3 and min(r["width"] for r in rows) < 3
    sims = {w: simulate_load(TOY, spec, load_trace(trace), max_batch=3, ssd_width=w) for w in ("batch", "prefix", "live")}
    assert sims["batch"].rounds_by_width == {"3": sims["batch"].rounds}
    mean = {w: sum(int(k) * v for k, v in r.rounds_by_width.items()) / r.rounds for w, r in sims.items()}
    assert mean["live"] < mean["prefix"] < mean["batch"] == 3

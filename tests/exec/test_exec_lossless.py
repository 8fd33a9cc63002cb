"""Temperature 0: AR, SD and SSD must reproduce the target's own greedy tokens exactly.

Configs cover K, fan-out shapes (incl. zero fan-out positions), C < 1, every backup, batch 1 and > 1
with different prompt lengths, forced misses (an unrelated random draft) and a draft equal to the
target (hits). SSD runs both through the real draft process and the inline link (same worker code).
"""

import pytest
from exec_helpers import plain_greedy, tiny_models

from saguaro_exec import RunConfig, run
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
PROMPTS = [[1, 2, 3, 4, 5], [7, 8], [3, 3, 3, 3, 3, 3, 3, 9], [30]]
N_NEW = 24
GREEDY = [plain_greedy(TARGET, p, N_NEW) for p in PROMPTS]


def _run(spec: SpecConfig, draft=DRAFT, inline: bool = True, prompts=PROMPTS, protocol: str = "auto",
         transport: str = "auto"):
    return run(RunConfig(spec=spec, target=TARGET, draft=draft, prompts=prompts, max_new_tokens=N_NEW,
                         inline_draft=inline, ssd_protocol=protocol, transport=transport))


def test_ar_matches_plain_greedy():
    assert _run(SpecConfig(mode="ar", batch_size=3)).token_ids == GREEDY


@pytest.mark.parametrize("k,batch", [(1, 1), (3, 4), (5, 2)])
def test_sd_matches_greedy(k, batch):
    assert _run(SpecConfig(mode="sd", k=k, batch_size=batch)).token_ids == GREEDY


SSD_CONFIGS = [
    dict(k=3, batch_size=4, fanout=(2, 1, 1, 1), backup="neural"),
    dict(k=2, batch_size=1, fanout=(3, 2, 2), fanout_miss=(1, 1, 1), backup="fast"),
    dict(k=4, batch_size=2, fanout=(1, 0, 0, 0, 1), backup="neural", sampler_c=0.3),
    dict(k=3, batch_size=3, budget=12, fanout_shape="uniform", backup="auto"),
    dict(k=1, batch_size=4, fanout=(4, 4), backup="fast", sampler_c=0.0),
]


@pytest.mark.parametrize("cfg", SSD_CONFIGS)
@pytest.mark.parametrize("draft", ["random", "target"])
def test_ssd_inline_matches_greedy(cfg, draft):
    rep = _run(SpecConfig(mode="ssd", **cfg), draft=DRAFT if draft == "random" else TARGET)
    assert rep.token_ids == GREEDY


@pytest.mark.parametrize("transport", ["shm", "gloo"])
@pytest.mark.parametrize("protocol", ["reply", "push"])
def test_ssd_process_matches_greedy_with_misses(protocol, transport):
    """Real draft process, batch of 4 different lengths, unrelated draft: misses and backups happen
    (push: the verifier looks hits up itself and waits for the draft only for missed rows)."""
    rep = _run(SpecConfig(mode="ssd", k=3, batch_size=4, fanout=(2, 1, 1, 1)), inline=False, protocol=protocol,
               transport=transport)
    assert rep.token_ids == GREEDY
    assert rep.measurements.meta["transport"] == transport
    rows = rep.measurements.rounds
    assert any(fb for r in rows[1:] for fb in r["from_backup"])          # misses really happened
    assert rep.hit_rate is not None and rep.hit_rate < 0.9


@pytest.mark.parametrize("transport", ["shm", "gloo"])
@pytest.mark.parametrize("protocol", ["reply", "push"])
def test_draft_equal_target_hits_every_round(protocol, transport):
    """Draft == target through the real process: every round after the first is a cache hit and
    returns K+1 tokens (the first speculation comes from the backup)."""
    k = 3
    rep = _run(SpecConfig(mode="ssd", k=k, batch_size=2, fanout=(1, 1, 1, 1)), draft=TARGET, inline=False,
               protocol=protocol, transport=transport)
    assert rep.token_ids == GREEDY
    assert rep.hit_rate >= 0.99
    for r in rep.measurements.rounds:
        assert all(a == k for a in r["accepted"]), r
    assert rep.mean_tokens_per_round == k + 1


def test_eos_stops_each_sequence_where_the_target_would():
    """With an EOS id that the greedy continuation of one prompt reaches, every engine stops that row
    right after EOS while the other rows run to max_new_tokens."""
    import dataclasses

    from saguaro_exec.model import random_model

    eos = next(t for i, t in enumerate(GREEDY[0])                # first seen late in row 0, absent elsewhere
               if i >= 4 and GREEDY[0].index(t) == i and any(t not in g for g in GREEDY[1:]))
    cfg = dataclasses.replace(TARGET.config, eos_token_id=eos)
    target = random_model(cfg, seed=1, std=0.5)                 # same weights as TARGET, plus an EOS id
    expect = [g[: g.index(eos) + 1] if eos in g else g for g in GREEDY]
    assert len(expect[0]) < N_NEW and any(len(e) == N_NEW for e in expect)
    for spec, inline in [(SpecConfig(mode="ar", batch_size=4), True), (SpecConfig(mode="sd", k=3, batch_size=4), True),
                         (SpecConfig(mode="ssd", k=3, batch_size=4, fanout=(2, 1, 1, 1)), True),
                         (SpecConfig(mode="ssd", k=2, batch_size=2, fanout=(2, 2, 1), backup="fast"), True)]:
        rep = run(RunConfig(spec=spec, target=target, draft=DRAFT, prompts=PROMPTS, max_new_tokens=N_NEW,
                            inline_draft=inline))
        assert rep.token_ids == expect, spec.mode

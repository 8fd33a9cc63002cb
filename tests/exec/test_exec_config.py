"""RunConfig validation and TOML loading; RunReport JSON, Measurements rows and Chrome trace."""

import json

import pytest
from exec_helpers import tiny_models

from calibration.errors import ConfigError
from calibration.measurements import ROUND_FIELDS, Measurements
from saguaro_exec import RunConfig, RunReport, run
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()


@pytest.mark.parametrize("kwargs,field", [
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(device="tpu"), "device"),
    (dict(draft_device="cuda:x"), "draft_device"),
    (dict(dtype="int8"), "dtype"),
    (dict(timeout_s=0), "timeout_s"),
    (dict(prompts=[]), "prompts"),
    (dict(prompts=["ok", 3]), "prompts"),
    (dict(target="/no/such/dir"), "target"),
    (dict(spec={"mode": "ssd"}), "spec"),
    (dict(prompts=["a"], prompt_file="x.txt"), "prompt_file"),
])
def test_bad_fields_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as e:
        RunConfig(**kwargs)
    assert str(e.value).startswith(field) and "allowed:" in str(e.value)


def test_from_toml_reads_spec_and_relative_paths(tmp_path):
    (tmp_path / "p.txt").write_text("def f():\\n    return\nclass A:\n")
    (tmp_path / "run.toml").write_text(
        'prompt_file = "p.txt"\nmax_new_tokens = 7\nseed = 3\n[spec]\nmode = "sd"\nk = 2\ntemperature = 0.5\n')
    cfg = RunConfig.from_toml(tmp_path / "run.toml")
    assert cfg.spec == SpecConfig(mode="sd", k=2, temperature=0.5)
    assert cfg.max_new_tokens == 7 and cfg.seed == 3
    assert cfg.load_prompts() == ["def f():\n    return", "class A:"]
    (tmp_path / "bad.toml").write_text('max_new_tokens = 5\ncolour = "red"\n')
    with pytest.raises(ConfigError, match="colour: unknown key"):
        RunConfig.from_toml(tmp_path / "bad.toml")
    (tmp_path / "bad2.toml").write_text('[spec]\nk = 0\nmode = "sd"\n')
    with pytest.raises(ConfigError, match="spec.k"):
        RunConfig.from_toml(tmp_path / "bad2.toml")


def test_mismatched_vocab_is_a_config_error():
    _, other = tiny_models(vocab=40)
    with pytest.raises(ConfigError, match="draft: vocabulary size 40"):
        run(RunConfig(spec=SpecConfig(mode="sd"), target=TARGET, draft=other, prompts=[[1]]))


def test_report_measurements_and_trace(tmp_path):
    spec = SpecConfig(mode="ssd", k=2, batch_size=2, fanout=(2, 1, 1), temperature=0.7, sampler_c=0.5)
    rep = run(RunConfig(spec=spec, target=TARGET, draft=DRAFT, prompts=[[1, 2, 3], [4], [5, 6]],
                        max_new_tokens=10, inline_draft=True))
    assert isinstance(rep, RunReport)
    assert [len(t) for t in rep.token_ids] == [10, 10, 10]
    assert len(rep.tokens_per_s_per_seq) == 3 and rep.tokens_per_s > 0
    assert 1.0 <= rep.mean_tokens_per_round <= 3.0 and len(rep.acceptance_per_position) == 2
    assert 0.0 <= rep.hit_rate <= 1.0 and 0.0 <= rep.wait_share < 1.0
    rows = rep.measurements.rounds
    assert {r["batch_index"] for r in rows} == {0}                      # one queue through 2 rows
    assert {i for r in rows for i in r["seq"]} == {0, 1, 2} and [i for r in rows for i in r.get("refill", [])] == [2]
    for r in rows:
        assert set(ROUND_FIELDS) <= set(r)
        assert len(r["accepted"]) == len(r["hit"]) == len(r["bonus_rank"]) == r["batch"]
        assert all(-1 <= x < 64 for x in r["bonus_rank"])
        assert r["t0"] <= r["t1"]
    first = [r for r in rows if r["round"] == 0]
    assert all(all(r["from_backup"]) for r in first)       # the first speculation comes from the backup
    # hit <=> bonus rank below the fan-out used at that position (same ordering on both sides)
    for r in rows:
        fan = (2, 1, 1)                                      # fanout_miss defaults to the primary
        for acc, hit, rank, fb in zip(r["accepted"], r["hit"], r["bonus_rank"], r["from_backup"]):
            if rank >= 0:
                assert hit == (rank < fan[acc]), (r, acc, hit, rank, fb)
    rep.to_json(tmp_path / "rep.json")
    data = json.loads((tmp_path / "rep.json").read_text())
    assert data["mode"] == "ssd" and data["measurements"]["meta"]["spec"]["k"] == 2
    Measurements.from_dict(data["measurements"]).to_json(tmp_path / "m.json")
    assert Measurements.from_json(tmp_path / "m.json").rounds[0]["round"] == 0
    rep.chrome_trace(tmp_path / "trace.json")
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    spans = [e for e in trace if e["ph"] == "X"]
    names = {e["name"] for e in spans}
    assert {"verify", "wait", "glue", "fork", "tree", "reply"} <= names
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)

"""draft_placement = "stream": SSD's speculator in the verifier's process, building in a helper thread (on a
side CUDA stream on GPU). On CPU: lossless at T = 0 (every config, misses and hits), the same sampled tokens
as the inline link at T > 0 (same worker, same generators), the report says where the draft ran, and bad
combinations are one-line ConfigErrors."""

import pytest
from exec_helpers import plain_greedy, tiny_models

from calibration.errors import ConfigError
from saguaro_exec import RunConfig, run
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
PROMPTS = [[1, 2, 3, 4, 5], [7, 8], [3, 3, 3, 3, 3, 3, 3, 9], [30], [5, 6, 7]]
N_NEW = 24
GREEDY = [plain_greedy(TARGET, p, N_NEW) for p in PROMPTS]

CONFIGS = [
    dict(k=3, batch_size=4, fanout=(2, 1, 1, 1), backup="neural"),       # 5 prompts through 4 rows: a refill
    dict(k=2, batch_size=1, fanout=(3, 2, 2), fanout_miss=(1, 1, 1), backup="fast"),
    dict(k=4, batch_size=2, fanout=(1, 0, 0, 0, 1), backup="neural", sampler_c=0.3),
]


def _run(spec: SpecConfig, draft=DRAFT, **kw):
    return run(RunConfig(spec=spec, target=TARGET, draft=draft, prompts=PROMPTS, max_new_tokens=N_NEW, **kw))


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("draft", ["random", "target"])
def test_stream_placement_matches_greedy(cfg, draft):
    rep = _run(SpecConfig(mode="ssd", **cfg), draft=DRAFT if draft == "random" else TARGET,
               draft_placement="stream")
    assert rep.token_ids == GREEDY
    meta = rep.measurements.meta
    assert meta["transport"] == "stream" and meta["draft_pid"] is None
    assert meta["draft_placement"].startswith("stream on cpu") and "no CUDA stream" in meta["draft_placement"]
    if draft == "target":
        assert rep.hit_rate > 0.5     # the draft is the target: the cache holds the outcome


def test_stream_placement_samples_as_the_inline_link():
    spec = SpecConfig(mode="ssd", k=3, batch_size=3, fanout=(2, 2, 1, 1), temperature=0.8, backup="neural")
    inline = _run(spec, inline_draft=True, seed=7)
    stream = _run(spec, draft_placement="stream", seed=7)
    assert stream.token_ids == inline.token_ids
    assert stream.hit_rate == inline.hit_rate


def test_stream_placement_in_synthetic_mode_draws_from_the_built_cache():
    rep = _run(SpecConfig(mode="ssd", k=3, batch_size=2, fanout=(2, 1, 1, 1)), draft_placement="stream",
               synthetic="cpu-tinypair")
    assert rep.synthetic is not None and rep.measurements.meta["transport"] == "stream"
    assert all(len(t) == N_NEW for t in rep.token_ids)


@pytest.mark.parametrize("kw,needle", [
    ({"draft_placement": "gpu"}, "process | stream"),
    ({"draft_placement": "stream", "spec": SpecConfig(mode="sd")}, "mode"),
    ({"draft_placement": "stream", "inline_draft": True}, "inline_draft"),
    ({"draft_placement": "stream", "inject_fault": "die@1"}, "draft_placement"),
])
def test_bad_draft_placement_is_a_config_error(kw, needle):
    kw = {"spec": SpecConfig(mode="ssd"), **kw}
    with pytest.raises(ConfigError) as e:
        RunConfig(target=TARGET, draft=DRAFT, **kw)
    assert needle in str(e.value) and "\n" not in str(e.value)

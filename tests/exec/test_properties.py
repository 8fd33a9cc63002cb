"""Property-based tests (hypothesis, bounded examples): config and profile parsing never fail with anything
but ConfigError and valid ones round-trip through TOML / JSON; the verification rule is lossless: the exact
output distribution of one SD step (enumerated over draft tokens and accept/reject outcomes, Saguaro
sampling with C < 1 included) equals the target's, and ``sampling.verify`` draws from that distribution."""

from __future__ import annotations

import copy
import functools
import itertools
import json
import tomllib

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from calibration.errors import ConfigError
from calibration.profile import Profile, list_presets, load_preset
from saguaro_exec import RunConfig
from saguaro_exec.sampling import make_generator, saguaro_probs, target_probs, verify
from saguaro_sim import SpecConfig

FAST = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# config parsing -----------------------------------------------------------------------------------
ANY = st.one_of(st.none(), st.booleans(), st.integers(-10, 100), st.floats(allow_nan=True, allow_infinity=True),
                st.text(max_size=8), st.lists(st.integers(-2, 40), max_size=8), st.sampled_from(
                    ["ar", "sd", "ssd", "neural", "fast", "auto", "geometric", "uniform"]))
SPEC_KEYS = ["mode", "k", "fanout", "fanout_miss", "budget", "sampler_c", "backup", "temperature", "batch_size",
             "draft_devices", "fanout_shape"]
SPEC_VALUES = {
    "mode": st.sampled_from(["ar", "sd", "ssd"]), "k": st.integers(0, 8),
    "fanout": st.none() | st.lists(st.integers(0, 6), min_size=1, max_size=9),
    "fanout_miss": st.none() | st.lists(st.integers(0, 6), min_size=1, max_size=9),
    "budget": st.none() | st.integers(0, 64), "sampler_c": st.floats(-0.2, 1.2),
    "backup": st.sampled_from(["neural", "fast", "auto"]), "temperature": st.floats(0, 2),
    "batch_size": st.integers(0, 9), "draft_devices": st.integers(0, 3),
    "fanout_shape": st.sampled_from(["geometric", "uniform"]),
}
spec_dicts = st.fixed_dictionaries({}, optional={k: st.one_of(v, ANY) for k, v in SPEC_VALUES.items()})


@FAST
@given(spec_dicts)
def test_spec_config_parses_or_config_error_and_round_trips(d):
    try:
        spec = SpecConfig.from_dict(d)
    except ConfigError as e:
        assert e.field.split(".")[0] in SPEC_KEYS or e.field.startswith("fanout"), e
        return
    assert SpecConfig.from_dict(tomllib.loads(spec.to_toml())) == spec
    assert SpecConfig.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


@FAST
@given(st.dictionaries(st.text(max_size=12), ANY, max_size=6))
def test_spec_config_random_keys(d):
    try:
        SpecConfig.from_dict(d)
    except ConfigError:
        pass


@FAST
@given(st.text(max_size=200))
def test_spec_and_run_config_files_random_text(tmp_path, text):
    f = tmp_path / "c.toml"
    f.write_text(text)
    for load in (SpecConfig.load, RunConfig.from_toml):
        try:
            load(f)
        except ConfigError:
            pass


RUN_KEYS = ["max_new_tokens", "device", "draft_device", "dtype", "seed", "timeout_s", "profile", "threads",
            "inline_draft", "draft_timeout_s", "fallback", "inject_fault", "prompts", "prompt_file"]


@FAST
@given(st.fixed_dictionaries({}, optional={k: ANY for k in RUN_KEYS}))
def test_run_config_random_fields(d):
    try:
        RunConfig(**d)
    except ConfigError as e:
        assert e.field in RUN_KEYS, e


# profile parsing ----------------------------------------------------------------------------------
PRESETS = {name: load_preset(name).to_dict() for name in list_presets()}


def _paths(d, path=()):
    yield path
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _paths(v, path + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _paths(v, path + (i,))


JSONV = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-2, 2) | st.text(max_size=4),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                     max_leaves=6)


@FAST
@given(st.sampled_from(sorted(PRESETS)), st.data())
def test_profile_mutations_parse_or_config_error_and_round_trip(name, data):
    d = copy.deepcopy(PRESETS[name])
    paths = [p for p in _paths(d) if p]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        parent = d
        try:
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = data.draw(JSONV)
        except (KeyError, IndexError, TypeError):
            continue                                  # an earlier mutation replaced this branch
    try:
        prof = Profile.from_dict(d)
    except ConfigError:
        return
    again = Profile.from_dict(json.loads(json.dumps(prof.to_dict())))
    assert again.to_dict() == prof.to_dict()


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(PRESETS)), st.integers(0, 10**6), st.binary(max_size=3))
def test_profile_files_cut_or_corrupted(tmp_path, name, cut, junk):
    text = json.dumps(PRESETS[name]).encode()
    f = tmp_path / "p.json"
    f.write_bytes(text[: cut % (len(text) + 1)] + junk)
    try:
        Profile.from_json(f)
    except ConfigError:
        pass


# the verification rule ----------------------------------------------------------------------------
class TableModel:
    """prefix -> logits, random but fixed per prefix (a tiny 'language model' as a lookup table)."""

    def __init__(self, vocab: int, seed: int, scale: float) -> None:
        self.vocab, self.seed, self.scale, self.memo = vocab, seed, scale, {}

    def __call__(self, prefix: tuple) -> torch.Tensor:
        if prefix not in self.memo:
            g = torch.Generator().manual_seed(hash((self.seed,) + prefix) % 2**31)
            self.memo[prefix] = torch.randn(self.vocab, generator=g, dtype=torch.float64) * self.scale
        return self.memo[prefix]


@functools.cache
def _p(model, prefix, temp):
    """Target distribution (library code, float32), renormalized in float64 for exact sums."""
    x = target_probs(model(prefix), temp).double()
    return x / x.sum()


@functools.cache
def _q(model, prefix, temp, fan, c):
    """Saguaro draft distribution sigma_{F,C} (library code), renormalized in float64."""
    x = saguaro_probs(model(prefix), temp, fan, c).double()
    return x / x.sum()


def sd_step_exact(target, draft, prefix, k, temp, fan, c) -> dict[tuple, float]:
    """Exact distribution of one SD step's output (accepted draft tokens + bonus), by enumeration."""
    out: dict[tuple, float] = {}
    vocab = target.vocab
    for xs in itertools.product(range(vocab), repeat=k):
        pr, qs = 1.0, []
        for i, x in enumerate(xs):
            q = _q(draft, prefix + xs[:i], temp, fan[i], c)
            pr *= float(q[x])
            qs.append(q)
        if pr == 0:
            continue
        reach = pr
        for i, x in enumerate(xs):
            p = _p(target, prefix + xs[:i], temp)
            a = min(1.0, float(p[x] / qs[i][x]))
            resid = (p - qs[i]).clamp_min(0)
            resid = resid / resid.sum() if resid.sum() > 0 else p
            for b in range(vocab):
                if resid[b] > 0:
                    key = xs[:i] + (b,)
                    out[key] = out.get(key, 0.0) + reach * (1 - a) * float(resid[b])
            reach *= a
        p_last = _p(target, prefix + xs, temp)
        for b in range(vocab):
            if p_last[b] > 0:
                out[xs + (b,)] = out.get(xs + (b,), 0.0) + reach * float(p_last[b])
    return out


def extend_to(target, prefix, dist: dict, n: int, temp) -> dict[tuple, float]:
    """Continue each output by exact target sampling until n tokens: a lossless step gives the target's
    n-token joint distribution."""
    done: dict[tuple, float] = {}
    todo = list(dist.items())
    while todo:
        y, pr = todo.pop()
        if len(y) >= n:
            done[y[:n]] = done.get(y[:n], 0.0) + pr
            continue
        p = _p(target, prefix + y, temp)
        todo += [(y + (b,), pr * float(p[b])) for b in range(target.vocab) if p[b] > 0]
    return done


verify_cases = st.tuples(st.integers(2, 4), st.integers(1, 2), st.sampled_from([0.0, 0.5, 1.0, 1.7]),
                         st.floats(0.0, 1.0), st.lists(st.integers(0, 3), min_size=2, max_size=2),
                         st.integers(0, 10**6), st.floats(0.3, 3.0))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(verify_cases)
def test_sd_step_output_distribution_is_the_targets(case):
    vocab, k, temp, c, fan, seed, scale = case
    target, draft = TableModel(vocab, seed, scale), TableModel(vocab, seed + 1, scale)
    prefix = (0,)
    step = sd_step_exact(target, draft, prefix, k, temp, fan, c)
    assert abs(sum(step.values()) - 1) < 1e-9
    got = extend_to(target, prefix, step, k + 1, temp)
    want = extend_to(target, prefix, {(): 1.0}, k + 1, temp)
    keys = set(got) | set(want)
    assert max(abs(got.get(y, 0.0) - want.get(y, 0.0)) for y in keys) < 1e-9


@settings(max_examples=12, deadline=None, derandomize=True)
@given(verify_cases)
def test_sampling_verify_draws_from_the_exact_step_distribution(case):
    """The batched verifier (sampling.verify) on 20000 rows matches the enumerated step distribution."""
    vocab, k, temp, c, fan, seed, scale = case
    if temp == 0:
        temp = 1.0
    target, draft = TableModel(vocab, seed, scale), TableModel(vocab, seed + 1, scale)
    prefix, n = (0,), 20000
    combos = list(itertools.product(range(vocab), repeat=k))
    probs = torch.tensor([np.prod([float(_q(draft, prefix + xs[:i], temp, fan[i], c)[x])
                                   for i, x in enumerate(xs)]) for xs in combos])
    gen = make_generator(seed)
    pick = torch.multinomial(probs, n, replacement=True, generator=gen)
    tokens = torch.tensor(combos, dtype=torch.long)[pick]
    p_all = torch.stack([torch.stack([_p(target, prefix + xs[:i], temp) for i in range(k + 1)]) for xs in combos])
    q_all = torch.stack([torch.stack([_q(draft, prefix + xs[:i], temp, fan[i], c) for i in range(k)])
                         for xs in combos])
    acc, bonus = verify(p_all[pick].float(), q_all[pick].float(), tokens, temp, gen)
    seen: dict[tuple, int] = {}
    for row, a, b in zip(tokens.tolist(), acc.tolist(), bonus.tolist()):
        y = tuple(row[:a]) + (b,)
        seen[y] = seen.get(y, 0) + 1
    exact = sd_step_exact(target, draft, prefix, k, temp, fan, c)
    assert set(seen) <= set(exact)                   # never an impossible output
    cells = [y for y in exact if exact[y] * n >= 5]
    rest = 1 - sum(exact[y] for y in cells)
    obs = [seen.get(y, 0) for y in cells] + ([n - sum(seen.get(y, 0) for y in cells)] if rest * n >= 5 else [])
    exp = [exact[y] * n for y in cells] + ([rest * n] if rest * n >= 5 else [])
    if len(obs) < 2:
        return
    exp = np.array(exp) * sum(obs) / sum(exp)
    assert chisquare(obs, exp).pvalue > 1e-4


def test_broken_rule_is_caught():
    """Control: drafting with C < 1 but verifying against the plain softmax is not lossless (the first
    output token's distribution differs from the target's), so the exact check above can fail."""
    target, draft = TableModel(3, 7, 1.5), TableModel(3, 8, 1.5)
    p = _p(target, (0,), 1.0)
    q_true, q_plain = _q(draft, (0,), 1.0, 2, 0.2), _q(draft, (0,), 1.0, 0, 1.0)
    a = torch.minimum(torch.ones(3, dtype=torch.float64), p / q_plain)
    resid = (p - q_plain).clamp_min(0)
    resid = resid / resid.sum()
    first = q_true * a + float((q_true * (1 - a)).sum()) * resid
    assert float((first - p).abs().max()) > 1e-3
    good = q_true * torch.minimum(torch.ones(3, dtype=torch.float64), p / q_true)
    r = (p - q_true).clamp_min(0)
    good = good + float((q_true * (1 - torch.minimum(torch.ones(3, dtype=torch.float64), p / q_true))).sum()) \
        * r / r.sum()
    assert float((good - p).abs().max()) < 1e-12            # the same algebra with the true q is exact

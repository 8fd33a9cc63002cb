"""Property tests (issue 15): every validated field, from the API, from a file and from the command line,
fed random types and sizes. The only outcomes allowed: the value is accepted, or ConfigError / exit 2 with
one line naming the field (the flag on the CLI); never another exception, never output written, never a
child process left. Bounded examples (seconds per test); fixed database-free seeds via derandomize."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from class_helpers import inproc, leftovers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calibration.errors import ConfigError
from calibration.profile import Profile, load_preset
from saguaro_exec import RunConfig
from saguaro_exec.model import ModelConfig
from saguaro_sim import SpecConfig
from saguaro_sim.search import Constraints
from saguaro_sim.workload import Workload

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-10**450, max_value=10**450),
                    st.floats(), st.sampled_from([0, -1, 1, 2.0, 4.0, 1e308, -0.0, 2**63, "4", "", "false", "cuda",
                                                  "\ud800", "x" * 5000]), st.text(max_size=30))
values = st.one_of(scalars, st.lists(scalars, max_size=4), st.dictionaries(st.text(max_size=5), scalars, max_size=3))


def only_config_error(fn, field: str) -> None:
    """fn() either succeeds or raises ConfigError whose field names ``field``."""
    try:
        fn()
    except ConfigError as e:
        assert field in e.field, (field, str(e))
        assert len(str(e)) < 600 and "\n" not in str(e)


def no_children() -> None:
    """No child process of this one is left (Linux: /proc/self/task/*/children)."""
    kids = [pid for t in Path("/proc/self/task").iterdir() for pid in (t / "children").read_text().split()]
    assert kids == [], kids


SPEC_FIELDS = [f.name for f in fields(SpecConfig)]
RUN_FIELDS = [f.name for f in fields(RunConfig) if f.name != "spec"]


@SETTINGS
@given(field=st.sampled_from(SPEC_FIELDS), value=values)
def test_spec_config_fields(field, value):
    only_config_error(lambda: SpecConfig.from_dict({field: value}), field)


@SETTINGS
@given(field=st.sampled_from(RUN_FIELDS), value=values)
def test_run_config_fields(field, value):
    only_config_error(lambda: RunConfig(**{field: value}), field)
    no_children()


@SETTINGS
@given(field=st.sampled_from(["num_sequences", "output_tokens", "prompt_tokens"]), value=values)
def test_workload_fields(field, value):
    only_config_error(lambda: Workload(**{field: value}), field)


@SETTINGS
@given(field=st.sampled_from([f.name for f in fields(Constraints)]), value=values)
def test_constraints_fields(field, value):
    only_config_error(lambda: Constraints.from_dict({field: value}), field)


HF = ModelConfig(vocab_size=272, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                 intermediate_size=48).to_hf()


@SETTINGS
@given(key=st.sampled_from(sorted(HF) + ["rope_parameters", "layer_types", "use_sliding_window"]), value=values)
def test_checkpoint_config_json_fields(key, value):
    only_config_error(lambda: ModelConfig.from_hf({**HF, key: value}), "config.json")


GOOD_PROFILE = load_preset("cpu-tinypair-ssd").to_dict()
_LATENCY_PARAM = next(iter(GOOD_PROFILE["target"]["params"]))   # the fitted form's first parameter (knots_y, base, ...)
PROFILE_KEYS = sorted(set(GOOD_PROFILE) - {"schema_version"}) + [f"target.params.{_LATENCY_PARAM}", "draft.kind",
                                                                  "acceptance.by_temperature", "hits.kind"]


def _write_json(path: Path, obj) -> None:
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)            # let any integer reach the file; the reader must refuse it
    try:
        path.write_text(json.dumps(obj))
    finally:
        sys.set_int_max_str_digits(old)


@SETTINGS
@given(key=st.sampled_from(PROFILE_KEYS), value=values)
def test_profile_file_fields(tmp_path, key, value):
    d = json.loads(json.dumps(GOOD_PROFILE))
    *parents, last = key.split(".")
    node = d
    for p in parents:
        node = node[p]
    node[last] = value
    f = tmp_path / "p.json"
    _write_json(f, d)
    only_config_error(lambda: Profile.from_json(f), str(f))


def toml_value(v) -> str | None:
    """v as a TOML value (None when TOML cannot express it)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v) if abs(v) < 10**4000 else None
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        parts = [toml_value(x) for x in v]
        return None if None in parts else "[" + ", ".join(parts) + "]"
    return None


@SETTINGS
@given(field=st.sampled_from(RUN_FIELDS + [f"spec.{f}" for f in SPEC_FIELDS]), value=values)
def test_run_config_toml_fields(tmp_path, field, value):
    text = toml_value(value)
    if text is None:
        return
    key = field.split(".")[-1]
    f = tmp_path / "c.toml"
    f.write_text(f"[spec]\n{key} = {text}\n" if field.startswith("spec.") else f"{key} = {text}\n")
    only_config_error(lambda: RunConfig.from_toml(f), str(f))
    no_children()


FLAGS = {"simulate": ["--k", "--budget", "--sampler-c", "--temperature", "--batch-size", "--draft-devices",
                      "--num-sequences", "--output-tokens", "--prompt-tokens", "--seed", "--fanout", "--mode",
                      "--backup", "--fanout-shape", "--profile"],
         "optimize": ["--batch-size", "--temperature", "--k-range", "--max-budget", "--top-n", "--top", "--modes",
                      "--objective", "--pareto-batch-sizes"],
         "run": ["--k", "--max-new-tokens", "--threads", "--seed", "--draft-timeout-s", "--device", "--dtype",
                 "--fallback", "--target", "--attention", "--cuda-graphs", "--target-devices", "--prompt"],
         "profile": ["--threads", "--repeats", "--warmup", "--ks", "--batches", "--contexts", "--device", "--target"]}
flag_text = st.one_of(st.text(max_size=20), st.integers().map(str), st.floats().map(repr),
                      st.sampled_from(["4.0", "1e400", "nan", "-0", "9" * 5000, "cuda", "tpu", "--x", "1,2,x"]))


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cmd_flag=st.sampled_from([(c, f) for c, fs in FLAGS.items() for f in fs]), text=flag_text)
def test_cli_flags(tmp_path_factory, capsys, cmd_flag, text):
    """A flag with any text: exit 2, one line naming the flag, or (a valid value) naming the unwritable
    output; the work never starts because the output is under a regular file."""
    cmd, flag = cmd_flag
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "file").write_text("x")
    out_flag = "-o" if cmd == "profile" else "--out"
    code, err, out = inproc(capsys, [cmd, f"{flag}={text}", out_flag, tmp / "file" / "out"])
    assert code == 2, (cmd, flag, text, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert flag in err or out_flag in err or "argument" in err, err
    assert out == "" and leftovers(tmp) == [] and sorted(p.name for p in tmp.iterdir()) == ["file"]
    no_children()


@pytest.mark.parametrize("cmd", sorted(FLAGS))
def test_cli_flag_strategy_reaches_every_command(cmd):
    assert FLAGS[cmd]

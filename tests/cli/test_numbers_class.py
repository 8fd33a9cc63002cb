"""Class "numbers and text that pass validation and crash later" (issue 15): every field from every source
(flags, TOML, JSON, API, profile, checkpoint config.json) goes through the same typed checks. Integral floats
for integer fields are refused naming the field (the rule: only true integers pass); huge integers, deep
JSON, non-UTF-8 bytes, a JSON list, a corrupt tokenizer.json, lone surrogates and zero / infinite / 1e308
latencies are a one-line error with exit 2 (ConfigError in the API), never a traceback."""

from __future__ import annotations

import json

import pytest
from class_helpers import assert_clean_error, inproc, leftovers, subproc, tiny_copy

from calibration.errors import ConfigError, check_number, show
from calibration.profile import Profile, load_preset
from saguaro_exec import RunConfig
from saguaro_exec.io.tokenizer import load_tokenizer
from saguaro_exec.model import read_config

BIG = int("9" * 401)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("numbers")
    good = load_preset("cpu-tinypair-ssd").to_dict()
    files = {}

    def put(name, content):
        (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        files[name.rsplit(".", 1)[0]] = d / name

    put("k_float.toml", "[spec]\nmode = \"ar\"\nk = 4.0\n")
    put("spec_k_float.toml", "k = 4.0\n")
    put("max_new_float.toml", "max_new_tokens = 4.0\n")
    put("threads_float.toml", "threads = 2.0\n")
    put("huge_toml.toml", f"seed = {'9' * 5001}\n")
    put("deep_toml.toml", "seed = " + "[" * 100_000 + "]" * 100_000 + "\n")
    put("latin1.toml", b"max_new_tokens = 8 # caf\xe9\n")
    put("huge.json", json.dumps({**good, "vocab_size": 0})[:-1] + ', "x": ' + "9" * 5001 + "}")
    put("deep.json", "[" * 100_000 + "]" * 100_000)
    put("big401.json", json.dumps({**good, "vocab_size": BIG}))
    put("latin1.json", b'{"name": "caf\xe9"}')
    for tag, value in (("zero", 0.0), ("inf", float("inf")), ("e308", 1e308)):
        p = json.loads(json.dumps(good))
        p["target"] = {"kind": "constant", "params": {"s": value}}
        put(f"lat_{tag}.json", json.dumps(p))
    files["dir"] = d
    return files


CLI = [
    ("run --config {k_float}", "spec.k"),
    ("simulate --config {spec_k_float}", "k"),
    ("run --config {max_new_float}", "max_new_tokens"),
    ("run --config {threads_float}", "threads"),
    ("run --config {huge_toml}", "huge_toml.toml"),
    ("run --config {deep_toml}", "deep_toml.toml"),
    ("run --config {latin1}", "UTF-8"),
    ("simulate --profile {huge}", "4300 digits"),
    ("simulate --profile {deep}", "deep.json"),
    ("simulate --profile {big401}", "vocab_size"),
    ("simulate --profile {latin1}", "UTF-8"),
    ("simulate --profile {lat_zero}", "profile.target"),
    ("simulate --profile {lat_inf}", "profile.target.params.s"),
    ("simulate --profile {lat_e308}", "profile.target"),
    ("optimize --profile {lat_zero}", "profile.target"),
    ("simulate --num-sequences " + "9" * 401, "--num-sequences"),
    ("simulate --k 4.0", "--k"),
    ("run --max-new-tokens 4.0", "--max-new-tokens"),
    ("simulate --sampler-c inf", "--sampler-c"),
    ("run --prompt \udcff --mode ar", "--prompt"),
]


@pytest.mark.parametrize("case, needle", CLI, ids=[c[:50] for c, _ in CLI])
def test_cli_refuses_cleanly(tmp_path, capsys, inputs, case, needle):
    argv = [a.format(**inputs) for a in case.split(" ")]
    code, err, out = inproc(capsys, argv + ["--out", tmp_path / "out"])
    assert_clean_error(code, err, needle)
    assert out == "" and list(tmp_path.iterdir()) == []


def test_checkpoint_config_json_problems_exit_2(tmp_path, capsys):
    """config.json that is not UTF-8, is a JSON list, is deeply nested or holds a 5,001-digit integer."""
    for name, content in (("latin1", b'{"vocab_size": 272, "x": "caf\xe9"}'), ("list", b"[1, 2]"),
                          ("deep", b"[" * 100_000 + b"]" * 100_000), ("huge", b'{"vocab_size": ' + b"9" * 5001 + b"}")):
        ck = tiny_copy(tmp_path / name)
        (ck / "config.json").write_bytes(content)
        code, err, out = inproc(capsys, ["run", "--mode", "ar", "--target", ck, "--max-new-tokens", "2"])
        assert_clean_error(code, err, "config.json")
        with pytest.raises(ConfigError, match="config.json"):
            read_config(ck)


def test_corrupt_tokenizer_json_is_a_config_error(tmp_path, capsys):
    ck = tiny_copy(tmp_path / "ck")
    (ck / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": 3}}')
    with pytest.raises(ConfigError, match="tokenizer.json"):
        load_tokenizer(ck)
    code, err, _ = inproc(capsys, ["run", "--mode", "ar", "--target", ck, "--max-new-tokens", "2"])
    assert_clean_error(code, err, "tokenizer.json")


def test_lone_surrogate_prompts_api_and_file(tmp_path):
    from saguaro_exec import run

    with pytest.raises(ConfigError, match="prompts"):
        run(RunConfig(prompts=["ok", "bad \ud800 text"], max_new_tokens=2, spec=_ar()))
    f = tmp_path / "p.json"
    f.write_text(json.dumps(["x \ud800 y"]))             # a JSON escape of a lone surrogate
    with pytest.raises(ConfigError, match="prompts"):
        run(RunConfig(prompt_file=str(f), max_new_tokens=2, spec=_ar()))


def _ar():
    from saguaro_sim import SpecConfig

    return SpecConfig(mode="ar", k=0)


@pytest.mark.parametrize("kw, field", [({"threads": 2.0}, "threads"), ({"max_new_tokens": 4.0}, "max_new_tokens"),
                                       ({"seed": 3.0}, "seed"), ({"seed": BIG}, "seed"),
                                       ({"timeout_s": float("inf")}, "timeout_s")])
def test_api_integral_floats_and_huge_values(kw, field):
    with pytest.raises(ConfigError) as ei:
        RunConfig(**kw)
    assert ei.value.field == field and len(str(ei.value)) < 300


def test_error_formatter_survives_any_size():
    for v in (BIG, 10**5000, "x" * 10_000, float("nan")):
        assert len(show(v)) <= 60
        with pytest.raises(ConfigError):
            check_number("f", v, 0, 10, integer=True)


@pytest.mark.parametrize("value", [0.0, float("inf"), 1e308, float("nan")])
def test_profile_latencies_refused_in_the_api(value):
    from calibration.latency import LatencyModel

    good = load_preset("cpu-tinypair-ssd")
    with pytest.raises(ConfigError, match="profile.(target|draft)|latency"):
        Profile(name="x", target=LatencyModel.linear(value) if value == value else LatencyModel.constant(value),
                draft=good.draft)


def test_subprocess_deep_json_and_latin1_toml(tmp_path, inputs):
    for argv, needle in ((["simulate", "--profile", inputs["deep"]], "deep.json"),
                         (["run", "--config", inputs["latin1"]], "UTF-8")):
        p = subproc(argv + ["--out", tmp_path / "out"], cwd=tmp_path)
        assert_clean_error(p.returncode, p.stderr, needle)
        assert p.stdout == "" and list(tmp_path.iterdir()) == [] and leftovers(tmp_path) == []

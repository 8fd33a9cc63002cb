"""saguaro_exec/measure/beside.py on the shipped tiny pair: a real draft child busy and idle in alternate windows
beside the timed target forward; the result's shape, no process or temp folder left behind, bad input named."""

from __future__ import annotations

import glob
import os
import tempfile

import pytest

pytest.importorskip("torch")

from calibration import ConfigError  # noqa: E402
from saguaro_exec.io.assets import tiny_pair_paths  # noqa: E402
from saguaro_exec.measure.beside import beside_slowdown  # noqa: E402


def _children() -> list[str]:
    kids = []
    for t in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{t}/children") as f:
            kids += f.read().split()
    return kids


def test_beside_measures_adjacent_window_pairs_and_cleans_up(tmp_path, monkeypatch):
    # a temp root of its own: the other test worker's calibrations make and remove saguaro-beside-* folders too
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    target, draft = tiny_pair_paths()
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "saguaro-beside-*")))
    got = beside_slowdown(target, draft, target_tokens=4, draft_tokens=8, context=32, cycles=6, window_s=0.05, batch=2)
    assert got["cycles"] == 6 and got["busy_s"] > 0 and got["idle_s"] > 0 and got["batch"] == 2
    assert got["slowdown"] == max(1.0, got["raw"]) and got["q1"] <= got["raw"] <= got["q3"]
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "saguaro-beside-*"))) == before
    assert _children() == []


@pytest.mark.parametrize("kw,field", [({"cycles": 1}, "beside.cycles"), ({"window_s": 0.001}, "beside.window_s"),
                                      ({"draft_tokens": 0}, "beside.draft_tokens"), ({"batch": 0}, "beside.batch")])
def test_bad_shapes_name_the_field(kw, field):
    target, draft = tiny_pair_paths()
    with pytest.raises(ConfigError) as e:
        beside_slowdown(target, draft, **kw)
    assert e.value.field == field

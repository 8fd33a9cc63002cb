"""Plots: each writes a real PNG (decoded back at the figure's pixel size, not blank) plus a JSON holding
exactly the numbers it was given; bad input names the field."""

import json

import pytest
from matplotlib.image import imread

from calibration import ConfigError
from saguaro_sim import plots

DPI = 110                      # plots._figure's


def _check(png, kind, inches=(7.0, 4.0)):
    assert png.suffix == ".png"
    pixels = imread(png)
    assert pixels.shape[:2] == (round(inches[1] * DPI), round(inches[0] * DPI))
    assert pixels[..., :3].std() > 0.05                                     # something was drawn
    data = json.loads(png.with_suffix(".json").read_text())
    assert data["kind"] == kind
    assert not [p for p in png.parent.iterdir() if p.name.startswith(".")]  # no temp files left
    return data


def _events(rounds=10):
    ev, t = [], 0.0
    for r in range(rounds):
        ev.append({"name": "message", "track": "link", "start_s": t, "dur_s": 0.0001, "args": {}})
        ev.append({"name": "verify", "track": "verifier", "start_s": t, "dur_s": 0.015, "args": {"round": r}})
        ev.append({"name": "build cache", "track": "speculator 0", "start_s": t, "dur_s": 0.010, "args": {}})
        ev.append({"name": "message", "track": "link", "start_s": t + 0.015, "dur_s": 0.0002, "args": {}})
        t += 0.0152
    return ev


def test_timeline(tmp_path):
    png = plots.plot_timeline(_events(), tmp_path / "timeline.png", max_rounds=3)
    data = _check(png, "timeline", inches=(9.0, 1.2 + 0.6 * 3))
    assert data["tracks"] == ["verifier", "speculator 0", "link"]  # verifier on top, link last
    assert sum(e["track"] == "verifier" for e in data["events"]) == 3
    verify = [e for e in data["events"] if e["track"] == "verifier"]
    assert verify[0]["start_ms"] == 0.0 and verify[0]["dur_ms"] == pytest.approx(15.0)
    assert verify[1]["start_ms"] == pytest.approx(15.2)


def test_line_plots(tmp_path):
    k_series = {"SD": [1.5, 1.9, 2.2, 2.0], "SSD": [1.8, 2.4, 2.9, 2.7]}
    d = _check(plots.plot_speedup_vs_k([1, 2, 4, 8], k_series, tmp_path / "k.png"), "speedup_vs_k")
    assert d["series"] == k_series and d["x"] == [1, 2, 4, 8]
    b_series = {"neural": [2.0, 1.6, 1.3], "fast": [1.5, 1.5, 1.4]}
    d = _check(plots.plot_speedup_vs_batch([1, 2, 4], b_series, tmp_path / "b"), "speedup_vs_batch")  # .png added
    assert d["series"] == b_series and d["x"] == [1, 2, 4]
    d = _check(plots.plot_hit_vs_fanout([1, 2, 4], {"T=0": [0.7, 0.8, 0.9]}, tmp_path / "h.png"), "hit_vs_fanout")
    assert d["series"] == {"T=0": [0.7, 0.8, 0.9]} and d["x"] == [1, 2, 4]
    schedules = {"geometric": [8, 6, 4, 3, 3], "uniform": [5, 5, 5, 4, 5]}
    d = _check(plots.plot_fanout(schedules, tmp_path / "f.png"), "fanout")
    assert d["schedules"] == schedules


def test_pareto_frontier(tmp_path):
    lat = [50.0, 40.0, 30.0, 45.0, 20.0]
    thr = [50.0, 100.0, 200.0, 45.0, 150.0]  # point 3 and 4 are dominated
    d = _check(plots.plot_pareto(lat, thr, tmp_path / "p.png", labels=list("abcde")), "pareto")
    assert sorted(d["frontier"]) == [0, 1, 2]
    assert d["per_seq_tok_s"] == lat and d["throughput_per_device"] == thr and d["labels"] == list("abcde")


def test_bad_input(tmp_path):
    with pytest.raises(ConfigError, match=r"series\['SD'\]"):
        plots.plot_speedup_vs_k([1, 2], {"SD": [1.0]}, tmp_path / "x.png")
    with pytest.raises(ConfigError, match="events"):
        plots.plot_timeline([], tmp_path / "t.png")
    with pytest.raises(ConfigError, match=r"events\[0\].start_s"):
        plots.plot_timeline([{"name": "v", "track": "v", "dur_s": 1}], tmp_path / "t.png")
    assert list(tmp_path.iterdir()) == []

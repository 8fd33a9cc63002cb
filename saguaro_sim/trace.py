"""Chrome trace-event JSON (chrome://tracing, Perfetto) from timeline events; shared by simulator and executor.

An event is a dict {name, track, start_s, dur_s, args}; each distinct track becomes one thread row.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from calibration.errors import ConfigError
from calibration.jsonio import write_atomic

_TRACK_ORDER = ("verifier", "link")


def _track_key(track: str) -> tuple[int, str]:
    if track in _TRACK_ORDER:
        return _TRACK_ORDER.index(track), track
    return len(_TRACK_ORDER), track


def chrome_trace_dict(events: Iterable[dict], process_name: str = "saguaro",
                      process_names: dict[int, str] | None = None) -> dict:
    """The trace-event document: one complete ("X") event per timeline event, µs timestamps, named tracks."""
    events = list(events)
    tracks = sorted({str(e["track"]) for e in events}, key=_track_key)
    tid = {t: i + 1 for i, t in enumerate(tracks)}
    out = []
    for i, e in enumerate(events):
        for key in ("name", "track", "start_s", "dur_s"):
            if key not in e:
                raise ConfigError(f"events[{i}].{key}", "missing", "{name, track, start_s, dur_s, args}")
        out.append({"name": str(e["name"]), "ph": "X", "ts": float(e["start_s"]) * 1e6,
                    "dur": max(0.0, float(e["dur_s"])) * 1e6, "pid": int(e.get("pid", 1)),
                    "tid": tid[str(e["track"])], "args": dict(e.get("args") or {})})
    names = dict(process_names or {1: process_name})
    meta = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": n}}
            for pid, n in names.items()]
    meta += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": t, "args": {"name": name}}
             for name, t in tid.items()]
    meta += [{"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": t, "args": {"sort_index": t}}
             for t in tid.values()]
    return {"traceEvents": meta + out, "displayTimeUnit": "ms"}


def chrome_trace(events: Iterable[dict], path: str | os.PathLike, process_name: str = "saguaro",
                 process_names: dict[int, str] | None = None) -> str:
    """Write events as Chrome trace-event JSON to path, atomically; returns the path."""
    doc = chrome_trace_dict(events, process_name, process_names)
    write_atomic(path, json.dumps(doc, separators=(",", ":")) + "\n")
    return os.fspath(path)

"""A child process of a run (draft process, tensor-parallel worker, link benchmark worker) imports only what it
runs: not the planner (saguaro_sim, simpy) nor scipy, which cost each child start-up most of a second. And the
lazy package still gives the public API, even when the submodule ``saguaro_exec.run`` is loaded first."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# What ``python -m saguaro_exec.child`` imports before it calls TARGET: the entry module, spawn, and the targets.
ENTRY = ("saguaro_exec.child", "saguaro_exec.spawn", "saguaro_exec.speculator.process", "saguaro_exec.tp.worker",
         "saguaro_exec.measure.microbench")
ABSENT = ("scipy", "simpy", "saguaro_sim", "saguaro_sim.sim", "saguaro_exec.run")

CODE = f"""
import importlib, inspect, json, sys
for m in {ENTRY!r}:
    importlib.import_module(m)
present = [m for m in {ABSENT!r} if m in sys.modules] + ["torch" in sys.modules]
from saguaro_exec.run import resolve_run          # binds the submodule on the package: run must stay the function
import saguaro_exec
from saguaro_exec import RunConfig, RunReport, run
api = [inspect.isfunction(run), run is saguaro_exec.run, run.__module__, RunConfig.__name__, RunReport.__name__,
       callable(resolve_run), sorted(set(saguaro_exec.__all__) - set(dir(saguaro_exec)))]
print(json.dumps([present, api]))
"""


def test_child_import_chain_skips_planner_and_scipy():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    present, api = json.loads(out.stdout.strip().splitlines()[-1])
    assert present == [True]  # none of ABSENT; torch is there, so the modules really loaded
    assert api == [True, True, "saguaro_exec.run", "RunConfig", "RunReport", True, []]

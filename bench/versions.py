"""One measurement of a checkout, for the benches that alternate old and new code (A B A B): in this process
for the current code, else in a subprocess whose imports come from the checkout at `path`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def parse_versions(spec: str | None) -> list[list[str]]:
    """`name=checkout,...` as [[name, path], ...]; none: [["this", ""]] (the code imported here)."""
    return [v.split("=", 1) for v in spec.split(",")] if spec else [["this", ""]]


def measure_version(script: str, argv: list[str], name: str, path: str, here: Callable[[], dict]) -> dict:
    """`here()` for the current code (path ""), else `script --one argv` run with PYTHONPATH=path: the JSON
    of its last output line. A failing child stops the bench with its stderr."""
    if not path:
        return here()
    env = {**os.environ, "PYTHONPATH": str(Path(path).resolve())}
    res = subprocess.run([sys.executable, script, "--one", *argv], env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{name} ({path}) failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])

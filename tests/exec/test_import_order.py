"""Every module of the four packages imports first, in an interpreter that has loaded none of saguaro's code.

A lazy package __init__ changes which module loads first; a cycle then shows only on the path a user takes
(it broke `saguaro autotune --target`). One subprocess: third-party packages stay loaded, saguaro's modules
are dropped from sys.modules before each import, so every module gets its turn to be the first.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("calibration", "saguaro_sim", "saguaro_exec", "saguaro")

SCRIPT = textwrap.dedent("""
    import importlib, pkgutil, sys, traceback
    packages = %r
    names = []
    for p in packages:
        mod = importlib.import_module(p)
        names.append(p)
        names += [m.name for m in pkgutil.walk_packages(mod.__path__, p + ".")
                  if not m.name.endswith("__main__")]
    failed = []
    for name in names:
        for loaded in [m for m in sys.modules if m.split(".")[0] in packages]:
            del sys.modules[loaded]
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    print(len(names), "modules")
    print("\\n".join(failed))
    sys.exit(1 if failed else 0)
""") % (PACKAGES,)


def test_every_module_imports_first_without_a_cycle():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert int(proc.stdout.split()[0]) > 100

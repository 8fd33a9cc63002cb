"""The capacity-planning notebooks run headless, start fresh, are stored clean and end with a conclusion.

Each notebook is executed with nbclient in a fresh python3 kernel (this venv's interpreter), with the repo
root on PYTHONPATH as `make setup`'s editable install would provide.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NB_DIR = ROOT / "notebooks"
CELL_TIMEOUT_S = 150
NOTEBOOKS = ["capacity_planning", "sensitivity", "calibration"]
MIN_FIGURES = {"capacity_planning": 4, "sensitivity": 3, "calibration": 1}
PRIVATE_IMPORT = re.compile(r"^\s*(from\s+[\w.]*\b_\w+|import\s+[\w.]*\b_\w+|from\s+\S+\s+import\s+.*\b_\w+)", re.M)


def _load_script():
    spec = importlib.util.spec_from_file_location("make_notebooks", ROOT / "scripts" / "make_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _present() -> list[str]:
    return [n for n in NOTEBOOKS if (NB_DIR / f"{n}.ipynb").is_file()]


def _text_outputs(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type in ("display_data", "execute_result"):
            out.append(o.get("data", {}).get("text/plain", ""))
    return "".join(out)


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict:
    """Execute every shipped notebook once (module scope: the three together stay under 3 minutes)."""
    old = {k: os.environ.get(k) for k in ("PYTHONPATH", "TMPDIR")}
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([old["PYTHONPATH"]] if old["PYTHONPATH"] else []))
    results = {}
    try:
        for name in _present():
            nb = nbformat.read(NB_DIR / f"{name}.ipynb", as_version=4)
            work = tmp_path_factory.mktemp(name)  # files a notebook writes land here, not in the repo
            os.environ["TMPDIR"] = str(work)  # ... and so do its tempfile folders (the autotune report)
            client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                                    resources={"metadata": {"path": str(work)}})
            t0 = time.perf_counter()
            client.execute()  # raises CellExecutionError naming the failing cell
            results[name] = (nb, time.perf_counter() - t0)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return results


def test_the_planning_notebooks_are_shipped():
    assert {"capacity_planning", "sensitivity"} <= set(_present())


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_stored_clean_and_opens_with_the_question(name):
    path = NB_DIR / f"{name}.ipynb"
    if not path.is_file():
        pytest.skip(f"{name}.ipynb not shipped")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert _load_script().problems(nb) == []
    first = nb.cells[0].source
    assert first.startswith("# ") and "question" in first.lower()
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert not PRIVATE_IMPORT.search(code), "notebooks use only public names"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_runs_headless_and_concludes_from_its_numbers(executed, name):
    if name not in executed:
        pytest.skip(f"{name}.ipynb not shipped")
    nb, wall = executed[name]
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert errors == []
    figures = sum("image/png" in o.get("data", {}) for c in code for o in c.outputs)
    assert figures >= MIN_FIGURES[name]
    conclusion = code[-1]
    assert re.search(r"(?i)conclusion", nb.cells[nb.cells.index(conclusion) - 1].source)
    text = _text_outputs(conclusion)
    assert len(text) > 100 and re.search(r"\d", text), f"conclusion printed: {text!r}"
    assert re.search(r"\bf[\"']", conclusion.source), "the conclusion is formatted from computed numbers"
    assert wall < 120, f"{name} took {wall:.0f}s"


def test_all_notebooks_together_stay_under_three_minutes(executed):
    assert executed and sum(w for _, w in executed.values()) < 180


def test_kernel_is_this_interpreter(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys; print(sys.executable)")])
    NotebookClient(nb, kernel_name="python3", timeout=60, resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert Path(nb.cells[0].outputs[0].text.strip()).resolve() == Path(sys.executable).resolve()


def test_percent_format_round_trip_and_strip(tmp_path):
    mk = _load_script()
    src = "# %% [markdown]\n# # Title\n# What question?\n\n# %%\nx = 1\nprint(x)\n"
    (tmp_path / "a.py").write_text(src)
    mk.build(tmp_path / "a.py", tmp_path / "a.ipynb")
    nb = nbformat.read(tmp_path / "a.ipynb", as_version=4)
    assert [c.cell_type for c in nb.cells] == ["markdown", "code"]
    assert nb.cells[0].source == "# Title\nWhat question?" and nb.cells[1].source == "x = 1\nprint(x)"
    assert mk.cells_from_percent(mk.percent_from_notebook(nb))[1].source == nb.cells[1].source
    NotebookClient(nb, kernel_name="python3", timeout=60, resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert mk.problems(nb) == ["cell 1 has stored outputs or an execution count"]
    mk.write_notebook(nb, tmp_path / "run.ipynb")
    assert mk.main(["check", str(tmp_path / "run.ipynb")]) == 1
    assert mk.main(["strip", str(tmp_path / "run.ipynb")]) == 0
    assert mk.main(["check", str(tmp_path / "run.ipynb")]) == 0

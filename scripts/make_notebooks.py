"""Keep the notebooks reviewable: build them from percent-format Python, export them back, strip outputs.

    python scripts/make_notebooks.py to-py notebooks/sensitivity.ipynb > /tmp/sensitivity.py   # edit as text
    python scripts/make_notebooks.py build /tmp/sensitivity.py notebooks/sensitivity.ipynb
    python scripts/make_notebooks.py strip notebooks/*.ipynb    # drop outputs before committing
    python scripts/make_notebooks.py check notebooks/*.ipynb    # exit 1 if any is not clean

Percent format: a line `# %%` starts a code cell, `# %% [markdown]` a markdown cell whose lines are
comments (`# text`). Stored notebooks have no outputs, no execution counts and stable cell ids.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path

import nbformat

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
MARKDOWN = "# %% [markdown]"
CODE = "# %%"


def cells_from_percent(text: str) -> list:
    """Notebook cells parsed from percent-format text (text before the first marker is ignored)."""
    cells, kind, lines = [], None, []

    def flush() -> None:
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in body.split("\n"))
            cells.append(nbformat.v4.new_markdown_cell(body))
        else:
            cells.append(nbformat.v4.new_code_cell(body))

    for line in text.split("\n"):
        if line.strip() == MARKDOWN or line.strip() == CODE:
            flush()
            kind, lines = ("markdown" if line.strip() == MARKDOWN else "code"), []
        else:
            lines.append(line)
    flush()
    return cells


def percent_from_notebook(nb: nbformat.NotebookNode) -> str:
    """Percent-format text of a notebook (the inverse of cells_from_percent, outputs dropped)."""
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            body = "\n".join(f"# {ln}" if ln else "#" for ln in cell.source.split("\n"))
            parts.append(f"{MARKDOWN}\n{body}\n")
        else:
            parts.append(f"{CODE}\n{cell.source}\n")
    return "\n".join(parts)


def clean(nb: nbformat.NotebookNode, stem: str) -> nbformat.NotebookNode:
    """Strip outputs and execution counts, set the kernelspec, give cells stable ids (name + index)."""
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    for i, cell in enumerate(nb.cells):
        cell.id = hashlib.sha1(f"{stem}:{i}".encode()).hexdigest()[:12]
        cell.metadata = {}
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nbformat.validate(nb)
    return nb


def problems(nb: nbformat.NotebookNode) -> list[str]:
    """Why a stored notebook is not clean (empty list: clean)."""
    out = []
    if not nb.cells or nb.cells[0].cell_type != "markdown":
        out.append("first cell is not a markdown cell saying what question the notebook answers")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            out.append(f"cell {i} has stored outputs or an execution count")
    if nb.metadata.get("kernelspec", {}).get("name") != KERNELSPEC["name"]:
        out.append("kernelspec is not python3")
    return out


def write_notebook(nb: nbformat.NotebookNode, path: Path) -> None:
    """Write atomically (temp file + os.replace)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        text = nbformat.writes(nb)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(src: Path, dest: Path) -> None:
    """Percent-format source -> clean notebook."""
    nb = nbformat.v4.new_notebook(cells=cells_from_percent(src.read_text()))
    write_notebook(clean(nb, dest.stem), dest)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="percent-format .py -> clean .ipynb")
    b.add_argument("src", type=Path)
    b.add_argument("dest", type=Path)
    sub.add_parser("to-py", help="notebook -> percent-format text on stdout").add_argument("nb", type=Path)
    sub.add_parser("strip", help="drop outputs in place").add_argument("nbs", type=Path, nargs="+")
    sub.add_parser("check", help="exit 1 if a notebook is not clean").add_argument("nbs", type=Path, nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        build(args.src, args.dest)
    elif args.cmd == "to-py":
        sys.stdout.write(percent_from_notebook(nbformat.read(args.nb, as_version=4)))
    elif args.cmd == "strip":
        for path in args.nbs:
            write_notebook(clean(nbformat.read(path, as_version=4), path.stem), path)
    else:
        bad = 0
        for path in args.nbs:
            for p in problems(nbformat.read(path, as_version=4)):
                print(f"{path}: {p}")
                bad += 1
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

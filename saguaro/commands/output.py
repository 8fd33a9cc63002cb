"""The one output mechanism of every command: the destination is checked and a staging entry created
before any work; the result is renamed into place on success (under a lock on the parent folder, so two
commands writing the same path at once both finish cleanly); the staging entry is removed on every exit
path (error, interrupt, SIGTERM, interpreter exit). Stdout goes through ``emit``."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path

from calibration.errors import ConfigError

MARKER = ".saguaro-out"  # written into every output folder: only such folders (or empty ones) are replaced


def _anchor(path: Path, flag: str) -> Path:
    """The nearest existing ancestor of ``path``: where the staging entry goes (same file system)."""
    anchor = path.parent
    while not os.path.lexists(anchor):
        anchor = anchor.parent
    if not anchor.is_dir():
        raise ConfigError(flag, f"{path} is under {anchor}, which is not a folder", "a path in a writable folder")
    return anchor


def _destination(path: str | os.PathLike, flag: str) -> Path:
    """The absolute destination; symbolic links and the current folder (or one above it) are refused."""
    text = os.fspath(path)
    if not text or "\0" in text:
        raise ConfigError(flag, f"{text!r} is not a path", "a file or folder path")
    if os.path.islink(text):
        raise ConfigError(flag, f"{text} is a symbolic link{'' if os.path.exists(text) else ' to nothing'}",
                          "a path that is not a symbolic link")
    p = Path(os.path.abspath(text))
    cwd = Path.cwd()
    if p == cwd or p in cwd.parents:
        raise ConfigError(flag, f"{text} is the current folder or contains it (it cannot be replaced)",
                          "a new folder, or a previous saguaro output folder other than the current one")
    return p


@contextlib.contextmanager
def _locked(folder: Path, missing_ok: bool = False) -> Iterator[None]:
    """An exclusive flock on ``folder`` itself (no lock file left behind); with ``missing_ok``, a folder that
    cannot be opened (not there yet, not ours to read) is simply not locked: the later checks report it."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        if not missing_ok:
            raise
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove(p: str | os.PathLike) -> None:
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p, ignore_errors=True)
    elif os.path.lexists(p):
        with contextlib.suppress(OSError):
            os.unlink(p)


class _Staged:
    """Shared life cycle of StagedDir / StagedFile: stage now, publish on success, remove otherwise."""

    def __init__(self, path: str | os.PathLike | None, flag: str) -> None:
        self.flag = flag
        self.path = None if path is None else _destination(path, flag)
        self.tmp: Path | None = None
        if self.path is not None:
            with _locked(self.path.parent, missing_ok=True):   # not mid-way through another writer's replace
                self._check_existing(self.path)
            anchor = _anchor(self.path, flag)
            try:
                self.tmp = self._make(anchor)
            except OSError as e:
                raise ConfigError(flag, f"cannot write under {anchor} ({e.strerror or e})",
                                  "a path in a writable folder") from None
            self._cleanup = weakref.finalize(self, _remove, str(self.tmp))  # any exit path, even without __exit__

    def _check_existing(self, p: Path) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _make(self, anchor: Path) -> Path:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self) -> Path | None:
        return self.tmp

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.tmp is None:
            return
        try:
            if exc_type is None:
                self._publish()
        finally:
            self._cleanup()            # removes the staging entry if it is still there

    def _publish(self) -> None:
        p, tmp = self.path, self.tmp
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            with _locked(p.parent):
                if os.path.lexists(p):
                    self._check_existing(p)          # another command may have written it meanwhile
                self._replace(tmp, p)
        except OSError as e:
            raise ConfigError(self.flag, f"cannot write {p} ({e.strerror or e})", "a path in a writable folder") \
                from None

    def _replace(self, tmp: Path, p: Path) -> None:
        os.replace(tmp, p)


class StagedDir(_Staged):
    """An --out folder written in a hidden staging folder and renamed into place on success (else removed).

    Usage: `with StagedDir(path) as d: do the work, write into d`; nothing appears at `path` unless the
    block succeeds. An existing empty folder, or one a previous run wrote (it holds MARKER), is replaced;
    anything else at `path` is an error, raised here, before any work.
    """

    MARKER = MARKER

    def __init__(self, path: str | os.PathLike | None, flag: str = "--out") -> None:
        super().__init__(path, flag)

    def _check_existing(self, p: Path) -> None:
        if not os.path.lexists(p):
            return
        if not p.is_dir():
            raise ConfigError(self.flag, f"{p} exists and is not a folder", "a new folder or a saguaro output folder")
        if any(p.iterdir()) and not (p / MARKER).is_file():
            raise ConfigError(self.flag, f"{p} is a non-empty folder saguaro did not write",
                              "a new or empty folder, or a previous saguaro output folder")

    def _make(self, anchor: Path) -> Path:
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.tmp-", dir=anchor))
        (tmp / MARKER).write_text("written by saguaro; this folder is replaced by the next run\n")
        tmp.chmod(0o755)
        return tmp

    def _replace(self, tmp: Path, p: Path) -> None:
        if not os.path.lexists(p):
            os.replace(tmp, p)
            return
        old = Path(tempfile.mkdtemp(prefix=f".{p.name}.old-", dir=p.parent))
        try:
            os.replace(p, old / "x")
            try:
                os.replace(tmp, p)
            except OSError:
                os.replace(old / "x", p)          # put the previous output back
                raise
        finally:
            shutil.rmtree(old, ignore_errors=True)


class StagedFile(_Staged):
    """A `-o FILE` output: `with StagedFile(path, "-o") as tmp: write tmp`; renamed onto path on success."""

    def __init__(self, path: str | os.PathLike, flag: str = "-o") -> None:
        super().__init__(path, flag)

    def _check_existing(self, p: Path) -> None:
        if os.path.lexists(p) and not p.is_file():
            raise ConfigError(self.flag, f"{p} exists and is not a regular file", "a file path (it is replaced)")

    def _make(self, anchor: Path) -> Path:
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=anchor)
        os.close(fd)
        os.chmod(tmp, 0o644)
        return Path(tmp)


def emit(text: str) -> None:
    """Write command output on stdout (the flush in saguaro.cli reports a full or closed stdout)."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")

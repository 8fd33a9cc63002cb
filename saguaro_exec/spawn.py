"""The one lifecycle of a run's child processes (the SSD draft process, tensor-parallel workers).

Parent side, ``Supervisor``: a TCPStore on a free port, a temp folder (the args file, one error file per
child), ranks 1..world-1 spawned as fresh interpreters in their own session (a Ctrl-C reaches only the
parent, which stops them) that die with the parent from their first instruction (PR_SET_PDEATHSIG, set
between fork and exec), start-up watched until every child reports a store key (a child that exits, or
stays stopped (SIGSTOP) for ``stall_s``, fails it at once; ``start_s`` from the spawn bounds it all), a
watchdog that kills a child stopped for ``stall_s`` at any time (so no collective waits for it), close
(grace, terminate, kill), abort, and removal of the temp folder on every exit path: while there are
children the interrupt policy of ``calibration.interrupts`` holds (a second signal never cuts the
clean-up short). Child side: ``saguaro_exec.child`` (the entry) and ``join`` / ``report``.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta

import torch.distributed as dist

from calibration.errors import ConfigError
from calibration.interrupts import deferred, first_signal_wins

ARGS = "args"            # the args file's name in the temp folder (its format is the role's own)
POLL_S = 0.02            # start-up polling interval
WATCH_S = 0.1            # watchdog interval


def error_file(workdir: str, rank: int) -> str:
    return os.path.join(workdir, f"error-{rank}.json")


def proc_state(pid: int) -> str | None:
    """The process's state letter from /proc (R, S, D, T = stopped, Z, ...); None if unknown or gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child SIGKILLed when this process dies (kept across exec), and exits
    if that already happened; resolved here, so the forked child only makes two system calls."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except OSError:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(signal.SIGKILL))                 # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class ChildFailed(RuntimeError):
    """A child failed: exited, raised (``traceback``; ``config_error`` when it was bad input), was killed
    for staying stopped (``stalled_s``), or did not start in time (``rank`` None)."""

    def __init__(self, what: str, rank: int | None, how: str, tb: str = "",
                 config_error: ConfigError | None = None, stalled_s: float | None = None) -> None:
        super().__init__(f"{what} failed ({how}). {tb}".strip())
        self.rank, self.how, self.traceback = rank, how, tb
        self.config_error, self.stalled_s = config_error, stalled_s


class SupervisedContext:
    """The context-manager protocol of an object that owns a Supervisor's children: ``_open`` on entry
    (a ChildFailed goes to ``_start_failed``, which raises or records it), ``close`` on a clean exit,
    ``abort`` (no grace period) on an error or an interrupt."""

    def _open(self) -> None:
        raise NotImplementedError

    def _start_failed(self, e: ChildFailed) -> None:
        raise e

    def close(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self._open()
        except ChildFailed as e:
            self.abort()
            self._start_failed(e)
        except BaseException:
            self.abort()
            raise
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class Supervisor:
    """Child ranks 1..world-1 running ``target`` ("module:function", called as f(rank, port, workdir));
    ``what`` names them in errors ("draft process", "tensor-parallel worker"); ``timeout_s`` is the store's
    (and the start-up bound ``start_s`` when that is None). See the module docstring."""

    def __init__(self, what: str, prefix: str, target: str, world: int, timeout_s: float, stall_s: float,
                 start_s: float | None = None) -> None:
        self.what, self.prefix, self.target, self.world = what, prefix, target, world
        self.timeout_s, self.stall_s = timeout_s, stall_s
        self.start_s = timeout_s if start_s is None else start_s
        self._started = time.monotonic()
        self.procs: list[subprocess.Popen] = []
        self.store: dist.TCPStore | None = None
        self.tmp: str | None = None
        self.stalled: dict[int, float] = {}               # rank -> seconds stopped before the watchdog killed it
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._signals = ExitStack()       # the interrupt policy, held while there are children

    @property
    def ranks(self) -> range:
        return range(1, self.world)

    def args_file(self) -> str:
        return os.path.join(self.tmp, ARGS)

    def spawn(self, write_args: Callable[[str], None], pass_fds: tuple[int, ...] = ()) -> dist.TCPStore:
        """Host the store, write the args (``write_args(path)``) and start every child (inheriting
        ``pass_fds``) and the watchdog."""
        self._signals.enter_context(first_signal_wins())   # a second signal never cuts the clean-up short
        self.store = dist.TCPStore("127.0.0.1", 0, self.world, True, timeout=timedelta(seconds=self.timeout_s),
                                   wait_for_workers=False)
        with deferred():                          # no folder or child an interrupt could orphan
            self.tmp = tempfile.mkdtemp(prefix=self.prefix)
        write_args(self.args_file())
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        preexec = _die_with_parent()
        for rank in self.ranks:
            with deferred():
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "saguaro_exec.child", str(os.getpid()), self.target, str(rank),
                     str(self.store.port), self.tmp], env=env, start_new_session=True, preexec_fn=preexec,
                    pass_fds=pass_fds))
        self._started = time.monotonic()
        self._watchdog = threading.Thread(target=self._watch, name=f"{self.prefix}watchdog", daemon=True)
        self._watchdog.start()
        return self.store

    def _watch(self) -> None:
        """Kill a child that stays stopped (SIGSTOP / SIGTSTP) for stall_s: whoever waits on it then fails."""
        since: dict[int, float] = {}
        while not self._stop.wait(WATCH_S):
            now = time.monotonic()
            for rank, p in zip(self.ranks, self.procs):
                if proc_state(p.pid) != "T":
                    since.pop(rank, None)
                    continue
                t0 = since.setdefault(rank, now)
                if now - t0 >= self.stall_s and rank not in self.stalled:
                    self.stalled[rank] = now - t0
                    p.kill()

    def wait_for(self, key: str, doing: str) -> None:
        """Until every child has set ``{key}_{rank}`` in the store (see ``report``); ChildFailed as soon
        as one exits or is killed as stopped, or once start_s has passed since the spawn."""
        keys = [f"{key}_{r}" for r in self.ranks]
        while not self.store.check(keys):
            failed = self.failure()
            if failed is not None:
                raise failed
            if time.monotonic() > self._started + self.start_s:
                raise ChildFailed(self.what, None, f"did not {doing} within the start-up timeout of "
                                  f"{self.start_s:g} s")
            time.sleep(POLL_S)

    def failure(self, wait_s: float = 0.0) -> ChildFailed | None:
        """The first child that exited or wrote its error file (waiting up to ``wait_s`` for one), with
        its traceback; None if all are running."""
        end = time.monotonic() + wait_s
        while True:
            for rank, p in zip(self.ranks, self.procs):
                path = error_file(self.tmp, rank) if self.tmp else ""
                code, wrote = p.poll(), bool(path) and os.path.exists(path)
                if code is None and not wrote:
                    continue
                err = _read_error(path) if wrote else {}
                return ChildFailed(self.what, rank, self._how(rank, code), err.get("traceback", ""),
                                   _config_error(err.get("config_error")), self.stalled.get(rank))
            if time.monotonic() >= end:
                return None
            time.sleep(POLL_S)

    def _how(self, rank: int, code: int | None) -> str:
        if rank in self.stalled:
            return f"stopped (SIGSTOP) for {self.stalled[rank]:.1f} s, killed"
        if code is None:
            return "raised"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def close(self, grace_s: float = 3.0) -> None:
        """Give each child ``grace_s`` to exit on its own, then terminate, then kill; clean up."""
        try:
            for p in self.procs:
                for stop in (lambda: None, p.terminate):
                    if p.poll() is not None:
                        break
                    stop()
                    try:
                        p.wait(timeout=grace_s)
                    except subprocess.TimeoutExpired:
                        continue
        finally:
            self.abort()

    def abort(self) -> None:
        """Kill every child at once and remove the temp folder; signals wait until this is done."""
        try:
            with deferred():
                self._stop.set()
                for p in self.procs:
                    if p.poll() is None:
                        p.kill()
                    p.wait()
                if self.tmp:
                    shutil.rmtree(self.tmp, ignore_errors=True)
                    self.tmp = None
                self.store = None
        finally:
            self._signals.close()


def _read_error(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"traceback": "(unreadable error file)"}


def _config_error(fields: list | None) -> ConfigError | None:
    return None if not fields else ConfigError(*fields)


# ---- child side ----

def child_main(target: str, rank: int, port: int, workdir: str) -> None:
    """Run ``target`` (see ``Supervisor``); any exception goes to this rank's error file, then exit 1."""
    try:
        module, name = target.split(":")
        getattr(importlib.import_module(module), name)(rank, port, workdir)
    except BaseException as e:
        write_error(workdir, rank, traceback.format_exc(), e)
        sys.exit(1)


def join(port: int, world: int, rank: int, timeout_s: float) -> dist.TCPStore:
    """Connect to the parent's store and report ``up``."""
    store = dist.TCPStore("127.0.0.1", port, world, False, timeout=timedelta(seconds=timeout_s))
    report(store, "up", rank)
    return store


def report(store: dist.Store, key: str, rank: int) -> None:
    """Tell the parent's ``wait_for(key)`` that this rank got there."""
    store.set(f"{key}_{rank}", "1")


def write_error(workdir: str, rank: int, tb: str, exc: BaseException) -> None:
    """The child's error file, written whole (atomic rename): its traceback, and a ConfigError's fields so
    that the parent raises the same clean error."""
    fields = [exc.field, exc.problem, exc.allowed] if isinstance(exc, ConfigError) else None
    path = error_file(workdir, rank)
    with open(path + ".tmp", "w") as f:
        json.dump({"traceback": tb, "config_error": fields}, f)
    os.replace(path + ".tmp", path)

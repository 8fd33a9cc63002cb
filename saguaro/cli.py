"""The `saguaro` command line: subcommands discovered from modules in saguaro.commands.

To add a subcommand, write saguaro/commands/<name>.py exposing `add_parser(subparsers) -> ArgumentParser`
and `main(args) -> int`, and list <name> in COMMANDS. A command whose module cannot be imported (a missing
optional dependency) becomes a placeholder that says why. Import heavy dependencies (torch) inside `main`,
not at module level, so every other command stays fast.

Bad input (ConfigError, bad flags) prints one line on stderr naming the field and exits with status 2.
Interrupts: SIGINT / SIGTERM are blocked from ``main``'s first line until the policy of
``calibration.interrupts`` is in place (this module imports nothing heavy at its top), and every import after
that finishes before an interrupt is raised; whatever the point, one line on stderr and exit 130 / 143.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Sequence

SIGNALS = (signal.SIGINT, signal.SIGTERM)
COMMANDS = ["presets", "simulate", "optimize", "plan", "run", "profile", "calibrate", "autotune", "report"]

class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def _placeholder(name: str, reason: str):
    def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
        help_ = f"{name} (not available: {reason})"
        p = subparsers.add_parser(name, help=help_, description=help_)
        p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        return p

    def main(args: argparse.Namespace) -> int:
        print(f"saguaro {name}: not available in this build ({reason})", file=sys.stderr)
        return 1

    return add_parser, main


def _load(name: str):
    """(add_parser, main) of saguaro.commands.<name>, or a placeholder saying why it is unavailable."""
    from calibration.interrupts import deferred

    modname = f"saguaro.commands.{name}"
    try:
        with deferred():            # a command module imports whole, or not at all
            mod = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        reason = f"no module {modname}" if e.name == modname else f"missing dependency {e.name!r}"
        return _placeholder(name, reason)
    return mod.add_parser, mod.main


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    """The top-level parser and {command: main function}."""
    parser = Parser(prog="saguaro", description="Plan, simulate, tune and run speculative speculative decoding.")
    from saguaro import __version__
    parser.add_argument("--version", action="version", version=f"saguaro {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    mains = {}
    for name in COMMANDS:
        add_parser, main_fn = _load(name)
        add_parser(sub)
        mains[name] = main_fn
    return parser, mains


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (`saguaro`, `python -m saguaro`): returns the process exit status."""
    mask = None
    if hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread():
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)   # an interrupt waits for the policy
        if argv is None:            # the program (__main__ may have blocked them already): unblocked after
            mask = mask - set(SIGNALS)
    try:
        from calibration.interrupts import imports_deferred

        with imports_deferred():    # SIGTERM unwinds like Ctrl-C; a second signal waits for the clean-up
            try:
                if mask is not None:
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one that came meanwhile is raised now
                    mask = None
                code = _main(argv)
            except KeyboardInterrupt as e:  # before a command was chosen (_command catches the command's)
                print("saguaro: interrupted", file=sys.stderr)
                code = 143 if e.args == ("SIGTERM",) else 130
            # the program is ending, interrupted or done: later signals must not change its status (a Ctrl-C
            # during a finished run's interpreter shutdown, ~0.1 s with torch loaded, killed it with -2, not 0)
            if argv is None and hasattr(signal, "pthread_sigmask"):
                signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if argv is None:   # (interpreter shutdown included)
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)
    return code


def _main(argv: Sequence[str] | None) -> int:
    parser, mains = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    return _command(args, mains[args.command])


def _command(args: argparse.Namespace, command_main) -> int:
    """Run one command; bad input and interrupts become their exit status."""
    from calibration.errors import ConfigError

    guard = sys.stdout = _StdoutGuard(sys.stdout)
    try:
        code = int(command_main(args) or 0)
        sys.stdout.flush()          # a full or closed stdout is reported here, not at interpreter exit
        return code
    except ConfigError as e:
        _error(args.command, str(e))
        return 2
    except KeyboardInterrupt as e:
        print(f"saguaro {args.command}: interrupted", file=sys.stderr)
        return 143 if e.args == ("SIGTERM",) else 130
    except BrokenPipeError:  # e.g. `saguaro presets | head`
        _drop_stdout()
        return 0
    except OSError as e:        # stdout on a full device, an output disk filling up mid-write
        if guard.failed:
            _drop_stdout()
            _error(args.command, f"cannot write to stdout ({e.strerror or e})")
        else:
            _error(args.command, f"{e.strerror or e}{f': {e.filename}' if e.filename else ''}")
        return 1
    finally:
        if sys.stdout is guard:
            sys.stdout = guard.inner


def _error(command: str, message: str) -> None:
    """The one-line error report on stderr."""
    msg = " ".join(message.split())  # always one line
    print(f"saguaro {command}: error: {msg}", file=sys.stderr)


class _StdoutGuard:
    """sys.stdout as it was, remembering whether a write or flush failed (a full device, a closed pipe)."""

    def __init__(self, inner) -> None:
        self.inner, self.failed = inner, False

    def write(self, text: str) -> int:
        try:
            return self.inner.write(text)
        except OSError:
            self.failed = True
            raise

    def flush(self) -> None:
        try:
            self.inner.flush()
        except OSError:
            self.failed = True
            raise

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def _drop_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's exit flush does not fail a second time."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())

"""Entry point of the SSD draft process: ``python -m saguaro_exec.speculator.entry PARENT_PID PORT ARGS ERR``.

It first arranges to die with its parent (Linux PR_SET_PDEATHSIG, before the slow torch import, and
exits if the parent is already gone), then runs ``draft_process.main``. Imported by nobody, so
running it as ``__main__`` never loads a second copy of ``draft_process``.
"""

import ctypes
import os
import signal
import sys


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies; exit now if that already happened."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except OSError:
            pass
    if os.getppid() != parent_pid:
        os._exit(1)


if __name__ == "__main__":
    die_with_parent(int(sys.argv[1]))
    from saguaro_exec.speculator.process import main

    main(sys.argv[1:])

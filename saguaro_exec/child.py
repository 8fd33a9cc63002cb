"""Entry point of every child process of a run: ``python -m saguaro_exec.child PARENT_PID TARGET RANK PORT DIR``.

Started by ``spawn.Supervisor``, which has already made it die with its parent (PR_SET_PDEATHSIG before
exec); it exits at once if the parent is already gone, then runs TARGET ("module:function") through
``spawn.child_main``. Imported by nobody, so running it as ``__main__`` never loads a module twice.
"""

import os
import sys
import traceback

if __name__ == "__main__":
    parent, target, rank, port, workdir = sys.argv[1:6]
    if os.getppid() != int(parent):
        os._exit(1)
    try:
        from saguaro_exec.spawn import child_main
    except BaseException:                     # nothing to report through: say it on stderr
        traceback.print_exc()
        sys.exit(1)
    child_main(target, int(rank), int(port), workdir)

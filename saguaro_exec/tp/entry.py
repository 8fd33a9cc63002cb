"""Entry point of a tensor-parallel worker: ``python -m saguaro_exec.tp.entry PARENT_PID RANK PORT ARGS ERR``.

Like ``draft_entry``: first arrange to die with the parent (before the slow torch import), then run
``tp_worker.main``.
"""

import sys

if __name__ == "__main__":
    from saguaro_exec.speculator.entry import die_with_parent

    die_with_parent(int(sys.argv[1]))
    from saguaro_exec.tp.worker import main

    main(sys.argv[1:])

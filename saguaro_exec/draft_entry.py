"""Entry point of the SSD draft process (``python -m saguaro_exec.draft_entry``); imported by nobody,
so running it as ``__main__`` never loads a second copy of ``draft_process``."""

import sys

from saguaro_exec.draft_process import main

if __name__ == "__main__":
    main(sys.argv)

"""`python -m saguaro ...` runs the CLI. SIGINT / SIGTERM are blocked from the first line (``_signal`` is
built in, so this costs no import) until ``cli.main`` has its interrupt policy in place."""

import _signal

if hasattr(_signal, "pthread_sigmask"):
    _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGINT, _signal.SIGTERM))

import sys  # noqa: E402

from saguaro.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

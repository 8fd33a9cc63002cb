"""`python -m saguaro ...` runs the CLI."""

import sys

from saguaro.cli import main

if __name__ == "__main__":
    sys.exit(main())

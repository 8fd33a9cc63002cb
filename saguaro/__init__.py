"""saguaro: plan, simulate, tune and run speculative speculative decoding (SSD / Saguaro).

This package is the application layer: the `saguaro` command line (see `saguaro.cli`).
"""

__version__ = "0.1.0"

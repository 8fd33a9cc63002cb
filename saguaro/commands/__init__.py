"""CLI subcommands: each module exposes `add_parser(subparsers)` and `main(args) -> int` (see saguaro.cli)."""

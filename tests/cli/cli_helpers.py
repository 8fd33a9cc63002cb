"""Shared by the CLI tests: the `saguaro` entry point called in this process, its exit code and output."""

from saguaro import cli


def inproc(capsys, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``saguaro ARGS`` through the same entry point, in this process."""
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err

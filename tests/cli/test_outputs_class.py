"""Class "output paths" (issue 15): one output mechanism (saguaro/commands/output.py) for every command:
the destination is checked before the work, the result staged and renamed, and nothing is left behind on
any exit path (no ..tmp-* / ..old-* / *.tmp), also with two commands writing the same --out at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from class_helpers import ROOT, assert_clean_error, inproc, leftovers, subproc

from saguaro.commands.output import MARKER, StagedDir, StagedFile

SIM = ["simulate", "--profile", "cpu-tinypair-ssd", "--num-sequences", "2", "--output-tokens", "16", "--no-baselines"]
CAL_INPUT = ROOT / "saguaro_exec" / "assets" / "tiny" / "eval.json"


@pytest.fixture
def regular_file(tmp_path) -> Path:
    f = tmp_path / "afile"
    f.write_text("x")
    return f


@pytest.mark.parametrize("flag_cmd", ["simulate", "optimize", "run", "profile", "calibrate"])
def test_out_under_a_regular_file(tmp_path, capsys, regular_file, flag_cmd):
    argv = {"simulate": SIM + ["--out"], "optimize": ["optimize", "--out"], "run": ["run", "--out"],
            "profile": ["profile", "--quick", "-o"], "calibrate": ["calibrate", "x.json", "-o"]}[flag_cmd]
    code, err, out = inproc(capsys, argv + [regular_file / "sub" / "out"])
    assert_clean_error(code, err, "-o" if flag_cmd in ("profile", "calibrate") else "--out")
    assert "not a folder" in err and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("dest", ["/proc/saguaro-out", "/proc/self/saguaro-out"])
def test_out_under_proc(capsys, dest):
    code, err, _ = inproc(capsys, SIM + ["--out", dest])
    assert_clean_error(code, err, "--out")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders; the /proc case covers EACCES")
def test_out_in_read_only_parent(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, err, _ = inproc(capsys, SIM + ["--out", ro / "out"])
        assert_clean_error(code, err, "--out")
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


def test_dash_o_naming_an_existing_directory(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    code, err, _ = inproc(capsys, ["profile", "--quick", "-o", tmp_path / "d"])
    assert_clean_error(code, err, "-o")
    code, err, _ = inproc(capsys, ["calibrate", str(CAL_INPUT), "-o", tmp_path / "d"])
    assert_clean_error(code, err, "-o")
    assert [p.name for p in tmp_path.iterdir()] == ["d"] and list((tmp_path / "d").iterdir()) == []


def test_out_dot_in_an_empty_cwd_leaves_nothing(tmp_path):
    p = subproc(SIM + ["--out", "."], cwd=tmp_path)
    assert_clean_error(p.returncode, p.stderr, "--out")
    assert list(tmp_path.iterdir()) == []
    p = subproc(SIM + ["--out", "./"], cwd=tmp_path)
    assert p.returncode == 2 and list(tmp_path.iterdir()) == []


def test_dangling_symlink_out(tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    code, err, _ = inproc(capsys, SIM + ["--out", link])
    assert_clean_error(code, err, "--out")
    assert "symbolic link" in err and sorted(p.name for p in tmp_path.iterdir()) == ["link"]


def test_stdout_on_a_full_device(tmp_path):
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "saguaro", *SIM, "--json"], stdout=full, stderr=subprocess.PIPE,
                           text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert_clean_error(p.returncode, p.stderr, "stdout", status=1)
    assert "No space left" in p.stderr


def test_success_replaces_a_previous_output_and_leaves_nothing_staged(tmp_path, capsys):
    out = tmp_path / "out"
    for _ in range(2):
        code, err, _ = inproc(capsys, SIM + ["--out", out])
        assert code == 0, err
    assert (out / MARKER).is_file() and (out / "result.json").is_file()
    assert leftovers(tmp_path) == [] and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_two_commands_writing_the_same_out_at_once(tmp_path):
    """Eight pairs of concurrent writers: both exit 0, one complete output, no staged folder ever left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("import sys; from saguaro.commands.output import StagedDir\n"
            "for i in range(40):\n"
            "    with StagedDir(sys.argv[1]) as d:\n"
            "        (d / 'result.json').write_text(sys.argv[2] * 1000)\n")
    out = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(out), tag], env=env, stderr=subprocess.PIPE, text=True)
             for tag in "ab"]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert leftovers(tmp_path) == [] and [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (out / "result.json").read_text() in ("a" * 1000, "b" * 1000)


def test_failed_work_and_interrupt_leave_nothing(tmp_path):
    out = tmp_path / "out"
    for exc in (RuntimeError, KeyboardInterrupt):
        with pytest.raises(exc):
            with StagedDir(out) as d:
                (d / "partial.json").write_text("{}")
                raise exc()
        with pytest.raises(exc):
            with StagedFile(tmp_path / "f.json") as f:
                f.write_text("{}")
                raise exc()
    staged = StagedDir(tmp_path / "never-entered")      # staged, then dropped without `with`
    assert leftovers(tmp_path) != []
    del staged
    assert list(tmp_path.iterdir()) == []


def test_sigterm_during_work_leaves_nothing(tmp_path):
    """SIGTERM while the work runs: exit 143, no output and no staged folder."""
    code = ("import sys, time; from calibration.interrupts import first_signal_wins; "
            "from saguaro.commands.output import StagedDir\n"
            "with first_signal_wins():\n"
            "    with StagedDir(sys.argv[1]) as d:\n"
            "        print('staged', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "out")], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.stdout.readline().strip() == "staged"
    p.terminate()
    p.wait(timeout=30)
    assert list(tmp_path.iterdir()) == []

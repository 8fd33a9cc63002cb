"""`saguaro run --qps R [--trace FILE]`: the executor's load mode from the CLI (in process: same entry point)."""

import json

from cli_helpers import inproc as _cli


def test_run_qps_reports_latency_percentiles(capsys):
    code, out, err = _cli(capsys, "run", "--mode", "ar", "--batch-size", "2", "--max-new-tokens", "4", "--qps", "50",
                          "--prompt", "a b", "--prompt", "c d e", "--prompt", "f", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["offered_qps"] == 50 and doc["tokens"] == 12
    for name in ("ttft_s", "tpot_s", "latency_s"):
        assert doc[name]["p50"] <= doc[name]["p90"] <= doc[name]["p99"]
    code, out, err = _cli(capsys, "run", "--mode", "ar", "--max-new-tokens", "3", "--qps", "inf", "--prompt", "a b")
    assert code == 0, err
    assert "ttft p99 ms" in out and "requests/s" in out


def test_run_trace_rescaled_and_bad_load_flags(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2}\n'
                     '{"arrival_s": 4, "prompt_tokens": 5, "output_tokens": 3}\n')
    code, out, err = _cli(capsys, "run", "--mode", "sd", "--k", "2", "--trace", str(trace), "--qps", "100", "--json")
    assert code == 0, err
    assert json.loads(out)["tokens"] == 5                               # the trace's output lengths
    for args, name in [(["--qps", "-2"], "--qps"), (["--trace", str(tmp_path / "no.jsonl")], "--trace")]:
        code, out, err = _cli(capsys, "run", *args)
        assert code == 2 and err.strip().count("\n") == 0 and name in err, err


def test_run_ssd_under_load(capsys):
    code, out, err = _cli(capsys, "run", "--mode", "ssd", "--k", "2", "--batch-size", "2", "--max-new-tokens", "4",
                          "--qps", "40", "--prompt", "a b", "--prompt", "c d e", "--prompt", "f", "--check-lossless",
                          "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["offered_qps"] == 40 and doc["tokens"] == 12 and 0 < doc["ttft_s"]["p50"] <= doc["ttft_s"]["p99"]

"""--acceptance-length AL[@K] on `saguaro simulate` / `optimize`: the profile's acceptance replaced by a
geometric one with that many expected tokens per round; bad values exit 2 naming the flag."""

import json

import pytest
from cli_helpers import inproc as run


def test_simulated_tokens_per_round_match_the_acceptance_length(capsys):
    # SD rounds with K = 4: tokens per round averages AL; 4 x 400 tokens ~ 530 rounds, sd of the mean ~0.05
    code, out, err = run(capsys, "simulate", "--profile", "h100-llama8b-llama1b", "--mode", "sd", "--k", "4",
                         "--acceptance-length", "3.0", "--num-sequences", "4", "--output-tokens", "400",
                         "--no-baselines", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["result"]["tokens_per_round"] == pytest.approx(3.0, abs=0.2)


def test_at_k_and_optimize(capsys):
    code, out, err = run(capsys, "optimize", "--profile", "h100-llama8b-llama1b", "--acceptance-length", "2.0@6",
                         "--num-sequences", "4", "--output-tokens", "64", "--json")
    assert code == 0, err
    low = json.loads(out)
    code, out, err = run(capsys, "optimize", "--profile", "h100-llama8b-llama1b", "--acceptance-length", "6.0@6",
                         "--num-sequences", "4", "--output-tokens", "64", "--json")
    high = json.loads(out)
    # higher acceptance: longer lookahead pays, more tokens per round
    assert high["best"]["k"] >= low["best"]["k"]
    assert high["best_result"]["tokens_per_round"] > low["best_result"]["tokens_per_round"]


@pytest.mark.parametrize("value,needle", [("5", "(1, 5)"), ("1", "(1, 5)"), ("abc", "AL@K"), ("3@x", "AL@K")])
def test_bad_values_exit_2_naming_the_flag(capsys, value, needle):
    code, out, err = run(capsys, "simulate", "--profile", "h100-llama8b-llama1b", "--k", "4",
                         "--acceptance-length", value)
    assert code == 2 and "--acceptance-length" in err and needle in err and "Traceback" not in err
    assert out == ""

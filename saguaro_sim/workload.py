"""Workload: how many sequences, how long their prompts are and how many tokens each generates."""

from __future__ import annotations

from dataclasses import dataclass

from calibration.errors import check_number


@dataclass(frozen=True)
class Workload:
    """num_sequences decoded output_tokens each, starting from prompt_tokens of context."""

    num_sequences: int = 16
    output_tokens: int = 512
    prompt_tokens: int = 128

    def __post_init__(self) -> None:
        check_number("num_sequences", self.num_sequences, 1, 1_000_000, integer=True)
        check_number("output_tokens", self.output_tokens, 1, 10_000_000, integer=True)
        check_number("prompt_tokens", self.prompt_tokens, 0, 10_000_000, integer=True)

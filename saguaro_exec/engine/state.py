"""The true sequences of a batch: one Sequence per request, held in the slots (cache rows) of a BatchState.

Every engine keeps its truth here: the verifier (SD, SSD) and the AR loop append accepted tokens + the bonus
and read back which rows still generate. A slot is a cache row; today a batch fills its slots once from
its prompts and ends when every Sequence is finished, so ``slots[b]`` is the request in cache row b.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sequence:
    """One request: its tokens so far (prompt first), where the prompt ends, and when it finished."""

    tokens: list[int]
    prompt_len: int
    max_new: int
    eos: frozenset[int] = field(default_factory=frozenset)
    done: bool = False
    finish_round: int = -1           # the round that finished it (-1 while generating)

    @classmethod
    def from_prompt(cls, prompt: list[int], max_new: int, eos_ids: list[int] | frozenset[int]) -> Sequence:
        if len(prompt) == 0:
            raise ValueError("prompts: a prompt encodes to zero tokens; allowed: at least one token")
        return cls(list(prompt), len(prompt), max_new, frozenset(eos_ids))

    def append(self, new: list[int], round_idx: int) -> None:
        """Add accepted tokens + bonus, cutting after an EOS and finishing at EOS or ``max_new`` tokens."""
        if self.done:
            return
        for i, t in enumerate(new):
            if t in self.eos:
                new = new[: i + 1]
                self.done = True
                break
        self.tokens.extend(new)
        if len(self.tokens) - self.prompt_len >= self.max_new:
            self.done = True
        if self.done:
            self.finish_round = round_idx

    @property
    def output(self) -> list[int]:
        """The generated tokens (the last round may overshoot ``max_new``: cut here)."""
        return self.tokens[self.prompt_len:][: self.max_new]


class BatchState:
    """The slots of one batch; slot b holds the Sequence whose K/V sit in cache row b."""

    def __init__(self, prompts: list[list[int]], max_new: int, eos_ids: list[int]) -> None:
        self.slots = [Sequence.from_prompt(p, max_new, eos_ids) for p in prompts]

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def seqs(self) -> list[list[int]]:
        """Each slot's token list (the lists themselves: prompt + generated so far)."""
        return [s.tokens for s in self.slots]

    @property
    def done(self) -> list[bool]:
        return [s.done for s in self.slots]

    @property
    def finish_round(self) -> list[int]:
        return [s.finish_round for s in self.slots]

    def live(self) -> list[int]:
        """Slots still generating."""
        return [b for b, s in enumerate(self.slots) if not s.done]

    def append(self, b: int, new: list[int], round_idx: int) -> None:
        self.slots[b].append(new, round_idx)

    def generated(self, b: int) -> list[int]:
        return self.slots[b].output

    def outputs(self) -> list[list[int]]:
        """Every slot's generated tokens, in slot order."""
        return [s.output for s in self.slots]

    def all_done(self) -> bool:
        return all(s.done for s in self.slots)

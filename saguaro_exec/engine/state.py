"""The true sequences of a batch: one Sequence per request, held in the slots (cache rows) of a BatchState.

Every engine keeps its truth here: the verifier (SD, SSD) and the AR loop append accepted tokens + the bonus
and read back which rows still generate. A slot is a cache row: ``slots[b]`` is the request whose K/V sit
in cache row b. Without a width, a batch fills its slots once from its prompts and ends when every Sequence
is finished. With one (continuous batching), ``refill`` hands the slots of finished requests to the next
requests of the queue that have arrived, and, where rows can be moved, moves the last live row into a
finished row's place, so that slots 0..n-1 are exactly the live requests and none is forwarded done.
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
    rid: int = 0                     # its index in the run's queue of prompts
    first_round: int = -1            # the round that gave its first token
    admit_s: float = 0.0             # when it took its slot (seconds since run start)

    @classmethod
    def from_prompt(cls, prompt: list[int], max_new: int, eos_ids: list[int] | frozenset[int],
                    rid: int = 0) -> Sequence:
        if len(prompt) == 0:
            raise ValueError("prompts: a prompt encodes to zero tokens; allowed: at least one token")
        return cls(list(prompt), len(prompt), max_new, frozenset(eos_ids), rid=rid)

    def append(self, new: list[int], round_idx: int) -> None:
        """Add accepted tokens + bonus, cutting after an EOS and finishing at EOS or ``max_new`` tokens."""
        if self.done:
            return
        if self.first_round < 0:
            self.first_round = round_idx
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


IDLE_ROW = [0]       # what a row without a request holds (SSD under load: both sides keep every row)


def forwarded_rows(done: list[bool]) -> int:
    """Rows a forward covers: up to the last live one (at least one). SSD keeps every row in place (both sides
    index rows alike without a message for moves), so finished rows after the last live one are skipped
    rather than moved out: a batch's tail and a light load no longer pay for idle rows."""
    for b in range(len(done) - 1, -1, -1):
        if not done[b]:
            return b + 1
    return 1


def compact_rows(done: list[bool]) -> list[tuple[int, int]]:
    """SSD's other rule both sides apply without a message, after the refill: each finished row before the
    last live one swaps with that live row (src live, dst finished; lowest finished first), so the live rows
    are 0..n-1 and every forward covers them alone. Returns the swaps in the order to apply them."""
    done = list(done)
    swaps: list[tuple[int, int]] = []
    lo, hi = 0, len(done) - 1
    while True:
        while lo < hi and not done[lo]:
            lo += 1
        while hi > lo and done[hi]:
            hi -= 1
        if lo >= hi:
            return swaps
        swaps.append((hi, lo))
        done[lo], done[hi] = False, True


def next_swaps(done: list[bool], fresh) -> list[tuple[int, int]]:
    """``compact_rows`` on the done flags an outcome leaves once its ``fresh`` (refilled) rows are live."""
    return compact_rows([d and b not in fresh for b, d in enumerate(done)]) if any(done) else []


def swap_rows(values: list, swaps: list[tuple[int, int]]) -> list:
    """``values`` (one per row) with ``compact_rows``' swaps applied (a new list)."""
    out = list(values)
    for a, b in swaps:
        out[a], out[b] = out[b], out[a]
    return out


def refill_rows(done: list[bool], left: int) -> list[int]:
    """The rule both sides of SSD apply without a message: finished rows, in row order, take the next
    ``left`` prompts of the queue (what ``BatchState.refill`` does in place when every request has arrived)."""
    return [b for b, d in enumerate(done) if d][:max(0, left)]


class BatchState:
    """The slots of one batch; slot b holds the Sequence whose K/V sit in cache row b. ``requests`` are all
    of the batch's Sequences in queue order; ``width`` (None: one slot per prompt, all filled now) caps the
    slots, which ``refill`` then fills as requests arrive (``arrivals``: seconds since run start, sorted;
    None: all at 0); ``max_new`` may differ per request."""

    def __init__(self, prompts: list[list[int]], max_new: int | list[int], eos_ids: list[int],
                 width: int | None = None, arrivals: list[float] | None = None) -> None:
        lens = max_new if isinstance(max_new, list | tuple) else [max_new] * len(prompts)
        self.requests = [Sequence.from_prompt(p, n, eos_ids, rid=i) for i, (p, n) in enumerate(zip(prompts, lens))]
        self.arrivals = list(arrivals) if arrivals is not None else [0.0] * len(prompts)
        if width is None:
            self.width, self.slots, self.next = len(prompts), list(self.requests), len(prompts)
        else:
            self.width, self.slots, self.next = max(1, min(int(width), len(prompts))), [], 0

    def __len__(self) -> int:
        return len(self.slots)

    def arrive_from(self, t0: float, arrivals: list[float] | None) -> None:
        """Requests arrive ``arrivals`` seconds after ``t0`` (the batch start; None: all at ``t0``)."""
        self.arrivals = [t0 + a for a in (arrivals or [0.0] * len(self.requests))]

    @property
    def seqs(self) -> list[list[int]]:
        """Each slot's token list (the lists themselves: prompt + generated so far)."""
        return [s.tokens for s in self.slots]

    @property
    def done(self) -> list[bool]:
        return [s.done for s in self.slots]

    @property
    def finish_round(self) -> list[int]:
        """Per request (queue order): the round that finished it."""
        return [s.finish_round for s in self.requests]

    @property
    def rids(self) -> list[int]:
        """Each slot's request id."""
        return [s.rid for s in self.slots]

    def live(self) -> list[int]:
        """Slots still generating."""
        return [b for b, s in enumerate(self.slots) if not s.done]

    def append(self, b: int, new: list[int], round_idx: int) -> None:
        self.slots[b].append(new, round_idx)

    def generated(self, b: int) -> list[int]:
        return self.slots[b].output

    def outputs(self) -> list[list[int]]:
        """Every request's generated tokens, in queue order."""
        return [s.output for s in self.requests]

    def pending(self) -> int:
        """Requests not yet given a slot."""
        return len(self.requests) - self.next

    def next_arrival(self) -> float | None:
        """When the next request without a slot arrives (None: the queue is empty)."""
        return self.arrivals[self.next] if self.next < len(self.requests) else None

    def all_done(self) -> bool:
        return self.next == len(self.requests) and all(s.done for s in self.slots)

    def needs_refill(self, now_s: float) -> bool:
        """Whether ``refill`` at ``now_s`` could change anything: a slot finished, no slot is live, or a free
        slot and an arrived request (the common round: none of these, and the loop skips the refill's work)."""
        slots = self.slots
        if not slots or any(s.done for s in slots):
            return True
        return len(slots) < self.width and self.next < len(self.requests) and self.arrivals[self.next] <= now_s

    def pad_idle(self) -> None:
        """Fill the free slots, up to ``width``, with finished one-token rows no request owns (SSD keeps a
        fixed row count on both sides; ``refill`` gives these slots to arriving requests first, in row order)."""
        while len(self.slots) < self.width:
            self.slots.append(Sequence(list(IDLE_ROW), len(IDLE_ROW), 0, done=True, rid=-1))

    def swap(self, swaps: list[tuple[int, int]]) -> None:
        """Apply ``compact_rows``' swaps to the slots (the Sequences themselves stay in ``requests``)."""
        self.slots = swap_rows(self.slots, swaps)

    def refill(self, now_s: float, movable: bool = True) -> tuple[list[tuple[int, int]], list[int]]:
        """Give finished slots (then free ones, up to ``width``) to the requests arrived by ``now_s``; with
        ``movable``, finished slots nobody takes are closed by moving the last slot into them. Returns the
        row moves (src, dst) in the order to apply them, then the slots of newly admitted requests."""
        new: list[Sequence] = []

        def take() -> Sequence | None:
            if self.next < len(self.requests) and self.arrivals[self.next] <= now_s:
                seq = self.requests[self.next]
                self.next += 1
                seq.admit_s = now_s
                new.append(seq)
                return seq
            return None

        for b, s in enumerate(self.slots):
            if s.done and (seq := take()) is not None:
                self.slots[b] = seq
        while len(self.slots) < self.width and (seq := take()) is not None:
            self.slots.append(seq)
        moves: list[tuple[int, int]] = []
        if movable:
            b = 0
            while b < len(self.slots):
                while self.slots and self.slots[-1].done:      # finished last rows just go
                    self.slots.pop()
                if b < len(self.slots) and self.slots[b].done:
                    moves.append((len(self.slots) - 1, b))
                    self.slots[b] = self.slots.pop()
                b += 1
        fresh = {id(s) for s in new}
        return moves, [b for b, s in enumerate(self.slots) if id(s) in fresh]

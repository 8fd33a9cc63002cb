"""The SSD speculator called synchronously in this process (debugging, the synthetic mode's inline runs):
the same DraftWorker as the draft process, built then answered each round, so there is no overlap."""

from __future__ import annotations

import torch

from saguaro_exec.sampling import batch_generator
from saguaro_exec.speculator.process import DraftArgs, load_source
from saguaro_exec.speculator.protocol import Reply, reordered
from saguaro_exec.speculator.worker import DraftWorker


class InlineLink:
    """The same DraftWorker called synchronously in this process: build, then answer (no overlap)."""

    def __init__(self, args: DraftArgs, vocab: int) -> None:
        self.args, self.vocab = args, vocab
        self.model = load_source(args.source, args.device, args.dtype)
        self._batch = -1
        self.pid = None
        self.built = False

    def __enter__(self) -> InlineLink:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def start(self, bsz: int) -> Reply:
        self._batch += 1
        a = self.args
        gen = batch_generator(a.seed, self._batch, "draft", a.device)
        self.worker = DraftWorker(self.model, a.batches[self._batch], a.ws, gen, a.t_start, width=a.width)
        if a.first_rows is not None:
            self.worker.admitted = a.first_rows
        return self.worker.start()

    def send(self, acc: torch.Tensor, bonus: torch.Tensor, done: list[bool], stop: bool, fresh: tuple = (),
             swaps: list[tuple[int, int]] | tuple = ()) -> None:
        self._outcome = (acc, bonus, done)
        self.worker.admitted = self.worker.next + len(fresh)
        self._swaps = list(swaps)

    def build_now(self) -> None:
        """Build the cache of the speculation being verified now (the synthetic mode needs it before the
        outcome, engine/synthetic.py); recv then answers from it."""
        if not self.built:
            self.worker.build()
            self.built = True

    def recv(self) -> Reply:
        self.build_now()
        self.built = False
        return self.answered()

    def answered(self) -> Reply:
        """The worker's answer to the outcome sent, in the next round's row order (see ProcessLink._reordered)."""
        return reordered(self.worker.answer(*self._outcome), self._swaps)

    def close(self) -> None:
        return None

    def abort(self) -> None:
        return None

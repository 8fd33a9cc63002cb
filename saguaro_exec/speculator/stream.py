"""The SSD speculator in the verifier's process, building beside the verification (draft_placement "stream").

The same DraftWorker as the draft process. As soon as a speculation is handed to the verifier, a helper
thread builds the next cache (glue, fork, tree; its host syncs wait in that thread, not in the verifier's
loop) with its kernels on a side torch.cuda.Stream, so on one GPU they can run beside the verification
kernels. Before the answer the side stream waits for the verifier's (the outcome), and the verifier's stream
waits for the side stream before it reads the speculation; tensors that cross streams are recorded on the
stream that reads them, so the caching allocator does not hand their memory out early.
On CPU there is no CUDA stream: the thread builds beside the verification, which overlaps only where torch
releases the GIL; ``label`` says so, and the run's meta carries it.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext

import torch

from saguaro_exec.speculator.inline import InlineLink
from saguaro_exec.speculator.process import DraftArgs
from saguaro_exec.speculator.protocol import Reply


class StreamLink(InlineLink):
    """InlineLink whose cache build runs in a helper thread, on a side CUDA stream when the draft is on CUDA."""

    def __init__(self, args: DraftArgs, vocab: int) -> None:
        super().__init__(args, vocab)
        device = torch.device(args.device)
        self.stream = torch.cuda.Stream(device=device) if device.type == "cuda" else None
        self.label = (f"stream: draft in the verifier's process on a side CUDA stream of {args.device}"
                      if self.stream is not None else
                      "stream on cpu: draft in a helper thread of the verifier's process, no CUDA stream "
                      "(overlap only where torch releases the GIL)")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="saguaro-draft")
        self._build: Future | None = None
        self._stop = False

    def __exit__(self, *exc) -> None:
        self.close()

    def _side(self):
        return torch.cuda.stream(self.stream) if self.stream is not None else nullcontext()

    def _main_waits(self, reply: Reply) -> Reply:
        """The verifier's stream waits for the side stream; the reply's tensors are recorded on it."""
        if self.stream is not None:
            main = torch.cuda.current_stream(self.stream.device)
            main.wait_stream(self.stream)
            for t in (reply.tokens, reply.q):
                if isinstance(t, torch.Tensor) and t.is_cuda:
                    t.record_stream(main)
        return reply

    def _launch(self) -> None:
        """Start building the cache for the speculation just handed out."""
        def build() -> None:
            with self._side():
                self.worker.build()

        self._build = self._pool.submit(build)

    def build_now(self) -> None:
        """Wait for the cache of the speculation being verified (its build is already running)."""
        if self._build is not None:
            self._build.result()          # re-raises the build's error here
            self._build = None
        self.built = True

    def start(self, bsz: int) -> Reply:
        self.build_now()
        with self._side():
            reply = super().start(bsz)
        self.built, self._stop = False, False
        reply = self._main_waits(reply)
        self._launch()
        return reply

    def send(self, acc: torch.Tensor, bonus: torch.Tensor, done: list[bool], stop: bool, fresh: tuple = (),
             swaps: list[tuple[int, int]] | tuple = ()) -> None:
        if self.stream is not None:   # read on the side stream by the answer and the next build's settle
            for t in (acc, bonus):
                if t.is_cuda:
                    t.record_stream(self.stream)
        self._stop = stop
        super().send(acc, bonus, done, stop, fresh, swaps)

    def recv(self) -> Reply:
        self.build_now()
        if self.stream is not None:   # the outcome was computed on the verifier's stream
            self.stream.wait_stream(torch.cuda.current_stream(self.stream.device))
        with self._side():
            reply = self.answered()
        self.built = False
        reply = self._main_waits(reply)
        if not self._stop:            # the last reply of the run: nothing left to build for
            self._launch()
        return reply

    def close(self) -> None:
        try:
            if self._build is not None:
                self._build.exception()   # let a running build finish (its error, if any, is dropped)
                self._build = None
        finally:
            self._pool.shutdown(wait=True)

    def abort(self) -> None:
        self.close()

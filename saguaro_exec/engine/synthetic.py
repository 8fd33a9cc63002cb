"""Synthetic-acceptance timing mode: the real forwards at any shapes (random weights are fine), with the
verification outcome drawn from a calibration model instead of the target's rule. TIMING ONLY: the output
is not the target's, so a run in this mode is never lossless (RunConfig refuses it with ``check_lossless``).

Engines ship the same benchmarking knob: vLLM's SpeculativeConfig(rejection_sample_method="synthetic",
synthetic_acceptance_length=... | synthetic_acceptance_rates=[...]) (https://docs.vllm.ai/en/latest/api/vllm/
config/speculative/; vllm-project/vllm#39359 argues for acceptance length as the input), MAX's
``synthetic_acceptance_rate`` (https://docs.modular.com/max/api/python/generated/max.pipelines.SpeculativeConfig/),
ATOM's ``--spec-decode-acceptance-length`` (https://rocm.docs.amd.com/projects/atom/en/latest/_sources/
forced_acceptance_length.md: "never run an accuracy evaluation with it enabled") and llama.cpp's benchmark-only
synthetic acceptance (ggml-org/llama.cpp#27711). Ours also draws SSD's cache hits (from a HitCurve).

Per round the verifier runs its real forward and verification rule (same kernels, same host sync), then
replaces the outcome: the accepted length k ~ AcceptanceModel.length_pmf(K), and in SSD the bonus token
lands in the cache with the HitCurve's probability. At accepted length k the cache holds the draft's
top-F_k tokens there (the sent token excluded), so with P(rank < F) = hit(F) the bonus rank j is drawn with
P(rank = j) = hit(j + 1) - hit(j) over the draft's ranked list (beyond it: a token outside the list), and
the bonus is the token of that rank: the realised hit rate is hit(F_k) and the realised bonus ranks follow
the whole curve (what calibration fits). The ranked lists come from the speculation cache: the push
protocol's verifier holds its rows, an inline speculator its SpecCache; the reply protocol keeps them in the
draft process, so it is refused (see ``check_synthetic``). In SD there is no cache: the bonus is any token
other than the rejected draft token at k (the hit curve is unused there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from calibration.acceptance import AcceptanceModel
from calibration.errors import ConfigError, check_number
from calibration.hits import HitCurve

LABEL = "synthetic acceptance (timing only, not lossless)"


@dataclass(frozen=True)
class SyntheticAcceptance:
    """Where a synthetic run's outcomes come from: ``acceptance`` (an AcceptanceModel, or a mean acceptance
    length in tokens per round at the run's K), ``hits`` (SSD: P(bonus in the draft's top-F) by position,
    primary vs backup), ``seed`` of the draws, ``source`` (e.g. the profile they were taken from)."""

    acceptance: AcceptanceModel | float
    hits: HitCurve | None = None
    seed: int = 0
    source: str = "given"

    def __post_init__(self) -> None:
        a = self.acceptance
        if not isinstance(a, AcceptanceModel) and (isinstance(a, bool) or not isinstance(a, int | float)):
            raise ConfigError("synthetic.acceptance", f"expected an AcceptanceModel or a number, got {a!r}",
                              "an AcceptanceModel | a mean acceptance length AL, 1 < AL < K + 1")
        if self.hits is not None and not isinstance(self.hits, HitCurve):
            raise ConfigError("synthetic.hits", f"expected a HitCurve, got {type(self.hits).__name__}",
                              "a calibration.HitCurve | None (SD, AR)")
        check_number("synthetic.seed", self.seed, 0, 2**62, integer=True)

    @classmethod
    def from_profile(cls, name: str, acceptance_length: float | None = None, seed: int = 0) -> SyntheticAcceptance:
        """A preset's (or profile JSON's) acceptance and hit curves; ``acceptance_length`` replaces the first."""
        from calibration.profile import load_preset

        p = load_preset(name)
        acc = p.acceptance if acceptance_length is None else float(acceptance_length)
        return cls(acc, p.hits, seed, f"profile {name}")

    def model(self, k: int) -> AcceptanceModel:
        """The AcceptanceModel at lookahead ``k`` (a mean acceptance length made geometric)."""
        if isinstance(self.acceptance, AcceptanceModel):
            return self.acceptance
        try:
            return AcceptanceModel.from_acceptance_length(self.acceptance, k)
        except ConfigError as e:
            raise ConfigError("synthetic.acceptance", e.problem, e.allowed) from None

    def to_dict(self, k: int) -> dict:
        """The record a report's meta carries (label first: this run is timing only)."""
        return {"label": LABEL, "source": self.source, "seed": self.seed,
                "acceptance_length": None if isinstance(self.acceptance, AcceptanceModel) else self.acceptance,
                "acceptance": self.model(k).to_dict(), "hits": None if self.hits is None else self.hits.to_dict()}


def as_synthetic(value: object) -> SyntheticAcceptance | None:
    """RunConfig.synthetic as given: None, a SyntheticAcceptance, a mean acceptance length, or a profile name."""
    if value is None or isinstance(value, SyntheticAcceptance):
        return value
    if isinstance(value, str):
        return SyntheticAcceptance.from_profile(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return SyntheticAcceptance(float(value))
    raise ConfigError("synthetic", f"expected a SyntheticAcceptance, a number or a profile name, got {value!r}",
                      "None | SyntheticAcceptance(...) | acceptance length AL | a preset name")


def check_synthetic(s: SyntheticAcceptance | None, spec, ssd_protocol: str, inline_draft: bool,
                    check_lossless: bool) -> None:
    """A synthetic run's constraints, each a ConfigError naming the fields involved."""
    if s is None:
        return
    if check_lossless:
        raise ConfigError("synthetic / check_lossless", "a synthetic-acceptance run is timing only (its "
                          "outputs are not the target's), so it cannot be checked for losslessness",
                          "one of synthetic | check_lossless")
    s.model(spec.k)                                  # a mean acceptance length must fit this K
    if spec.mode == "ssd":
        if s.hits is None:
            raise ConfigError("synthetic.hits", "needed in SSD (where the bonus lands in the cache)",
                              "a calibration.HitCurve, or a profile name for synthetic")
        if ssd_protocol == "reply" and not inline_draft:
            raise ConfigError("synthetic / ssd_protocol", "the reply protocol keeps the cache's candidate "
                              "lists in the draft process, where the verifier cannot choose the bonus from them",
                              "ssd_protocol = \"push\" or \"auto\" (synthetic runs push), or inline_draft")


class SyntheticOutcomes:
    """One batch's draws. ``lookup`` (SSD): a callable returning the Candidates of the speculation being
    verified (waiting for its cache); None in SD and after a draft fault."""

    def __init__(self, s: SyntheticAcceptance, k: int, temperature: float, sampler_c: float, batch_index: int,
                 vocab: int, eos_ids: list[int], lookup=None) -> None:
        self.s, self.k, self.temperature, self.sampler_c = s, k, temperature, sampler_c
        self.pmf = s.model(k).length_pmf(k, temperature, sampler_c)
        self.rng = np.random.default_rng([s.seed, batch_index])
        self.vocab, self.eos = vocab, frozenset(eos_ids)
        self.lookup = lookup

    def outcome(self, toks: list[list[int]], real_acc: torch.Tensor, real_bonus: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(accepted [B], bonus [B]) on the host, replacing the real rule's (computed and waited for)."""
        bsz = len(toks)
        acc = self.rng.choice(self.k + 1, size=bsz, p=self.pmf)
        cands = self.lookup() if self.lookup is not None else None
        bonus = [self._bonus(b, int(acc[b]), toks[b], cands) for b in range(bsz)]
        return torch.as_tensor(acc, dtype=torch.long), torch.tensor(bonus, dtype=torch.long)

    def _bonus(self, b: int, a: int, sent: list[int], cands: Candidates | None) -> int:
        excluded = set(self.eos) | ({sent[a]} if a < len(sent) else set())
        if cands is None or b >= len(cands.ranked):    # SD, or a finished row the build skipped (unread)
            return self._outside(excluded)
        ranked = [t for t in cands.ranked[b][a] if 0 <= t < self.vocab]   # a garbled cache: recv faults on it
        fan = min(cands.fan[b][a], len(ranked))
        hit = [self.s.hits.hit(j, a, self.temperature, cands.from_backup[b], self.sampler_c, self.k)
               for j in range(len(ranked) + 1)]
        u = self.rng.random()
        if u < hit[fan]:                                        # a cached candidate: rank < fan
            return ranked[next(j for j in range(fan) if u < hit[j + 1])]
        j = next((j for j in range(fan, len(ranked)) if u < hit[j + 1]), None)
        if j is not None and ranked[j] not in excluded:         # a miss, ranked j by the draft
            return ranked[j]
        beyond = excluded | set(ranked)                         # a miss beyond the ranked list
        return self._outside(beyond if len(beyond) < self.vocab else excluded | set(ranked[:fan]))

    def _outside(self, excluded: set[int]) -> int:
        """A uniformly drawn token not in ``excluded`` (EOS ids among them: a synthetic run keeps its length)."""
        for _ in range(64):
            t = int(self.rng.integers(self.vocab))
            if t not in excluded:
                return t
        return int(self.rng.choice([t for t in range(self.vocab) if t not in excluded]))


@dataclass(frozen=True)
class Candidates:
    """What the cache of one speculation offers the bonus: ``ranked[b][k]`` the draft's tokens at position k
    best first (the sent token excluded), ``fan[b][k]`` how many of them are cached (F_k), and whether each
    row's speculation came from the backup (the HitCurve's backup source)."""

    ranked: list[list[list[int]]]
    fan: list[list[int]]
    from_backup: list[bool]

    @classmethod
    def of(cls, top: list, rank: list, branch_k: list, valid: list, from_backup: list[bool]) -> Candidates:
        """From a fork's lists (per row: top/rank [K+1][R], branch_k/valid [N]; rank -1 = excluded or padding)."""
        ranked = [[[t for _, t in sorted((r, t) for t, r in zip(ts, rs) if r >= 0)] for ts, rs in zip(tb, rb)]
                  for tb, rb in zip(top, rank)]
        fan = [[sum(1 for bk, ok in zip(bks, oks) if ok and bk == a) for a in range(len(tb))]
               for bks, oks, tb in zip(branch_k, valid, top)]
        return cls(ranked, fan, [bool(x) for x in from_backup])

    @classmethod
    def of_cache(cls, cache, from_backup: list[bool]) -> Candidates:
        """From a host-side speculator.cache.SpecCache."""
        f = cache.fork
        return cls.of(f.top.tolist(), f.rank.tolist(), f.branch_k.tolist(), f.valid.tolist(), from_backup)


def link_candidates(link) -> Candidates:
    """The candidate lists of the speculation being verified, from the SSD link: an InlineLink builds its cache
    now (its recv then answers from it), a StreamLink waits for its build; a PushLink waits for the pushed
    cache before the outcome is sent."""
    from saguaro_exec.speculator.inline import InlineLink

    if isinstance(link, InlineLink):        # and StreamLink, whose build is already running
        link.build_now()
        return Candidates.of_cache(link.worker.cache, link.worker.from_backup.tolist())
    msg = link.wait_cache()                  # recv checks it (a garbled one is a DraftFault there)
    return Candidates.of_cache(link._layout.unpack(msg, None)[0], link.from_backup)


def batch_outcomes(config, batch_index: int, vocab: int, eos_ids: list[int], lookup=None
                   ) -> SyntheticOutcomes | None:
    """A RunConfig's synthetic draws for one batch (None when the mode is off: nothing else changes)."""
    s = config.synthetic
    if s is None:
        return None
    spec = config.spec
    return SyntheticOutcomes(s, spec.k, spec.temperature, spec.sampler_c, batch_index, vocab, eos_ids, lookup)

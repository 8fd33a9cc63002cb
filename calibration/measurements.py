"""Measurements: what one executor run or microbenchmark records; the input of calibration.fit."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from calibration.jsonio import dump_json, load_json

SCHEMA_VERSION = 1

ROUND_FIELDS = ("round", "t0", "t1", "batch", "verify_s", "wait_s", "msg_s", "draft_reply_s", "glue_s",
                "fork_s", "tree_s", "backup_s", "accepted", "hit", "from_backup", "bonus_rank", "context")
"""Keys of one verification round. accepted/hit/from_backup/bonus_rank/context are per-sequence lists;
bonus_rank is the 0-based rank of the true bonus token among the draft's candidates at the accepted
position (excluding the token sent there), -1 when beyond the recorded top-N."""

LATENCY_FIELDS = ("who", "batch", "new_tokens", "context", "median_s", "p10_s", "p90_s", "n")
LINK_FIELDS = ("bytes", "round_trip_s")


@dataclass
class Measurements:
    """meta (config, models, device, date), per-round rows, latency microbenchmarks, link timings, totals."""

    meta: dict = field(default_factory=dict)
    rounds: list[dict] = field(default_factory=list)
    latency: list[dict] = field(default_factory=list)
    link: list[dict] = field(default_factory=list)
    totals: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "meta": self.meta, "rounds": self.rounds,
                "latency": self.latency, "link": self.link, "totals": self.totals}

    @classmethod
    def from_dict(cls, d: dict) -> Measurements:
        return cls(meta=d.get("meta", {}), rounds=list(d.get("rounds", [])), latency=list(d.get("latency", [])),
                   link=list(d.get("link", [])), totals=d.get("totals", {}))

    def to_json(self, path: str | os.PathLike) -> None:
        """Write atomically."""
        dump_json(path, self.to_dict())

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> Measurements:
        return cls.from_dict(load_json(path, "measurements", SCHEMA_VERSION))

    def merged(self, other: Measurements) -> Measurements:
        """Concatenate two sets (meta of self wins), e.g. a microbenchmark grid plus a run."""
        return Measurements({**other.meta, **self.meta}, self.rounds + other.rounds, self.latency + other.latency,
                            self.link + other.link, {**other.totals, **self.totals})

"""Measurements: what one executor run or microbenchmark records; the input of calibration.fit."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from calibration.errors import ConfigError, check_number
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
        """Build from a dict produced by to_dict; the structure is checked (errors name the field)."""
        _check_structure(d)
        return cls(meta=d.get("meta", {}), rounds=list(d.get("rounds", [])), latency=list(d.get("latency", [])),
                   link=list(d.get("link", [])), totals=d.get("totals", {}))

    def to_json(self, path: str | os.PathLike) -> None:
        """Write atomically."""
        dump_json(path, self.to_dict())

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> Measurements:
        """Read and check a Measurements file; errors name the file and the field."""
        try:
            return cls.from_dict(load_json(path, "measurements", SCHEMA_VERSION))
        except ConfigError as e:
            if e.field.startswith("measurements."):
                raise ConfigError(f"{path}: {e.field}", e.problem, e.allowed) from None
            raise

    def merged(self, other: Measurements) -> Measurements:
        """Concatenate two sets (meta of self wins), e.g. a microbenchmark grid plus a run."""
        return Measurements({**other.meta, **self.meta}, self.rounds + other.rounds, self.latency + other.latency,
                            self.link + other.link, {**other.totals, **self.totals})


def _check_structure(d: object) -> None:
    """meta/totals objects; rounds/latency/link lists of objects; latency rows with non-negative times."""
    if not isinstance(d, dict):
        raise ConfigError("measurements", f"must be an object, got {type(d).__name__}", "a Measurements object")
    for key, kind in (("meta", dict), ("totals", dict), ("rounds", list), ("latency", list), ("link", list)):
        v = d.get(key, kind())
        if not isinstance(v, kind):
            raise ConfigError(f"measurements.{key}", f"must be {'an object' if kind is dict else 'a list'}, "
                              f"got {type(v).__name__}", "a file written by saguaro profile / run")
        if kind is list and not all(isinstance(row, dict) for row in v):
            raise ConfigError(f"measurements.{key}", "rows must be objects", "a list of objects")
    for i, row in enumerate(d.get("latency", [])):
        for f in ("batch", "new_tokens", "median_s"):
            if f not in row:
                raise ConfigError(f"measurements.latency[{i}].{f}", "missing", ", ".join(LATENCY_FIELDS))
            check_number(f"measurements.latency[{i}].{f}", row[f], 0.0)
    for i, row in enumerate(d.get("rounds", [])):
        acc = row.get("accepted", [])
        if not isinstance(acc, list) or not all(isinstance(a, int) and a >= 0 for a in acc):
            raise ConfigError(f"measurements.rounds[{i}].accepted", f"got {acc!r}", "a list of integers >= 0")

"""Pareto frontier of configurations: per-sequence speed (latency) against throughput per device."""

from __future__ import annotations

from collections.abc import Sequence


def pareto_front(rows: Sequence[dict], x: str = "tokens_per_s_per_seq",
                 y: str = "throughput_per_device") -> list[dict]:
    """Rows not dominated in (x, y), both maximized; sorted by x descending (fastest per sequence first).

    A row is dominated when another is at least as good in both and strictly better in one; exact
    duplicates keep only their first occurrence.
    """
    order = sorted(range(len(rows)), key=lambda i: (-rows[i][x], -rows[i][y], i))
    front: list[dict] = []
    best_y = float("-inf")
    for i in order:
        if rows[i][y] > best_y:
            front.append(rows[i])
            best_y = rows[i][y]
    return front

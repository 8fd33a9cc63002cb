"""Closed forms of one SSD round when the draft shares the target's device (placement "shared").

Only device work competes: the verification V, the cache build T_p (with the draft's own round time) and
the neural backup T_b; the messages (up, down, the pushed cache c), the fast backup and the verifier's lookup L
are host work. As in analytic.ssd_round_time, q = p_hit^b is the chance that every sequence hit, and a round
after a miss builds the after-miss tree (T_p').

time-sliced (one forward at a time, each at full speed; in the simulator the draft, which asks first, builds
first): reply = V + up + [q T_p + (1-q) T_p'] + down + (1-q) T_b; push: hit rounds max(L, T_p) + V + up,
miss rounds T_p' + V + up + max(L, T_b + down).

concurrent (each slowed s-fold while both run): the separate-device formulas with V and T_p inflated by the
overlap m, V + (s-1) m and T_p + (s-1) m, where m is the work the shorter of the two does while both run
(they start together in reply; in push the verification starts L after the build on a hit, and the build
max(0, L - T_b - down) before the verification after a miss).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from saguaro_sim.analytic import RoundTimes


def shared_round_time(rt: RoundTimes, q: float) -> float:
    """E[SSD round time] on a shared device; q = P(every sequence of the batch hit)."""
    if rt.sharing == "time-sliced":
        if rt.push:
            hit = max(rt.lookup, rt.build) + rt.verify + rt.msg_up
            miss = rt.build_miss + rt.verify + rt.msg_up + max(rt.lookup, rt.backup + rt.msg_down)
            return q * hit + (1.0 - q) * miss
        build = q * rt.build + (1 - q) * rt.build_miss
        return rt.verify + rt.msg_up + build + rt.msg_down + (1.0 - q) * rt.backup
    extra = rt.slowdown - 1.0
    if rt.push:
        m = min(rt.verify, max(0.0, rt.build - rt.lookup))
        hit = max(rt.verify + extra * m + rt.msg_up + rt.lookup, rt.build + extra * m + rt.msg_cache)
        wait = max(rt.lookup, rt.backup + rt.msg_down)
        m = min(rt.verify, max(0.0, rt.build_miss - (wait - rt.backup - rt.msg_down)))
        miss = max(rt.verify + extra * m + rt.msg_up, rt.build_miss + extra * m + rt.msg_cache) + wait
        return q * hit + (1.0 - q) * miss
    build = q * rt.build + (1 - q) * rt.build_miss
    m = min(rt.verify, build)
    return max(rt.verify + extra * m + rt.msg_up, build + extra * m) + rt.msg_down + (1.0 - q) * rt.backup

"""Placing buffers with lifetimes in one arena: greedy by size, hill-climb fallback.

The problem TVM's USMP and TFLite Micro's greedy planner solve: each buffer has a size
and a lifetime (the first and last step it is live, both included); two buffers whose
lifetimes meet must not share bytes; the arena's size (the peak) should be as small as
possible. No placement beats the *lower bound*, the most bytes live at one step.

:func:`plan_arena` places the buffers largest first (ties by first step, then key: the
same input gives the same plan), each at the lowest offset where it conflicts with no
buffer placed before it. That reaches the bound on most real networks. When it does
not, a hill climb swaps two buffers in the placement order (a seeded generator) and
keeps the order if the peak does not grow, for a bounded number of tries or until the
bound is reached (USMP's fallback).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ArenaPlan", "LiveBuffer", "lower_bound", "plan_arena"]

#: Hill-climb tries when greedy-by-size stays above the lower bound.
HILL_CLIMB_STEPS = 400


@dataclass(frozen=True)
class LiveBuffer:
    """A buffer to place: ``key`` (unique), ``nbytes``, live from step ``first`` to
    step ``last`` (both included)."""

    key: int
    nbytes: int
    first: int
    last: int


@dataclass(frozen=True)
class ArenaPlan:
    """Offsets by buffer key, the arena's ``peak`` size, ``naive_sum`` (every buffer its
    own bytes), ``lower_bound`` (most bytes live at once) and the ``method`` that gave
    the offsets (``greedy-by-size`` or ``hill-climb``)."""

    offsets: dict[int, int]
    peak: int
    naive_sum: int
    lower_bound: int
    method: str

    def to_json(self) -> dict[str, object]:
        """The plan as JSON-ready data."""
        return {"offsets": {str(k): v for k, v in self.offsets.items()}, "peak": self.peak,
                "naive_sum": self.naive_sum, "lower_bound": self.lower_bound,
                "method": self.method}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ArenaPlan:
        """:meth:`to_json`'s data back (``KeyError``, ``TypeError`` or ``ValueError``
        when malformed)."""
        return cls({int(k): int(v) for k, v in data["offsets"].items()}, int(data["peak"]),
                   int(data["naive_sum"]), int(data["lower_bound"]), str(data["method"]))

    def conflict(self, buffers: Sequence[LiveBuffer], alignment: int = 1) -> str | None:
        """Why these offsets do not place ``buffers`` (a buffer without an offset, one
        past the peak or misaligned, two live at once sharing bytes), or None."""
        spans = []
        for b in buffers:
            off = self.offsets.get(b.key)
            if off is None:
                return f"buffer {b.key} has no offset"
            end = off + _align(b.nbytes, alignment)
            if off % alignment or off < 0 or end > self.peak:
                return f"buffer {b.key} at {off} ({b.nbytes} bytes) is misaligned or " \
                       f"past the arena's {self.peak} bytes"
            spans.append((off, end, b))
        spans.sort(key=lambda s: s[0])
        for i, (_, end, b) in enumerate(spans):
            for off2, _, b2 in spans[i + 1:]:
                if off2 >= end:
                    break
                if b.first <= b2.last and b2.first <= b.last:
                    return f"buffers {b.key} and {b2.key} are live at once and share bytes"
        return None


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def lower_bound(buffers: Sequence[LiveBuffer], alignment: int = 1) -> int:
    """The most (aligned) bytes live at one step."""
    events: dict[int, int] = {}
    for b in buffers:
        size = _align(b.nbytes, alignment)
        events[b.first] = events.get(b.first, 0) + size
        events[b.last + 1] = events.get(b.last + 1, 0) - size
    live = best = 0
    for step in sorted(events):
        live += events[step]
        best = max(best, live)
    return best


def _place(order: Sequence[LiveBuffer], alignment: int) -> tuple[dict[int, int], int]:
    """Each buffer in ``order`` at the lowest aligned offset free of the placed buffers
    whose lifetimes meet its own; the offsets and the peak."""
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[int, int] = {}
    peak = 0
    for b in order:
        size = _align(b.nbytes, alignment)
        pos = 0
        for off, end, _, _ in sorted(p for p in placed
                                     if p[2] <= b.last and b.first <= p[3]):
            if pos + size <= off:
                break
            pos = max(pos, _align(end, alignment))
        offsets[b.key] = pos
        placed.append((pos, pos + size, b.first, b.last))
        peak = max(peak, pos + size)
    return offsets, peak


def plan_arena(buffers: Sequence[LiveBuffer], alignment: int = 1, *,
               hill_climb_steps: int = HILL_CLIMB_STEPS, seed: int = 0) -> ArenaPlan:
    """Offsets for ``buffers`` in one arena (see the module docstring).

    Parameters
    ----------
    buffers : sequence of LiveBuffer
        Keys must be unique.
    alignment : int
        Every offset is a multiple of it (sizes are rounded up to it).
    hill_climb_steps, seed : int
        The fallback's tries and its generator's seed.
    """
    bound = lower_bound(buffers, alignment)
    naive = sum(_align(b.nbytes, alignment) for b in buffers)
    order = sorted(buffers, key=lambda b: (-_align(b.nbytes, alignment), b.first, b.key))
    offsets, peak = _place(order, alignment)
    method = "greedy-by-size"
    if peak > bound and len(order) > 1:
        rng = random.Random(seed)
        for _ in range(hill_climb_steps):
            i, j = rng.sample(range(len(order)), 2)
            trial = list(order)
            trial[i], trial[j] = trial[j], trial[i]
            t_offsets, t_peak = _place(trial, alignment)
            if t_peak <= peak:
                if t_peak < peak:
                    method = "hill-climb"
                order, offsets, peak = trial, t_offsets, t_peak
                if peak == bound:
                    break
    return ArenaPlan(offsets, peak, naive, bound, method)

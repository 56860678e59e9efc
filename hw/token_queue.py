"""A dependency-token queue: a counter with push and pop handshakes."""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["TokenQueue"]


class TokenQueue(wiring.Component):
    """Holds up to ``depth`` data-less tokens between two engines.

    A push happens on a cycle where ``push_valid`` and ``push_ready`` are both
    high, a pop where ``pop_ready`` and ``pop_valid`` are both high; both may
    happen in the same cycle. ``push_ready`` (not full) and ``pop_valid`` (not
    empty) depend only on the registered count, never combinationally on the
    other side's request, so a full queue refuses a push even when a pop happens
    in the same cycle. ``count`` changes one cycle after a handshake.

    Parameters
    ----------
    depth : int
        Capacity (``HwConfig.dep_queue_depth``), at least 1.

    Attributes
    ----------
    push_valid : In(1)
        The producer offers a token.
    push_ready : Out(1)
        The queue has room (``count < depth``).
    pop_ready : In(1)
        The consumer wants a token.
    pop_valid : Out(1)
        The queue holds a token (``count > 0``).
    count : Out(range(depth + 1))
        Tokens held.
    """

    def __init__(self, depth: int) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth}")
        self.depth = depth
        super().__init__({
            "push_valid": In(1),
            "push_ready": Out(1),
            "pop_ready": In(1),
            "pop_valid": Out(1),
            "count": Out(range(depth + 1)),
        })

    def elaborate(self, platform: object) -> Module:
        """Build the counter."""
        m = Module()
        push = self.push_valid & self.push_ready
        pop = self.pop_ready & self.pop_valid
        m.d.comb += [
            self.push_ready.eq(self.count < self.depth),
            self.pop_valid.eq(self.count != 0),
        ]
        with m.If(push & ~pop):
            m.d.sync += self.count.eq(self.count + 1)
        with m.Elif(pop & ~push):
            m.d.sync += self.count.eq(self.count - 1)
        return m

"""A dependency-token queue: a counter with push and pop handshakes."""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .signatures import TokenSignature

__all__ = ["TokenQueue"]


class TokenQueue(wiring.Component):
    """Holds up to ``depth`` data-less tokens between two engines.

    The producer's ``Out(TokenSignature)`` connects to :attr:`push`, :attr:`pop`
    to the consumer's ``In(TokenSignature)`` (``wiring.connect``). A push happens
    on a cycle where ``push.valid`` and ``push.ready`` are both high, a pop where
    ``pop.ready`` and ``pop.valid`` are both high; both may happen in the same
    cycle. ``push.ready`` (not full) and ``pop.valid`` (not empty) depend only on
    the registered count, never combinationally on the other side's request, so a
    full queue refuses a push even when a pop happens in the same cycle. ``count``
    changes one cycle after a handshake.

    Parameters
    ----------
    depth : int
        Capacity (``HwConfig.dep_queue_depth``), at least 1.

    Attributes
    ----------
    push : In(TokenSignature)
        The producer offers a token (``valid``); the queue has room (``ready``,
        ``count < depth``).
    pop : Out(TokenSignature)
        The queue holds a token (``valid``, ``count > 0``); the consumer takes it
        (``ready``).
    count : Out(range(depth + 1))
        Tokens held.
    """

    def __init__(self, depth: int) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth}")
        self.depth = depth
        super().__init__({
            "push": In(TokenSignature),
            "pop": Out(TokenSignature),
            "count": Out(range(depth + 1)),
        })

    def elaborate(self, platform: object) -> Module:
        """Build the counter."""
        m = Module()
        push = self.push.valid & self.push.ready
        pop = self.pop.ready & self.pop.valid
        m.d.comb += [
            self.push.ready.eq(self.count < self.depth),
            self.pop.valid.eq(self.count != 0),
        ]
        with m.If(push & ~pop):
            m.d.sync += self.count.eq(self.count + 1)
        with m.Elif(pop & ~push):
            m.d.sync += self.count.eq(self.count - 1)
        return m

"""Token-discipline errors the functional simulator detects and the hardware cannot.

Memory-range errors are plain :class:`~tensorfab.isa.ProgramError` with the
architectural codes ``SRAM_RANGE``, ``DRAM_RANGE`` and ``UOP_RANGE``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorfab.isa import ProgramError


@dataclass(frozen=True)
class Wait:
    """An engine blocked on a dependency-token queue.

    Attributes
    ----------
    engine : str
        ``load``, ``compute`` or ``store``.
    index : int
        Index of the blocked instruction in the program.
    mnemonic : str
        Its mnemonic.
    action : str
        ``pop`` (the queue is empty), ``push`` (the queue is full), ``fetch`` (the
        engine's next instruction is not dispatched yet) or ``dispatch`` (fetch waits
        for room in an engine's command queue; ``engine`` is then ``fetch``).
    queue : str
        Queue name, e.g. ``load→compute``.
    flag : str
        The dependency flag that makes it wait (``pop_prev``...).
    """

    engine: str
    index: int
    mnemonic: str
    action: str
    queue: str
    flag: str

    def describe(self) -> str:
        """One line: ``compute engine at instruction 7 (gemm) waits to pop from ...``."""
        if self.action == "dispatch":
            return (f"fetch at instruction {self.index} ({self.mnemonic}) waits for room in "
                    f"the {self.queue}")
        if self.action == "fetch":
            return (f"{self.engine} engine waits for fetch to dispatch instruction "
                    f"{self.index} ({self.mnemonic})")
        if self.action == "pop":
            what = f"pop from {self.queue} (empty)"
        else:
            what = f"push into {self.queue} (full)"
        return f"{self.engine} engine at instruction {self.index} ({self.mnemonic}) waits to {what}"


class DeadlockError(ProgramError):
    """No engine can make progress before FINISH retired.

    Attributes
    ----------
    waits : list[Wait]
        Every blocked engine and the queue it waits on; :attr:`index` and
        :attr:`engine` are those of the first (lowest instruction index).
    """

    def __init__(self, waits: list[Wait], finished: list[str]) -> None:
        self.waits = sorted(waits, key=lambda w: w.index)
        first = self.waits[0]
        lines = "; ".join(w.describe() for w in self.waits)
        done = f"; finished: {', '.join(finished)}" if finished else ""
        super().__init__(f"deadlock: {lines}{done}", index=first.index, engine=first.engine,
                         field=first.flag)


class TokenError(ProgramError):
    """Token imbalance at the end of the program.

    Either an engine still waits on a queue after the compute engine retired FINISH
    (``underflow``: nothing will ever push the token it needs, or pop the one it
    wants to push), or tokens are left in a queue.

    Attributes
    ----------
    queue : str
        Queue at fault.
    count : int
        Tokens left in the queue (0 for an underflow).
    pushers : list[int]
        Instruction indices that pushed the unpopped tokens.
    waits : list[Wait]
        Engines still blocked (underflow), else empty.
    """

    def __init__(self, message: str, *, queue: str, count: int = 0,
                 pushers: list[int] | None = None, waits: list[Wait] | None = None,
                 index: int, engine: str, field: str) -> None:
        self.queue = queue
        self.count = count
        self.pushers = list(pushers or [])
        self.waits = list(waits or [])
        super().__init__(message, index=index, engine=engine, field=field)


class RaceError(ProgramError):
    """Two engines access the same buffer entry or DRAM byte, at least one writing,
    with no chain of tokens ordering them.

    Attributes
    ----------
    resource : str
        ``inp``, ``wgt``, ``acc``, ``uop`` or ``dram``.
    kind : str
        ``RAW`` (read after an unordered write), ``WAR`` or ``WAW``.
    lo, hi : int
        First and last conflicting entry (byte address for DRAM).
    other_index : int
        Index of the earlier, conflicting instruction.
    other_engine : str
        Its engine.
    """

    def __init__(self, message: str, *, resource: str, kind: str, lo: int, hi: int,
                 index: int, engine: str, other_index: int, other_engine: str) -> None:
        self.resource = resource
        self.kind = kind
        self.lo = lo
        self.hi = hi
        self.other_index = other_index
        self.other_engine = other_engine
        super().__init__(message, index=index, engine=engine, field=resource)


__all__ = ["DeadlockError", "RaceError", "TokenError", "Wait"]

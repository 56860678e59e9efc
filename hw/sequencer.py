"""The instruction sequencer every engine is built on: take, pop, execute, push, retire.

An engine is an :class:`InsnSequencer` plus the datapath that executes one
instruction. The sequencer owns what the three engines share: the instruction
stream, the dependency-token ports the engine's queues ask for
(:data:`tensorfab.isa.formats.TOKEN_QUEUES`), the halt policy and the status
outputs (``error``, ``busy``, ``stall``, ``retire``, ``idle``). It hands the
instruction to the datapath through :func:`ExecSignature`.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import Engine, HwConfig, insn_width
from tensorfab.isa.formats import header_format, token_pops, token_pushes

from .layouts import format_layout
from .signatures import ErrorSignature, InsnStreamLayout, TokenSignature, insn_index_width

__all__ = ["ExecSignature", "InsnSequencer", "engine_members"]


def ExecSignature(cfg: HwConfig) -> wiring.Signature:
    """The handshake between a sequencer and its datapath, from the sequencer's side.

    ``start`` is a one-cycle pulse: the tokens are popped, execute ``word`` (held
    until the instruction retires or is dropped). The datapath answers with a
    one-cycle ``done`` (finished; may be high in the ``start`` cycle itself, for an
    instruction with nothing to execute) or ``fail`` (an error with ``code``, an
    :class:`~tensorfab.isa.ErrorCode`; the instruction is dropped). ``idle`` says
    the datapath needs no further cycle for what it was given, so a dropped
    instruction can be forgotten (it may drain memory beats after a halt first).

    Parameters
    ----------
    cfg : HwConfig
        Gives the instruction width.

    Returns
    -------
    amaranth.lib.wiring.Signature
    """
    return wiring.Signature({
        "start": Out(1),
        "word": Out(insn_width(cfg)),
        "done": In(1),
        "fail": In(1),
        "code": In(4),
        "idle": In(1),
    })


def engine_members(cfg: HwConfig, engine: Engine) -> dict[str, wiring.Member]:
    """The signature members every engine shares with its sequencer.

    Parameters
    ----------
    cfg : HwConfig
        Configuration.
    engine : Engine
        Which engine: gives its token ports (one per queue of
        :data:`~tensorfab.isa.formats.TOKEN_QUEUES` it pops or pushes, named by the
        instruction flag).

    Returns
    -------
    dict of str to amaranth.lib.wiring.Member
        ``insn``, the pop ports (``In(TokenSignature)``), the push ports
        (``Out(TokenSignature)``), ``halt``, ``error``, ``busy``, ``stall``,
        ``retire``, ``idle``.
    """
    members: dict[str, wiring.Member] = {"insn": In(stream.Signature(InsnStreamLayout(cfg)))}
    for flag, _queue in token_pops(engine):
        members[flag] = In(TokenSignature)
    for flag, _queue in token_pushes(engine):
        members[flag] = Out(TokenSignature)
    members |= {
        "halt": In(1),
        "error": Out(ErrorSignature),
        "busy": Out(1),
        "stall": Out(1),
        "retire": Out(1),
        "idle": Out(1),
    }
    return members


class InsnSequencer(wiring.Component):
    """Takes an engine's instructions one at a time and runs each through its datapath.

    For each instruction: take it from ``insn``; wait until every token its pop
    flags ask for is available and pop them all in one cycle, which is the cycle of
    ``exec.start``; wait for ``exec.done``; wait until every queue its push flags
    name has room and push them all in one cycle, which is the ``retire`` cycle;
    take the next instruction from the cycle after. An instruction without token
    flags thus spends a cycle in each step: take, start, (execute), retire.

    **Halt policy** (one for every engine). While ``halt`` is high the sequencer takes
    no instruction; an instruction it holds is dropped: no token is pushed, nothing
    retires, and the datapath sees the same ``halt``. ``exec.fail`` drops the
    instruction in the same way and is reported on ``error`` with the instruction's
    index. A dropped instruction is forgotten once ``exec.idle`` is high; until then
    the sequencer is neither busy nor idle. When ``halt`` falls the sequencer takes
    instructions again (the core holds ``halt`` until the next start).

    Parameters
    ----------
    cfg : HwConfig
        Configuration.
    engine : Engine
        The engine served; gives the token ports (:func:`engine_members`).

    Attributes
    ----------
    insn : In(stream.Signature(InsnStreamLayout(cfg)))
        The engine's instructions.
    pop_prev, pop_next : In(TokenSignature)
        Pop side of the queues the engine consumes (those it has).
    push_prev, push_next : Out(TokenSignature)
        Push side of the queues the engine produces (those it has).
    exec : Out(ExecSignature(cfg))
        The datapath.
    halt : In(1)
        Stop: drop the instruction held, take none.
    error : Out(ErrorSignature)
        ``exec.fail`` and ``exec.code`` with the held instruction's index.
    busy : Out(1)
        Holds an instruction (from the cycle after it is taken to its retire cycle).
    stall : Out(1)
        Of that, waits for a token to pop or for room to push.
    retire : Out(1)
        Pulse per retired instruction.
    idle : Out(1)
        Holds nothing, and the datapath nothing in flight.
    """

    def __init__(self, cfg: HwConfig, engine: Engine) -> None:
        self.cfg = cfg
        self.engine = engine
        self.pops = tuple(flag for flag, _queue in token_pops(engine))
        self.pushes = tuple(flag for flag, _queue in token_pushes(engine))
        super().__init__({**engine_members(cfg, engine), "exec": Out(ExecSignature(cfg))})

    def connect_engine(self, m: Module, engine: wiring.Component,
                       halt: Value | None = None) -> None:
        """Connect ``engine``'s members of :func:`engine_members` to this sequencer.

        Parameters
        ----------
        m : Module
            The engine's module (this sequencer is its submodule).
        engine : wiring.Component
            The engine, whose signature includes :func:`engine_members`.
        halt : Value, optional
            What halts the sequencer, when it is more than ``engine.halt``.
        """
        for name, member in self.signature.members.items():
            if name == "exec":
                continue
            outer, inner = getattr(engine, name), getattr(self, name)
            if member.is_signature:
                wiring.connect(m, wiring.flipped(outer), inner)
            elif member.flow == wiring.Out:
                m.d.comb += outer.eq(inner)
            else:
                m.d.comb += inner.eq(halt if name == "halt" and halt is not None else outer)

    def elaborate(self, platform: object) -> Module:
        """Build the sequencer's state machine."""
        m = Module()
        ex = self.exec
        word = Signal(insn_width(self.cfg))
        index = Signal(insn_index_width(self.cfg))
        flags = data.View(format_layout(header_format(self.cfg)), word)
        m.d.comb += [ex.word.eq(word), self.error.valid.eq(ex.fail),
                     self.error.code.eq(ex.code), self.error.index.eq(index)]
        pops_ready = Signal()
        pushes_ready = Signal()
        pops = [~getattr(flags, f) | getattr(self, f).valid for f in self.pops]
        pushes = [~getattr(flags, f) | getattr(self, f).ready for f in self.pushes]
        m.d.comb += [pops_ready.eq(_all(pops)), pushes_ready.eq(_all(pushes))]

        def drop() -> None:
            """Forget the instruction, at once if the datapath is idle."""
            with m.If(ex.idle):
                m.next = "IDLE"
            with m.Else():
                m.next = "DROP"

        def outcome(otherwise: str) -> None:
            """Follow the datapath's answer; ``otherwise`` the next state."""
            with m.If(ex.fail):
                drop()
            with m.Elif(ex.done):
                m.next = "PUSH"
            with m.Else():
                m.next = otherwise

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [self.idle.eq(1), self.insn.ready.eq(~self.halt)]
                with m.If(self.insn.valid & ~self.halt):
                    m.d.sync += [word.eq(self.insn.payload.word),
                                 index.eq(self.insn.payload.index)]
                    m.next = "POP"
            with m.State("POP"):
                m.d.comb += self.busy.eq(1)
                with m.If(self.halt):
                    drop()
                with m.Elif(pops_ready):
                    m.d.comb += ex.start.eq(1)
                    m.d.comb += [getattr(self, f).ready.eq(getattr(flags, f)) for f in self.pops]
                    outcome("EXEC")
                with m.Else():
                    m.d.comb += self.stall.eq(1)
            with m.State("EXEC"):
                m.d.comb += self.busy.eq(1)
                with m.If(self.halt):
                    drop()
                with m.Else():
                    outcome("EXEC")
            with m.State("PUSH"):
                m.d.comb += self.busy.eq(1)
                with m.If(self.halt):
                    drop()
                with m.Elif(pushes_ready):
                    m.d.comb += [getattr(self, f).valid.eq(getattr(flags, f))
                                 for f in self.pushes]
                    m.d.comb += self.retire.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += self.stall.eq(1)
            with m.State("DROP"):
                m.d.comb += self.idle.eq(ex.idle)
                with m.If(ex.idle):
                    m.next = "IDLE"
        return m


def _all(terms: list[Value]) -> Value:
    """The AND of ``terms`` (1 when there are none)."""
    out: Value = Value.cast(1)
    for t in terms:
        out = out & t
    return out

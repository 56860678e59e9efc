"""Automatic dependency-token insertion for virtual-threaded step programs.

A lowering describes its work as :class:`Step` objects, in program order, without any
dependency flag. Each step belongs to one virtual thread and one output tile: its
loads fill on-chip *resources* (:attr:`Step.writes`: input and weight regions, the
thread's bias tile), its compute reads resources (:attr:`Step.reads`) and accumulates
into the thread's *accumulator slot*, and the last step of a tile carries the stores
that drain the accumulator slot to DRAM. Steps whose operands are already on chip
have no loads. By default a step's loads write, and its compute reads, the one
resource ``("slot", vthread)``: each thread has its own load slot.

:func:`insert_tokens` sets the flags that make every such program race-free and
deadlock-free:

* load → compute: a step's compute waits for the latest load of every resource it
  reads (the last LOAD of that step pushes ``l2c``, the compute's first instruction
  pops it);
* compute → load (reuse): a step's loads wait for the last computation that read the
  resources they overwrite (its last compute instruction pushes ``c2l``, the first
  LOAD pops it) and, to bound the tokens in flight, for the computation ``lookahead``
  steps back;
* compute → store: the last compute instruction of a tile pushes ``c2s``; the tile's
  first store pops it;
* store → compute (accumulator reuse): a tile's first computation waits for the stores
  of the previous tile of its thread (the last of them pushes ``s2c``).

The engines run in order, so a wait for step ``k`` covers every earlier step of the
same engine: a wait already implied by an earlier one of the same queue gets no token.
The tokens a queue carries are therefore pushed and popped in the same order (the
``k``-th pop takes the ``k``-th push), and every pop takes a push that comes earlier
in program order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from tensorfab.isa import Engine, HwConfig, Insn, ProgramError

from .timing import simulate

Emitted = tuple[Insn, str | None]
"""An instruction and the DRAM segment its address is relative to (LOAD/STORE)."""


@dataclass
class Step:
    """One step of one virtual thread (see the module docstring).

    Attributes
    ----------
    vthread : int
        Owner of the accumulator slot the step uses.
    tile : int
        Output tile the step accumulates into; a tile's steps are consecutive among
        its thread's steps.
    loads, stores : list[Emitted]
        LOAD and STORE instructions with their segments.
    compute : list[Insn]
        GEMM and ALU instructions (at least one).
    writes : tuple | None
        Resources the loads overwrite (default: ``("slot", vthread)`` if there are
        loads).
    reads : tuple | None
        Resources the compute reads besides the accumulator slot (default:
        ``("slot", vthread)``).
    """

    vthread: int
    tile: int
    loads: list[Emitted] = field(default_factory=list)
    compute: list[Insn] = field(default_factory=list)
    stores: list[Emitted] = field(default_factory=list)
    writes: tuple[Hashable, ...] | None = None
    reads: tuple[Hashable, ...] | None = None

    def written(self) -> tuple[Hashable, ...]:
        """Resources the loads overwrite."""
        if self.writes is not None:
            return self.writes
        return (("slot", self.vthread),) if self.loads else ()

    def read(self) -> tuple[Hashable, ...]:
        """Resources the compute reads."""
        return self.reads if self.reads is not None else (("slot", self.vthread),)


def _flag(insn: Insn, **flags: bool) -> Insn:
    on = {k: True for k, v in flags.items() if v}
    return dataclasses.replace(insn, **on) if on else insn


def _chain(needs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(waiting step, step waited for)`` in the waiting engine's order -> the pairs that
    need a token (those not implied by an earlier wait of the same queue)."""
    out = []
    waited = -1
    for s, need in needs:
        if need > waited:
            out.append((s, need))
            waited = need
    return out


def insert_tokens(steps: Sequence[Step], lookahead: int | None = None) -> list[Emitted]:
    """Flag the steps' instructions with dependency tokens and flatten them in program
    order (per step: loads, compute, stores).

    Parameters
    ----------
    steps : sequence of Step
        The work, in program order.
    lookahead : int | None
        Loads of step ``s`` also wait for the computation of step ``s - lookahead``
        (``None``: no such bound), which bounds the ``l2c`` tokens in flight.

    Raises
    ------
    ProgramError
        A step without compute instructions, stores before a tile's last step, a tile
        split between threads or interrupted, or a tile without stores.
    """
    tile_thread: dict[int, int] = {}
    tile_first: dict[int, int] = {}
    tile_last: dict[int, int] = {}
    thread_tile: dict[int, int] = {}        # thread -> current tile
    tile_prev: dict[int, int] = {}          # tile -> previous tile of its thread
    for s, st in enumerate(steps):
        if not st.compute:
            raise ProgramError(f"step {s} has no compute instruction")
        if st.tile in tile_thread:
            if tile_thread[st.tile] != st.vthread or thread_tile[st.vthread] != st.tile:
                raise ProgramError(f"step {s}: tile {st.tile} is split between threads or "
                                   "interrupted by another tile of its thread")
        else:
            tile_thread[st.tile] = st.vthread
            tile_first[st.tile] = s
            if st.vthread in thread_tile:
                tile_prev[st.tile] = thread_tile[st.vthread]
            thread_tile[st.vthread] = st.tile
        tile_last[st.tile] = s
    for t, s in tile_last.items():
        if not steps[s].stores:
            raise ProgramError(f"tile {t} has no store")
        for s2 in range(tile_first[t], s):
            if steps[s2].tile == t and steps[s2].stores:
                raise ProgramError(f"step {s2}: stores before the last step of tile {t}")

    # what each engine waits for, in its own order
    last_load: dict[Hashable, int] = {}     # resource -> latest step loading it
    last_read: dict[Hashable, int] = {}     # resource -> latest step computing from it
    need_l2c: list[tuple[int, int]] = []
    need_c2l: list[tuple[int, int]] = []
    need_s2c: list[tuple[int, int]] = []
    for s, st in enumerate(steps):
        if st.loads:
            need = max((last_read.get(r, -1) for r in st.written()), default=-1)
            if lookahead is not None:
                need = max(need, s - lookahead)
            need_c2l.append((s, need))
            for r in st.written():
                last_load[r] = s
        need_l2c.append((s, max((last_load.get(r, -1) for r in st.read()), default=-1)))
        for r in st.read():
            last_read[r] = s
        if tile_first[st.tile] == s and st.tile in tile_prev:
            need_s2c.append((s, tile_last[tile_prev[st.tile]]))
    l2c = _chain(need_l2c)   # (compute step, load step)
    c2l = _chain(need_c2l)   # (load step, compute step)
    s2c = _chain(need_s2c)   # (compute step, store step)
    pop_l2c = {s for s, _ in l2c}
    push_l2c = {p for _, p in l2c}
    pop_c2l = {s for s, _ in c2l}
    push_c2l = {p for _, p in c2l}
    pop_s2c = {s for s, _ in s2c}
    push_s2c = {p for _, p in s2c}

    out: list[Emitted] = []
    for s, st in enumerate(steps):
        loads = list(st.loads)
        if loads:
            insn, seg = loads[0]
            loads[0] = (_flag(insn, pop_next=s in pop_c2l), seg)
            insn, seg = loads[-1]
            loads[-1] = (_flag(insn, push_next=s in push_l2c), seg)
        compute = list(st.compute)
        last_of_tile = tile_last[st.tile] == s
        compute[0] = _flag(compute[0], pop_prev=s in pop_l2c, pop_next=s in pop_s2c)
        compute[-1] = _flag(compute[-1], push_prev=s in push_c2l, push_next=last_of_tile)
        stores = list(st.stores)
        if last_of_tile:
            insn, seg = stores[0]
            stores[0] = (_flag(insn, pop_prev=True), seg)
            insn, seg = stores[-1]
            stores[-1] = (_flag(insn, push_prev=s in push_s2c), seg)
        out += loads
        out += [(c, None) for c in compute]
        out += stores
    return out


#: queue -> (pushing engine, flag), (popping engine, flag)
_QUEUES = {
    "l2c": ((Engine.LOAD, "push_next"), (Engine.COMPUTE, "pop_prev")),
    "c2l": ((Engine.COMPUTE, "push_prev"), (Engine.LOAD, "pop_next")),
    "c2s": ((Engine.COMPUTE, "push_next"), (Engine.STORE, "pop_prev")),
    "s2c": ((Engine.STORE, "push_prev"), (Engine.COMPUTE, "pop_next")),
}


def check_program_order(insns: Sequence[Insn], capacity: int) -> dict[str, int]:
    """Check that running the instructions one at a time in program order never pops an
    empty queue nor overfills one, and leaves every queue empty.

    This is the condition under which the in-order fetch unit cannot deadlock whatever
    its command-queue depths: every token an instruction waits for is pushed by an
    earlier instruction.

    Returns
    -------
    dict[str, int]
        Highest occupancy of each queue.

    Raises
    ------
    ProgramError
        Naming the instruction and queue.
    """
    level = dict.fromkeys(_QUEUES, 0)
    peak = dict.fromkeys(_QUEUES, 0)
    for i, insn in enumerate(insns):
        for q, (_, (eng, flag)) in _QUEUES.items():
            if insn.engine is eng and getattr(insn, flag):
                if level[q] == 0:
                    raise ProgramError(f"instruction {i} ({insn.mnemonic}) pops {q} before "
                                       "any earlier instruction pushed it", index=i)
                level[q] -= 1
        for q, ((eng, flag), _) in _QUEUES.items():
            if insn.engine is eng and getattr(insn, flag):
                level[q] += 1
                peak[q] = max(peak[q], level[q])
                if level[q] > capacity:
                    raise ProgramError(f"instruction {i} ({insn.mnemonic}) fills {q} past "
                                       f"its {capacity} tokens", index=i)
    left = {q: n for q, n in level.items() if n}
    if left:
        raise ProgramError(f"tokens left at the end: {left}")
    return peak


def dispatch_order(emitted: Sequence[Emitted], cfg: HwConfig) -> list[Emitted]:
    """``emitted`` reordered so that the in-order fetch unit dispatches instructions in
    about the order the engines start them.

    Fetch hands instructions to bounded command queues in program order, so an engine
    whose queue is full (say, the stores of a tile waiting for its computation) blocks
    the dispatch of every later instruction, including the loads another virtual
    thread could run meanwhile. Sorting by the start times :func:`.timing.simulate`
    predicts without fetch keeps each engine's own order (hence which push every pop
    takes) and puts each instruction after the ones it waits for. The original order
    is kept if the reordered one would pop a token before its push or overfill a queue
    in program order (:func:`check_program_order`).
    """
    insns = [insn for insn, _ in emitted]
    timing = simulate(insns, cfg, fetch=False)
    if timing is None:
        return list(emitted)
    start = timing.start
    order = sorted(range(len(insns)), key=lambda i: (start[i], i))
    out = [emitted[i] for i in order]
    try:
        check_program_order([insn for insn, _ in out], cfg.dep_queue_depth)
    except ProgramError:
        return list(emitted)
    return out


__all__ = ["Emitted", "Step", "check_program_order", "dispatch_order", "insert_tokens"]

"""Automatic dependency-token insertion for virtual-threaded step programs.

A lowering describes its work as :class:`Step` objects, in program order, without any
dependency flag. Each step belongs to one virtual thread and one output tile: its
loads fill the thread's *load slot* (input, weight and bias tiles), its compute reads
that slot and accumulates into the thread's *accumulator slot*, and the last step of a
tile carries the stores that drain the accumulator slot to DRAM. Steps that reuse what
the slot already holds have no loads.

:func:`insert_tokens` sets the flags that make every such program race-free and
deadlock-free, for any number of threads:

* load → compute: the last load of a step pushes ``l2c``; the step's first compute
  instruction pops it;
* compute → load (slot reuse): the first load of a step pops ``c2l``, pushed by the last
  compute instruction of the previous step of the same thread (which, the compute engine
  being in order, has finished every read of that slot);
* compute → store: the last compute instruction of a tile pushes ``c2s``; the tile's
  first store pops it;
* store → compute (accumulator reuse): the last store of a tile pushes ``s2c`` when its
  thread has a later tile, whose first compute instruction pops it.

Every pop is matched by a push that comes earlier in program order, and the queues are
FIFOs, so the ``k``-th pop must take the ``k``-th push: this holds when threads reuse
their slots in the order they were first taken (round-robin), and is checked. At most
one token per thread waits in each queue, so ``vthreads <= dep_queue_depth`` suffices.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
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
        Owner of the slots the step uses.
    tile : int
        Output tile the step accumulates into; a tile's steps are consecutive among
        its thread's steps.
    loads, stores : list[Emitted]
        LOAD and STORE instructions with their segments.
    compute : list[Insn]
        GEMM and ALU instructions (at least one).
    """

    vthread: int
    tile: int
    loads: list[Emitted] = field(default_factory=list)
    compute: list[Insn] = field(default_factory=list)
    stores: list[Emitted] = field(default_factory=list)


def _flag(insn: Insn, **flags: bool) -> Insn:
    on = {k: True for k, v in flags.items() if v}
    return dataclasses.replace(insn, **on) if on else insn


def _check_fifo(pairs: list[tuple[int, int]], queue: str) -> None:
    """``pairs`` of (pushing step, popping step): by pop order, pushes must increase."""
    pushes = [p for p, _ in sorted(pairs, key=lambda pair: pair[1])]
    if any(a >= b for a, b in itertools.pairwise(pushes)):
        raise ProgramError(f"slot reuse is not in first-use order: the {queue} tokens would "
                           "be popped out of FIFO order")


def insert_tokens(steps: Sequence[Step]) -> list[Emitted]:
    """Flag the steps' instructions with dependency tokens and flatten them in program
    order (per step: loads, compute, stores).

    Raises
    ------
    ProgramError
        A step without compute instructions, stores before a tile's last step, a tile
        split between threads or interrupted, or slot reuse out of FIFO order.
    """
    last_step: dict[int, int] = {}          # thread -> last step index so far
    load_prev: dict[int, int] = {}          # load step -> previous step of its thread
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
        if st.loads and st.vthread in last_step:
            load_prev[s] = last_step[st.vthread]
        last_step[st.vthread] = s
    for t, s in tile_last.items():
        for s2 in range(tile_first[t], s):
            if steps[s2].tile == t and steps[s2].stores:
                raise ProgramError(f"step {s2}: stores before the last step of tile {t}")
    _check_fifo([(p, s) for s, p in load_prev.items()], "compute→load")
    _check_fifo([(tile_last[p], tile_first[t]) for t, p in tile_prev.items()],
                "store→compute")
    push_c2l = set(load_prev.values())
    push_s2c = set(tile_prev.values())

    out: list[Emitted] = []
    for s, st in enumerate(steps):
        loads = list(st.loads)
        if loads:
            insn, seg = loads[0]
            loads[0] = (_flag(insn, pop_next=s in load_prev), seg)
            insn, seg = loads[-1]
            loads[-1] = (_flag(insn, push_next=True), seg)
        compute = list(st.compute)
        first_of_tile = tile_first[st.tile] == s
        last_of_tile = tile_last[st.tile] == s
        compute[0] = _flag(compute[0], pop_prev=bool(loads),
                           pop_next=first_of_tile and st.tile in tile_prev)
        compute[-1] = _flag(compute[-1], push_prev=s in push_c2l, push_next=last_of_tile)
        stores = list(st.stores)
        if last_of_tile:
            if not stores:
                raise ProgramError(f"tile {st.tile} has no store")
            insn, seg = stores[0]
            stores[0] = (_flag(insn, pop_prev=True), seg)
            insn, seg = stores[-1]
            stores[-1] = (_flag(insn, push_prev=st.tile in push_s2c), seg)
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

"""Where each step's operand tiles live on chip: input and weight tiles are cached in
*regions* shared by every virtual thread.

A plan's steps (:func:`step_sequence`) run output tiles in groups of ``vthreads``, the
reduction (input-channel) tiles outermost within a group, so every thread advances one
step at a time. Each step needs one input tile (key: group, batch, output rows and
columns, first input channel) and one weight tile (key: group, output channels, first
input channel). Region ``r`` of ``inp`` (``wgt``) starts at entry ``r · pitch``; there
are as many regions as fit the buffer (:meth:`.TilePlan.regions`). A tile already in a
region is not loaded again, whichever thread loaded it; a missing one replaces the
tile whose next use is farthest away (Belady's rule, the least recently used among
tiles never used again), so with two threads working on output tiles that share their
weights the weights are loaded once, and with room for every weight tile of a layer
each is loaded once.

The accumulator slot (output tile and bias tile) stays per thread: thread ``v`` owns
``[v · pitch, v · pitch + acc_entries)`` of ``acc``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .tensorize import GEMM_LOOPS, bias_dims, gemm_dims, kernel_size
from .tile_plan import TilePlan

__all__ = ["StepSlots", "assign_regions", "kernel_uop_count", "plan_steps", "step_sequence",
           "thread_regions"]


@dataclass(frozen=True)
class StepSlots:
    """One step of a plan and the regions it uses.

    Attributes
    ----------
    vthread : int
        Thread (accumulator slot).
    tile : int
        Output tile number (in loop order).
    start : dict[str, int]
        Start of the output tile (``g``, ``b``, ``oc``, ``oh``, ``ow``).
    kt : int
        Reduction step of the tile.
    c0, tic : int
        First input-channel block and blocks of the reduction step.
    first, last : bool
        First and last reduction step of the tile.
    inp_region, wgt_region : int
        Regions holding the step's input and weight tiles.
    load_inp, load_wgt : bool
        Whether the step loads them (else a region already holds them).
    """

    vthread: int
    tile: int
    start: dict[str, int]
    kt: int
    c0: int
    tic: int
    first: bool
    last: bool
    inp_region: int = 0
    wgt_region: int = 0
    load_inp: bool = True
    load_wgt: bool = True

    @property
    def inp_key(self) -> tuple[int, ...]:
        t = self.start
        return (t["g"], t["b"], t["oh"], t["ow"], self.c0)

    @property
    def wgt_key(self) -> tuple[int, ...]:
        t = self.start
        return (t["g"], t["oc"], self.c0)


def step_sequence(plan: TilePlan) -> list[StepSlots]:
    """The plan's steps in program order (regions not yet assigned)."""
    tiles = list(plan.output_tiles())
    kts = plan.ic_tiles()
    n_vt = plan.vthreads
    out = []
    for g0 in range(0, len(tiles), n_vt):
        group = tiles[g0: g0 + n_vt]
        for kt, (c0, tic) in enumerate(kts):
            for v, t in enumerate(group):
                out.append(StepSlots(v, g0 + v, t, kt, c0, tic, kt == 0, kt == len(kts) - 1))
    return out


def assign_regions(keys: list[tuple[int, ...]], n_regions: int, owners: list[int],
                   recent: int = 1) -> list[tuple[int, bool]]:
    """``(region, load)`` per use of ``keys`` with ``n_regions`` shared regions.

    A missing key goes to a free region (region ``owners[i]`` if free, else the
    lowest). Otherwise it replaces a key not used by the last ``recent`` uses (so the
    load need not wait for the computation just issued; any key if there is none):
    the one whose next use is farthest (Belady's rule), among equally far ones
    (typically keys never used again) the one last used by the same owner, then the
    least recently used. Preferring the owner's regions keeps the number of distinct
    (thread, input region, weight region) kernels small.
    """
    n = len(keys)
    nxt = [math.inf] * n
    seen: dict[tuple[int, ...], int] = {}
    for i in range(n - 1, -1, -1):
        nxt[i] = seen.get(keys[i], math.inf)
        seen[keys[i]] = i
    where: dict[tuple[int, ...], int] = {}
    holder: list[tuple[int, ...] | None] = [None] * n_regions
    next_use = [math.inf] * n_regions
    last_use = [-1] * n_regions
    last_owner = [-1] * n_regions
    out = []
    for i, key in enumerate(keys):
        r = where.get(key)
        load = r is None
        if r is None:
            free = [k for k in range(n_regions) if holder[k] is None]
            if free:
                r = owners[i] if owners[i] in free else free[0]
            else:
                old = [k for k in range(n_regions) if last_use[k] < i - recent]
                r = max(old or range(n_regions),
                        key=lambda k: (next_use[k], last_owner[k] == owners[i],
                                       -last_use[k], -k))
                del where[holder[r]]  # type: ignore[arg-type]
            holder[r] = key
            where[key] = r
        next_use[r] = nxt[i]
        last_use[r] = i
        last_owner[r] = owners[i]
        out.append((r, load))
    return out


def thread_regions(keys: list[tuple[int, ...]], owners: list[int]) -> list[tuple[int, bool]]:
    """``(region, load)`` per use when each thread keeps its own region (region =
    thread): a thread loads a tile unless its region holds it."""
    held: dict[int, tuple[int, ...]] = {}
    out = []
    for key, v in zip(keys, owners, strict=True):
        out.append((v, held.get(v) != key))
        held[v] = key
    return out


def kernel_uop_count(plan: TilePlan) -> int:
    """Micro-ops of every distinct kernel the plan needs: a GEMM kernel per thread,
    reduction-tile size and pair of regions its steps read, a reset or bias kernel and
    an element-wise ALU kernel per thread."""
    return _gemm_uops(plan, plan_steps(plan)) + _other_uops(plan)


def _gemm_uops(plan: TilePlan, steps: list[StepSlots]) -> int:
    sizes = {size: kernel_size(gemm_dims(plan, size), GEMM_LOOPS)
             for _, size in plan.ic_tiles()}
    combos = {(s.vthread, s.tic, s.inp_region, s.wgt_region) for s in steps}
    return sum(sizes[tic] for _, tic, _, _ in combos)


def _other_uops(plan: TilePlan) -> int:
    """Micro-ops of the reset or bias kernel and the element-wise ALU kernel."""
    # the reset (1) or bias move, and one kernel per per-channel vector operand (with
    # vectors the epilogue may have no bias: count a reset kernel too)
    per_thread = kernel_size(bias_dims(plan), {"b", "oc", "pix"}) * int(plan.bias) \
        + (plan.bias > 1) if plan.bias else 1
    return (per_thread + 1) * min(plan.vthreads, plan.n_output_tiles)


def plan_steps(plan: TilePlan, shared: bool | None = None) -> list[StepSlots]:
    """The plan's steps with their input and weight regions.

    Parameters
    ----------
    plan : TilePlan
        The tiling.
    shared : bool | None
        ``True``: regions shared by all threads (:func:`assign_regions`); ``False``:
        one region per thread (:func:`thread_regions`); ``None``: shared unless their
        micro-op kernels would not fit the micro-op buffer.
    """
    steps = step_sequence(plan)
    owners = [s.vthread for s in steps]
    inp_keys = [s.inp_key for s in steps]
    wgt_keys = [s.wgt_key for s in steps]

    def build(inp: list[tuple[int, bool]], wgt: list[tuple[int, bool]]) -> list[StepSlots]:
        return [StepSlots(s.vthread, s.tile, s.start, s.kt, s.c0, s.tic, s.first, s.last,
                          ri, rw, li, lw)
                for s, (ri, li), (rw, lw) in zip(steps, inp, wgt, strict=True)]

    threads = min(plan.vthreads, len(steps))
    if shared is not False:
        recent = max(0, threads - 1)
        out = build(assign_regions(inp_keys, plan.regions("inp"), owners, recent),
                    assign_regions(wgt_keys, plan.regions("wgt"), owners, recent))
        if shared or _gemm_uops(plan, out) + _other_uops(plan) <= plan.cfg.uop_depth:
            return out
    return build(thread_regions(inp_keys, owners), thread_regions(wgt_keys, owners))

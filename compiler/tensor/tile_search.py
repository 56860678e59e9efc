"""Default schedules: a tile search over buffer capacity and the cost model.

For every combination of candidate tile sizes (balanced sizes ``ceil(extent / q)``
along each axis), two loop orders (weights reused across spatial tiles, or inputs
reused across output-channel tiles; one when both walk the tiles in the same order)
and two placements of the operand regions (one per
thread, ``depth // vthreads`` apart, or packed as tightly as the tiles allow, see
:mod:`.residency`), :func:`search_plan` keeps the tilings whose tiles fit the buffers
(``depth // vthreads``) and whose micro-op kernels fit ``uop_depth``, and ranks them by
:func:`.cost_model.estimate_cost`. The :data:`REFINE_CANDIDATES` fastest estimates and
as many of the least traffic among those within :data:`CYCLE_TOLERANCE` of the fastest
are then lowered and timed by :func:`.timing.simulate`; the fastest wins, ties (within
:data:`SIM_TOLERANCE`) going to the least DRAM traffic. Given several thread counts
(:data:`MODEL_VTHREADS` for a model's convolutions), each count is searched so, with
its own pruning bounds and shortlist (the analytic estimate ranks tilings of different
thread counts poorly), and the fastest timed tiling of all wins. :func:`default_schedule`
returns the winner as a :class:`.Schedule` written with ``tile``, ``reorder``,
``virtual_thread`` and ``place`` primitives, so it prints and replays like a
hand-written one.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from collections.abc import Sequence
from itertools import product

import numpy as np

from tensorfab.isa import HwConfig

from .cost_model import CostEstimate, cycles_lower_bound, estimate_cost
from .lower import plan_instructions
from .schedule import Schedule, ScheduleError, max_pad
from .tensorize import GEMM_LOOPS, MAX_ITER, gemm_dims, kernel_size
from .tile_plan import AXES, OUTER_AXES, TilePlan
from .timing import simulate
from .workload import Workload

#: Tilings within this fraction of the fastest estimate count as equally fast; among
#: them the one moving the fewest DRAM bytes (then issuing the fewest instructions) wins.
CYCLE_TOLERANCE = 0.03
#: Candidates (the fastest estimates, and the least traffic among the near-fastest) the
#: search lowers and times with :func:`.timing.simulate` when ``refine`` is on.
REFINE_CANDIDATES = 6
#: Candidates with more steps than this are not timed (lowering and timing grow with
#: the steps; such tilings are rarely the fastest).
REFINE_MAX_STEPS = 1000
#: Simulated cycles within this fraction of the fastest count as equally fast; the
#: least DRAM traffic wins among them.
SIM_TOLERANCE = 0.001
#: Thread counts a model's convolutions are searched over (the accelerator lowering of
#: a graph): more threads overlap more stores and loads with computation but split the
#: buffers finer, and which wins depends on the layer (on ResNet-18 four threads win the
#: stem, the 1×1 downsamples and the fused residual convolutions below 56×56, two
#: threads the 56×56 layers and half of the other 3×3 convolutions). Three threads
#: would gain ResNet-18 another 0.05 % of its cycles (timing model) for 45 % more
#: search time.
MODEL_VTHREADS: tuple[int, ...] = (2, 4)
#: Searches :func:`default_schedule` remembers (keyed by workload shape, config,
#: threads, per-channel tiles and epilogue length).
SEARCH_CACHE_SIZE = 256
#: Loop orders tried: weights stay while spatial tiles change; inputs stay while
#: output-channel tiles change.
ORDERS: tuple[tuple[str, ...], ...] = (("b", "oc", "oh", "ow"), ("b", "oh", "ow", "oc"))


def tile_candidates(extent: int) -> list[int]:
    """Balanced tile sizes ``ceil(extent / q)`` for ``q = 1 .. extent``, descending."""
    return sorted({-(-extent // q) for q in range(1, extent + 1)}, reverse=True)


def _fits(plan: TilePlan, n_threads: int) -> bool:
    cfg = plan.cfg
    v = plan.vthreads
    if plan.inp_entries() > plan.inp_capacity // v or \
            plan.wgt_entries() > plan.wgt_capacity // v:
        return False
    if plan.acc_entries > plan.acc_capacity // v:
        return False
    tics = {size for _, size in plan.ic_tiles()}
    gemm = sum(kernel_size(gemm_dims(plan, t), GEMM_LOOPS) for t in tics)
    bias = plan.tile("b") * plan.tile("oc") * int(plan.bias) + (plan.bias > 1) \
        if plan.bias else 1
    return (gemm + bias + 1 + 2 * plan.residual) * n_threads <= cfg.uop_depth


class _Bounds:
    """What a new candidate must beat to matter to :func:`search_plan`: the fastest
    estimate so far (within :data:`CYCLE_TOLERANCE` it could join the near-fastest)
    and the :data:`REFINE_CANDIDATES` fastest estimates with at most
    :data:`REFINE_MAX_STEPS` steps (it could join the timed shortlist). Both only fall
    as candidates come, so a candidate beyond them now stays beyond them."""

    def __init__(self) -> None:
        self.fastest = math.inf
        self.small: list[float] = []  # the fastest small candidates' cycles, ascending

    def add(self, est: CostEstimate) -> None:
        self.fastest = min(self.fastest, est.cycles)
        if est.steps <= REFINE_MAX_STEPS:
            bisect.insort(self.small, est.cycles)
            del self.small[REFINE_CANDIDATES:]

    def beaten(self, cycles: float, steps: int) -> bool:
        """Whether a candidate of at least ``cycles`` can no longer be picked."""
        if cycles <= self.fastest * (1 + CYCLE_TOLERANCE):
            return False
        return steps > REFINE_MAX_STEPS or (len(self.small) == REFINE_CANDIDATES
                                            and cycles > self.small[-1])


def _cannot_win(plan: TilePlan, n_alu_ops: int, bounds: _Bounds) -> bool:
    """Whether ``plan``'s estimate is sure to lose (:func:`.cost_model.cycles_lower_bound`
    against ``bounds``), so it need not be estimated. Pruning this way picks the same
    tiling as estimating every candidate."""
    if bounds.fastest == math.inf:
        return False
    steps = plan.n_output_tiles * len(plan.ic_tiles())
    return bounds.beaten(cycles_lower_bound(plan, n_alu_ops) * (1 - 1e-9), steps)


def thread_counts(vthreads: int | Sequence[int], cfg: HwConfig) -> tuple[int, ...]:
    """The thread counts a search over ``vthreads`` tries (an int: that one count).

    Raises
    ------
    ScheduleError
        A count that is no integer in ``1..cfg.dep_queue_depth``, or no count.
    """
    if isinstance(vthreads, int | np.integer):
        counts: tuple[object, ...] = (vthreads,)
    else:
        counts = tuple(vthreads) if isinstance(vthreads, Sequence) else ()
    if not counts or any(isinstance(v, bool) or not isinstance(v, int | np.integer)
                         or not 1 <= v <= cfg.dep_queue_depth for v in counts):
        raise ScheduleError(f"virtual_thread({vthreads!r})", "dep_queue_depth",
                            f"vthreads must be an integer in 1..{cfg.dep_queue_depth} or a "
                            "non-empty sequence of them (the token queues hold one token "
                            "per thread)")
    return tuple(dict.fromkeys(int(v) for v in counts))  # type: ignore[call-overload]


def search_plan(workload: Workload, cfg: HwConfig, vthreads: int | Sequence[int] = 2, *,
                bias: int = False, n_alu_ops: int = 0, refine: bool = True,
                records: int = 0, residual: bool = False, acc_records: int = 0
                ) -> TilePlan:
    """The cheapest tiling of ``workload`` with ``vthreads`` threads (see the module
    docstring); a sequence of thread counts searches each count (its own pruning and
    timed shortlist) and keeps the fastest timed tiling of all.

    Raises
    ------
    ScheduleError
        No tiling fits (the message names the smallest footprints tried).
    """
    counts = thread_counts(vthreads, cfg)
    if max(workload.padding) > max_pad(cfg):
        raise ScheduleError("workload", "pad field", f"padding {workload.padding} exceeds "
                            f"the LOAD's {max_pad(cfg)}-entry pad")
    per_count: list[list[tuple[CostEstimate, TilePlan]]] = []
    for v in counts:  # each count its own pruning bounds and shortlist
        found: list[tuple[CostEstimate, TilePlan]] = []
        _enumerate(workload, cfg, v, bias, n_alu_ops, records, residual, acc_records, found,
                   _Bounds())
        if found:
            per_count.append(found)
    if not per_count:
        raise ScheduleError("tile search", "buffer capacity",
                            f"no tiling of {workload.describe()} fits the {cfg.name} "
                            f"buffers with {'/'.join(map(str, counts))} virtual threads")
    if not refine:
        return _least_traffic([f for found in per_count for f in found])
    scored = [(cycles, dram_bytes, k, i, plan) for k, found in enumerate(per_count)
              for cycles, dram_bytes, i, plan in _timed(found, cfg, n_alu_ops)]
    if not scored:
        return _least_traffic(per_count[0])
    best = min(c for c, *_ in scored)
    return min((d, k, i, plan) for c, d, k, i, plan in scored
               if c <= best * (1 + SIM_TOLERANCE))[3]


def _enumerate(workload: Workload, cfg: HwConfig, vthreads: int, bias: int, n_alu_ops: int,
               records: int, residual: bool, acc_records: int,
               found: list[tuple[CostEstimate, TilePlan]], bounds: _Bounds) -> None:
    """Append to ``found`` the estimated tilings of ``workload`` with ``vthreads``
    threads that fit and that ``bounds`` does not rule out."""
    ext = workload.extents(cfg)
    cands = {a: tile_candidates(ext[a]) for a in AXES}
    wgt_depth = cfg.wgt_depth - records
    acc_depth = cfg.acc_depth - acc_records
    pitches = (("inp", cfg.inp_depth // vthreads), ("wgt", wgt_depth // vthreads),
               ("acc", acc_depth // vthreads))
    kh, kw = workload.kernel
    orders = ORDERS if not workload.is_dense else (("b", "oc", "oh", "ow"),
                                                    ("oh", "ow", "b", "oc"))
    for tn, toc in product(cands["b"], cands["oc"]):
        if tn * toc > acc_depth // vthreads:
            continue
        for th, tw in product(cands["oh"], cands["ow"]):
            out = tn * toc * th * tw + toc * int(bias)
            if out > acc_depth // vthreads or out // tw > MAX_ITER:
                continue
            inp_cap = cfg.inp_depth - (tn * toc * th * tw * vthreads if residual else 0)
            pitches = (("inp", inp_cap // vthreads), *pitches[1:])
            for tic in cands["ic"]:
                if toc * tic * kh * kw > wgt_depth // vthreads:
                    continue
                tiles = (("b", tn), ("oc", toc), ("oh", th), ("ow", tw), ("ic", tic))
                split = {a for a, t in tiles[:4] if t < ext[a]}
                walks: dict[tuple[str, ...], list[int]] = {}  # walk -> its entries in found
                for order in orders:
                    plan = TilePlan(workload, cfg, tiles, order, vthreads, pitches, bias,
                                    records, residual, acc_records)
                    if plan.inp_entries() > inp_cap // vthreads:
                        break
                    if _cannot_win(plan, n_alu_ops, bounds):
                        # nor can its packed placement or other order (same compute)
                        continue
                    n_threads = min(vthreads, plan.n_output_tiles)
                    if not _fits(plan, n_threads):
                        break
                    entries = [(estimate_cost(plan, n_alu_ops), plan)]
                    packed = (("inp", plan.inp_entries()), ("wgt", plan.wgt_entries()),
                              pitches[2])
                    if packed != pitches:
                        plan = TilePlan(workload, cfg, tiles, order, vthreads, packed, bias,
                                        records, residual, acc_records)
                        entries.append((estimate_cost(plan, n_alu_ops), plan))
                    # two orders walking the split axes alike make the same program: it
                    # is kept once, with the lower of the two estimates
                    walk = tuple(a for a in order if a in split)
                    if walk in walks:
                        for j, entry in zip(walks[walk], entries, strict=True):
                            if entry[0].cycles < found[j][0].cycles:
                                found[j] = entry
                                bounds.add(entry[0])
                        continue
                    walks[walk] = list(range(len(found), len(found) + len(entries)))
                    for entry in entries:
                        found.append(entry)
                        bounds.add(entry[0])


def _least_traffic(found: list[tuple[CostEstimate, TilePlan]]) -> TilePlan:
    """Among the tilings within :data:`CYCLE_TOLERANCE` of the fastest estimate, the one
    moving the fewest DRAM bytes (then issuing the fewest instructions, taking the
    fewest steps)."""
    fastest = min(est.cycles for est, _ in found)
    near = min((est.dram_bytes, est.insns, est.steps, i) for i, (est, _) in enumerate(found)
               if est.cycles <= fastest * (1 + CYCLE_TOLERANCE))
    return found[near[3]][1]


def _timed(found: list[tuple[CostEstimate, TilePlan]], cfg: HwConfig, n_alu_ops: int
           ) -> list[tuple[float, float, int, TilePlan]]:
    """``(simulated cycles, DRAM bytes, index, plan)`` of the shortlist of ``found``:
    the :data:`REFINE_CANDIDATES` fastest estimates and as many of the least traffic
    within :data:`CYCLE_TOLERANCE` of the fastest (at most :data:`REFINE_MAX_STEPS`
    steps each), lowered and timed by :func:`.timing.simulate`."""
    fastest = min(est.cycles for est, _ in found)
    near = sorted((est.dram_bytes, est.insns, est.steps, i) for i, (est, _) in enumerate(found)
                  if est.cycles <= fastest * (1 + CYCLE_TOLERANCE))
    small = [i for i in range(len(found)) if found[i][0].steps <= REFINE_MAX_STEPS]
    by_cycles = sorted(small, key=lambda i: (found[i][0].cycles, i))
    near_small = [i for *_, i in near if found[i][0].steps <= REFINE_MAX_STEPS]
    shortlist = list(dict.fromkeys(near_small[:REFINE_CANDIDATES]
                                   + by_cycles[:REFINE_CANDIDATES]))
    scored = []
    for i in shortlist:
        plan = found[i][1]
        timing = simulate([insn for insn, _ in plan_instructions(plan, n_alu_ops)], cfg)
        if timing is not None:
            scored.append((timing.cycles, found[i][0].dram_bytes, i, plan))
    return scored


def schedule_for(plan: TilePlan) -> Schedule:
    """A :class:`Schedule` reproducing ``plan`` with primitives (only what differs from
    the defaults is recorded)."""
    s = Schedule(plan.workload, plan.cfg, bias=plan.bias, records=plan.records,
                 residual=plan.residual, acc_records=plan.acc_records)
    ext = plan.extents
    split = {a: plan.tile(a) for a in AXES if plan.tile(a) != ext[a]}
    if split:
        s.tile(**split)
    if plan.order != OUTER_AXES:
        s.reorder(*plan.order)
    if plan.vthreads != 1:
        s.virtual_thread(plan.vthreads)
    for buffer in ("inp", "wgt", "acc"):
        depth = {"wgt": plan.wgt_capacity, "inp": plan.inp_capacity,
                 "acc": plan.acc_capacity}[buffer]
        if plan.pitch(buffer) != depth // plan.vthreads:
            s.place(buffer, plan.pitch(buffer))
    return s


def default_schedule(workload: Workload, cfg: HwConfig,
                     vthreads: int | Sequence[int] = 2, *, bias: int = False,
                     n_alu_ops: int = 0, records: int = 0,
                     residual: bool = False, acc_records: int = 0) -> Schedule:
    """The searched schedule of ``workload`` (see :func:`search_plan`) with up to
    ``vthreads`` threads: when no tiling fits that many slots (e.g. a large kernel's
    taps overflow a weight slot), fewer threads are used. A sequence of thread counts
    (e.g. :data:`MODEL_VTHREADS`) is searched together and the fastest tiling of any
    of them wins (fewer than the smallest only when none fits).

    Raises
    ------
    ScheduleError
        Not even one thread's tiling fits the config.
    """
    counts = thread_counts(vthreads, cfg)
    plan = _searched_plan(dataclasses.replace(workload, name=""), cfg, counts,
                          bias, n_alu_ops, records, residual, acc_records)
    if plan.workload != workload:  # found for another layer of the same shape
        plan = dataclasses.replace(plan, workload=workload)
    return schedule_for(plan)


@functools.lru_cache(maxsize=SEARCH_CACHE_SIZE)
def _searched_plan(workload: Workload, cfg: HwConfig, counts: tuple[int, ...], bias: int,
                   n_alu_ops: int, records: int = 0, residual: bool = False,
                   acc_records: int = 0) -> TilePlan:
    """:func:`search_plan` over the thread counts ``counts`` or, when no tiling fits
    any of them, with one thread fewer than the smallest down to one; memoized: a
    network's layers of one shape (ResNet-18 has 11 shapes in 20 convolutions) are
    searched once. The search is a pure function of these values (``workload``
    without its name)."""
    attempts = [counts, *((v,) for v in range(min(counts) - 1, 0, -1))]
    for k, tried in enumerate(attempts):
        try:
            return search_plan(workload, cfg, tried, bias=bias, n_alu_ops=n_alu_ops,
                               records=records, residual=residual, acc_records=acc_records)
        except ScheduleError:
            if k == len(attempts) - 1:
                raise
    raise AssertionError("unreachable")


def search_space(workload: Workload, cfg: HwConfig) -> int:
    """Number of tilings the search enumerates (before pruning), per loop order."""
    ext = workload.extents(cfg)
    return math.prod(len(tile_candidates(ext[a])) for a in AXES)


__all__ = ["MODEL_VTHREADS", "ORDERS", "default_schedule", "schedule_for", "search_plan",
           "search_space", "thread_counts", "tile_candidates"]

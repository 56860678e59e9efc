"""Analytic cost model: cycles ≈ the busiest resource, with the pipeline's fill and drain.

For one output tile (all its reduction steps) the model counts the work of each
resource:

* compute engine: one cycle per GEMM micro-op execution (``b·oc·oh·ow`` output entries
  × ``ic·KH·KW`` reduction entries), one per accumulator entry for the bias move (or
  one per :data:`tensorfab.isa.formats.FAST_RESET_LANES` entries for the fast reset) and for each
  epilogue ALU operation, plus :data:`INSN_ISSUE_CYCLES` per compute instruction and
  :data:`~tensorfab.isa.formats.ALU_PIPELINE_STAGES` more per ALU instruction (its
  pipeline's drain);
* load engine: the bus beats of the input windows, weight and bias tiles it loads (a
  tile a region already holds is not loaded, see :func:`operand_loads`), one cycle per
  padding entry, and :data:`DMA_SETUP_CYCLES` per LOAD;
* store engine: the beats of the int8 output tile and :data:`STORE_SETUP_CYCLES` per
  STORE;
* memory bus: every byte loaded, stored or fetched as an instruction word, at
  ``mem_bus_width / 8`` bytes per cycle.

With ``V >= 2`` virtual threads (or one thread with room for two tiles of each operand)
loads run ahead of the computation: the estimate is the largest of the first tile's
loads (it finds nothing on chip) plus the remaining computation, all loads plus one
tile's computation, the stores, and the bus; with one thread the computation also
waits for the previous tile's store, and with one region per operand everything
serializes. The last tile's store (drain) and the micro-op load are added.
:mod:`.timing` simulates a built program instead; the tile search uses it to rank this
model's best candidates.

:func:`program_traffic` and :func:`roofline_cycles` measure a built program instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tensorfab.isa import (
    Buffer,
    Load,
    Program,
    Store,
    buffer_entry_bytes,
    insn_width,
    uop_format,
)
from tensorfab.isa.formats import ALU_PIPELINE_STAGES
from tensorfab.isa.insn import fast_reset_lanes
from tensorfab.sim.timing.model import DEFAULT_TIMING

from .tile_plan import OUTER_AXES, TilePlan

#: Cycles the compute engine spends per instruction beyond its micro-ops (micro-op
#: read, pipeline fill and drain, tokens).
INSN_ISSUE_CYCLES = DEFAULT_TIMING.compute_fixed
#: Cycles a LOAD spends besides its beats (decode, checks, the memory's read latency).
#: (the read latency and the two cycles of an isolated LOAD's decode and push)
DMA_SETUP_CYCLES = DEFAULT_TIMING.read_latency + 2.0
#: Cycles a STORE spends besides its beats.
STORE_SETUP_CYCLES = DEFAULT_TIMING.store_fixed

_KEY_AXES = {"inp": ("b", "oh", "ow"), "wgt": ("oc",), "bias": ("oc",)}


@dataclass(frozen=True)
class CostEstimate:
    """What :func:`estimate_cost` predicts.

    Attributes
    ----------
    cycles : float
        Estimated cycles.
    compute_cycles : float
        Compute engine cycles (GEMM + ALU micro-ops and instruction issue).
    dram_bytes : float
        Bytes over the memory bus (data, micro-ops, instruction words).
    insns : float
        Instructions.
    steps : int
        Tile steps (output tiles × reduction tiles).
    """

    cycles: float
    compute_cycles: float
    dram_bytes: float
    insns: float
    steps: int


def operand_loads(plan: TilePlan, operand: str) -> float:
    """Times the plan loads a tile of ``operand`` (``inp``, ``wgt`` or ``bias``) in all.

    Tiles are cached in the operand's regions (:mod:`.residency`), shared by the
    threads: consecutive output tiles sharing the tile (the loops inside the innermost
    axis the tile depends on) load it once when the regions hold every reduction step's
    tile, else once per group of ``vthreads`` tiles; when the key recurs after an outer
    loop, it is loaded again unless the regions hold every tile visited in between.
    The bias tile stays per thread.
    """
    ext = plan.extents
    counts = {a: -(-ext[a] // plan.tile(a)) for a in OUTER_AXES}  # len(tile_starts(...))
    n_kt = len(plan.ic_tiles()) if operand != "bias" else 1
    depends = _KEY_AXES[operand]
    threads = min(plan.vthreads, plan.n_output_tiles)
    order = plan.order
    inner = max(i for i, a in enumerate(order) if a in depends)
    run = math.prod(counts[a] for a in order[inner + 1:])
    distinct = math.prod(counts[a] for a in depends) * n_kt * plan.workload.groups
    outer = [a for a in order[:inner] if a not in depends]
    recur = math.prod(counts[a] for a in outer)
    if operand == "bias":
        per_run = min(run, threads)
        return distinct * per_run * recur
    regions = plan.regions(operand)
    per_run = 1 if n_kt == 1 or regions >= n_kt + threads - 1 else math.ceil(run / threads)
    period = math.prod(counts[a] for a in order[order.index(outer[-1]) + 1:]
                       if a in depends) * n_kt if outer else 0
    if outer and regions >= period + threads:
        recur = 1
    return distinct * per_run * recur


def estimate_cost(plan: TilePlan, n_alu_ops: int = 0) -> CostEstimate:
    """Estimated cycles of ``plan`` with ``n_alu_ops`` epilogue ALU instructions.

    Parameters
    ----------
    plan : TilePlan
        The tiling.
    n_alu_ops : int
        Epilogue ALU instructions per tile (see :meth:`.Epilogue.alu_ops`).
    """
    cfg, wl = plan.cfg, plan.workload
    kh, kw = wl.kernel
    bus = cfg.mem_bus_bytes
    insn_bytes = insn_width(cfg) // 8
    kts = plan.ic_tiles()
    n_tiles = plan.n_output_tiles
    threads = min(plan.vthreads, n_tiles)
    out_entries = plan.out_entries
    rows, cols = plan.window
    tn, toc = plan.tile("b"), plan.tile("oc")
    merged_inp = rows == wl.height and cols == wl.width and plan.row_step == 1 \
        and max(wl.padding) == 0
    f_inp = operand_loads(plan, "inp") / (n_tiles * len(kts))
    f_wgt = operand_loads(plan, "wgt") / (n_tiles * len(kts))
    f_bias = operand_loads(plan, "bias") / n_tiles if plan.bias else 0.0

    n_compute = len(kts) + 1 + n_alu_ops
    inp_bytes = sum(tn * tic * rows * cols for _, tic in kts) * cfg.inp_entry_bytes * f_inp
    wgt_bytes = sum(toc * tic * kh * kw for _, tic in kts) * cfg.wgt_entry_bytes * f_wgt
    bias_bytes = toc * cfg.acc_entry_bytes * f_bias * int(plan.bias)
    out_bytes = out_entries * cfg.out_entry_bytes
    n_inp_loads = sum(1 if merged_inp else tn * tic for _, tic in kts) * f_inp
    n_wgt_loads = len(kts) * f_wgt
    full = (plan.tile("oh"), plan.tile("ow")) == (wl.out_height, wl.out_width)
    n_stores = 1 if full else (tn if plan.tile("ow") == wl.out_width else tn * toc)
    n_loads = n_inp_loads + n_wgt_loads + f_bias * int(plan.bias)
    pad = _padding_entries(plan) * f_inp
    n_insns = n_compute + n_loads + n_stores
    tile_bytes = inp_bytes + wgt_bytes + bias_bytes + out_bytes + n_insns * insn_bytes
    compute = _tile_compute_cycles(plan, n_alu_ops)
    load = (inp_bytes + wgt_bytes + bias_bytes) / bus + n_loads * DMA_SETUP_CYCLES + pad
    store = out_bytes / bus + n_stores * STORE_SETUP_CYCLES
    # the first tile finds nothing on chip: its loads come before most computation
    first = (sum(tn * tic * rows * cols for _, tic in kts) * cfg.inp_entry_bytes
             + sum(toc * tic * kh * kw for _, tic in kts) * cfg.wgt_entry_bytes) / bus \
        + sum(1 if merged_inp else tn * tic + 1 for _, tic in kts) * DMA_SETUP_CYCLES \
        + _padding_entries(plan)
    uop_bytes = _uop_estimate(plan) * uop_format(cfg).bytes
    if threads > 1 or min(plan.regions("inp"), plan.regions("wgt")) > 1:
        # loads run ahead of the computation, step by step (a flow shop: the loads of a
        # prefix of the steps, then the computation of the rest)
        n_kt = len(kts)
        busy = compute + (store if threads == 1 else 0.0)  # per tile
        total = n_tiles * busy
        step = busy / n_kt
        cycles = max(first / n_kt + total, first + total - busy + step,
                     n_tiles * load + step, n_tiles * store, n_tiles * tile_bytes / bus)
    else:
        cycles = n_tiles * (compute + store + load)
    cycles += store + uop_bytes / bus
    return CostEstimate(cycles=cycles, compute_cycles=n_tiles * compute,
                        dram_bytes=n_tiles * tile_bytes + uop_bytes, insns=n_tiles * n_insns,
                        steps=n_tiles * len(kts))


def _tile_compute_cycles(plan: TilePlan, n_alu_ops: int) -> float:
    """Compute-engine cycles of one output tile: GEMM micro-ops, the accumulator
    initialization, the epilogue's ALU micro-ops and instruction issue."""
    kh, kw = plan.workload.kernel
    kts = plan.ic_tiles()
    out_entries = plan.out_entries
    gemm = sum(out_entries * tic * kh * kw for _, tic in kts)
    init = (out_entries if plan.bias or not plan.cfg.fast_reset
            else math.ceil(out_entries / fast_reset_lanes(plan.cfg)) + 1)
    alu = init + out_entries * n_alu_ops
    n_alu_insns = n_alu_ops + (1 if plan.bias else 0)  # the bias move is an ALU MOV
    issue = (len(kts) + 1 + n_alu_ops) * INSN_ISSUE_CYCLES + n_alu_insns * ALU_PIPELINE_STAGES
    return gemm + alu + issue


def cycles_lower_bound(plan: TilePlan, n_alu_ops: int = 0) -> float:
    """A bound :func:`estimate_cost`'s cycles never go below: the compute engine's
    cycles over all output tiles (every branch of the estimate adds to them). Cheap; the
    tile search skips tilings whose bound already loses to the candidates it has."""
    return plan.n_output_tiles * _tile_compute_cycles(plan, n_alu_ops)


def _padding_entries(plan: TilePlan) -> float:
    """Average padding entries of one step's input window (zero rows and columns the
    LOAD writes), over the tiles: ``window - data``."""
    wl = plan.workload
    rows, cols = plan.window
    pt, pb, pl, pr = wl.padding
    if max(wl.padding) == 0:
        return 0.0
    th, tw = plan.tile("oh"), plan.tile("ow")
    n_h = -(-wl.out_height // th)  # len(tile_starts(...))
    n_w = -(-wl.out_width // tw)
    pad_rows = (pt + pb) / n_h
    pad_cols = (pl + pr) / n_w
    per_plane = pad_rows * cols + pad_cols * rows
    return plan.tile("b") * plan.tile("ic") * per_plane


def _uop_estimate(plan: TilePlan) -> int:
    wl = plan.workload
    live = sorted((plan.tile(a) for a in OUTER_AXES), reverse=True)
    unrolled = math.prod(live[2:]) * plan.tile("ic") * wl.kernel[0] * wl.kernel[1]
    return (unrolled + 2) * min(plan.vthreads, plan.n_output_tiles)


def program_traffic(program: Program) -> dict[str, int]:
    """DRAM bytes a built program moves, by kind: ``inp``, ``wgt``, ``acc`` (biases),
    ``uop`` (loads, padding excluded), ``out`` (stores) and ``insn`` (instruction
    words fetched); ``total`` sums them."""
    cfg = program.config
    out = {"inp": 0, "wgt": 0, "acc": 0, "uop": 0, "out": 0}
    names = {Buffer.INP: "inp", Buffer.WGT: "wgt", Buffer.ACC: "acc", Buffer.UOP: "uop"}
    for insn in program.insns:
        if isinstance(insn, Load):
            out[names[insn.buffer]] += insn.y * insn.x * buffer_entry_bytes(cfg, insn.buffer)
        elif isinstance(insn, Store):
            out["out"] += insn.y * insn.x * cfg.out_entry_bytes
    out["insn"] = len(program.insns) * program.insn_bytes
    out["total"] = sum(out.values())
    return out


def roofline_cycles(cfg_macs_per_cycle: int, bus_bytes: int, macs: int, dram_bytes: int
                    ) -> float:
    """``max(macs / peak MACs per cycle, dram_bytes / bus bytes per cycle)``."""
    return max(macs / cfg_macs_per_cycle, dram_bytes / bus_bytes)


__all__ = ["DMA_SETUP_CYCLES", "INSN_ISSUE_CYCLES", "STORE_SETUP_CYCLES", "CostEstimate",
           "cycles_lower_bound", "estimate_cost", "operand_loads", "program_traffic",
           "roofline_cycles"]

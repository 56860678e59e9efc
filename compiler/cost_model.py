"""Analytic cost model: cycles ≈ Σ over tiles of max(compute, DRAM bytes / bus bytes).

For one output tile (all its reduction steps) the model counts

* compute cycles: one per GEMM micro-op execution (``b·oc·oh·ow`` output entries ×
  ``ic·KH·KW`` reduction entries), plus one per accumulator entry for the reset or bias
  move and for each epilogue ALU operation, plus :data:`INSN_ISSUE_CYCLES` per
  compute instruction;
* DRAM cycles: bytes moved over the memory bus (``mem_bus_width / 8`` bytes per cycle) —
  input windows, weight and bias tiles (only when the thread's slot does not already hold
  them), the int8 output tile, and every instruction word fetched — plus
  :data:`DMA_SETUP_CYCLES` per LOAD or STORE and :data:`DMA_ROW_CYCLES` per row moved.

With ``V >= 2`` virtual threads the load, compute and store engines overlap, so a tile
costs the larger of the two (plus one unhidden load to fill the pipeline); with one
thread they serialize and add up. Slot reuse depends on the loop order: with a single
reduction step, a run of ``R`` consecutive tiles sharing an input (or weight) tile
spreads round-robin over the threads and is loaded ``min(R, V)`` times.

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

from .tile_plan import OUTER_AXES, TilePlan, tile_starts

#: Cycles the compute engine spends per instruction beyond its micro-ops (issue,
#: pipeline fill and drain).
INSN_ISSUE_CYCLES = 16
#: Cycles a LOAD or STORE spends before its first beat (address phase, latency).
DMA_SETUP_CYCLES = 64
#: Cycles per row of a 2-D transfer (one burst each).
DMA_ROW_CYCLES = 4

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


def _reload_fraction(plan: TilePlan, operand: str, n_kt: int, threads: int) -> float:
    """Fraction of tiles whose step must (re)load ``operand``."""
    if n_kt > 1 and operand != "bias":
        return 1.0
    ext = plan.extents
    counts = {a: len(tile_starts(ext[a], plan.tile(a))) for a in OUTER_AXES}
    depends = _KEY_AXES[operand]
    run = 1  # consecutive tiles sharing the key: the loops inside the innermost key axis
    for axis in reversed(plan.order):
        if axis in depends:
            break
        run *= counts[axis]
    return min(run, threads) / run


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
    f_inp = _reload_fraction(plan, "inp", len(kts), threads)
    f_wgt = _reload_fraction(plan, "wgt", len(kts), threads)
    f_bias = _reload_fraction(plan, "bias", len(kts), threads)

    gemm = sum(out_entries * tic * kh * kw for _, tic in kts)
    alu = out_entries * (1 + n_alu_ops)
    n_compute = len(kts) + 1 + n_alu_ops
    inp_bytes = sum(tn * tic * rows * cols for _, tic in kts) * cfg.inp_entry_bytes * f_inp
    wgt_bytes = sum(toc * tic * kh * kw for _, tic in kts) * cfg.wgt_entry_bytes * f_wgt
    bias_bytes = toc * cfg.acc_entry_bytes * f_bias if plan.bias else 0.0
    out_bytes = out_entries * cfg.out_entry_bytes
    n_inp_loads = sum(1 if merged_inp else tn * tic for _, tic in kts) * f_inp
    n_wgt_loads = len(kts) * f_wgt
    n_stores = 1 if (plan.tile("oh"), plan.tile("ow")) == (wl.out_height, wl.out_width) \
        else tn * toc
    n_dma = n_inp_loads + n_wgt_loads + n_stores + (f_bias if plan.bias else 0)
    inp_rows = 1 if merged_inp else rows
    n_rows = (n_inp_loads * inp_rows + n_wgt_loads * toc
              + (tn if n_stores == 1 else n_stores * plan.tile("oh")))
    n_insns = n_compute + n_dma
    tile_bytes = inp_bytes + wgt_bytes + bias_bytes + out_bytes + n_insns * insn_bytes
    compute = gemm + alu + n_compute * INSN_ISSUE_CYCLES
    dram = tile_bytes / bus + n_dma * DMA_SETUP_CYCLES + n_rows * DMA_ROW_CYCLES
    per_tile = max(compute, dram) if threads > 1 else compute + dram
    uop_bytes = _uop_estimate(plan) * uop_format(cfg).bytes
    fill = (dram / max(1, len(kts))) if threads > 1 else 0.0
    cycles = n_tiles * per_tile + fill + uop_bytes / bus
    return CostEstimate(cycles=cycles, compute_cycles=n_tiles * compute,
                        dram_bytes=n_tiles * tile_bytes + uop_bytes, insns=n_tiles * n_insns,
                        steps=n_tiles * len(kts))


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


__all__ = ["DMA_ROW_CYCLES", "DMA_SETUP_CYCLES", "INSN_ISSUE_CYCLES", "CostEstimate",
           "estimate_cost", "program_traffic", "roofline_cycles"]

"""Tensorization: map a tile's loop nest onto GEMM/ALU micro-op kernels.

The innermost ``BATCH × BLOCK_IN × BLOCK_OUT`` product is one GEMM micro-op. Every
other loop of a tile is a :class:`Dim` with an extent and one index step per operand
(``acc``, ``inp``, ``wgt`` for GEMM; ``dst``, ``src`` for ALU). The two output loops
with the largest extents become the instruction's hardware loops (``iter_out``,
``iter_in``); all remaining loops, the reduction over input channels and kernel taps
included, are unrolled into the micro-op kernel. For a convolution tile of one batch
entry that makes the kernel exactly the tile's weight entries (``toc × tic × KH × KW``
micro-ops) and the loops the output rows and columns.

Kernels are identified by content, so :class:`KernelTable` stores each distinct one once.
"""

from __future__ import annotations

import math
from collections.abc import Set
from dataclasses import dataclass

import numpy as np

from tensorfab.isa import Uop
from tensorfab.isa.formats import MAX_ITER

from .tile_plan import TilePlan

#: Largest value of the 14-bit GEMM/ALU loop-extent fields.
#: Dims a GEMM may run as hardware loops (the output axes).
GEMM_LOOPS = frozenset({"b", "oc", "oh", "ow"})


@dataclass(frozen=True)
class Dim:
    """One loop of a tile: its extent and the index step it adds per operand."""

    name: str
    extent: int
    strides: tuple[int, ...]


@dataclass(frozen=True)
class Kernel:
    """A micro-op kernel and the two hardware loops around it.

    Attributes
    ----------
    uops : tuple[Uop, ...]
        The micro-ops (absolute buffer indices).
    outer, inner : tuple[int, tuple[int, ...]]
        ``(extent, steps)`` of the outer and inner loop; steps are zero for extent 1.
    """

    uops: tuple[Uop, ...]
    outer: tuple[int, tuple[int, ...]]
    inner: tuple[int, tuple[int, ...]]


def gemm_dims(plan: TilePlan, tic: int) -> list[Dim]:
    """Loops of one GEMM step with ``tic`` input-channel blocks, outermost first.

    On-chip layouts: input ``[b][ic][row][col]`` (the loaded window), weights
    ``[oc][ic][kh][kw]``, accumulators ``[b][oc][oh][ow]``.
    """
    wl = plan.workload
    rows, cols = plan.window
    kh, kw = wl.kernel
    sh, sw = wl.stride
    tn, toc, th, tw = (plan.tile(a) for a in ("b", "oc", "oh", "ow"))
    return [
        Dim("b", tn, (toc * th * tw, tic * rows * cols, 0)),
        Dim("oc", toc, (th * tw, 0, tic * kh * kw)),
        Dim("oh", th, (tw, (sh // plan.row_step) * cols, 0)),
        Dim("ow", tw, (1, sw, 0)),
        Dim("ic", tic, (0, rows * cols, kh * kw)),
        Dim("kh", kh if plan.row_step == 1 else 1, (0, cols, kw)),
        Dim("kw", kw, (0, 1, 1)),
    ]


def bias_dims(plan: TilePlan) -> list[Dim]:
    """Loops of the bias move: ``acc[b][oc][pix] = bias[oc]`` (``dst``, ``src`` steps)."""
    tn, toc = plan.tile("b"), plan.tile("oc")
    pix = plan.tile("oh") * plan.tile("ow")
    return [Dim("b", tn, (toc * pix, 0)), Dim("oc", toc, (pix, 1)), Dim("pix", pix, (1, 0))]


def tile_dims(plan: TilePlan, operands: int) -> list[Dim]:
    """The output tile as a contiguous block ``[rows][ow]`` (reset and element-wise ALU)."""
    tw = plan.tile("ow")
    rows = plan.out_entries // tw
    return [Dim("rows", rows, (tw,) * operands), Dim("ow", tw, (1,) * operands)]


def choose_loops(dims: list[Dim], loop_candidates: Set[str]) -> tuple[list[Dim], list[Dim]]:
    """Split ``dims`` into hardware loops (the two candidates with the largest extents,
    the inner one first among equals, in nest order) and unrolled dims (the rest, extents
    above 1, in nest order)."""
    live = [d for d in dims if d.extent > 1]
    cands = [i for i, d in enumerate(live) if d.name in loop_candidates
             and d.extent <= MAX_ITER]
    ranked = set(sorted(cands, key=lambda i: (live[i].extent, i), reverse=True)[:2])
    loops = [d for i, d in enumerate(live) if i in ranked]
    unrolled = [d for i, d in enumerate(live) if i not in ranked]
    return loops, unrolled


def make_kernel(dims: list[Dim], loop_candidates: Set[str], base: tuple[int, ...]) -> Kernel:
    """Choose the hardware loops (:func:`choose_loops`) and unroll the rest into micro-ops.

    Parameters
    ----------
    dims : list[Dim]
        Loops, outermost first.
    loop_candidates : set[str]
        Names of the dims that may become hardware loops (the others are reductions).
    base : tuple[int, ...]
        Index of the first element per operand (slot bases).
    """
    loops, unrolled = choose_loops(dims, loop_candidates)
    n_ops = len(base)
    offsets = []  # per operand, the index of every micro-op (the last dim fastest)
    for k, b in enumerate(base):
        off = np.array([b], dtype=np.int64)
        for d in unrolled:
            off = (off[:, None] + np.arange(d.extent, dtype=np.int64) * d.strides[k]).ravel()
        offsets.append(off.tolist())
    wgt = offsets[2] if n_ops == 3 else [0] * len(offsets[0])
    uops = [Uop(acc=a, src=s, wgt=w) for a, s, w in zip(offsets[0], offsets[1], wgt,
                                                       strict=True)]
    while len(loops) < 2:
        loops.insert(0, Dim("unit", 1, (0,) * n_ops))
    outer, inner = ((d.extent, d.strides) for d in loops)
    return Kernel(tuple(uops), outer, inner)


def kernel_size(dims: list[Dim], loop_candidates: Set[str]) -> int:
    """Micro-ops :func:`make_kernel` would emit for ``dims``."""
    return math.prod(d.extent for d in choose_loops(dims, loop_candidates)[1])


def gemm_kernel(plan: TilePlan, vthread: int, tic: int, inp_region: int | None = None,
                wgt_region: int | None = None) -> Kernel:
    """The GEMM kernel of one step of ``vthread`` with ``tic`` input-channel blocks,
    reading input and weight regions ``inp_region`` and ``wgt_region`` (default: the
    thread's number)."""
    ri = vthread if inp_region is None else inp_region
    rw = vthread if wgt_region is None else wgt_region
    base = (plan.slot_base("acc", vthread), plan.slot_base("inp", ri),
            plan.slot_base("wgt", rw))
    return make_kernel(gemm_dims(plan, tic), GEMM_LOOPS, base)


def reset_kernel(plan: TilePlan, vthread: int) -> Kernel:
    """GEMM-reset kernel zeroing ``vthread``'s output tile: one micro-op and one
    contiguous inner loop over the whole tile when it fits the loop field, the form the
    compute engine zeroes many entries per cycle (docs/architecture.md, "Fast reset")."""
    a = plan.slot_base("acc", vthread)
    if plan.out_entries <= MAX_ITER:
        return make_kernel([Dim("entries", plan.out_entries, (1, 0, 0))], {"entries"},
                           (a, 0, 0))
    return make_kernel(tile_dims(plan, 3), {"rows", "ow"}, (a, 0, 0))


def bias_kernel(plan: TilePlan, vthread: int) -> Kernel:
    """ALU kernel moving the bias tile into ``vthread``'s output tile."""
    return channel_kernel(plan, vthread, 0)


def channel_kernel(plan: TilePlan, vthread: int, index: int) -> Kernel:
    """ALU kernel over ``vthread``'s output tile whose source is per-channel tile
    ``index`` of the slot (the bias, or a vector of per-channel multipliers or shifts):
    ``acc[b][oc][pix] = OP(acc[b][oc][pix], tile[oc])``."""
    a = plan.slot_base("acc", vthread)
    return make_kernel(bias_dims(plan), {"b", "oc", "pix"},
                       (a, a + plan.out_entries + index * plan.tile("oc")))


def record_kernel(plan: TilePlan, vthread: int, record: int) -> Kernel:
    """REQUANT kernel over ``vthread``'s output tile: ``acc[b][oc][pix]`` with the record
    of channel block ``oc`` at weight entry ``record + oc`` (the third operand, which
    the ALU instruction steps with its source factors)."""
    tn, toc = plan.tile("b"), plan.tile("oc")
    pix = plan.tile("oh") * plan.tile("ow")
    dims = [Dim("b", tn, (toc * pix, 0, 0)), Dim("oc", toc, (pix, 0, 1)),
            Dim("pix", pix, (1, 0, 0))]
    return make_kernel(dims, {"b", "oc", "pix"}, (plan.slot_base("acc", vthread), 0, record))


def alu_kernel(plan: TilePlan, vthread: int) -> Kernel:
    """ALU kernel applying an element-wise immediate operation to the output tile."""
    a = plan.slot_base("acc", vthread)
    return make_kernel(tile_dims(plan, 2), {"rows", "ow"}, (a, a))


class KernelTable:
    """Micro-op kernels, each distinct one stored once; returns ``(begin, end)``."""

    def __init__(self) -> None:
        self.uops: list[Uop] = []
        self._index: dict[tuple[Uop, ...], tuple[int, int]] = {}

    def add(self, kernel: Kernel) -> tuple[int, int]:
        """Place ``kernel.uops`` (once) and return their range."""
        key = kernel.uops
        if key not in self._index:
            begin = len(self.uops)
            self.uops.extend(key)
            self._index[key] = (begin, len(self.uops))
        return self._index[key]

    def __len__(self) -> int:
        return len(self.uops)


__all__ = ["GEMM_LOOPS", "MAX_ITER", "Dim", "Kernel", "KernelTable", "alu_kernel", "bias_kernel",
           "channel_kernel",
           "choose_loops", "gemm_dims", "gemm_kernel", "kernel_size",
           "make_kernel", "reset_kernel", "tile_dims"]

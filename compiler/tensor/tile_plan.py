"""A resolved tiling: tile sizes, loop order, virtual threads, buffer slots and the
geometry every later stage (cost model, tensorization, lowering) derives from it.

Tiles along the output axes ``b``, ``oc``, ``oh``, ``ow`` all have the full tile size:
when a tile size does not divide its extent, the last tile is shifted back to end at the
extent and overlaps its neighbour (the overlapping outputs are computed twice and stored
twice with equal values). Keeping every tile the same shape keeps one micro-op kernel
and one on-chip layout for all of them. Tiles along the reduction axis ``ic`` cannot
overlap; the last one is shorter and gets its own micro-op kernel.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from itertools import product

from tensorfab.isa import HwConfig

from .workload import Workload

#: Output (non-reduction) tile axes, in their default loop order.
OUTER_AXES: tuple[str, ...] = ("b", "oc", "oh", "ow")
#: Every schedulable axis.
AXES: tuple[str, ...] = (*OUTER_AXES, "ic")


def tile_starts(extent: int, tile: int) -> list[int]:
    """Start of every tile of size ``tile`` over ``extent``, the last shifted back so it
    ends at ``extent`` (tiles overlap when ``tile`` does not divide ``extent``)."""
    starts = list(range(0, extent - tile + 1, tile))
    if starts[-1] + tile < extent:
        starts.append(extent - tile)
    return starts


def reduction_tiles(extent: int, tile: int) -> list[tuple[int, int]]:
    """``(start, size)`` of the reduction tiles; the last may be shorter."""
    return [(s, min(tile, extent - s)) for s in range(0, extent, tile)]


@dataclass(frozen=True)
class TilePlan:
    """Everything a schedule decides, resolved and validated by :class:`.Schedule`.

    Attributes
    ----------
    workload : Workload
        The operator.
    cfg : HwConfig
        The target.
    tiles : tuple[tuple[str, int], ...]
        Tile size per axis (``b``, ``oc``, ``ic`` in entries; ``oh``, ``ow`` in pixels).
    order : tuple[str, ...]
        The output tile loops, outermost first (a permutation of :data:`OUTER_AXES`);
        the reduction loop over ``ic`` tiles runs inside a group of ``vthreads`` tiles.
    vthreads : int
        Virtual threads.
    pitches : tuple[tuple[str, int], ...]
        Entries between consecutive regions of ``inp`` and ``wgt`` (operand tiles cached
        for every thread, see :mod:`.residency`) and between the accumulator slots of
        consecutive virtual threads (thread ``v`` owns ``[v·pitch, v·pitch +
        acc_entries)`` of ``acc``).
    bias : int
        Per-channel tiles kept in the accumulator slot after the output tile: the bias
        and the vectors of an exact requantization (:meth:`.Epilogue.channel_tiles`;
        ``True`` counts as one, the bias alone).
    records : int
        Weight-buffer entries reserved at the top of the buffer for REQUANT's
        per-channel records (:meth:`.Epilogue.record_entries`); the operand regions
        share the rest.
    residual : bool
        The epilogue adds a residual (:attr:`.Epilogue.residual`): each thread keeps
        one output tile of the int8 residual at the top of the input buffer
        (:meth:`residual_base`), below which the operand regions share the rest.
    acc_records : int
        Accumulator entries reserved at the top of the buffer for the records of
        requantizing STOREs (:meth:`.Epilogue.acc_record_entries`); the threads' slots
        share the rest.
    """

    workload: Workload
    cfg: HwConfig
    tiles: tuple[tuple[str, int], ...]
    order: tuple[str, ...]
    vthreads: int
    pitches: tuple[tuple[str, int], ...]
    bias: int = False
    records: int = 0
    residual: bool = False
    acc_records: int = 0

    # ------------------------------------------------------------------ tile sizes
    @cached_property
    def _tile_of(self) -> dict[str, int]:
        return dict(self.tiles)

    def tile(self, axis: str) -> int:
        """Tile size along ``axis``."""
        return self._tile_of[axis]

    def pitch(self, buffer: str) -> int:
        """Slot pitch of ``buffer`` (``inp``, ``wgt`` or ``acc``)."""
        return dict(self.pitches)[buffer]

    @cached_property
    def extents(self) -> dict[str, int]:
        """Extent of every axis (see :meth:`.Workload.extents`)."""
        return self.workload.extents(self.cfg)

    # -------------------------------------------------------------------- geometry
    @property
    def row_step(self) -> int:
        """Input rows between consecutive loaded rows: the vertical stride for a kernel
        one row high (the DMA skips unused rows), else 1."""
        kh, sh = self.workload.kernel[0], self.workload.stride[0]
        return sh if kh == 1 else 1

    @cached_property
    def window(self) -> tuple[int, int]:
        """``(rows, cols)`` of the input window of one output tile, as loaded on chip."""
        kh, kw = self.workload.kernel
        sh, sw = self.workload.stride
        th, tw = self.tile("oh"), self.tile("ow")
        rows = (th - 1) * (sh // self.row_step) + (kh if self.row_step == 1 else 1)
        return rows, (tw - 1) * sw + kw

    def inp_entries(self, tic: int | None = None) -> int:
        """Input entries of one step with ``tic`` input-channel blocks (default full)."""
        rows, cols = self.window
        return self.tile("b") * (tic or self.tile("ic")) * rows * cols

    def wgt_entries(self, tic: int | None = None) -> int:
        """Weight entries of one step."""
        kh, kw = self.workload.kernel
        return self.tile("oc") * (tic or self.tile("ic")) * kh * kw

    @property
    def out_entries(self) -> int:
        """Accumulator entries of one output tile."""
        return self.tile("b") * self.tile("oc") * self.tile("oh") * self.tile("ow")

    @property
    def acc_entries(self) -> int:
        """Accumulator entries of one slot: output tile plus per-channel tiles."""
        return self.out_entries + self.tile("oc") * int(self.bias)

    @property
    def wgt_capacity(self) -> int:
        """Weight entries the operand regions may use (below the records)."""
        return self.cfg.wgt_depth - self.records

    @property
    def records_base(self) -> int:
        """First weight entry of the REQUANT records."""
        return self.wgt_capacity

    @property
    def acc_capacity(self) -> int:
        """Accumulator entries the threads' slots may use (below the STORE records)."""
        return self.cfg.acc_depth - self.acc_records

    @property
    def acc_records_base(self) -> int:
        """First accumulator entry of the requantizing STOREs' records."""
        return self.acc_capacity

    @property
    def inp_capacity(self) -> int:
        """Input entries the operand regions may use (below the residual tiles)."""
        reserved = self.out_entries * self.vthreads if self.residual else 0
        return self.cfg.inp_depth - reserved

    def residual_base(self, vthread: int) -> int:
        """First input entry of ``vthread``'s residual tile (with :attr:`residual`)."""
        return self.inp_capacity + vthread * self.out_entries

    def regions(self, buffer: str) -> int:
        """Regions of ``inp`` or ``wgt`` that cache operand tiles (:mod:`.residency`):
        every ``pitch`` entries, as many as the buffer holds."""
        fp = self.inp_entries() if buffer == "inp" else self.wgt_entries()
        depth = self.inp_capacity if buffer == "inp" else self.wgt_capacity
        return (depth - fp) // self.pitch(buffer) + 1 if fp <= depth else 0

    def slot_base(self, buffer: str, vthread: int) -> int:
        """First entry of ``vthread``'s accumulator slot, or of region ``vthread`` of
        ``inp`` / ``wgt``."""
        return vthread * self.pitch(buffer)

    # -------------------------------------------------------------------- iteration
    def output_tiles(self) -> Iterator[dict[str, int]]:
        """Start of every output tile (``g``, ``b``, ``oc``, ``oh``, ``ow``), in loop
        order: groups outermost, then :attr:`order`."""
        ext = self.extents
        starts = {a: tile_starts(ext[a], self.tile(a)) for a in OUTER_AXES}
        for g in range(self.workload.groups):
            for combo in product(*(starts[a] for a in self.order)):
                out = dict(zip(self.order, combo, strict=True))
                out["g"] = g
                yield out

    def ic_tiles(self) -> list[tuple[int, int]]:
        """``(start, size)`` of the reduction tiles."""
        return reduction_tiles(self.extents["ic"], self.tile("ic"))

    @cached_property
    def n_output_tiles(self) -> int:
        """Number of output tiles."""
        ext = self.extents
        n = self.workload.groups
        for a in OUTER_AXES:
            n *= len(tile_starts(ext[a], self.tile(a)))
        return n

    def describe(self) -> str:
        """Compact text, e.g. ``b1 oc4 oh14 ow56 ic4 order=b,oc,oh,ow vt=2 regions=2,2``
        (the input and weight regions, see :meth:`regions`)."""
        t = " ".join(f"{a}{self.tile(a)}" for a in AXES)
        return (f"{t} order={','.join(self.order)} vt={self.vthreads} "
                f"regions={self.regions('inp')},{self.regions('wgt')}")


__all__ = ["AXES", "OUTER_AXES", "TilePlan", "reduction_tiles", "tile_starts"]

"""The accelerator's channel gather: each output channel of an int8 activation taken
from a channel of one of its inputs, and optionally requantized, as a program. Channel
concatenation (:mod:`.concat`) and channel permutation (:mod:`.channel_permute`) are
gathers.

In the blocked layout ``NCHW{batch}n{block}c`` (one batch block, the same height and
width everywhere) output channel block ``J`` is ``Σ P_JXK · x_XK`` over the blocks ``K``
of the inputs ``X`` it takes channels from, ``P_JXK`` the ``block × block`` 0/1 matrix
of those channels: one weight entry each. For every output block and tile of pixels the
accumulators are reset, each source block's tile is loaded and multiplied in by its
``P`` (exact: one input value times 1 per output lane), and the tile is stored,
optionally requantized with that block's records (a record per lane: each output
channel scaled as its input needs): by default the STORE requantizes, the records in
three accumulator entries per output block at the top of the accumulators; with
``requant_stage="alu"`` one ALU REQUANT before the STORE reads them from one weight
entry per block. Cost per output entry: one GEMM micro-op per source block plus the
reset (and the ALU's REQUANT). Needs ``block_in == block_out``, 8-bit inputs and 32-bit
accumulators.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tensorfab.isa import AluOp, HwConfig
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.formats import REQUANT_RECORD_WORDS, Buffer
from tensorfab.isa.insn import Alu, Gemm, Load, Store, Uop
from tensorfab.isa.program import Program, Segment
from tensorfab.isa.requant_record import requant_rows_acc_records

from .epilogue import check_requant_stage
from .errors import CompileError
from .vector_program import block_entries, uniform_tiles

__all__ = ["Source", "block_sources", "gather_program"]


@dataclass(frozen=True)
class Source:
    """Input ``input``'s channel block ``block`` feeds an output block through the 0/1
    matrix ``gather`` (``[o, i] = 1``: output lane ``o`` is input lane ``i``)."""

    input: int
    block: int
    gather: np.ndarray


def block_sources(channels: Sequence[tuple[int, int]], block: int) -> list[list[Source]]:
    """Per output block, the :class:`Source` blocks of output channels whose sources are
    ``channels[c] = (input, channel of that input)``; lanes past the channels (the
    blocked layout's padding) take nothing."""
    out: list[list[Source]] = []
    for j in range(-(-len(channels) // block)):
        by: dict[tuple[int, int], np.ndarray] = {}
        for o, (x, c) in enumerate(channels[j * block:(j + 1) * block]):
            k, i = divmod(int(c), block)
            by.setdefault((int(x), k), np.zeros((block, block), np.int8))[o, i] = 1
        out.append([Source(x, k, g) for (x, k), g in sorted(by.items())])
    return out


def gather_program(cfg: HwConfig, what: str, inputs: Sequence[tuple[str, tuple[int, ...]]],
                   channels: Sequence[tuple[int, int]],
                   records: np.ndarray | None = None,
                   data: Sequence[np.ndarray | None] | None = None, *,
                   tile: int = 256, requant_stage: str = "store") -> Program:
    """A program gathering output channels from ``inputs`` (see the module docstring).

    Parameters
    ----------
    cfg : HwConfig
        The accelerator configuration.
    what : str
        The operator's name, for errors.
    inputs : Sequence[tuple[str, tuple[int, ...]]]
        Segment name and blocked ``NCHW{batch}n{block}c`` shape (6-D, one batch block)
        of each input, in the order ``channels`` counts them.
    channels : Sequence[tuple[int, int]]
        Per output channel, ``(input, channel of that input)``.
    records : numpy.ndarray | None
        REQUANT records, one weight entry per output block (``(blocks, block_out,
        block_in)`` int8, :func:`~tensorfab.isa.requant_record.pack_requant_records`), or
        None to store the gathered values as they are.
    data : Sequence[numpy.ndarray | None] | None
        Initial contents of the input segments (int8; None: zeros).
    tile : int
        Pixels per tile.
    requant_stage : str
        With ``records``: ``"store"`` (requantizing STOREs, the records in the
        accumulators) or ``"alu"`` (an ALU REQUANT before each STORE, the records in the
        weight buffer).

    Returns
    -------
    Program
        The input segments, ``out`` (int8 output), ``gather`` and, with ``records``,
        ``record`` (constants: int8 weight entries, or int32 accumulator entries with
        ``requant_stage="store"``).

    Raises
    ------
    CompileError
        For a configuration or shapes the program cannot take, channels past their
        input's, or weight entries or micro-ops past the buffers.
    """
    shapes = [tuple(s) for _, s in inputs]
    for s in shapes:
        block_entries(cfg, s, what)
        if len(s) != 6 or s[0] != 1 or s[2:] != shapes[0][2:]:
            raise CompileError(f"{what} of shapes {shapes}: the program takes blocked "
                               "NCHW{n}n{c}c activations (6-D) with one batch block and "
                               "the same height, width and blocking")
    block, pixels = cfg.block_out, shapes[0][2] * shapes[0][3]
    for x, c in channels:
        if not (0 <= x < len(shapes) and 0 <= c < shapes[x][1] * block):
            raise CompileError(f"{what}: channel {c} of input {x} is past the inputs "
                               f"{shapes}")
    sources = block_sources(channels, block)
    blocks = len(sources)
    entries = [s for srcs in sources for s in srcs]
    check_requant_stage(requant_stage, what)
    in_store = records is not None and requant_stage == "store"
    n_rec = 0 if records is None or in_store else blocks  # weight entries of records
    acc_rec = REQUANT_RECORD_WORDS * blocks if in_store else 0  # accumulator entries
    if (len(entries) + n_rec > cfg.wgt_depth or 4 * len(entries) + 4 * n_rec + 2 > cfg.uop_depth
            or acc_rec + 2 > cfg.acc_depth):
        raise CompileError(f"{what}: {len(entries)} gather entries exceed config "
                           f"{cfg.name!r}'s weight, accumulator or micro-op buffer")
    t = max(1, min(tile, pixels, cfg.inp_depth // 2, (cfg.acc_depth - acc_rec) // 2))
    pb = ProgramBuilder(cfg)
    for (name, shape), d in zip(inputs, data or [None] * len(inputs), strict=True):
        pb.add_segment(Segment(name, "int8", shape, d))
    pb.add_segment(Segment("out", "int8", (1, blocks, *shapes[0][2:]), output=True))
    pb.add_segment(Segment("gather", "int8", (len(entries), block, cfg.block_in),
                           np.stack([s.gather for s in entries])))
    if in_store:
        pb.add_segment(Segment("record", "int32", (acc_rec, cfg.batch, block),
                               requant_rows_acc_records(cfg, records)))
    elif records is not None:
        pb.add_segment(Segment("record", "int8", (blocks, block, cfg.block_in), records))
    reset = [pb.add_uops([Uop(acc=a * t)]) for a in range(2)]
    gemm = {(a, s, w): pb.add_uops([Uop(acc=a * t, src=s * t, wgt=w)])
            for w in range(len(entries)) for a in range(2) for s in range(2)}
    scale = {(a, j): pb.add_uops([Uop(acc=a * t, wgt=len(entries) + j)])
             for j in range(n_rec) for a in range(2)}
    pb.load_uops()
    pb.emit(Load(buffer=Buffer.WGT, sram=0, dram=0, y=1, x=len(entries),
                 stride=len(entries)), segment="gather")
    rec_base = cfg.acc_depth - acc_rec
    if in_store:  # read by the STOREs, which follow the first GEMM that these loads precede
        pb.emit(Load(buffer=Buffer.ACC, sram=rec_base, dram=0, y=1, x=acc_rec,
                     stride=acc_rec), segment="record")
    elif records is not None:
        pb.emit(Load(buffer=Buffer.WGT, sram=len(entries), dram=0, y=1, x=blocks,
                     stride=blocks), segment="record")
    weight = {id(s): w for w, s in enumerate(entries)}
    tiles = [(j, part) for j in range(blocks) for part in uniform_tiles(pixels, t)]
    steps = [(m, s) for m, (j, _) in enumerate(tiles) for s in sources[j]]

    def load(i: int) -> None:
        m, s = steps[i]
        part = tiles[m][1]
        pb.emit(Load(buffer=Buffer.INP, sram=(i % 2) * t, dram=s.block * pixels + part.start,
                     y=1, x=part.count, stride=part.count, pop_next=i >= 2, push_next=True),
                segment=inputs[s.input][0])

    for i in range(min(2, len(steps))):
        load(i)
    for i, (m, s) in enumerate(steps):
        j, part = tiles[m]
        first = i == 0 or steps[i - 1][0] != m
        last = i + 1 == len(steps) or steps[i + 1][0] != m
        a = m % 2
        if first:
            pb.emit(Gemm(reset=True, uop_begin=reset[a][0], uop_end=reset[a][1], iter_out=1,
                         iter_in=part.count, acc_factor_in=1, pop_prev=True,
                         pop_next=m >= 2))
        span = gemm[(a, i % 2, weight[id(s)])]
        pb.emit(Gemm(uop_begin=span[0], uop_end=span[1], iter_out=1, iter_in=part.count,
                     acc_factor_in=1, inp_factor_in=1, pop_prev=not first,
                     push_prev=i + 2 < len(steps), push_next=last and n_rec == 0))
        if last and n_rec:
            span = scale[(a, j)]
            pb.emit(Alu(op=AluOp.REQUANT, uop_begin=span[0], uop_end=span[1], iter_out=1,
                        iter_in=part.count, dst_factor_in=1, push_next=True))
        if last:
            rec = {"requant": True, "rec": rec_base + REQUANT_RECORD_WORDS * j} \
                if in_store else {}
            pb.emit(Store(sram=a * t, dram=j * pixels + part.start, y=1, x=part.count,
                          stride=part.count, pop_prev=True, push_prev=m + 2 < len(tiles),
                          **rec), segment="out")
        if i + 2 < len(steps):
            load(i + 2)
    return pb.build()

"""A permutation of an int8 activation's channels on the accelerator (ShuffleNet's
channel shuffle): ``qnn.channel_permute(x)`` as a program.

In the blocked layout ``NCHW{batch}n{block}c`` (one batch block) output channel block
``J`` gathers its channels from a few input blocks ``K``: ``out_J = Σ_K P_JK · x_K``
with ``P_JK`` the ``block × block`` 0/1 matrix of the channels ``J`` takes from ``K``.
Each ``P_JK`` that is not zero is a weight entry; for every output block and tile of
pixels the accumulators are reset, each source block's tile is loaded and multiplied
in by its ``P_JK`` (exact: one input value times 1 per output), and the tile is stored.
A shuffle of ``C`` channels in ``g`` groups connects each output block with at most
``2g`` input blocks, so the program costs at most ``2g + 1`` GEMM micro-ops per output
entry (a dense ``C × C`` permutation convolution would cost ``C / block``), and loads
each input tile that often. Needs ``block_in == block_out``, 8-bit inputs and 32-bit
accumulators.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorfab.isa import HwConfig
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.formats import Buffer
from tensorfab.isa.insn import Gemm, Load, Store, Uop
from tensorfab.isa.program import Program, Segment

from .errors import CompileError
from .vector_program import block_entries, uniform_tiles

__all__ = ["block_sources", "channel_permute_program"]


def block_sources(perm: Sequence[int], block: int
                  ) -> list[list[tuple[int, np.ndarray]]]:
    """Per output block ``J``, the ``(K, P_JK)`` of the input blocks it reads, ``P_JK``
    the ``block × block`` int8 matrix with ``P[o, i] = 1`` when output channel
    ``J·block + o`` is input channel ``K·block + i``."""
    perm = np.asarray(perm, dtype=np.int64)
    blocks = -(-perm.size // block)
    out: list[list[tuple[int, np.ndarray]]] = []
    for j in range(blocks):
        by_source: dict[int, np.ndarray] = {}
        for o in range(block):
            c = j * block + o
            if c >= perm.size:
                break
            k, i = divmod(int(perm[c]), block)
            by_source.setdefault(k, np.zeros((block, block), np.int8))[o, i] = 1
        out.append(sorted(by_source.items(), key=lambda kv: kv[0]))
    return out


def channel_permute_program(cfg: HwConfig, shape: tuple[int, ...], perm: Sequence[int],
                            x: np.ndarray | None = None, *, tile: int = 256) -> Program:
    """A program computing ``qnn.channel_permute(x)`` (see the module docstring).

    Parameters
    ----------
    cfg : HwConfig
        The accelerator configuration.
    shape : tuple[int, ...]
        Blocked ``NCHW{batch}n{block}c`` shape (6-D) of ``x`` and the result, one batch
        block.
    perm : Sequence[int]
        Output channel ``j`` is input channel ``perm[j]`` (a permutation of the
        channels).
    x : numpy.ndarray | None
        Initial contents of segment ``x`` (int8; None: zeros).
    tile : int
        Pixels per tile.

    Returns
    -------
    Program
        Segments ``x`` (int8 input), ``out`` (int8 output) and ``gather`` (the ``P_JK``
        weight entries).

    Raises
    ------
    CompileError
        For a configuration or shape the program cannot take, a ``perm`` that is no
        permutation of the channels, or weight entries or micro-ops past the buffers.
    """
    shape = tuple(shape)
    block_entries(cfg, shape, "qnn.channel_permute")
    if len(shape) != 6 or shape[0] != 1:
        raise CompileError(f"qnn.channel_permute of shape {shape}: the program takes a "
                           "blocked NCHW{n}n{c}c activation (6-D) with one batch block")
    block, blocks, pixels = cfg.block_out, shape[1], shape[2] * shape[3]
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(perm))) or -(-len(perm) // block) != blocks:
        raise CompileError(f"qnn.channel_permute: {len(perm)} channels given as perm do "
                           f"not permute the {blocks} blocks of shape {shape}")
    sources = block_sources(perm, block)
    entries = [(j, k, p) for j, srcs in enumerate(sources) for k, p in srcs]
    if len(entries) > cfg.wgt_depth or 4 * len(entries) + 2 > cfg.uop_depth:
        raise CompileError(f"qnn.channel_permute of {len(perm)} channels: {len(entries)} "
                           f"gather entries exceed config {cfg.name!r}'s weight or micro-op "
                           "buffer")
    t = max(1, min(tile, pixels, cfg.inp_depth // 2, cfg.acc_depth // 2))
    pb = ProgramBuilder(cfg)
    pb.add_segment(Segment("x", "int8", shape, x))
    pb.add_segment(Segment("out", "int8", shape, output=True))
    pb.add_segment(Segment("gather", "int8", (len(entries), block, cfg.block_in),
                           np.stack([p for _, _, p in entries])))
    reset = [pb.add_uops([Uop(acc=a * t)]) for a in range(2)]
    gemm = {(a, s, w): pb.add_uops([Uop(acc=a * t, src=s * t, wgt=w)])
            for w in range(len(entries)) for a in range(2) for s in range(2)}
    pb.load_uops()
    pb.emit(Load(buffer=Buffer.WGT, sram=0, dram=0, y=1, x=len(entries),
                 stride=len(entries)), segment="gather")
    weight = {(j, k): w for w, (j, k, _) in enumerate(entries)}
    tiles = [(j, part) for j in range(blocks) for part in uniform_tiles(pixels, t)]
    steps = [(m, k) for m, (j, _) in enumerate(tiles) for k, _ in sources[j]]

    def load(i: int) -> None:
        m, k = steps[i]
        part = tiles[m][1]
        pb.emit(Load(buffer=Buffer.INP, sram=(i % 2) * t, dram=k * pixels + part.start, y=1,
                     x=part.count, stride=part.count, pop_next=i >= 2, push_next=True),
                segment="x")

    for i in range(min(2, len(steps))):
        load(i)
    for i, (m, k) in enumerate(steps):
        j, part = tiles[m]
        first = i == 0 or steps[i - 1][0] != m
        last = i + 1 == len(steps) or steps[i + 1][0] != m
        a = m % 2
        if first:
            pb.emit(Gemm(reset=True, uop_begin=reset[a][0], uop_end=reset[a][1], iter_out=1,
                         iter_in=part.count, acc_factor_in=1, pop_prev=True,
                         pop_next=m >= 2))
        span = gemm[(a, i % 2, weight[(j, k)])]
        pb.emit(Gemm(uop_begin=span[0], uop_end=span[1], iter_out=1, iter_in=part.count,
                     acc_factor_in=1, inp_factor_in=1, pop_prev=not first,
                     push_prev=i + 2 < len(steps), push_next=last))
        if last:
            pb.emit(Store(sram=a * t, dram=j * pixels + part.start, y=1, x=part.count,
                          stride=part.count, pop_prev=True, push_prev=m + 2 < len(tiles)),
                    segment="out")
        if i + 2 < len(steps):
            load(i + 2)
    return pb.build()

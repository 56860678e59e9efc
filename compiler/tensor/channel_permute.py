"""A permutation of an int8 activation's channels on the accelerator (ShuffleNet's
channel shuffle): ``qnn.channel_permute(x)`` as a gather program
(:mod:`.channel_gather`): output channel block ``J`` is ``Σ_K P_JK · x_K`` over the
input blocks ``K`` it takes channels from. A shuffle of ``C`` channels in ``g`` groups
connects each output block with at most ``2g`` input blocks, so the program costs at
most ``2g + 1`` GEMM micro-ops per output entry (a dense ``C × C`` permutation
convolution would cost ``C / block``), and loads each input tile that often.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorfab.isa import HwConfig
from tensorfab.isa.program import Program

from .channel_gather import gather_program
from .errors import CompileError

__all__ = ["channel_permute_program", "permuted_channels"]


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
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(perm))) or len(shape) != 6 \
            or -(-len(perm) // cfg.block_out) != shape[1]:
        raise CompileError(f"qnn.channel_permute: {len(perm)} channels given as perm do "
                           f"not permute the blocks of shape {shape}")
    return gather_program(cfg, "qnn.channel_permute", [("x", shape)],
                          permuted_channels(perm), data=[x], tile=tile)


def permuted_channels(perm: Sequence[int]) -> list[tuple[int, int]]:
    """The gather's ``(input, channel)`` of each output channel of a permutation."""
    return [(0, int(p)) for p in perm]

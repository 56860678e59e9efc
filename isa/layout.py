"""The blocked tensor layouts of VTA's ``graph_pack``, with pack and unpack functions.

Activations are ``NCHW{BATCH}n{BLOCK}c``: an ``(N, C, H, W)`` tensor becomes
``(N/BATCH, C/BLOCK, H, W, BATCH, BLOCK)``, so that entry ``(nb, cb, h, w)`` of the
packed array is one buffer entry (``BATCH × BLOCK`` values). Weights are
``OIHW{BLOCK_OUT}o{BLOCK_IN}i``: ``(O, I, KH, KW)`` becomes
``(O/BLOCK_OUT, I/BLOCK_IN, KH, KW, BLOCK_OUT, BLOCK_IN)``, one weight entry per
``(ob, ib, kh, kw)`` with one output channel per row. Counts that are not multiples of
their block are padded with zeros (padded input channels meet zero weights, so they add
nothing; padded output channels and batch rows are dropped by the unpack functions).

Biases are int32 ``(O/BLOCK_OUT, BATCH, BLOCK_OUT)``: one accumulator entry per output
block, the bias of each channel repeated over the ``BATCH`` rows, so that it can be
loaded into the accumulators and added (or moved) entry by entry.
"""

from __future__ import annotations

import numpy as np

from .config import HwConfig
from .errors import UsageError


def blocks(extent: int, block: int) -> int:
    """Number of ``block``-sized blocks covering ``extent`` (rounded up)."""
    return -(-extent // block)


def _pack_blocked(x: np.ndarray, first: int, second: int, what: str) -> np.ndarray:
    """Pack a 4-D ``(A, B, H, W)`` tensor into ``(A/first, B/second, H, W, first,
    second)``, zero-padding ``A`` and ``B``; ``what`` names the expected shape."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise UsageError(f"expected {what}, got shape {x.shape}")
    a, b, h, w = x.shape
    ab, bb = blocks(a, first), blocks(b, second)
    padded = np.zeros((ab * first, bb * second, h, w), dtype=x.dtype)
    padded[:a, :b] = x
    return np.ascontiguousarray(
        padded.reshape(ab, first, bb, second, h, w).transpose(0, 2, 4, 5, 1, 3))


def pack_nchw(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """Pack an ``(N, C, H, W)`` tensor into ``(N/batch, C/block, H, W, batch, block)``.

    ``N`` and ``C`` are zero-padded up to multiples of ``batch`` and ``block``.
    """
    return _pack_blocked(x, batch, block, "an (N, C, H, W) tensor")


def unpack_nchw(packed: np.ndarray, n: int, c: int) -> np.ndarray:
    """Inverse of :func:`pack_nchw`: ``(N/batch, C/block, H, W, batch, block)`` to
    ``(n, c, H, W)``, dropping the padding."""
    packed = np.asarray(packed)
    if packed.ndim != 6:
        raise UsageError(f"expected a packed 6-D tensor, got shape {packed.shape}")
    nb, cb, h, w, batch, block = packed.shape
    if n > nb * batch or c > cb * block:
        raise UsageError(f"({n}, {c}) does not fit a packed tensor of {nb * batch} rows and "
                         f"{cb * block} channels")
    full = packed.transpose(0, 4, 1, 5, 2, 3).reshape(nb * batch, cb * block, h, w)
    return np.ascontiguousarray(full[:n, :c])


def pack_oihw(w: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    """Pack ``(O, I, KH, KW)`` weights into ``(O/bo, I/bi, KH, KW, bo, bi)``, zero-padding
    ``O`` and ``I``."""
    return _pack_blocked(w, block_out, block_in, "(O, I, KH, KW) weights")


def pack_bias(bias: np.ndarray, batch: int, block_out: int) -> np.ndarray:
    """Pack an ``(O,)`` int32 bias into ``(O/bo, batch, bo)``, repeated over ``batch``."""
    bias = np.asarray(bias)
    if bias.ndim != 1:
        raise UsageError(f"expected an (O,) bias, got shape {bias.shape}")
    ob = blocks(bias.shape[0], block_out)
    padded = np.zeros(ob * block_out, dtype=np.int32)
    padded[: bias.shape[0]] = bias
    return np.ascontiguousarray(
        np.broadcast_to(padded.reshape(ob, 1, block_out), (ob, batch, block_out)))


# ------------------------------------------------------------- config-bound helpers
def pack_activation(cfg: HwConfig, x: np.ndarray) -> np.ndarray:
    """:func:`pack_nchw` with the config's input entry (``batch × block_in``)."""
    return pack_nchw(x, cfg.batch, cfg.block_in)


def unpack_output(cfg: HwConfig, y: np.ndarray, n: int, c: int) -> np.ndarray:
    """:func:`unpack_nchw` for an output tensor (``batch × block_out`` entries)."""
    y = np.asarray(y)
    if y.shape[-2:] != (cfg.batch, cfg.block_out):
        raise UsageError(f"output entries are {y.shape[-2:]}, the config's are "
                         f"{(cfg.batch, cfg.block_out)}")
    return unpack_nchw(y, n, c)


def pack_weight(cfg: HwConfig, w: np.ndarray) -> np.ndarray:
    """:func:`pack_oihw` with the config's weight entry (``block_out × block_in``)."""
    return pack_oihw(w, cfg.block_out, cfg.block_in)


def pack_bias_for(cfg: HwConfig, bias: np.ndarray) -> np.ndarray:
    """:func:`pack_bias` with the config's accumulator entry (``batch × block_out``)."""
    return pack_bias(bias, cfg.batch, cfg.block_out)


__all__ = [
    "blocks",
    "pack_activation",
    "pack_bias",
    "pack_bias_for",
    "pack_nchw",
    "pack_oihw",
    "pack_weight",
    "unpack_nchw",
    "unpack_output",
]

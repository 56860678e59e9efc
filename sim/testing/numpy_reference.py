"""Independent numpy references for the compiler's operators (int64 arithmetic, wrapped
to int32 where the accelerator wraps), used by the tests and the benchmarks alike.
Shares no code with tensorfab.compiler."""

from __future__ import annotations

import numpy as np


def wrap32(a: np.ndarray) -> np.ndarray:
    """Two's complement wrap of int64 values to int32 (kept as int64)."""
    a = np.asarray(a, dtype=np.int64)
    return (a + (1 << 31)) % (1 << 32) - (1 << 31)


def round_shift(a: np.ndarray, s: int) -> np.ndarray:
    """``a / 2**s`` rounded to nearest, ties away from zero."""
    a = np.asarray(a, dtype=np.int64)
    if s == 0:
        return a
    half = 1 << (s - 1)
    mag = (np.abs(a) + half) >> s
    return np.where(a < 0, -mag, mag)


def conv2d_acc(x: np.ndarray, w: np.ndarray, stride: tuple[int, int],
               padding: tuple[int, int, int, int]) -> np.ndarray:
    """Exact int64 convolution sums ``(N, O, OH, OW)`` of NCHW ``x`` and OIHW ``w``."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    sh, sw = stride
    pt, pb, pl, pr = padding
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), dtype=np.int64)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb - kh) // sh + 1
    ow = (wd + pl + pr - kw) // sw + 1
    out = np.zeros((n, o, oh, ow), dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.int64))
    return out


def epilogue(acc: np.ndarray, bias: np.ndarray | None = None,
             requant: tuple[int, int] | None = None, relu: bool = False,
             clip: tuple[int, int] | None = None) -> np.ndarray:
    """The accelerator's epilogue on int64 sums, ending with STORE's low byte (int8).

    ``bias`` broadcasts along axis 1 (channels) of a 4-D ``acc`` or the last axis of a
    2-/3-D one.
    """
    a = np.asarray(acc, dtype=np.int64)
    if bias is not None:
        b = np.asarray(bias, dtype=np.int64)
        if a.ndim == 4:
            b = b.reshape(1, -1, 1, 1)
        a = a + b
    a = wrap32(a)
    if requant is not None:
        mult, shift = requant
        a = round_shift(wrap32(a * mult), shift)
        if clip is None:
            clip = (-128, 127)
    if relu:
        a = np.maximum(a, 0)
    if clip is not None:
        a = np.clip(a, clip[0], clip[1])
    return (a & 0xFF).astype(np.uint8).view(np.int8)


def dense_acc(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w.T`` in int64 for ``x`` ``(M, K)`` and ``w`` ``(N, K)``."""
    return np.asarray(x, np.int64) @ np.asarray(w, np.int64).T


def batch_matmul_acc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a[g] @ b[g]`` in int64."""
    return np.einsum("gmk,gkn->gmn", np.asarray(a, np.int64), np.asarray(b, np.int64))


def resnet_conv_case(wl):
    """Seeded int8 inputs, weights and int32 bias for a ResNet conv workload.

    The seed comes from the layer's name via CRC-32, so the data is the same in every
    process (``hash()`` of a string is salted per process).
    """
    import zlib

    rng = np.random.default_rng(zlib.crc32(wl.name.encode()))
    x = np.clip(rng.normal(0, 40, (1, wl.in_channels, wl.height, wl.width)), -128, 127
                ).astype(np.int8)
    w = np.clip(rng.normal(0, 40, (wl.out_channels, wl.in_channels, *wl.kernel)), -128, 127
                ).astype(np.int8)
    bias = rng.integers(-(1 << 16), 1 << 16, wl.out_channels).astype(np.int32)
    return x, w, bias

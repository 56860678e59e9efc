"""Quantization parameters for post-training quantization: observers that collect
activation ranges from a calibration set, and the int8 quantizers.

The conventions are onnxruntime's (``QuantizeLinear``), so that a model quantized here
and one quantized by ``onnxruntime.quantization.quantize_static`` mean the same:

* activations: per-tensor, asymmetric int8 ``[-128, 127]``; the range always contains
  zero, ``scale = (rmax - rmin) / 255``, ``zero_point = round(-128 - rmin / scale)``;
* weights: per output channel, symmetric int8 ``[-127, 127]`` (zero point 0),
  ``scale = max|w| / 127``;
* bias: int32, ``round(b / (scale_x · scale_w))`` per channel, zero point 0;
* rounding is half to even, as ``QuantizeLinear`` rounds, then saturation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .types import GraphError

__all__ = [
    "INT8_MAX",
    "INT8_MIN",
    "MinMaxObserver",
    "PercentileObserver",
    "QParams",
    "activation_qparams",
    "dequantize",
    "quantize",
    "quantize_bias",
    "weight_qparams",
]

INT8_MIN, INT8_MAX = -128, 127
#: Symmetric weights leave -128 out, so that negation never overflows.
WEIGHT_QMAX = 127


@dataclass(frozen=True)
class QParams:
    """Scale(s) and zero point(s) of an affine int8 quantization.

    ``real = scale · (q - zero_point)``. Per-tensor parameters are 0-d arrays;
    per-channel ones are 1-d along ``axis`` of the tensor they quantize.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    def __post_init__(self) -> None:
        scale = np.asarray(self.scale, dtype=np.float64)
        zp = np.asarray(self.zero_point, dtype=np.int64)
        if scale.shape != zp.shape:
            raise GraphError(f"scale shape {scale.shape} != zero point shape {zp.shape}")
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise GraphError(f"quantization scales must be positive and finite: {scale}")
        if np.any(zp < INT8_MIN) or np.any(zp > INT8_MAX):
            raise GraphError(f"int8 zero points outside [-128, 127]: {zp}")
        if (scale.ndim == 1) != (self.axis is not None):
            raise GraphError("per-channel parameters need an axis, per-tensor ones none")
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "zero_point", zp)

    def _broadcast(self, a: np.ndarray, ndim: int) -> np.ndarray:
        if self.axis is None:
            return a
        shape = [1] * ndim
        shape[self.axis] = a.size
        return a.reshape(shape)


def activation_qparams(rmin: float, rmax: float) -> QParams:
    """Per-tensor asymmetric int8 parameters for the range ``[rmin, rmax]`` (widened
    to contain 0; an empty range, or one too narrow for a float32 scale, gets scale 1)."""
    rmin, rmax = min(float(rmin), 0.0), max(float(rmax), 0.0)
    if not (np.isfinite(rmin) and np.isfinite(rmax)):
        raise GraphError(f"activation range [{rmin}, {rmax}] is not finite")
    scale = (rmax - rmin) / (INT8_MAX - INT8_MIN)
    if scale < np.finfo(np.float32).tiny:  # scales are float32 in a model: treat as empty
        return QParams(np.float64(1.0), np.int64(0))
    zp = int(np.clip(np.rint(INT8_MIN - rmin / scale), INT8_MIN, INT8_MAX))
    return QParams(np.float64(scale), np.int64(zp))


def weight_qparams(w: np.ndarray, axis: int = 0) -> QParams:
    """Per-channel symmetric int8 parameters of weights ``w`` along ``axis`` (the output
    channels: 0 for OIHW convolutions and ``(N, K)`` dense weights)."""
    w = np.asarray(w, dtype=np.float64)
    if not np.all(np.isfinite(w)):
        raise GraphError("weights hold non-finite values")
    absmax = np.max(np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)), axis=1)
    scale = np.where(absmax > 0, absmax / WEIGHT_QMAX, 1.0)
    return QParams(scale, np.zeros_like(scale, dtype=np.int64), axis=axis % w.ndim)


def quantize(x: np.ndarray, qp: QParams, lo: int = INT8_MIN, hi: int = INT8_MAX
             ) -> np.ndarray:
    """``saturate(round_half_even(x / scale) + zero_point)`` as int8."""
    x = np.asarray(x, dtype=np.float64)
    s = qp._broadcast(qp.scale, x.ndim)
    z = qp._broadcast(qp.zero_point, x.ndim)
    return np.clip(np.rint(x / s) + z, lo, hi).astype(np.int8)


def dequantize(q: np.ndarray, qp: QParams) -> np.ndarray:
    """``scale · (q - zero_point)`` as float32."""
    q = np.asarray(q, dtype=np.int64)
    s = qp._broadcast(qp.scale, q.ndim)
    z = qp._broadcast(qp.zero_point, q.ndim)
    return (s * (q - z)).astype(np.float32)


def quantize_bias(b: np.ndarray, x_scale: float, w: QParams) -> np.ndarray:
    """int32 bias ``round(b / (x_scale · w_scale))`` per output channel; an overflow of
    int32 is an error naming the channel."""
    b = np.asarray(b, dtype=np.float64)
    q = np.rint(b / (float(x_scale) * w.scale))
    bad = np.flatnonzero(np.abs(q) > np.iinfo(np.int32).max)
    if bad.size:
        raise GraphError(f"bias of channel {bad[0]} ({b[bad[0]]}) overflows int32 at scale "
                         f"{float(x_scale) * w.scale[bad[0]]:.3g}")
    return q.astype(np.int32)


class MinMaxObserver:
    """Running minimum and maximum of every batch it sees."""

    def __init__(self) -> None:
        self.min = np.inf
        self.max = -np.inf

    def observe(self, x: np.ndarray) -> None:
        """Take one calibration batch."""
        x = np.asarray(x)
        if x.size:
            self.min = min(self.min, float(x.min()))
            self.max = max(self.max, float(x.max()))

    def qparams(self) -> QParams:
        """Parameters for the observed range (an error before any observation)."""
        if self.min > self.max:
            raise GraphError("no calibration data was observed")
        return activation_qparams(self.min, self.max)


class PercentileObserver:
    """Clips outliers: the range ends at the ``percentile`` of the observed values
    (below and above), estimated from a histogram of ``bins`` bins over the observed
    extent, as onnxruntime's percentile calibration does.

    The histogram is rebuilt when a batch widens the extent (values are re-binned from
    the old histogram's bin centres), so memory stays ``O(bins)``.
    """

    def __init__(self, percentile: float = 99.999, bins: int = 2048) -> None:
        if not 50.0 < percentile <= 100.0:
            raise GraphError(f"percentile {percentile} must lie in (50, 100]")
        self.percentile = percentile
        self.bins = bins
        self.hist = np.zeros(bins, dtype=np.float64)
        self.edges: np.ndarray | None = None

    def observe(self, x: np.ndarray) -> None:
        """Take one calibration batch."""
        x = np.asarray(x, dtype=np.float64).ravel()
        if not x.size:
            return
        lo, hi = float(x.min()), float(x.max())
        if self.edges is None:
            hi = hi if hi > lo else lo + 1e-12
            self.edges = np.linspace(lo, hi, self.bins + 1)
        elif lo < self.edges[0] or hi > self.edges[-1]:
            centres = (self.edges[:-1] + self.edges[1:]) / 2
            new = np.linspace(min(lo, self.edges[0]), max(hi, self.edges[-1]), self.bins + 1)
            self.hist, _ = np.histogram(centres, bins=new, weights=self.hist)
            self.edges = new
        h, _ = np.histogram(x, bins=self.edges)
        self.hist += h

    def range(self) -> tuple[float, float]:
        """``(low, high)`` percentiles of the observed values."""
        if self.edges is None:
            raise GraphError("no calibration data was observed")
        cdf = np.cumsum(self.hist) / self.hist.sum()
        tail = 1.0 - self.percentile / 100.0
        lo = self.edges[int(np.searchsorted(cdf, tail, side="left"))]
        hi = self.edges[int(np.searchsorted(cdf, 1.0 - tail, side="left")) + 1]
        return float(lo), float(hi)

    def qparams(self) -> QParams:
        """Parameters for the clipped range."""
        return activation_qparams(*self.range())

"""Quantized test cases shared by the requantization tests (tests/compiler): random
int8 operands with per-channel scales, and the float reference they are judged by."""

from __future__ import annotations

import numpy as np


def quantized_case(rng: np.random.Generator, x_shape: tuple[int, ...],
                   w_shape: tuple[int, ...], reduction: int):
    """Asymmetric int8 activations (zero point zx), symmetric per-channel int8 weights,
    int32 bias, per-channel real scales mapping about ±4σ of the sums to int8."""
    zx = int(rng.integers(-128, -60))
    x = rng.integers(-128, 128, x_shape).astype(np.int8)
    w_sigma = rng.uniform(5, 60, w_shape[0]).reshape(-1, *([1] * (len(w_shape) - 1)))
    w = np.clip(np.round(rng.normal(0, 1, w_shape) * w_sigma), -127, 127).astype(np.int8)
    sigma = np.sqrt(reduction) * 74 * w_sigma.reshape(-1)
    bias = np.round(rng.normal(0, 1, w_shape[0]) * sigma / 4).astype(np.int32)
    scales = 127 / (4 * sigma) * rng.uniform(0.5, 2, w_shape[0])
    zy = int(rng.integers(-20, 20))
    return x, w, bias, zx, zy, scales


def float_conv(acc, scales, zy, relu):
    """The float reference: round(acc · scale) in float64, + zy, clamp."""
    y = np.floor(acc * scales.reshape(1, -1, 1, 1) + 0.5) + zy
    return np.clip(y, zy if relu else -128, 127).astype(np.int64)

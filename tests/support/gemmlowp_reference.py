"""gemmlowp / TFLite fixed-point requantization, written for the tests in int64 numpy.

A transcription of gemmlowp's ``fixedpoint.h`` (``SaturatingRoundingDoublingHighMul``,
``RoundingDivideByPOT``) and TFLite's ``QuantizeMultiplier`` and
``MultiplyByQuantizedMultiplier`` (``quantization_util.cc``, ``common.h``), kept
literal (nudge, truncating division, mask and threshold) so that it is an
independent reference for the accelerator's ALU and for the compiler.
"""

from __future__ import annotations

import math

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def _i64(x: np.ndarray | int) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def saturating_rounding_doubling_high_mul(a: np.ndarray | int, b: np.ndarray | int
                                          ) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul(a, b)`` on int32 values (as int64)."""
    a, b = np.broadcast_arrays(_i64(a), _i64(b))
    overflow = (a == b) & (a == INT32_MIN)
    ab = a * b  # |ab| <= 2^62 fits int64
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    v = ab + nudge
    d = 1 << 31
    high = np.where(v >= 0, v // d, -((-v) // d))  # C++ division truncates toward zero
    return np.where(overflow, INT32_MAX, high).astype(np.int64)


def rounding_divide_by_pot(x: np.ndarray | int, exponent: np.ndarray | int) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT(x, exponent)``, ``0 <= exponent <= 31``."""
    x, e = np.broadcast_arrays(_i64(x), _i64(exponent))
    assert ((e >= 0) & (e <= 31)).all(), "exponent outside 0..31"
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return ((x >> e) + (remainder > threshold)).astype(np.int64)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite ``QuantizeMultiplier``: ``real ≈ m · 2^(shift - 31)``, ``m`` in [2^30, 2^31)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = math.floor(abs(q) * (1 << 31) + 0.5) * (1 if q > 0 else -1)  # std::round
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        shift, q_fixed = 0, 0
    if shift > 30:
        shift, q_fixed = 30, (1 << 31) - 1
    return q_fixed, shift


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: np.ndarray | int,
                                     shift: np.ndarray | int) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier(x, multiplier, shift)`` (32-bit form)."""
    x, m, s = np.broadcast_arrays(_i64(x), _i64(multiplier), _i64(shift))
    left = np.where(s > 0, s, 0)
    right = np.where(s > 0, 0, -s)
    xl = x * (np.int64(1) << left)
    xl = (xl + (1 << 31)) % (1 << 32) - (1 << 31)  # int32 arithmetic
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(xl, m), right)


def requantize(acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, zero_point: int,
               lo: int = -128, hi: int = 127) -> np.ndarray:
    """TFLite's int8 output stage: scale, add the output zero point, clamp."""
    out = multiply_by_quantized_multiplier(acc, multiplier, shift) + zero_point
    return np.clip(out, lo, hi).astype(np.int64)


def requant_single(v: np.ndarray, multiplier: int, shift: int, zero_point: int) -> np.ndarray:
    """REQUANT's one rounding (half away from zero) of the exact product
    ``v · multiplier / 2^(31 - shift)``, + zero point, clipped to int8 (int64 numpy)."""
    p = np.asarray(v, np.int64) * np.int64(multiplier)
    n = 31 - shift
    r = np.sign(p) * ((np.abs(p) + (np.int64(1) << (n - 1))) >> n)
    return np.clip(r + zero_point, -128, 127).astype(np.int8)

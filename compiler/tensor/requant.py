"""Exact int8 requantization as TFLite does it: per-channel Q31 multipliers and shifts.

The accumulator ``a`` of output channel ``c`` becomes
``clamp(MultiplyByQuantizedMultiplier(a, M[c], e[c]) + zero_point)``, where
``real_scale[c] ≈ M[c] · 2^(e[c] - 31)`` with ``M[c]`` in ``[2^30, 2^31)``
(:func:`quantize_multiplier_q31`, TFLite's ``QuantizeMultiplier``). On the accelerator
that is ``SHL`` by ``max(e, 0)`` (only when some exponent is positive), ``MULHI`` by
``M`` (gemmlowp's ``SaturatingRoundingDoublingHighMul``) and ``SHR_RND`` by
``max(-e, 0)`` (``RoundingDivideByPOT``), each with a per-channel vector operand held
in the accumulator buffer, then ``ADD`` of the zero point and a clip.

Zero points of the input are folded into the bias (:func:`fold_input_zero_point`):
``Σ (x - zx)·w = Σ x·w - zx·Σ w``, with symmetric weights (zero point 0).
"""

from __future__ import annotations

import math

import numpy as np

from .errors import CompileError, integers

#: Requantization arithmetics: ``"double"`` (TFLite: MULHI rounds, then the rounding
#: shift) and ``"single"`` (REQUANT: the exact product rounded once).
ROUNDINGS = ("double", "single")
#: Most negative exponent: RoundingDivideByPOT takes shifts 0..31.
MIN_EXPONENT = -31
#: Largest exponent TFLite keeps (``QuantizeMultiplier`` clamps above it).
MAX_EXPONENT = 30


def quantize_multiplier_q31(real_scale: float) -> tuple[int, int]:
    """TFLite ``QuantizeMultiplier``: ``real_scale ≈ multiplier · 2^(exponent - 31)``.

    Parameters
    ----------
    real_scale : float
        Non-negative finite scale (input scale × weight scale / output scale).

    Returns
    -------
    tuple[int, int]
        ``(multiplier, exponent)``: ``multiplier`` in ``[2^30, 2^31)`` (``std::frexp``,
        then ``round`` half away from zero of the mantissa in Q31; a mantissa that rounds
        up to 2^31 is halved and the exponent incremented), ``(0, 0)`` for 0 and for
        scales below ``2^-32`` (exponent below -31).

    Raises
    ------
    ValueError
        A negative, infinite or NaN scale.
    """
    if not math.isfinite(real_scale) or real_scale < 0:
        raise CompileError(f"real_scale = {real_scale!r} must be finite and non-negative")
    if real_scale == 0:
        return 0, 0
    mantissa, exponent = math.frexp(real_scale)
    q = math.floor(mantissa * (1 << 31) + 0.5)
    if q == 1 << 31:
        q //= 2
        exponent += 1
    if exponent < MIN_EXPONENT:
        return 0, 0
    if exponent > MAX_EXPONENT:
        return (1 << 31) - 1, MAX_EXPONENT
    return q, exponent


def quantize_multipliers(real_scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quantize_multiplier_q31` of every element: ``(multipliers, exponents)``
    as int64 arrays of the same shape."""
    scales = np.asarray(real_scales, dtype=np.float64)
    pairs = [quantize_multiplier_q31(float(s)) for s in scales.ravel()]
    mult = np.array([m for m, _ in pairs], dtype=np.int64).reshape(scales.shape)
    exp = np.array([e for _, e in pairs], dtype=np.int64).reshape(scales.shape)
    return mult, exp


def fold_input_zero_point(bias: np.ndarray | None, weights: np.ndarray,
                          input_zero_point: int) -> np.ndarray:
    """The int32 bias that makes ``Σ x·w + bias'`` equal ``Σ (x - zx)·w + bias``.

    Parameters
    ----------
    bias : numpy.ndarray | None
        ``(O,)`` int32 bias (``None``: zeros).
    weights : numpy.ndarray
        Symmetric int8 weights with the output channel first (OIHW or ``(N, K)``).
    input_zero_point : int
        The input's zero point ``zx`` (int8 range).

    Returns
    -------
    numpy.ndarray
        ``bias - zx · Σ w`` per output channel, int64 (within int32 for int8 data).

    Raises
    ------
    CompileError
        A zero point that is not an integer in -128..127, weights or a bias that are
        not integers of their type (floats are not truncated: :func:`~.errors.integers`),
        a bias of the wrong shape.
    """
    zx = int(integers("input zero point", input_zero_point, np.int8))
    w = integers("weights", weights, np.int8).astype(np.int64)
    o = w.shape[0]
    b = (np.zeros(o, dtype=np.int64) if bias is None
         else integers("bias", bias, np.int32).astype(np.int64))
    if b.shape != (o,):
        raise CompileError(f"bias has shape {b.shape}, expected ({o},)")
    return b - zx * w.reshape(o, -1).sum(axis=1)


__all__ = ["MAX_EXPONENT", "MIN_EXPONENT", "ROUNDINGS", "fold_input_zero_point",
           "quantize_multiplier_q31", "quantize_multipliers"]

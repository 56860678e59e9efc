"""Fixed-point requantization parameters for the 32-bit ALU with 16-bit immediates.

The accelerator requantizes an int32 accumulator ``a`` to int8 with three ALU
instructions, each taking its second operand as a 16-bit signed immediate::

    a = a * mult           # MUL: low 32 bits of the product
    a = a >> shift         # SHR_RND: rounds to nearest, ties away from zero
    a = clip(a, -128, 127) # CLIP 127

so ``a · mult / 2^shift ≈ a · real_scale``. The product must not wrap: with
``|a| <= acc_bound`` the multiplier is limited to ``(2^31 - 1) // acc_bound`` as well as
to the immediate's 32767. :func:`quantize_multiplier` picks the largest multiplier
(hence the largest shift, the most precision) within both limits.

Difference from TFLite
----------------------
TFLite (gemmlowp) represents the scale as a 32-bit Q31 multiplier ``M0 ∈ [2^30, 2^31)``
and an exponent, and computes ``RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(a,
M0), shift)``: a 64-bit product whose high half is rounded, then a second rounding shift.
That keeps 31 bits of scale precision for every accumulator value and rounds twice.
Here the product is a plain 32-bit MUL (no 64-bit intermediate), so precision is traded
against the accumulator range: ``mult`` has at most 15 bits, fewer when ``acc_bound`` is
large (a 3×3×64 convolution bounded by ``576 · 2^14`` leaves 8 bits), and there is a
single rounding (``SHR_RND`` is gemmlowp's ``RoundingDivideByPOT``). Results can differ
from TFLite's by one unit where the scale's truncation matters; a tighter, calibrated
``acc_bound`` recovers precision.
"""

from __future__ import annotations

import math

from tensorfab.isa.formats import MAX_IMM_MULTIPLIER as MAX_MULTIPLIER
from tensorfab.isa.formats import MAX_SHIFT

from .errors import CompileError

#: Largest int32.
INT32_MAX = (1 << 31) - 1
#: Largest magnitude of an int8 × int8 product.
MAX_PRODUCT = 128 * 128


def accumulator_bound(reduction: int, bias_bound: int = 0) -> int:
    """Largest ``|acc|`` of a sum of ``reduction`` int8 × int8 products plus a bias of
    magnitude at most ``bias_bound``."""
    if reduction < 0 or bias_bound < 0:
        raise CompileError("reduction and bias_bound must be non-negative")
    return reduction * MAX_PRODUCT + bias_bound


def quantize_multiplier(real_scale: float, acc_bound: int = INT32_MAX // MAX_MULTIPLIER
                        ) -> tuple[int, int]:
    """Fixed-point ``(mult, shift)`` with ``mult / 2^shift ≈ real_scale``.

    ``mult`` is the largest multiplier at most ``32767`` and at most
    ``(2^31 - 1) // acc_bound`` (so ``acc · mult`` never wraps for ``|acc| <= acc_bound``);
    ``shift`` is then as large as possible, at most 31.

    Parameters
    ----------
    real_scale : float
        Positive real scale (input scale × weight scale / output scale).
    acc_bound : int
        Largest accumulator magnitude the layer produces (see :func:`accumulator_bound`);
        the default admits the full 15-bit multiplier.

    Returns
    -------
    tuple[int, int]
        ``(mult, shift)``; ``(0, 0)`` for a scale so small every result rounds to zero.

    Raises
    ------
    ValueError
        A non-positive or non-finite scale, a non-positive bound, or a scale too large for
        the bound (``round(real_scale) · acc_bound`` would overflow int32).
    """
    if not math.isfinite(real_scale) or real_scale <= 0:
        raise CompileError(f"real_scale = {real_scale!r} must be positive and finite")
    if acc_bound < 1:
        raise CompileError(f"acc_bound = {acc_bound} must be positive")
    cap = min(MAX_MULTIPLIER, INT32_MAX // acc_bound)
    if cap < 1:
        raise CompileError(f"acc_bound = {acc_bound} leaves no multiplier: every product "
                         "would overflow int32")
    best: tuple[int, int] | None = None
    for shift in range(MAX_SHIFT + 1):
        mult = round(real_scale * (1 << shift))
        if mult > cap:
            break
        best = (mult, shift)
    if best is None:
        raise CompileError(f"real_scale = {real_scale} needs a multiplier of at least "
                         f"{round(real_scale)}, above the limit {cap} for acc_bound = "
                         f"{acc_bound}")
    if best[0] == 0:
        return 0, 0
    return best


__all__ = ["MAX_MULTIPLIER", "MAX_SHIFT", "accumulator_bound", "quantize_multiplier"]

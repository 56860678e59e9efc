"""Requantization in the accelerator's fixed-point arithmetic.

``qnn.requantize`` multiplies by a float32 scale and rounds half to even (onnxruntime's
arithmetic). The accelerator multiplies by a 15-bit integer and shifts with rounding
(:mod:`tensorfab.compiler.tensor.quantize`), one ``(multiplier, shift)`` per operator.
:func:`fixed_point_requantize` replaces each per-tensor, zero-point-0 int8
``qnn.requantize`` with ``qnn.requantize_fixed``, choosing ``(multiplier, shift)`` with
:func:`~tensorfab.compiler.tensor.quantize.quantize_multiplier` for the accumulator bound of
the convolution or matmul (and constant bias) that feeds it, so that the CPU computes
what the accelerator computes.
"""

from __future__ import annotations

import numpy as np

from tensorfab.compiler.tensor.quantize import accumulator_bound, quantize_multiplier
from tensorfab.compiler.tensor.requant import quantize_multipliers
from tensorfab.isa import HwConfig
from tensorfab.isa.formats import requant_supported

from .ir import Call, Constant, Expr, Function
from .partitioning import OUTPUT_SCALE_ACTIVATIONS
from .rewrite import rewrite


def single_rounding(attrs: dict) -> dict:
    """The output-scale attributes of a vector operator as one REQUANT: the same real
    scale ``multiplier · 2^(shift - 31) · 2^left_shift`` as a Q31 multiplier and shift
    of the exact product, ``left_shift`` 0, ``rounding="single"``."""
    from tensorfab.compiler.tensor.requant import quantize_multiplier_q31

    real = attrs["multiplier"] * 2.0 ** (attrs["shift"] - 31 + attrs["left_shift"])
    multiplier, shift = quantize_multiplier_q31(real)
    return {"left_shift": 0, "multiplier": multiplier, "shift": shift, "rounding": "single"}


def _acc_bound(acc: Expr) -> int | None:
    """Largest |accumulator| of an integer conv/matmul (plus a constant bias)."""
    bias = 0
    if isinstance(acc, Call) and acc.op == "add" and isinstance(acc.args[1], Constant):
        bias = int(np.abs(acc.args[1].data.astype(np.int64)).max(initial=0))
        acc = acc.args[0]
    if isinstance(acc, Call) and acc.op == "qnn.conv2d_integer":
        w = acc.args[1].checked_type.shape  # type: ignore[union-attr]
        reduction = w[1] * w[2] * w[3]
    elif isinstance(acc, Call) and acc.op == "qnn.matmul_integer":
        reduction = acc.args[1].checked_type.shape[-2]  # type: ignore[union-attr]
    else:
        return None
    if not isinstance(reduction, int):
        return None
    return accumulator_bound(reduction, bias)


def _conv_channels(acc: Expr) -> int:
    """Output channels of the integer convolution of ``acc`` (:func:`_is_conv_acc`)."""
    if isinstance(acc, Call) and acc.op == "add":
        acc = acc.args[0]
    return int(acc.args[1].checked_type.shape[0])  # type: ignore[union-attr]


def _is_conv_acc(acc: Expr) -> bool:
    if isinstance(acc, Call) and acc.op == "add" and isinstance(acc.args[1], Constant):
        acc = acc.args[0]
    return isinstance(acc, Call) and acc.op == "qnn.conv2d_integer"


def rounding_for(cfg: HwConfig | None) -> str:
    """The requantization rounding of :func:`fixed_point_requantize` for models compiled
    for ``cfg``: ``"single"`` (REQUANT's one rounding, faster and closer to float than
    TFLite's) where its STOREs requantize
    (:func:`~tensorfab.isa.formats.requant_supported`) or with no config, else
    ``"double"`` (TFLite's MULHI epilogue on the ALU)."""
    return "double" if cfg is not None and not requant_supported(cfg) else "single"


def fixed_point_requantize(fn: Function, per_channel: bool = False,
                           rounding: str = "double", every_q31: bool = False) -> Function:
    """``fn`` with per-tensor int8 ``qnn.requantize`` calls after integer convolutions
    or matmuls replaced by the accelerator's ``qnn.requantize_fixed``. With
    ``per_channel``, per-channel ones after integer convolutions become
    ``qnn.requantize_q31`` with ``rounding``: ``"double"`` is TFLite's exact per-channel
    arithmetic (the accelerator's MULHI epilogue), ``"single"`` one rounding of the
    exact product (the REQUANT instruction: one ALU pass, closer to float; for configs
    with :func:`~tensorfab.isa.formats.requant_supported`); otherwise they stay. With
    ``rounding="single"`` the int8 vector operators (:data:`~.partitioning.
    OUTPUT_SCALE_ACTIVATIONS`, each with an output scale of
    :mod:`tensorfab.compiler.tensor.vector_program`'s attributes) scale
    their output with one REQUANT too (:func:`single_rounding`). With ``every_q31``
    (and ``per_channel``), per-tensor ones after integer convolutions become
    ``qnn.requantize_q31`` too, one scale for every channel: a config without the vector
    ALU has no other epilogue than its STOREs' REQUANT."""
    def rule(e: Expr, _old: Expr) -> Expr:
        if isinstance(e, Call) and e.op in OUTPUT_SCALE_ACTIVATIONS and rounding == "single" \
                and e.attrs.get("rounding", "double") == "double":
            return Call(e.op, e.args, {**e.attrs, **single_rounding(e.attrs)},
                        e.virtual_device, e.name)
        if not (isinstance(e, Call) and e.op == "qnn.requantize"
                and e.attrs["out_dtype"] == "int8"):
            return e
        scale, zp = e.args[1], e.args[2]
        if per_channel and _is_conv_acc(e.args[0]) and isinstance(scale, Constant) \
                and isinstance(zp, Constant) and np.unique(zp.data).size == 1 \
                and (every_q31 or scale.data.size > 1 or np.any(zp.data)):
            scales = scale.data.astype(np.float64).reshape(-1)
            if scales.size == 1:  # one scale with a zero point (requantize_fixed has
                # none) or for every_q31: every channel's
                scales = np.full(_conv_channels(e.args[0]), scales[0])
            mult, exp = quantize_multipliers(scales)
            return Call("qnn.requantize_q31", [e.args[0]],
                        {"multiplier": tuple(int(m) for m in mult),
                         "shift": tuple(int(x) for x in exp),
                         "zero_point": int(zp.data.reshape(-1)[0]), "rounding": rounding},
                        e.virtual_device)
        if not (isinstance(scale, Constant) and scale.data.size == 1
                and isinstance(zp, Constant) and not np.any(zp.data)):
            return e
        bound = _acc_bound(e.args[0])
        if bound is None:
            return e
        mult, shift = quantize_multiplier(float(scale.data.reshape(())), bound)
        return Call("qnn.requantize_fixed", [e.args[0]], {"multiplier": mult, "shift": shift},
                    e.virtual_device)
    return rewrite(fn, rule)

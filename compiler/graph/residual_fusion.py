"""Residual adds fused into the convolution before them: one rounding, one program.

An int8 residual add ``qnn.add_q31(q, r)`` (and the ``relu`` that is its only reader)
whose operand ``q = qnn.requantize_q31(conv + bias)`` (one-pass rounding, zero point
0, read only by the add) comes straight from a convolution becomes

``qnn.requantize_residual_q31(conv + bias, r)``: ``t = acc + r · K[c]`` and
``y = clamp(round(t · s[c]) + z_y, lo, hi)``

with ``s[c] = s_acc[c] / s_y`` (the convolution's accumulator scale over the add's
output scale, as a Q31 multiplier and exponent) and ``K[c] = round(s_r / s_acc[c])``
(the residual's scale in units of the accumulator's). The relu becomes ``lo = 0``
(it is ``max(y, 0)`` on the add's int8 output). The intermediate int8 ``q`` and the
add's three Q31 scalings disappear: the sum is rounded once, by REQUANT, so it is at
least as close to the float model as TFLite's ADD of the requantized convolution
(which rounds ``q``, then the sum). On the accelerator the residual enters the
convolution's accumulators before its GEMMs (:attr:`tensorfab.compiler.tensor.Epilogue.residual`):
one identity GEMM and one ALU multiply per output entry instead of a separate program
of 10-13 ALU passes; the CPU kernel of the op follows that arithmetic bit for bit.

Of the add's two operands the one from the convolution with more multiply-accumulates
is fused (ResNet's 3×3 rather than its 1×1 downsample). An add is left alone when
``K`` would be below :data:`MIN_RESIDUAL_FACTOR` (too coarse a factor) or the sum
could leave int32 (the convolution's largest accumulator plus ``127 · K``).
"""

from __future__ import annotations

import numpy as np

from tensorfab.compiler.tensor.requant import quantize_multipliers

from .infer import infer_types
from .ir import Call, Constant, Expr, Function, post_order
from .rewrite import call_readers, rebuild

__all__ = ["MIN_RESIDUAL_FACTOR", "fuse_residual_adds"]

#: Smallest residual factor ``K`` fused: the factor's rounding moves the residual's
#: scale by at most ``1 / (2K)`` (1/512 here).
MIN_RESIDUAL_FACTOR = 256


def _real(multiplier: int, shift: int) -> float:
    return float(multiplier) * 2.0 ** (int(shift) - 31)


def _conv_operand(q: Expr, readers: dict[int, list[Call]]) -> tuple[Call, Call] | None:
    """``(requantize, conv)`` if ``q`` is a one-pass requantized convolution read once."""
    if not (isinstance(q, Call) and q.op == "qnn.requantize_q31"
            and q.attrs.get("rounding") == "single" and q.attrs["zero_point"] == 0
            and len(readers.get(id(q), [])) == 1):
        return None
    acc = q.args[0]
    conv = acc.args[0] if isinstance(acc, Call) and acc.op == "add" and \
        isinstance(acc.args[1], Constant) else acc
    if not (isinstance(conv, Call) and conv.op == "qnn.conv2d_integer"
            and isinstance(conv.args[1], Constant)
            and len(readers.get(id(conv), [])) == 1
            and len(readers.get(id(acc), [])) == 1):
        return None
    return q, conv


def _macs(conv: Call) -> int:
    w = conv.args[1].checked_type.shape  # type: ignore[union-attr]
    out = conv.checked_type.shape  # type: ignore[union-attr]
    return int(np.prod(out) * np.prod(w[1:]))


def _fused(add: Call, relu: bool, readers: dict[int, list[Call]]) -> Call | None:
    """The ``qnn.requantize_residual_q31`` replacing ``add`` (None: not fusable)."""
    a = add.attrs
    if a.get("a_zero_point", 0) or a.get("b_zero_point", 0):
        return None  # the fused form adds the residual without a zero point
    gain = _real(a["out_multiplier"], a["out_shift"]) * 2.0 ** a["left_shift"]
    options = []
    for k, other in ((0, 1), (1, 0)):
        found = _conv_operand(add.args[k], readers)
        if found is not None and tuple(add.args[k].checked_type.shape) == \
                tuple(add.args[other].checked_type.shape):  # type: ignore[union-attr]
            options.append((_macs(found[1]), k, other, found))
    if not options:
        return None
    _, k, other, (q, conv) = max(options, key=lambda o: o[0])
    names = "ab"
    ratio_q = _real(a[f"{names[k]}_multiplier"], a[f"{names[k]}_shift"]) * gain  # s_q / s_y
    ratio_r = _real(a[f"{names[other]}_multiplier"], a[f"{names[other]}_shift"]) * gain
    conv_real = np.array([_real(m, e) for m, e in zip(q.attrs["multiplier"],
                                                      q.attrs["shift"], strict=True)])
    scale = conv_real * ratio_q  # s_acc[c] / s_y
    if np.any(scale <= 0):
        return None
    factor = np.rint(ratio_r / scale)
    acc = q.args[0]
    w = conv.args[1].data.astype(np.int64)  # type: ignore[union-attr]
    bound = np.abs(w).reshape(w.shape[0], -1).sum(axis=1) * 128
    if acc is not conv:
        bound = bound + np.abs(acc.args[1].data.astype(np.int64)).reshape(-1)  # type: ignore[union-attr]
    if factor.min() < MIN_RESIDUAL_FACTOR or np.any(bound + 128 * factor >= 1 << 31):
        return None
    mult, exp = quantize_multipliers(scale)
    return Call("qnn.requantize_residual_q31", [acc, add.args[other]],
                {"multiplier": tuple(int(m) for m in mult),
                 "shift": tuple(int(e) for e in exp),
                 "residual_factor": tuple(int(f) for f in factor),
                 "zero_point": int(a["zero_point"]), "lo": 0 if relu else -128, "hi": 127},
                add.virtual_device)


def fuse_residual_adds(fn: Function) -> Function:
    """``fn`` with each fusable ``qnn.add_q31`` [+ ``relu``] replaced by a
    ``qnn.requantize_residual_q31`` (see the module docstring)."""
    infer_types(fn)
    readers = call_readers(fn)
    plan: dict[int, Call] = {}  # id(old end node) -> fused call (old arguments)
    for e in post_order(fn):
        if not (isinstance(e, Call) and e.op == "qnn.add_q31"):
            continue
        r = readers.get(id(e), [])
        relu = len(r) == 1 and r[0].op == "relu"
        fused = _fused(e, relu, readers)
        if fused is not None:
            plan[id(r[0] if relu else e)] = fused
    if not plan:
        return fn
    new: dict[int, Expr] = {}
    for node in post_order(fn):
        if id(node) in plan:
            new[id(node)] = rebuild(plan[id(node)], new)
        else:
            new[id(node)] = rebuild(node, new)
    out = new[id(fn)]
    assert isinstance(out, Function)
    infer_types(out)
    return out

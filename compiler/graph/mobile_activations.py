"""The activations of mobile networks in the forms the int8 flow takes.

MobileNetV3-style models exported to ONNX spell hard-swish out as
``Add(x, 3) → Clip(0, 6) → Mul(x, ·) → Div(·, 6)`` and follow a squeeze-excite
block's last convolution by ``HardSigmoid``. Two float-graph rewrites, exact up to float
rounding, run after batch norm folding:

* :func:`recognize_hard_swish`: ``divide(multiply(x, clip(add(x, 3), 0, 6)), 6)`` (either
  operand order of the multiply, or ``multiply`` by ``1/6``) becomes ``hard_swish(x)``,
  which quantizes to the integer ``qnn.hard_swish_q31`` (the accelerator runs it);
* :func:`fold_hard_sigmoid`: ``hard_sigmoid(conv2d(x, W) + b)`` (the convolution and
  its bias read by nothing else) becomes ``clip(conv2d(x, alpha·W) + (alpha·b + beta),
  0, 1)``, a convolution with a ReLU6-like clip that the accelerator's epilogue applies.

Both also read these patterns in a QDQ model (onnxruntime's ``quantize_static``), where a
``quantize``/``dequantize`` pair follows every operator: the pairs inside the pattern are
dropped (hard-swish and the folded gate then round once, at the pattern's output
quantization), a pair whose range is exactly ``[0, 6]`` stands for the ``Clip`` that
onnxruntime removes in front of it, and the weights and bias of a quantized gate
convolution are scaled through their ``dequantize`` (the weight's scale times ``alpha``:
exact).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .ir import Call, Constant, Expr, Function, post_order
from .rewrite import rewrite

__all__ = ["fold_hard_sigmoid", "recognize_hard_swish"]


def _real(e: Expr) -> np.ndarray | None:
    """The real values of a float constant or of a ``dequantize`` of constants
    (``(q - z) · s``, per channel along its axis), else None."""
    if isinstance(e, Constant):
        return e.data.astype(np.float64) if e.data.dtype.kind == "f" else None
    if not (isinstance(e, Call) and e.op == "qnn.dequantize"
            and all(isinstance(a, Constant) for a in e.args)):
        return None
    q, s, z = (a.data for a in e.args)  # type: ignore[union-attr]
    shape = [1] * q.ndim
    if s.size > 1 and q.ndim:
        shape[e.attrs.get("axis", 1) % q.ndim] = -1
    return ((q.astype(np.float64) - z.astype(np.float64).reshape(shape if z.size > 1 else ()))
            * s.astype(np.float64).reshape(shape if s.size > 1 else ()))


def _scalar(e: Expr) -> float | None:
    """The value of a constant holding one number (any shape of size 1), also behind a
    ``dequantize``."""
    v = _real(e)
    return float(v.reshape(())) if v is not None and v.size == 1 else None


def _quantized_pair(e: Expr) -> tuple[Expr, float, float] | None:
    """``(x, lo, hi)`` when ``e`` is ``dequantize(quantize(x, s, z), s, z)`` with a scalar
    ``s`` and ``z`` (a QDQ model's rounding point): ``[lo, hi]`` is the real range it
    represents."""
    if not (isinstance(e, Call) and e.op == "qnn.dequantize"):
        return None
    q = e.args[0]
    if not (isinstance(q, Call) and q.op == "qnn.quantize"):
        return None
    consts = [a.data if isinstance(a, Constant) else None
              for a in (*q.args[1:], *e.args[1:])]
    if any(c is None or c.size != 1 for c in consts):
        return None
    qs, qz, ds, dz = (c.reshape(()) for c in consts)  # type: ignore[union-attr]
    if qs != ds or qz != dz:
        return None
    info = np.iinfo(np.dtype(q.attrs["out_dtype"]))
    s, z = float(qs), int(qz)
    return q.args[0], (info.min - z) * s, (info.max - z) * s


def _unquantized(e: Expr) -> Expr:
    """``e`` without the QDQ pairs around it."""
    while (pair := _quantized_pair(e)) is not None:
        e = pair[0]
    return e


def _relu6_of_shifted(e: Expr) -> Expr | None:
    """``x`` when ``e`` is ``clip(add(x, 3), 0, 6)``, with or without QDQ pairs between
    them; a pair representing exactly ``[0, 6]`` is the clip itself."""
    clipped = False
    while True:
        if (isinstance(e, Call) and e.op == "clip" and e.attrs["a_min"] is not None
                and e.attrs["a_max"] is not None and float(e.attrs["a_min"]) == 0.0
                and float(e.attrs["a_max"]) == 6.0):
            clipped, e = True, e.args[0]
        elif (pair := _quantized_pair(e)) is not None:
            clipped |= pair[1] == 0.0 and bool(np.isclose(pair[2], 6.0, rtol=1e-5))
            e = pair[0]
        else:
            break
    if not (clipped and isinstance(e, Call) and e.op == "add"):
        return None
    for x, c in (e.args, e.args[::-1]):
        three = _scalar(c)
        if three is not None and np.isclose(three, 3.0, rtol=1e-5) \
                and not isinstance(x, Constant):
            return x
    return None


def _swish_product(e: Expr) -> Expr | None:
    """``x`` when ``e`` is ``multiply(x, clip(add(x, 3), 0, 6))`` (either order)."""
    e = _unquantized(e)
    if not (isinstance(e, Call) and e.op == "multiply"):
        return None
    for x, r in (e.args, e.args[::-1]):
        if _relu6_of_shifted(r) is x:
            return x
    return None


def recognize_hard_swish(fn: Function) -> Function:
    """``fn`` with hard-swish spelled out in elementwise operators replaced by
    ``hard_swish(x)`` (see the module docstring)."""
    def rule(e: Expr, _old: Expr) -> Expr:
        if not (isinstance(e, Call) and e.op in ("divide", "multiply") and len(e.args) == 2):
            return e
        inner, c = e.args
        want = 6.0 if e.op == "divide" else 1.0 / 6.0
        k = _scalar(c)
        if k is None or not np.isclose(k, want, rtol=1e-5):
            return e
        x = _swish_product(inner)
        if x is None:
            return e
        return Call("hard_swish", [x], {}, e.virtual_device, e.name)

    return rewrite(fn, rule)


def fold_hard_sigmoid(fn: Function) -> Function:
    """``fn`` with each ``hard_sigmoid`` of a convolution plus bias folded into them (see
    the module docstring)."""
    readers = Counter(id(a) for e in post_order(fn) if isinstance(e, Call) for a in e.args)
    olds = {}

    def rule(e: Expr, old: Expr) -> Expr:
        olds[id(e)] = old
        if not (isinstance(e, Call) and e.op == "hard_sigmoid"):
            return e

        def single_reader(x: Expr) -> bool:
            return readers[id(olds.get(id(x), x))] == 1

        add = e.args[0]
        pair = _quantized_pair(add)  # a QDQ model's rounding of the gate's convolution
        if pair is not None and single_reader(add) and single_reader(add.args[0]):  # type: ignore[union-attr]
            add = pair[0]
        if not (isinstance(add, Call) and add.op == "add" and single_reader(add)):
            return e
        conv, b = add.args
        if isinstance(b, Call) and b.op in ("expand_dims", "reshape"):
            b = b.args[0]
        if not (isinstance(conv, Call) and conv.op == "nn.conv2d" and single_reader(conv)
                and conv.attrs["kernel_layout"] == "OIHW"):
            return e
        weight, bias = _scaled_weight(conv.args[1], float(e.attrs["alpha"])), _real(b)
        channels = conv.checked_type.shape[1]  # type: ignore[union-attr]
        if weight is None or bias is None or bias.size not in (1, channels):
            return e
        alpha, beta = float(e.attrs["alpha"]), float(e.attrs["beta"])
        dev = e.virtual_device
        new_conv = Call("nn.conv2d", [conv.args[0], weight], conv.attrs, conv.virtual_device,
                        conv.name)
        shift = (bias * alpha + beta).astype(np.float32).reshape(
            (-1, 1, 1) if bias.size > 1 else ())
        biased = Call("add", [new_conv, Constant(shift, b.virtual_device)], {},
                      add.virtual_device, add.name)
        return Call("clip", [biased], {"a_min": 0.0, "a_max": 1.0}, dev, e.name)

    return rewrite(fn, rule)


def _scaled_weight(w: Expr, alpha: float) -> Expr | None:
    """``alpha · w`` for a float constant weight, or a ``dequantize`` of one with its
    scale times ``alpha`` (exact); None for anything else or ``alpha <= 0``."""
    if alpha <= 0:
        return None
    if isinstance(w, Constant) and w.data.dtype.kind == "f":
        return Constant((w.data * alpha).astype(w.data.dtype), w.virtual_device)
    if isinstance(w, Call) and w.op == "qnn.dequantize" \
            and all(isinstance(a, Constant) for a in w.args):
        q, s, z = w.args
        scale = (s.data.astype(np.float64) * alpha).astype(s.data.dtype)  # type: ignore[union-attr]
        return Call("qnn.dequantize", [q, Constant(scale, s.virtual_device), z], w.attrs,
                    w.virtual_device, w.name)
    return None

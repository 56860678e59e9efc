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
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .ir import Call, Constant, Expr, Function, post_order
from .rewrite import rewrite

__all__ = ["fold_hard_sigmoid", "recognize_hard_swish"]


def _scalar(e: Expr) -> float | None:
    """The value of a constant holding one number (any shape of size 1)."""
    if isinstance(e, Constant) and e.data.size == 1 and e.data.dtype.kind == "f":
        return float(e.data.reshape(()))
    return None


def _relu6_of_shifted(e: Expr) -> Expr | None:
    """``x`` when ``e`` is ``clip(add(x, 3), 0, 6)``."""
    if not (isinstance(e, Call) and e.op == "clip" and e.attrs["a_min"] is not None
            and e.attrs["a_max"] is not None and float(e.attrs["a_min"]) == 0.0
            and float(e.attrs["a_max"]) == 6.0):
        return None
    add = e.args[0]
    if not (isinstance(add, Call) and add.op == "add"):
        return None
    for x, c in (add.args, add.args[::-1]):
        if _scalar(c) == 3.0 and not isinstance(x, Constant):
            return x
    return None


def _swish_product(e: Expr) -> Expr | None:
    """``x`` when ``e`` is ``multiply(x, clip(add(x, 3), 0, 6))`` (either order)."""
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
        if k is None or not np.isclose(k, want, rtol=1e-6):
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
        add = e.args[0]
        if not (isinstance(add, Call) and add.op == "add" and readers[id(olds.get(id(add), add))]
                == 1):
            return e
        conv, b = add.args
        if not (isinstance(conv, Call) and conv.op == "nn.conv2d"
                and isinstance(conv.args[1], Constant) and isinstance(b, Constant)
                and readers[id(olds.get(id(conv), conv))] == 1
                and conv.attrs["kernel_layout"] == "OIHW"):
            return e
        w = conv.args[1].data
        if b.data.size not in (1, w.shape[0]):
            return e
        alpha, beta = float(e.attrs["alpha"]), float(e.attrs["beta"])
        if alpha <= 0:
            return e
        dev = e.virtual_device
        new_conv = Call("nn.conv2d", [conv.args[0], Constant((w * alpha).astype(w.dtype),
                                                             conv.args[1].virtual_device)],
                        conv.attrs, conv.virtual_device, conv.name)
        shift = (b.data.astype(np.float64) * alpha + beta).astype(b.data.dtype)
        biased = Call("add", [new_conv, Constant(shift, b.virtual_device)], {},
                      add.virtual_device, add.name)
        return Call("clip", [biased], {"a_min": 0.0, "a_max": 1.0}, dev, e.name)

    return rewrite(fn, rule)

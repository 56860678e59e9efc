"""A Python builder API for writing graph-IR programs by hand.

Every registered operator has a function here named after it without its namespace
(``nn.conv2d`` is :func:`conv2d`, ``qnn.quantize`` is ``quantize``); arguments that are
numpy arrays or Python numbers become constants::

    from tensorfab.compiler.graph import builder as gb

    x = gb.var("x", (1, 3, 8, 8))
    w = np.ones((4, 3, 3, 3), np.float32)
    f = gb.function([x], gb.relu(gb.conv2d(x, w, padding=(1, 1, 1, 1))))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .device import VirtualDevice
from .infer import infer_types
from .ir import Call, Constant, Expr, Function, Let, Tuple, TupleGetItem, Var, check_closed
from .ops import OPS
from .types import Dim, TensorType, Type

__all__ = ["call", "const", "function", "let", "tuple_", "tuple_item", "var"]


def var(name: str, shape: Sequence[Dim] | Type, dtype: str = "float32",
        device: VirtualDevice | None = None) -> Var:
    """A variable of ``TensorType(shape, dtype)`` (or of the type given as ``shape``)."""
    t = shape if isinstance(shape, Type) else TensorType(shape, dtype)  # checked there
    return Var(name, t, device)


def const(value: Any, dtype: str | None = None) -> Constant:
    """A constant from an array or a number (``dtype`` converts it; a Python float without
    ``dtype`` becomes float32, a Python int int64)."""
    array = np.asarray(value)
    if dtype is not None:
        array = array.astype(dtype)
    elif array.dtype == np.float64 and not isinstance(value, np.ndarray):
        array = array.astype(np.float32)
    return Constant(array)


def as_expr(value: Any) -> Expr:
    """``value`` if it is an :class:`Expr`, else a constant made from it."""
    return value if isinstance(value, Expr) else const(value)


def call(op: str, *args: Any, **attrs: Any) -> Call:
    """A call of operator ``op`` (arrays and numbers in ``args`` become constants)."""
    return Call(op, [as_expr(a) for a in args], attrs)


def tuple_(*fields: Any) -> Tuple:
    """A tuple expression."""
    return Tuple([as_expr(f) for f in fields])


def tuple_item(value: Expr, index: int) -> TupleGetItem:
    """Field ``index`` of a tuple-valued expression."""
    return TupleGetItem(value, index)


def let(v: Var, value: Any, body: Callable[[Var], Expr] | Expr) -> Let:
    """``let v = value; body`` (``body`` may be a function of ``v``)."""
    return Let(v, as_expr(value), body(v) if callable(body) else body)


def function(params: Sequence[Var], body: Any, *,
             result_device: VirtualDevice | None = None, check: bool = True) -> Function:
    """A function of ``params`` returning ``body``; with ``check`` its types are inferred
    and every variable it uses checked to be bound (errors raised) at once."""
    f = Function(tuple(params), as_expr(body), None, result_device)
    if check:
        check_closed(f)
        infer_types(f)
    return f


def _make_op_builder(name: str) -> Callable[..., Call]:
    op = OPS[name]

    def build(*args: Any, **attrs: Any) -> Call:
        return call(name, *args, **attrs)
    short = name.split(".")[-1]
    build.__name__ = short
    build.__qualname__ = short
    attr_text = ", ".join(f"{k}" for k in op.attrs) or "none"
    build.__doc__ = f"``{name}``: {op.doc}.\n\nAttributes: {attr_text}."
    return build


for _name in OPS:
    _short = _name.split(".")[-1]
    globals()[_short] = _make_op_builder(_name)
    __all__.append(_short)

"""The text form of the graph IR (printer); :mod:`.parser` reads it back.

Every call, tuple, tuple item, large constant and nested function is bound to a numbered
name (``%0 = nn.conv2d(%x, %w, ...);``), so a sub-expression used twice is printed once
and stays shared after parsing. ``let`` prints as ``let %v: T @dev = value;`` followed by
its body. Devices appear where they belong to the program: on function parameters, on
the result (``-> T @dev``), on let-bound variables, and in ``on_device`` /
``device_copy`` attributes. The grammar is in docs/graph.md.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable

import numpy as np

from .device import VirtualDevice
from .ir import Call, Constant, Expr, Function, Let, Tuple, TupleGetItem, Var
from .types import DTYPES, FuncType, GraphError, TensorType, TupleType, Type

#: Constants with at most this many elements print their values as a list.
INLINE_CONSTANT_LIMIT = 16
_NAME_OK = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_device(device: VirtualDevice) -> str:
    """``@cpu``, ``@accel(default)``, ``@accel(default, scope=global)``."""
    return f"@{device}"


def format_type(t: Type) -> str:
    """Text of a type (``Tensor[(batch, 3), float32]``, ``(T1, T2)``)."""
    if isinstance(t, TensorType | TupleType | FuncType):
        return str(t)
    raise GraphError(f"cannot print type {t!r}")


def _format_float(v: float) -> str:
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    text = repr(float(v))
    return text if any(c in text for c in ".e") else text + ".0"


def format_attr(value: object) -> str:
    """Text of an attribute value."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _format_float(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, VirtualDevice):
        return format_device(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    raise GraphError(f"cannot print attribute value {value!r}")


def format_constant(data: np.ndarray) -> str:
    """``const(float32, [2], [1.0, 2.0])``, or with base64 bytes for large constants."""
    dtype = next(n for n, t in DTYPES.items() if data.dtype == np.dtype(t))
    shape = "[" + ", ".join(str(d) for d in data.shape) + "]"
    if data.size <= INLINE_CONSTANT_LIMIT:
        flat = data.reshape(-1)
        if dtype == "bool":
            values = ", ".join("True" if v else "False" for v in flat)
        elif dtype.startswith("float"):
            values = ", ".join(_format_float(float(v)) for v in flat)
        else:
            values = ", ".join(str(int(v)) for v in flat)
        return f"const({dtype}, {shape}, [{values}])"
    raw = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<")).tobytes()
    return f'const({dtype}, {shape}, "{base64.b64encode(raw).decode("ascii")}")'


def astext(expr: Expr, constant_ref: Callable[[Constant], str | None] | None = None) -> str:
    """The text form of ``expr`` (usually a :class:`Function`).

    ``constant_ref`` names large constants kept elsewhere (a ``.tfm`` file's arrays):
    a constant it gives a name prints as ``meta[name]`` instead of its values, and
    :func:`~.parser.parse` reads it back given the arrays by name.
    """
    printer = _Printer(constant_ref)
    if isinstance(expr, Function):
        return printer.function(expr, 0, {}) + "\n"
    lines: list[str] = []
    result = printer.block(expr, lines, 0, {})
    return "\n".join([*lines, result]) + "\n"


class _Printer:
    def __init__(self, constant_ref: Callable[[Constant], str | None] | None = None) -> None:
        self.constant_ref = constant_ref
        self.counter = 0
        self.var_names: dict[int, str] = {}
        self.used_names: set[str] = set()

    def fresh_name(self, hint: str) -> str:
        """A variable name not used yet in the text (from the variable's name hint)."""
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint) or "v"
        if not _NAME_OK.match(base):
            base = "v" + base
        name, k = base, 1
        while name in self.used_names:
            name, k = f"{base}_{k}", k + 1
        self.used_names.add(name)
        return "%" + name

    def var_name(self, v: Var, memo: dict[int, str]) -> str:
        """The name of a variable in scope (a free variable gets a name of its own)."""
        if id(v) not in memo:
            if id(v) not in self.var_names:
                self.var_names[id(v)] = self.fresh_name(v.name)
            memo[id(v)] = self.var_names[id(v)]
        return memo[id(v)]

    def var_decl(self, v: Var, memo: dict[int, str]) -> str:
        """Bind ``v`` in ``memo`` under a fresh name (each binding occurrence has its own
        name, so that printing is stable) and print its declaration."""
        text = memo[id(v)] = self.fresh_name(v.name)
        if v.type_annotation is not None:
            text += f": {format_type(v.type_annotation)}"
        if v.virtual_device is not None:
            text += f" {format_device(v.virtual_device)}"
        return text

    def function(self, fn: Function, indent: int, memo: dict[int, str]) -> str:
        memo = dict(memo)
        params = ", ".join(self.var_decl(p, memo) for p in fn.params)
        head = f"fn ({params})"
        ret = []
        if fn.ret_type is not None:
            ret.append(format_type(fn.ret_type))
        if fn.result_device is not None:
            ret.append(format_device(fn.result_device))
        if ret:
            head += " -> " + " ".join(ret)
        lines: list[str] = []
        result = self.block(fn.body, lines, indent + 1, memo)
        pad = "  " * (indent + 1)
        body = "\n".join([*lines, pad + result])
        return f"{head} {{\n{body}\n{'  ' * indent}}}"

    def block(self, expr: Expr, lines: list[str], indent: int, memo: dict[int, str]) -> str:
        """Print ``expr``'s bindings into ``lines``; return its atom. Tail lets chain."""
        pad = "  " * indent
        while isinstance(expr, Let):
            value = self.atom(expr.value, lines, indent, memo)
            lines.append(f"{pad}let {self.var_decl(expr.var, memo)} = {value};")
            expr = expr.body
        return self.atom(expr, lines, indent, memo)

    def atom(self, expr: Expr, lines: list[str], indent: int, memo: dict[int, str]) -> str:
        """Text naming ``expr``: a variable, a small constant, or a numbered binding."""
        if isinstance(expr, Var):
            return self.var_name(expr, memo)
        if id(expr) in memo:
            return memo[id(expr)]
        if isinstance(expr, Constant) and expr.data.size <= INLINE_CONSTANT_LIMIT:
            return format_constant(expr.data)
        # iterative: bind children first (deep graphs must not recurse per node)
        stack: list[tuple[Expr, bool]] = [(expr, False)]
        while stack:
            node, ready = stack.pop()
            if id(node) in memo or isinstance(node, Var):
                continue
            kids = self.bound_children(node)
            if not ready:
                stack.append((node, True))
                stack.extend((k, False) for k in reversed(kids)
                             if id(k) not in memo and not isinstance(k, Var))
                continue
            text = self.node_text(node, lines, indent, memo)
            if isinstance(node, Constant) and node.data.size <= INLINE_CONSTANT_LIMIT:
                memo[id(node)] = text
                continue
            name = f"%{self.counter}"
            self.counter += 1
            lines.append(f"{'  ' * indent}{name} = {text};")
            memo[id(node)] = name
        return memo[id(expr)]

    @staticmethod
    def bound_children(node: Expr) -> tuple[Expr, ...]:
        if isinstance(node, Call):
            return node.args
        if isinstance(node, Tuple):
            return node.fields
        if isinstance(node, TupleGetItem):
            return (node.tuple_value,)
        return ()  # constants, lets and functions print their own insides

    def node_text(self, node: Expr, lines: list[str], indent: int,
                  memo: dict[int, str]) -> str:
        if isinstance(node, Constant):
            ref = self.constant_ref(node) if self.constant_ref is not None else None
            if ref is not None and node.data.size > INLINE_CONSTANT_LIMIT:
                return f"meta[{ref}]"
            return format_constant(node.data)
        if isinstance(node, Call):
            parts = [self.atom(a, lines, indent, memo) for a in node.args]
            parts += [f"{k}={format_attr(v)}" for k, v in node.attrs.items()]
            return f"{node.op}({', '.join(parts)})"
        if isinstance(node, Tuple):
            fields = [self.atom(f, lines, indent, memo) for f in node.fields]
            return "(" + ", ".join(fields) + ("," if len(fields) == 1 else "") + ")"
        if isinstance(node, TupleGetItem):
            return f"{self.atom(node.tuple_value, lines, indent, memo)}.{node.index}"
        if isinstance(node, Function):
            return self.function(node, indent, memo)
        if isinstance(node, Let):
            inner: list[str] = []
            result = self.block(node, inner, indent + 1, dict(memo))
            pad = "  " * (indent + 1)
            return "{\n" + "\n".join([*inner, pad + result]) + "\n" + "  " * indent + "}"
        raise GraphError(f"cannot print node {type(node).__name__}")

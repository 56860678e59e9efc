"""Expressions of the graph IR, functional in the manner of Relay.

``Var``, ``Constant``, ``Call(op, args, attrs)``, ``Tuple``, ``TupleGetItem``, ``Let`` and
``Function``. Nodes are immutable and compared by identity; :func:`structural_equal`
compares two programs up to renaming of bound variables. A shared sub-expression is one
node used twice (a dataflow graph), not two equal nodes.

Every node may carry a :class:`~tensorfab.compiler.graph.device.VirtualDevice` (set by
device planning: the complete representation has one on every sub-expression) and, once
:func:`~tensorfab.compiler.graph.infer.infer_types` has run, its ``checked_type``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .device import VirtualDevice
from .ops import check_arity, get_op, normalize_attrs
from .types import GraphError, Type, dtype_of

AttrValue = Any  # int | float | str | bool | None | tuple | VirtualDevice


def _freeze_attr(name: str, value: Any) -> AttrValue:
    if isinstance(value, list | tuple):
        return tuple(_freeze_attr(name, v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if value is None or isinstance(value, bool | int | float | str | VirtualDevice):
        return value
    raise GraphError(f"attribute {name}={value!r}: unsupported value type "
                     f"{type(value).__name__}")


class Expr:
    """Base class of IR expressions."""

    virtual_device: VirtualDevice | None

    @property
    def checked_type(self) -> Type:
        """The type inferred by :func:`~tensorfab.compiler.graph.infer.infer_types`."""
        t = self.__dict__.get("_checked_type")
        if t is None:
            raise GraphError(f"{type(self).__name__} has no inferred type yet; run "
                             "infer_types first")
        return t

    def with_device(self, device: VirtualDevice | None) -> Expr:
        """A copy of this node (same children) on ``device``."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A variable: a function parameter or a let-bound name.

    Parameters
    ----------
    name : str
        Name hint (printed as ``%name``).
    type_annotation : Type or None
        Required for function parameters.
    virtual_device : VirtualDevice or None
        Device of the value the variable holds.
    """

    name: str
    type_annotation: Type | None = None
    virtual_device: VirtualDevice | None = None

    def with_device(self, device: VirtualDevice | None) -> Var:
        return Var(self.name, self.type_annotation, device)


@dataclass(frozen=True, eq=False)
class Constant(Expr):
    """A tensor constant (a numpy array, copied and made read-only)."""

    data: np.ndarray
    virtual_device: VirtualDevice | None = None

    def __post_init__(self) -> None:
        data = np.array(self.data)  # a copy, also of 0-d arrays
        dtype_of(data)
        data.flags.writeable = False
        object.__setattr__(self, "data", data)

    def with_device(self, device: VirtualDevice | None) -> Constant:
        return Constant(self.data, device)


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """A call of the registered operator ``op`` on ``args`` with attributes ``attrs``.

    ``name`` is the source node's name (the ONNX node's ``name``, else its first output),
    kept through the passes so that tables and traces can say which layer of the user's
    model a kernel computes; empty for calls no source node made.
    """

    op: str
    args: tuple[Expr, ...]
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)
    virtual_device: VirtualDevice | None = None
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        for i, a in enumerate(self.args):
            if not isinstance(a, Expr):
                raise GraphError(f"{self.op}: argument {i} is {type(a).__name__}, not an Expr")
        op = get_op(self.op)
        check_arity(op, len(self.args))
        full = normalize_attrs(op, dict(self.attrs))
        frozen = {k: _freeze_attr(k, v) for k, v in sorted(full.items())}
        object.__setattr__(self, "attrs", frozen)

    def with_device(self, device: VirtualDevice | None) -> Call:
        return Call(self.op, self.args, self.attrs, device, self.name)


@dataclass(frozen=True, eq=False)
class Tuple(Expr):
    """A tuple of expressions."""

    fields: tuple[Expr, ...]
    virtual_device: VirtualDevice | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))

    def with_device(self, device: VirtualDevice | None) -> Tuple:
        return Tuple(self.fields, device)


@dataclass(frozen=True, eq=False)
class TupleGetItem(Expr):
    """Field ``index`` of a tuple-valued expression."""

    tuple_value: Expr
    index: int
    virtual_device: VirtualDevice | None = None

    def with_device(self, device: VirtualDevice | None) -> TupleGetItem:
        return TupleGetItem(self.tuple_value, self.index, device)


@dataclass(frozen=True, eq=False)
class Let(Expr):
    """``let var = value; body``; ``var.virtual_device`` is the device of the value."""

    var: Var
    value: Expr
    body: Expr
    virtual_device: VirtualDevice | None = None

    def with_device(self, device: VirtualDevice | None) -> Let:
        return Let(self.var, self.value, self.body, device)


@dataclass(frozen=True, eq=False)
class Function(Expr):
    """A function: parameters (each with its type and device), a body, the result's type
    and device.

    Parameters
    ----------
    params : tuple of Var
        Parameters; each needs a ``type_annotation``; their devices are the parameters'
        devices.
    body : Expr
        The result expression.
    ret_type : Type or None
        Declared result type (checked against the body's inferred type).
    result_device : VirtualDevice or None
        Device of the result.
    """

    params: tuple[Var, ...]
    body: Expr
    ret_type: Type | None = None
    result_device: VirtualDevice | None = None
    virtual_device: VirtualDevice | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        names = [p.name for p in self.params]
        for p in self.params:
            if not isinstance(p, Var):
                raise GraphError(f"function parameter {p!r} is not a Var")
            if p.type_annotation is None:
                raise GraphError(f"function parameter %{p.name} has no type annotation")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise GraphError(f"function parameters repeat the names {sorted(dup)}")

    def with_device(self, device: VirtualDevice | None) -> Function:
        return Function(self.params, self.body, self.ret_type, self.result_device, device)


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``expr`` in evaluation order."""
    if isinstance(expr, Call):
        return expr.args
    if isinstance(expr, Tuple):
        return expr.fields
    if isinstance(expr, TupleGetItem):
        return (expr.tuple_value,)
    if isinstance(expr, Let):
        return (expr.value, expr.var, expr.body)
    if isinstance(expr, Function):
        return (*expr.params, expr.body)
    return ()


def post_order(expr: Expr) -> Iterator[Expr]:
    """Every distinct node reachable from ``expr``, children before parents (iterative, so
    deep graphs do not hit Python's recursion limit)."""
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded:
            seen.add(id(node))
            yield node
            continue
        stack.append((node, True))
        for child in reversed(children(node)):
            if id(child) not in seen:
                stack.append((child, False))


def free_vars(expr: Expr) -> list[Var]:
    """The variables ``expr`` uses without binding them (as a function's parameter or a
    let's variable), in post order."""
    nodes = list(post_order(expr))
    bound = {id(p) for n in nodes if isinstance(n, Function) for p in n.params}
    bound |= {id(n.var) for n in nodes if isinstance(n, Let)}
    return [n for n in nodes if isinstance(n, Var) and id(n) not in bound]


def free_variable_error(var: Var, error: type[GraphError] = GraphError) -> GraphError:
    """The error for ``var`` used in a function that does not bind it."""
    return error(f"variable %{var.name} is free in the function; list it in the "
                 "function's parameters or bind it with a let")


def check_closed(fn: Function) -> None:
    """Raise :func:`free_variable_error` for the first variable ``fn`` uses without
    binding it."""
    free = free_vars(fn)
    if free:
        raise free_variable_error(free[0])


def structural_equal(a: Expr, b: Expr, *, compare_devices: bool = True) -> bool:
    """True when ``a`` and ``b`` are the same program up to renaming of bound variables.

    Compares operators, attributes, constants (dtype, shape, bytes), type annotations,
    tuple indices and, with ``compare_devices``, every node's virtual device and the
    functions' result devices. Free variables must be the same node.
    """
    return _StructuralEqual(compare_devices).equal(a, b)


class _StructuralEqual:
    def __init__(self, compare_devices: bool) -> None:
        self.compare_devices = compare_devices
        self.var_map: dict[int, Var] = {}
        self.done: set[tuple[int, int]] = set()

    def bind(self, a: Var, b: Var) -> bool:
        if not self.same_var_decl(a, b):
            return False
        self.var_map[id(a)] = b
        return True

    def same_var_decl(self, a: Var, b: Var) -> bool:
        if a.type_annotation != b.type_annotation:
            return False
        return not self.compare_devices or a.virtual_device == b.virtual_device

    def equal(self, a: Expr, b: Expr) -> bool:
        # explicit stack of pairs; bindings are made when a Let/Function pair is entered,
        # before its sub-expressions are compared
        stack: list[tuple[Expr, Expr]] = [(a, b)]
        while stack:
            x, y = stack.pop()
            key = (id(x), id(y))
            if key in self.done:
                continue
            if type(x) is not type(y):
                return False
            if self.compare_devices and x.virtual_device != y.virtual_device:
                return False
            if isinstance(x, Var):
                mapped = self.var_map.get(id(x))
                if mapped is None:
                    if x is not y:
                        return False
                elif mapped is not y:
                    return False
            elif isinstance(x, Constant):
                if (x.data.dtype != y.data.dtype or x.data.shape != y.data.shape
                        or x.data.tobytes() != y.data.tobytes()):
                    return False
            elif isinstance(x, Call):
                if (x.op != y.op or len(x.args) != len(y.args)
                        or not _attrs_equal(x.attrs, y.attrs)):
                    return False
                stack.extend(zip(x.args, y.args, strict=True))
            elif isinstance(x, Tuple):
                if len(x.fields) != len(y.fields):
                    return False
                stack.extend(zip(x.fields, y.fields, strict=True))
            elif isinstance(x, TupleGetItem):
                if x.index != y.index:
                    return False
                stack.append((x.tuple_value, y.tuple_value))
            elif isinstance(x, Let):
                if not self.bind(x.var, y.var):
                    return False
                stack.extend([(x.body, y.body), (x.value, y.value)])
            elif isinstance(x, Function):
                if len(x.params) != len(y.params) or x.ret_type != y.ret_type:
                    return False
                if self.compare_devices and x.result_device != y.result_device:
                    return False
                for p, q in zip(x.params, y.params, strict=True):
                    if not self.bind(p, q):
                        return False
                stack.append((x.body, y.body))
            else:  # pragma: no cover - every node type is listed above
                raise GraphError(f"unknown node type {type(x).__name__}")
            self.done.add(key)
        return True


def name_new_calls(exprs: list[Expr], name: str, known: set[int]) -> None:
    """Give ``name`` to the unnamed calls among ``exprs`` and their arguments that are not
    in ``known`` (ids of nodes that existed before): the calls a rewrite or a converter
    has just made for the source node ``name``. Names only freshly made nodes, so the
    immutability that passes rely on is kept."""
    stack = list(exprs)
    while stack:
        e = stack.pop()
        if not isinstance(e, Call) or e.name or id(e) in known:
            if isinstance(e, Tuple | TupleGetItem) and id(e) not in known:
                stack.extend(e.fields if isinstance(e, Tuple) else [e.tuple_value])
            continue
        object.__setattr__(e, "name", name)
        stack.extend(e.args)


def _attrs_equal(a: Mapping[str, AttrValue], b: Mapping[str, AttrValue]) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if type(x) is not type(y):
            return False
        if isinstance(x, float) and np.isnan(x) and np.isnan(y):
            continue
        if x != y:
            return False
    return True

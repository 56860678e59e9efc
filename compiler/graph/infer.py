"""Type inference: every sub-expression's type from the parameters' annotations and the
operators' type rules; errors name the call and the dims that do not match."""

from __future__ import annotations

from .ir import Call, Constant, Expr, Function, Let, Tuple, TupleGetItem, Var, post_order
from .ops import get_op
from .types import FuncType, GraphError, TensorType, TupleType, Type, TypeInferenceError, dtype_of


def describe_call(call: Call) -> str:
    """A one-line description of a call: its op, its arguments and their types."""
    parts = []
    for a in call.args:
        if isinstance(a, Var):
            name = f"%{a.name}"
        elif isinstance(a, Constant):
            name = "constant"
        elif isinstance(a, Call):
            name = f"{a.op}(...)"
        else:
            name = type(a).__name__
        t = a.__dict__.get("_checked_type")
        parts.append(f"{name}: {t}" if t is not None else name)
    return f"{call.op}({', '.join(parts)})"


def _set(expr: Expr, t: Type) -> None:
    object.__setattr__(expr, "_checked_type", t)


def infer_types(expr: Expr) -> Type:
    """Infer and record the type of every node reachable from ``expr``; return its type.

    Raises
    ------
    TypeInferenceError
        A call whose arguments break its operator's rule (the message names the call and
        the mismatching dims), a tuple index out of range, a declared type that differs
        from the inferred one, or a free variable without a type annotation.
    """
    nodes = list(post_order(expr))
    let_values = {id(n.var): n.value for n in nodes if isinstance(n, Let)}
    for node in nodes:
        if "_checked_type" in node.__dict__:
            continue
        if isinstance(node, Var) and id(node) in let_values:
            t = let_values[id(node)].checked_type
            if node.type_annotation is not None and node.type_annotation != t:
                raise TypeInferenceError(f"let %{node.name} is declared "
                                         f"{node.type_annotation}, its value has type {t}")
            _set(node, t)
            continue
        _set(node, _infer_node(node))
    return expr.checked_type


def _infer_node(node: Expr) -> Type:
    if isinstance(node, Var):
        if node.type_annotation is None:
            raise TypeInferenceError(f"variable %{node.name} has no type annotation and is "
                                     "not let-bound")
        return node.type_annotation
    if isinstance(node, Constant):
        return TensorType(node.data.shape, dtype_of(node.data))
    if isinstance(node, Call):
        op = get_op(node.op)
        try:
            return op.type_rule([a.checked_type for a in node.args], node.attrs)
        except TypeInferenceError as e:
            raise TypeInferenceError(f"in call {describe_call(node)}: {e}") from None
        except GraphError as e:
            raise TypeInferenceError(f"in call {describe_call(node)}: {e}") from None
    if isinstance(node, Tuple):
        return TupleType(tuple(f.checked_type for f in node.fields))
    if isinstance(node, TupleGetItem):
        t = node.tuple_value.checked_type
        if not isinstance(t, TupleType):
            raise TypeInferenceError(f"tuple item {node.index} of a non-tuple of type {t}")
        if not 0 <= node.index < len(t.fields):
            raise TypeInferenceError(f"tuple item {node.index} out of range for {t}")
        return t.fields[node.index]
    if isinstance(node, Let):
        return node.body.checked_type
    if isinstance(node, Function):
        body = node.body.checked_type
        if node.ret_type is not None and node.ret_type != body:
            raise TypeInferenceError(f"function declares result {node.ret_type}, its body "
                                     f"has type {body}")
        return FuncType(tuple(p.checked_type for p in node.params), body)
    raise GraphError(f"unknown node type {type(node).__name__}")

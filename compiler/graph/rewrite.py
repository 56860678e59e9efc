"""Bottom-up rewriting of a program: every node is rebuilt from its rebuilt children
(shared nodes stay shared), then offered to a rewrite rule."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TypeVar

from .infer import infer_types
from .ir import (
    Call,
    Constant,
    Expr,
    Function,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    name_new_calls,
    post_order,
)
from .types import GraphError

Rule = Callable[[Expr, Expr], Expr]
T = TypeVar("T")


def rebuild(node: Expr, new: dict[int, Expr]) -> Expr:
    """``node`` with its children replaced by ``new[id(child)]`` (``node`` itself when no
    child changed)."""
    if isinstance(node, Call):
        args = [new[id(a)] for a in node.args]
        if all(a is b for a, b in zip(args, node.args, strict=True)):
            return node
        return Call(node.op, args, node.attrs, node.virtual_device, node.name)
    if isinstance(node, Tuple):
        fields = [new[id(f)] for f in node.fields]
        if all(a is b for a, b in zip(fields, node.fields, strict=True)):
            return node
        return Tuple(fields, node.virtual_device)
    if isinstance(node, TupleGetItem):
        value = new[id(node.tuple_value)]
        return node if value is node.tuple_value else TupleGetItem(value, node.index,
                                                                   node.virtual_device)
    if isinstance(node, Let):
        var, value, body = new[id(node.var)], new[id(node.value)], new[id(node.body)]
        if var is node.var and value is node.value and body is node.body:
            return node
        return Let(var, value, body, node.virtual_device)  # type: ignore[arg-type]
    if isinstance(node, Function):
        params = [new[id(p)] for p in node.params]
        body = new[id(node.body)]
        if body is node.body and all(a is b for a, b in zip(params, node.params,
                                                            strict=True)):
            return node
        return Function(params, body, node.ret_type, node.result_device,  # type: ignore[arg-type]
                        node.virtual_device)
    if isinstance(node, Var | Constant):
        return node
    raise GraphError(f"unknown node {type(node).__name__}")


def rewrite(fn: Function, rule: Rule) -> Function:
    """Apply ``rule`` to every node of ``fn`` bottom-up; the rule receives the node with
    its children already rewritten (types inferred) and the original node, and returns
    the node or a replacement. The calls a replacement is made of take the replaced
    call's source name (:attr:`Call.name`) unless the rule named them."""
    new: dict[int, Expr] = {}
    known: set[int] = set()
    for node in post_order(fn):
        rebuilt = rebuild(node, new)
        if not isinstance(rebuilt, Function | Var):
            infer_types(rebuilt)
            replaced = rebuilt
            rebuilt = rule(rebuilt, node)
            if rebuilt is not replaced and isinstance(replaced, Call) and replaced.name:
                name_new_calls([rebuilt], replaced.name, known)
        known.add(id(node))
        known.add(id(rebuilt))
        new[id(node)] = rebuilt
    out = new[id(fn)]
    assert isinstance(out, Function)
    infer_types(out)
    return out


def substitute(expr: Expr, mapping: dict[int, Expr]) -> Expr:
    """``expr`` with each node whose id is in ``mapping`` replaced by its value
    (replacements are not searched again); shared nodes stay shared."""
    new: dict[int, Expr] = {}
    for node in post_order(expr):
        new[id(node)] = mapping[id(node)] if id(node) in mapping else rebuild(node, new)
    return new[id(expr)]


def call_readers(fn: Function) -> dict[int, list[Call]]:
    """The calls reading each node, by ``id`` of the node (every argument slot counts)."""
    readers: dict[int, list[Call]] = defaultdict(list)
    for e in post_order(fn):
        if isinstance(e, Call):
            for a in e.args:
                readers[id(a)].append(e)
    return readers


def single_reader_chain(start: Call, fn: Function, readers: dict[int, list[Call]],
                        step: Callable[[Call, Expr], T | None]) -> list[tuple[Call, T]]:
    """Follow ``start``'s readers while each node has exactly one (and is not the
    program's result) and ``step(reader, node)`` accepts it (returns non-``None``):
    the accepted readers in order, each with what ``step`` returned."""
    out: list[tuple[Call, T]] = []
    node: Expr = start
    while len(readers[id(node)]) == 1 and node is not fn.body:
        nxt = readers[id(node)][0]
        value = step(nxt, node)
        if value is None:
            break
        out.append((nxt, value))
        node = nxt
    return out

"""Parser of the graph IR's text form (see :mod:`.printer` and docs/graph.md).

``parse(astext(f))`` is structurally equal to ``f``. Errors name the line and column.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .device import VirtualDevice
from .ir import Call, Constant, Expr, Function, Let, Tuple, TupleGetItem, Var
from .types import DTYPES, GraphError, TensorType, TupleType, Type


class ParseError(GraphError):
    """Text that is not in the graph IR's text form; names line and column."""


_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*)
  | (?P<var>%[A-Za-z0-9_]+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+)|-inf)
  | (?P<arrow>->)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<punct>[()\[\]{},;=:@.])
""", re.VERBOSE)


@dataclass
class _Tok:
    kind: str
    text: str
    pos: int


def _tokenize(text: str) -> list[_Tok]:
    toks, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            line, col = _line_col(text, pos)
            raise ParseError(f"line {line}, column {col}: unexpected character "
                             f"{text[pos]!r}")
        kind = m.lastgroup
        if kind != "ws":
            toks.append(_Tok(kind, m.group(), pos))
        pos = m.end()
    toks.append(_Tok("eof", "", len(text)))
    return toks


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def parse(text: str, constants: Mapping[str, np.ndarray] | None = None) -> Expr:
    """Parse the text form into an expression (a :class:`Function` for a program).

    ``constants`` gives the arrays of ``meta[name]`` references (see
    :func:`~.printer.astext`'s ``constant_ref``).
    """
    return _Parser(text, constants).program()


class _Parser:
    def __init__(self, text: str, constants: Mapping[str, np.ndarray] | None = None) -> None:
        self.constants = constants or {}
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0

    # ---------------------------------------------------------------- token helpers
    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def error(self, msg: str, tok: _Tok | None = None) -> ParseError:
        tok = tok or self.peek()
        line, col = _line_col(self.text, tok.pos)
        found = tok.text or "end of input"
        return ParseError(f"line {line}, column {col}: {msg} (found {found!r})")

    def next(self) -> _Tok:
        tok = self.peek()
        self.i += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok.text == text and tok.kind in ("punct", "arrow", "ident")

    def expect(self, text: str) -> _Tok:
        if not self.at(text):
            raise self.error(f"expected {text!r}")
        return self.next()

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    # ----------------------------------------------------------------------- grammar
    def program(self) -> Expr:
        expr = self.block_contents({}, end="eof")
        if self.peek().kind != "eof":
            raise self.error("expected end of input")
        return expr

    def block_contents(self, scope: dict[str, Expr], end: str) -> Expr:
        """statements then a result expression, up to ``}`` or end of input."""
        scope = dict(scope)
        lets: list[tuple[Var, Expr]] = []
        while True:
            tok = self.peek()
            if tok.kind == "ident" and tok.text == "let":
                self.next()
                var = self.var_decl()
                self.expect("=")
                value = self.expr(scope)
                self.expect(";")
                scope[var.name] = var
                lets.append((var, value))
            elif tok.kind == "var" and self.peek(1).text == "=":
                self.next()
                self.next()
                value = self.expr(scope)
                self.expect(";")
                scope[tok.text[1:]] = value
            else:
                break
        result = self.expr(scope)
        for var, value in reversed(lets):
            result = Let(var, value, result)
        return result

    def var_decl(self) -> Var:
        tok = self.next()
        if tok.kind != "var":
            raise self.error("expected a variable such as %x", tok)
        t = self.type_() if self.accept(":") else None
        dev = self.device() if self.at("@") else None
        return Var(tok.text[1:], t, dev)

    def expr(self, scope: dict[str, Expr]) -> Expr:
        e = self.primary(scope)
        while self.at(".") and self.peek(1).kind == "number":
            self.next()
            e = TupleGetItem(e, int(self.next().text))
        return e

    def primary(self, scope: dict[str, Expr]) -> Expr:
        tok = self.peek()
        if tok.kind == "var":
            self.next()
            try:
                return scope[tok.text[1:]]
            except KeyError:
                raise self.error(f"{tok.text} is not defined", tok) from None
        if tok.text == "(":
            self.next()
            fields = []
            while not self.at(")"):
                fields.append(self.expr(scope))
                if not self.accept(","):
                    break
            self.expect(")")
            return Tuple(fields)
        if tok.text == "{":
            self.next()
            e = self.block_contents(scope, end="}")
            self.expect("}")
            return e
        if tok.kind == "ident" and tok.text == "fn":
            return self.function(scope)
        if tok.kind == "ident" and tok.text == "const":
            return self.constant()
        if tok.kind == "ident" and tok.text == "meta":
            return self.meta()
        if tok.kind == "ident":
            return self.call(scope)
        raise self.error("expected an expression")

    def function(self, scope: dict[str, Expr]) -> Function:
        self.expect("fn")
        self.expect("(")
        params = []
        while not self.at(")"):
            params.append(self.var_decl())
            if not self.accept(","):
                break
        self.expect(")")
        ret_type, ret_dev = None, None
        if self.accept("->"):
            if not self.at("@"):
                ret_type = self.type_()
            if self.at("@"):
                ret_dev = self.device()
        self.expect("{")
        inner = dict(scope)
        inner.update({p.name: p for p in params})
        body = self.block_contents(inner, end="}")
        self.expect("}")
        try:
            return Function(params, body, ret_type, ret_dev)
        except GraphError as e:
            raise self.error(str(e)) from None

    def call(self, scope: dict[str, Expr]) -> Call:
        name = self.next()
        self.expect("(")
        args, attrs = [], {}
        while not self.at(")"):
            if self.peek().kind == "ident" and self.peek(1).text == "=":
                key = self.next().text
                self.next()
                attrs[key] = self.attr_value()
            else:
                if attrs:
                    raise self.error("positional argument after attributes")
                args.append(self.expr(scope))
            if not self.accept(","):
                break
        self.expect(")")
        try:
            return Call(name.text, args, attrs)
        except GraphError as e:
            line, col = _line_col(self.text, name.pos)
            raise ParseError(f"line {line}, column {col}: {e}") from None

    def attr_value(self) -> object:
        tok = self.peek()
        if tok.text == "[":
            self.next()
            items = []
            while not self.at("]"):
                items.append(self.attr_value())
                if not self.accept(","):
                    break
            self.expect("]")
            return tuple(items)
        if tok.text == "@":
            return self.device()
        self.next()
        if tok.kind == "string":
            return json.loads(tok.text)
        if tok.kind == "number":
            return _number(tok.text)
        if tok.kind == "ident":
            special = {"None": None, "True": True, "False": False, "inf": float("inf"),
                       "nan": float("nan")}
            if tok.text in special:
                return special[tok.text]
        raise self.error("expected an attribute value", tok)

    def device(self) -> VirtualDevice:
        self.expect("@")
        kind = self.next()
        if kind.kind != "ident":
            raise self.error("expected a device kind (cpu, accel)", kind)
        cfg, scope = None, None
        if self.accept("("):
            if self.peek().kind == "ident" and self.peek(1).text != "=":
                cfg = self.next().text
                self.accept(",")
            if self.peek().text == "scope":
                self.next()
                self.expect("=")
                scope = self.next().text
            self.expect(")")
        try:
            return VirtualDevice(kind.text, cfg, scope)
        except GraphError as e:
            raise self.error(str(e), kind) from None

    def type_(self) -> Type:
        if self.accept("("):
            fields = []
            while not self.at(")"):
                fields.append(self.type_())
                if not self.accept(","):
                    break
            self.expect(")")
            return TupleType(tuple(fields))
        self.expect("Tensor")
        self.expect("[")
        self.expect("(")
        dims: list[int | str] = []
        while not self.at(")"):
            tok = self.next()
            if tok.kind == "number" and tok.text.isdigit():
                dims.append(int(tok.text))
            elif tok.kind == "ident":
                dims.append(tok.text)
            else:
                raise self.error("expected a dim (an int or a symbol name)", tok)
            if not self.accept(","):
                break
        self.expect(")")
        self.expect(",")
        dtype = self.next()
        if dtype.text not in DTYPES:
            raise self.error(f"unknown dtype; known: {', '.join(DTYPES)}", dtype)
        self.expect("]")
        return TensorType(tuple(dims), dtype.text)

    def meta(self) -> Constant:
        self.expect("meta")
        self.expect("[")
        name = self.next()
        if name.kind != "ident":
            raise self.error("expected the name of a constant in meta[...]", name)
        self.expect("]")
        if name.text not in self.constants:
            known = ", ".join(sorted(self.constants)[:8]) or "none were given"
            raise self.error(f"meta[{name.text}]: no such constant (known: {known})", name)
        return Constant(np.asarray(self.constants[name.text]))

    def constant(self) -> Constant:
        start = self.expect("const")
        self.expect("(")
        dtype = self.next().text
        if dtype not in DTYPES:
            raise self.error(f"unknown dtype; known: {', '.join(DTYPES)}")
        self.expect(",")
        shape = self.attr_value()
        self.expect(",")
        np_dtype = np.dtype(DTYPES[dtype])
        tok = self.peek()
        if tok.kind == "string":
            self.next()
            raw = base64.b64decode(json.loads(tok.text))
            data = np.frombuffer(raw, dtype=np_dtype.newbyteorder("<")).astype(np_dtype)
        else:
            values = self.attr_value()
            data = np.array(values if isinstance(values, tuple) else [values], dtype=np_dtype)
        self.expect(")")
        if not isinstance(shape, tuple) or data.size != int(np.prod(shape, dtype=np.int64)):
            raise self.error(f"constant of shape {shape} has {data.size} values", start)
        return Constant(data.reshape(shape))


def _number(text: str) -> int | float:
    if text == "-inf":
        return float("-inf")
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return float(text)

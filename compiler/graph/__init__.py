"""tensorfab.compiler.graph: a typed, functional graph IR in the manner of Relay.

Expressions (:mod:`.ir`), types with symbolic dims (:mod:`.types`), the operator registry
with per-op type rules (:mod:`.ops`), type inference (:mod:`.infer`), the text form
(:mod:`.printer`, :mod:`.parser`), a builder API (:mod:`.builder`), virtual devices and
device planning (:mod:`.device`, :mod:`.planning`), and lowering to the CPU interpreter
of :mod:`tensorfab.runtime` (:mod:`.lower_runtime`).
"""

from . import builder
from .device import CPU, VirtualDevice, accel
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
    post_order,
    structural_equal,
)
from .ops import OPS, OpDef, get_op
from .parser import ParseError, parse
from .printer import astext
from .types import DTYPES, FuncType, GraphError, TensorType, TupleType, Type, TypeInferenceError

__all__ = [
    "CPU",
    "DTYPES",
    "OPS",
    "Call",
    "Constant",
    "Expr",
    "FuncType",
    "Function",
    "GraphError",
    "Let",
    "OpDef",
    "ParseError",
    "TensorType",
    "Tuple",
    "TupleGetItem",
    "TupleType",
    "Type",
    "TypeInferenceError",
    "Var",
    "VirtualDevice",
    "accel",
    "astext",
    "builder",
    "get_op",
    "infer_types",
    "parse",
    "post_order",
    "structural_equal",
]

"""Types of the graph IR: tensors whose dims are ints or named symbols, tuples, functions.

A :class:`TensorType` has a shape of dims, each an ``int`` (a known extent) or a ``str``
(a named symbol such as ``"batch"`` or ``"seq"``: one unknown extent, the same wherever
the name appears), and a dtype name from :data:`DTYPES`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from tensorfab.isa import TensorfabError

Dim = int | str

#: dtype names of the IR and their numpy types.
DTYPES: dict[str, type] = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
}


class GraphError(TensorfabError):
    """An error in a graph-IR program (construction, parsing, planning)."""


class TypeInferenceError(GraphError):
    """A call whose argument types break its operator's rule; the message names the
    call and the dims that do not match."""


def check_dtype(dtype: str) -> str:
    """Return ``dtype`` if it is one of :data:`DTYPES`, else raise :class:`GraphError`."""
    if dtype not in DTYPES:
        raise GraphError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    return dtype


def dtype_of(array: np.ndarray) -> str:
    """IR dtype name of a numpy array."""
    for name, np_type in DTYPES.items():
        if array.dtype == np.dtype(np_type):
            return name
    raise GraphError(f"numpy dtype {array.dtype} has no IR dtype; known: {', '.join(DTYPES)}")


class Type:
    """Base class of IR types."""


@dataclass(frozen=True)
class TensorType(Type):
    """A tensor of ``shape`` (ints and named symbols) and ``dtype``.

    Parameters
    ----------
    shape : tuple of int or str
        Extents; a ``str`` is a named symbolic dim.
    dtype : str
        One of :data:`DTYPES`.
    """

    shape: tuple[Dim, ...]
    dtype: str

    def __post_init__(self) -> None:
        if isinstance(self.shape, str) or not isinstance(self.shape, Iterable):
            # a str would be one symbolic dim per character
            raise GraphError(f"shape {self.shape!r} is not a sequence of dims; give a tuple "
                             f"of ints and symbol names, e.g. ({self.shape!r},) for one dim")
        object.__setattr__(self, "shape", tuple(self.shape))
        for d in self.shape:
            if isinstance(d, bool) or not isinstance(d, int | str):
                raise GraphError(f"dim {d!r} of shape {self.shape} is neither an int nor a "
                                 "symbol name")
            if isinstance(d, int) and d < 0:
                raise GraphError(f"dim {d} of shape {self.shape} is negative")
        check_dtype(self.dtype)

    @property
    def ndim(self) -> int:
        """Rank of the tensor."""
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dim is an int."""
        return all(isinstance(d, int) for d in self.shape)

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        if len(self.shape) == 1:
            dims += ","
        return f"Tensor[({dims}), {self.dtype}]"


@dataclass(frozen=True)
class TupleType(Type):
    """A tuple of types (the result of ``split``, the arguments of ``concatenate``)."""

    fields: tuple[Type, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))

    def __str__(self) -> str:
        inner = ", ".join(str(f) for f in self.fields)
        if len(self.fields) == 1:
            inner += ","
        return f"({inner})"


@dataclass(frozen=True)
class FuncType(Type):
    """The type of a :class:`~tensorfab.compiler.graph.ir.Function`."""

    params: tuple[Type, ...]
    result: Type

    def __str__(self) -> str:
        return f"fn({', '.join(str(p) for p in self.params)}) -> {self.result}"


def as_tensor_type(t: Type, where: str) -> TensorType:
    """``t`` if it is a :class:`TensorType`, else a :class:`TypeInferenceError` naming
    ``where``."""
    if not isinstance(t, TensorType):
        raise TypeInferenceError(f"{where}: expected a tensor, got {t}")
    return t

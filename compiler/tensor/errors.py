"""The tensor-level compiler's errors."""

from __future__ import annotations

import numpy as np

from tensorfab.isa import TensorfabError

__all__ = ["CompileError", "integers"]


class CompileError(TensorfabError, ValueError):
    """An operator, layout or schedule the compiler cannot map onto the accelerator
    (a ``ValueError`` too, so callers that catch that keep working). The message names
    the operand, the dimension or the schedule primitive at fault."""


def integers(name: str, a: np.ndarray | int, dtype: type[np.integer]) -> np.ndarray:
    """``a`` (an array or a scalar) as ``dtype``: integer values in its range of an
    integer or float array (a float with a fraction, NaN or infinity is an error, not
    truncated; so is a boolean, a string or an object).

    Raises
    ------
    CompileError
        Naming ``name``, the first bad value and its index: ``bias[5] = 0.9 is not an
        integer (3 such values)``, ``input zero point = 2.5 is not an integer``, ``x has
        values outside the int8 range -128..127``.
    """
    a = np.asarray(a)
    kind = np.dtype(dtype).name
    if a.dtype.kind not in "iuf":
        raise CompileError(f"{name} has dtype {a.dtype}; {kind} operands need integer "
                           "values")
    if a.dtype.kind == "f" and a.size:
        bad = np.flatnonzero(~np.isfinite(a) | (a != np.round(a)))
        if bad.size:
            at = np.unravel_index(bad[0], a.shape)
            where = f"{name}[{', '.join(map(str, at))}]" if a.ndim else name
            count = f" ({bad.size} such values)" if a.size > 1 else ""
            raise CompileError(f"{where} = {a[at].item()!r} is not an integer{count}; quantize "
                               "floats first")
    info = np.iinfo(dtype)
    if a.size and (a.min() < info.min or a.max() > info.max):
        what = f"{name} = {a.item()!r} is" if a.ndim == 0 else f"{name} has values"
        raise CompileError(f"{what} outside the {kind} range {info.min}..{info.max}")
    return a.astype(dtype)

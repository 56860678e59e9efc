"""The tensor-level compiler's errors."""

from __future__ import annotations

from tensorfab.isa import TensorfabError

__all__ = ["CompileError"]


class CompileError(TensorfabError, ValueError):
    """An operator, layout or schedule the compiler cannot map onto the accelerator
    (a ``ValueError`` too, so callers that catch that keep working). The message names
    the operand, the dimension or the schedule primitive at fault."""

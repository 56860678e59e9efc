"""Exceptions shared by the assembler, the executors and the compiler.

Every error names where the problem is: instruction index, engine and field for
program errors, file, line and column for assembly errors.
"""

from __future__ import annotations

from .csr import ErrorCode


class TensorfabError(Exception):
    """Base class of tensorfab's errors: the command line reports any of them in one
    line (``tensorfab: <message>``, exit status 2)."""


class UsageError(TensorfabError, ValueError):
    """An argument of the Python API outside its documented range (a ``ValueError``
    too, so callers that catch that keep working)."""


class ProgramError(TensorfabError):
    """An error attributable to one instruction of a program.

    Attributes
    ----------
    code : ErrorCode
        Architectural error code (as the hardware reports it in ERROR_CODE).
    index : int | None
        Index of the offending instruction in the program.
    engine : str | None
        Engine that executes it (``load``, ``compute``, ``store``).
    field : str | None
        Instruction or micro-op field at fault.
    """

    def __init__(self, message: str, *, code: ErrorCode = ErrorCode.NONE,
                 index: int | None = None, engine: str | None = None,
                 field: str | None = None) -> None:
        self.code = code
        self.index = index
        self.engine = engine
        self.field = field
        self.detail = message
        where = []
        if index is not None:
            where.append(f"instruction {index}")
        if engine is not None:
            where.append(f"{engine} engine")
        if field is not None:
            where.append(f"field {field}")
        prefix = f"{', '.join(where)}: " if where else ""
        tag = f" [{code.name}]" if code is not ErrorCode.NONE else ""
        super().__init__(f"{prefix}{message}{tag}")


class IllegalInstruction(ProgramError):
    """An encoding or field value the ISA forbids for this config."""


class AsmError(TensorfabError):
    """A syntax or semantic error in assembly text, located by file, line and column."""

    def __init__(self, message: str, *, line: int, column: int, source: str = "<asm>") -> None:
        self.line = line
        self.column = column
        self.source = source
        self.detail = message
        super().__init__(f"{source}:{line}:{column}: {message}")


class BinaryFormatError(TensorfabError):
    """A program binary that cannot be read (bad magic, truncated, inconsistent)."""

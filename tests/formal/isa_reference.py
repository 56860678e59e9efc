"""The ISA's field rules (BAD_FIELD) as Amaranth logic, for the proof that the
hardware's ``InsnCheck`` flags exactly the words the ISA rejects.

The logic is not written by hand: :func:`bad_field_logic` runs the ISA's own Python,
:func:`tensorfab.isa.check_insn`, on an instruction whose fields are symbolic (Amaranth
values cut from the word by the ISA's :class:`~tensorfab.isa.fields.Format`). Each
``if`` on a symbolic condition is a branch; every path through ``check_insn`` is run
(:func:`all_paths`), and the word is bad exactly when it satisfies the conditions of a
path that raises. An enumerated field becomes one of its members by the same branching
(none of them: BAD_FIELD, as ``decode_insn`` raises when ``enum(value)`` fails), a
flag field is its bit. So the reference shares nothing with the hardware's derivation
(``hw/insn_check.py`` writes the rules out again): what it trusts is ``check_insn``
itself and the format's declaration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from enum import IntEnum
from typing import Any

from amaranth.hdl import Cat, Const, Value

from tensorfab.isa import (
    ErrorCode,
    HwConfig,
    IllegalInstruction,
    Opcode,
    check_insn,
    insn_formats,
)
from tensorfab.isa.insn import INSN_CLASSES

__all__ = ["Path", "SymbolicBool", "SymbolicInt", "all_paths", "bad_field_logic"]


class Path:
    """One path through a run: the branch taken at each symbolic ``if`` (the given
    ``decisions`` first, then the false side) and the conditions that select it."""

    def __init__(self, decisions: list[bool]) -> None:
        self.decisions = decisions
        self.taken: list[bool] = []
        self.conditions: list[Value] = []

    def decide(self, condition: Value) -> bool:
        """The branch this path takes on ``condition``."""
        choice = (self.decisions[len(self.taken)] if len(self.taken) < len(self.decisions)
                  else False)
        self.taken.append(choice)
        self.conditions.append(condition if choice else ~condition)
        return choice

    def selected(self) -> Value:
        """The conditions under which a word takes this path."""
        return Cat(*self.conditions).all() if self.conditions else Const(1)


def all_paths(run: Callable[[Path], bool]) -> list[tuple[Path, bool]]:
    """Every path of ``run`` (a function of a :class:`Path` that branches with
    ``path.decide``) with its result, each explored once."""
    pending: list[list[bool]] = [[]]
    done = []
    while pending:
        prefix = pending.pop()
        path = Path(prefix)
        result = run(path)
        done.append((path, result))
        for i in range(len(prefix), len(path.taken)):
            pending.append(path.taken[:i] + [True])
    return done


class SymbolicBool:
    """A condition on the word; ``bool()`` of it is a branch of the path."""

    def __init__(self, path: Path, value: Value) -> None:
        self.path, self.value = path, Value.cast(value)

    def __bool__(self) -> bool:
        return self.path.decide(self.value)

    def __format__(self, spec: str) -> str:
        return "<symbolic>"


class SymbolicInt:
    """A field's value; comparisons give :class:`SymbolicBool`."""

    def __init__(self, path: Path, value: Value) -> None:
        self.path, self.value = path, Value.cast(value)

    def _other(self, other: object) -> Value:
        return other.value if isinstance(other, SymbolicInt) else Value.cast(other)

    def __lt__(self, other: object) -> SymbolicBool:
        return SymbolicBool(self.path, self.value < self._other(other))

    def __le__(self, other: object) -> SymbolicBool:
        return SymbolicBool(self.path, self.value <= self._other(other))

    def __gt__(self, other: object) -> SymbolicBool:
        return SymbolicBool(self.path, self.value > self._other(other))

    def __ge__(self, other: object) -> SymbolicBool:
        return SymbolicBool(self.path, self.value >= self._other(other))

    def __eq__(self, other: object) -> SymbolicBool:  # type: ignore[override]
        return SymbolicBool(self.path, self.value == self._other(other))

    def __ne__(self, other: object) -> SymbolicBool:  # type: ignore[override]
        return SymbolicBool(self.path, self.value != self._other(other))

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        return self.path.decide(self.value != 0)

    def __format__(self, spec: str) -> str:
        return "<symbolic>"


class _EnumOutOfRange(Exception):
    """A value of an enumerated field that is none of its members."""


def _member(path: Path, enum: type[IntEnum], value: Value) -> IntEnum:
    for member in enum:
        if path.decide(value == member.value):
            return member
    raise _EnumOutOfRange


def _flag_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if isinstance(f.default, bool)}


def bad_field_logic(word: Value, cfg: HwConfig, opcode: Opcode) -> Value:
    """Whether ``word``, an instruction of ``opcode`` (its opcode and reserved bits
    assumed right), breaks a field rule: an enumerated field out of range, or any rule
    of :func:`tensorfab.isa.check_insn`, which this runs on every path."""
    fmt = insn_formats(cfg)[opcode]
    cls = INSN_CLASSES[opcode]
    flags = _flag_fields(cls)
    offsets = fmt.offsets()

    def run(path: Path) -> bool:
        kwargs: dict[str, Any] = {}
        for f in fmt.fields:
            if f.name == "opcode":
                continue
            bits = word[offsets[f.name]:offsets[f.name] + f.width]
            value = bits.as_signed() if f.signed else bits
            if f.enum is not None:
                try:
                    kwargs[f.name] = _member(path, f.enum, value)
                except _EnumOutOfRange:
                    return True
            elif f.name in flags:
                kwargs[f.name] = SymbolicBool(path, value != 0)
            else:
                kwargs[f.name] = SymbolicInt(path, value)
        try:
            check_insn(cls(**kwargs), cfg)
        except IllegalInstruction as exc:
            if exc.code != ErrorCode.BAD_FIELD:
                raise
            return True
        return False

    bad = [path.selected() for path, is_bad in all_paths(run) if is_bad]
    return Cat(*bad).any() if bad else Const(0)

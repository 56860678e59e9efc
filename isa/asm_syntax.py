"""The assembly syntax's vocabulary, derived from the format declarations.

Assembly keys are format field names, except that some fields are written as a
group (``pad=1,1,0,0``, ``uop=0:4``, ``iter=2,3``, ``acc=1,4``). Flags (one-bit
boolean fields) are bare words. Enum fields named in :data:`MNEMONIC_FIELD` are
part of the mnemonic (``load.inp``, ``alu.add``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .config import HwConfig
from .formats import AluOp, Buffer, Opcode, insn_formats
from .insn import INSN_CLASSES, Insn

GROUPS: dict[str, tuple[tuple[str, ...], str]] = {
    "pad": (("pad_top", "pad_bottom", "pad_left", "pad_right"), ","),
    "uop": (("uop_begin", "uop_end"), ":"),
    "iter": (("iter_out", "iter_in"), ","),
    "acc": (("acc_factor_out", "acc_factor_in"), ","),
    "inp": (("inp_factor_out", "inp_factor_in"), ","),
    "wgt": (("wgt_factor_out", "wgt_factor_in"), ","),
    "dst": (("dst_factor_out", "dst_factor_in"), ","),
    "src": (("src_factor_out", "src_factor_in"), ","),
}
"""Assembly keys that stand for several fields, with their separator."""

MNEMONIC_FIELD: dict[Opcode, str] = {Opcode.LOAD: "buffer", Opcode.ALU: "op"}
"""Enum fields written as the mnemonic's suffix."""

ALWAYS_PRINTED = frozenset({"sram", "dram", "y", "x", "stride", "uop", "iter"})
"""Keys the disassembler prints even at their default value."""

REQUIRED = ALWAYS_PRINTED
"""Keys an instruction must give (no default): transfers' addresses and sizes, kernels'
micro-op range and loop counts. Padding, loop factors, ``imm`` and flags default to 0."""

IMPLIED = {"use_imm": "imm", "requant": "rec"}
"""Fields set by the presence of another key rather than written themselves."""


@dataclass(frozen=True)
class Key:
    """One assembly key of an instruction kind: its fields and separator."""

    name: str
    fields: tuple[str, ...]
    sep: str = ""

    @property
    def is_group(self) -> bool:
        return len(self.fields) > 1


@dataclass(frozen=True)
class Vocabulary:
    """Keys and flags of one opcode, in canonical print order."""

    opcode: Opcode
    keys: tuple[Key, ...]
    flags: tuple[str, ...]

    def key(self, name: str) -> Key | None:
        for k in self.keys:
            if k.name == name:
                return k
        return None

    def key_of_field(self, field: str) -> Key | None:
        """The key that writes ``field`` (for pointing errors at a column)."""
        for k in self.keys:
            if field in k.fields:
                return k
        if field in IMPLIED:
            return self.key(IMPLIED[field])
        return None


def vocabulary(cfg: HwConfig, opcode: Opcode) -> Vocabulary:
    """Assembly keys and flags of ``opcode``, derived from its format."""
    fmt = insn_formats(cfg)[opcode]
    cls = INSN_CLASSES[opcode]
    bools = {f.name for f in dataclasses.fields(cls) if isinstance(f.default, bool)}
    keys: list[Key] = []
    flags: list[str] = []
    grouped = {f: g for g, (fs, _) in GROUPS.items() for f in fs}
    seen_groups: set[str] = set()
    for f in fmt.fields:
        name = f.name
        if name == "opcode" or name == MNEMONIC_FIELD.get(opcode) or name in IMPLIED:
            continue
        if name in bools:
            flags.append(name)
        elif name in grouped:
            g = grouped[name]
            if g not in seen_groups:
                seen_groups.add(g)
                keys.append(Key(g, *GROUPS[g]))
        else:
            keys.append(Key(name, (name,)))
    # non-dependency flags (reset) before the four dependency flags
    deps = ("pop_prev", "pop_next", "push_prev", "push_next")
    flags = [f for f in flags if f not in deps] + [f for f in flags if f in deps]
    return Vocabulary(opcode, tuple(keys), tuple(flags))


def mnemonic_table() -> dict[str, tuple[Opcode, dict[str, object]]]:
    """Every mnemonic with its opcode and the enum field value it implies."""
    table: dict[str, tuple[Opcode, dict[str, object]]] = {}
    for op in Opcode:
        if op is Opcode.LOAD:
            for b in Buffer:
                table[f"load.{b.name.lower()}"] = (op, {"buffer": b})
        elif op is Opcode.ALU:
            for a in AluOp:
                table[f"alu.{a.name.lower()}"] = (op, {"op": a})
        else:
            table[op.name.lower()] = (op, {})
    return table


def defaults(cls: type[Insn]) -> dict[str, object]:
    """Default field values of an instruction class."""
    return {f.name: f.default for f in dataclasses.fields(cls)}


__all__ = ["ALWAYS_PRINTED", "GROUPS", "MNEMONIC_FIELD", "REQUIRED", "Key", "Vocabulary",
           "defaults", "mnemonic_table", "vocabulary"]

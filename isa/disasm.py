"""Disassembler: :class:`~.program.Program` to canonical assembly text.

Canonical text is what :func:`disassemble` prints; :func:`~.asm.assemble` of it gives
back the same program, and disassembling that gives the same text.
"""

from __future__ import annotations

import numpy as np

from .asm_syntax import ALWAYS_PRINTED, IMPLIED, defaults, vocabulary
from .config import PRESETS
from .insn import INSN_CLASSES, Insn, dram_unit
from .program import Program, check_segment_names

DATA_PER_LINE = 16


def _dram_text(prog: Program, insn: Insn, dram: int) -> str:
    cfg = prog.config
    unit = dram_unit(cfg, insn)
    byte = dram * unit
    for name, r in prog.layout().items():
        if name in ("insns", "end") or r.nbytes == 0:
            continue
        if r.offset <= byte < r.offset + r.nbytes and r.offset % unit == 0:
            k = dram - r.offset // unit
            return name if k == 0 else f"{name}+{k}"
    return str(dram)


def format_insn(insn: Insn, prog: Program) -> str:
    """One instruction in canonical assembly."""
    voc = vocabulary(prog.config, insn.opcode)
    vals = insn.values()
    dflt = defaults(INSN_CLASSES[insn.opcode])
    parts = [insn.mnemonic]
    for key in voc.keys:
        if key.name in IMPLIED.values():
            continue
        if key.name not in ALWAYS_PRINTED and all(vals[f] == int(dflt[f]) for f in key.fields):
            continue
        if key.name == "dram":
            parts.append(f"dram={_dram_text(prog, insn, vals['dram'])}")
        else:
            parts.append(f"{key.name}=" + key.sep.join(str(vals[f]) for f in key.fields))
    for implied_field, key_name in IMPLIED.items():
        if vals.get(implied_field):
            parts.append(f"{key_name}={vals[key_name]}")
    parts += [f for f in voc.flags if vals[f]]
    return " ".join(parts)


def _config_line(prog: Program) -> str:
    cfg = prog.config
    if PRESETS.get(cfg.name) == cfg:
        return f".config {cfg.name}"
    return ".config " + cfg.to_json().replace("\n", "").replace("  ", "")


def disassemble(prog: Program) -> str:
    """Canonical assembly text of a whole program (config, segments, data, micro-ops,
    instructions).

    Raises
    ------
    ProgramError
        A segment name assembly cannot read back
        (:func:`~.program.check_segment_names`).
    """
    check_segment_names(prog)
    lines = [_config_line(prog)]
    for s in prog.segments:
        shape = ",".join(str(d) for d in s.shape)
        lines.append(f".segment {s.name} {s.dtype} {shape}" + (" output" if s.output else ""))
        if s.data is not None:
            flat = np.asarray(s.data).ravel()
            for i in range(0, flat.size, DATA_PER_LINE):
                lines.append(f".data {s.name} " + " ".join(
                    str(int(v)) for v in flat[i: i + DATA_PER_LINE]))
    for u in prog.uops:
        lines.append(f".uop acc={u.acc} src={u.src} wgt={u.wgt}")
    lines += [format_insn(insn, prog) for insn in prog.insns]
    return "\n".join(lines) + "\n"


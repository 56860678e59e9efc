"""Program builder: instructions, micro-ops and segments with segment-relative DRAM
addresses, resolved into a :class:`~tensorfab.isa.Program` once the layout is known."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .config import HwConfig
from .errors import ProgramError
from .formats import Buffer
from .insn import Finish, Insn, Load, Store, Uop, segment_dram
from .program import UOP_SEGMENT, Program, Segment


class ProgramBuilder:
    """Accumulates instructions, micro-ops and segments, then resolves DRAM addresses.

    LOAD and STORE instructions may be emitted with ``dram`` relative to a named
    segment (``segment=`` argument of :meth:`emit`); :meth:`build` adds the segment's
    base, in entries of the transferred tile, once the layout (which depends on the
    number of instructions) is known.

    Parameters
    ----------
    cfg : HwConfig
        Configuration the program is built for.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        self.segments: list[Segment] = []
        self.uops: list[Uop] = []
        self._insns: list[Insn] = []
        self._seg_of: list[str | None] = []

    def __len__(self) -> int:
        return len(self._insns)

    def add_segment(self, segment: Segment) -> Segment:
        """Declare a DRAM segment (in layout order) and return it."""
        self.segments.append(segment)
        return segment

    def add_uops(self, uops: Sequence[Uop]) -> tuple[int, int]:
        """Append micro-ops to the table; returns their ``(uop_begin, uop_end)``."""
        begin = len(self.uops)
        self.uops.extend(uops)
        if len(self.uops) > self.cfg.uop_depth:
            raise ProgramError(f"{len(self.uops)} micro-ops do not fit uop_depth = "
                               f"{self.cfg.uop_depth}")
        return begin, len(self.uops)

    def emit(self, insn: Insn, segment: str | None = None) -> int:
        """Append ``insn``; returns its index.

        Parameters
        ----------
        insn : Insn
            The instruction.
        segment : str | None
            For LOAD and STORE: the segment ``insn.dram`` is relative to.
        """
        if segment is not None and not isinstance(insn, Load | Store):
            raise TypeError("only LOAD and STORE address DRAM segments")
        self._insns.append(insn)
        self._seg_of.append(segment)
        return len(self._insns) - 1

    def load_uops(self, **flags: bool) -> int:
        """Emit LOAD.UOP instruction(s) bringing the whole micro-op table (so far) to
        micro-op entry 0; returns the index of the last one. Flags go on the last one."""
        total = len(self.uops)
        if total == 0:
            raise ProgramError("no micro-ops to load")
        chunk = 1 << 15
        last = -1
        for start in range(0, total, chunk):
            x = min(chunk, total - start)
            last_chunk = start + x == total
            last = self.emit(Load(buffer=Buffer.UOP, sram=start, dram=start, y=1, x=x,
                                  stride=x, **(flags if last_chunk else {})),
                             segment=UOP_SEGMENT)
        return last

    def set_flags(self, index: int, **flags: bool) -> None:
        """Set dependency flags on an already emitted instruction (others unchanged)."""
        self._insns[index] = dataclasses.replace(self._insns[index], **flags)

    def insn(self, index: int) -> Insn:
        """The instruction at ``index`` (addresses not yet resolved)."""
        return self._insns[index]

    def build(self, *, finish: bool = True) -> Program:
        """The program, with FINISH appended (unless ``finish=False``) and segment-relative
        DRAM addresses resolved.

        Raises
        ------
        ProgramError
            If a segment base is not a whole number of entries, or the program is
            illegal (:meth:`Program.validate`).
        """
        if finish:
            self.emit(Finish())
        prog = Program(self.cfg, list(self._insns), list(self.uops), list(self.segments))
        layout = prog.layout()
        resolved: list[Insn] = []
        for i, (insn, seg) in enumerate(zip(self._insns, self._seg_of, strict=True)):
            if seg is not None:
                assert isinstance(insn, Load | Store)
                try:
                    base = segment_dram(self.cfg, insn, seg, layout[seg].offset)
                except ValueError as e:
                    raise ProgramError(str(e), index=i) from None
                insn = dataclasses.replace(insn, dram=insn.dram + base)
            resolved.append(insn)
        prog.insns = resolved
        prog.validate()
        return prog



__all__ = ["ProgramBuilder"]

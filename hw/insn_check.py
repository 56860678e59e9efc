"""Static legality check of one instruction word (combinational).

Implements, in hardware, exactly what :func:`tensorfab.isa.decode_insn` rejects:
``BAD_OPCODE`` (opcodes 5 to 7, and ALU in a config without the vector ALU),
``RESERVED_BITS`` (a bit above the last field of the opcode's format), and
``BAD_FIELD`` (an enumerated value out of range, such as an ALU op of 9 or more, and
every rule of :func:`tensorfab.isa.check_insn`). The precedence is the decoder's:
opcode, then reserved bits, then fields.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import (
    AluOp,
    Buffer,
    ErrorCode,
    HwConfig,
    Opcode,
    buffer_depth,
    insn_formats,
    insn_width,
)
from tensorfab.isa.formats import (
    MAX_SHIFT,
    REQUANT_RECORD_WORDS,
    alu_requant_supported,
    requant_supported,
)
from tensorfab.isa.insn import SHIFT_OPS

from .layouts import RESERVED, insn_layout

__all__ = ["InsnCheck"]


class InsnCheck(wiring.Component):
    """Combinational legality check of an instruction word.

    Parameters
    ----------
    cfg : HwConfig
        Configuration (field widths, buffer depths).

    Attributes
    ----------
    word : In(insn_width)
        The instruction word.
    ok : Out(1)
        The word is a legal instruction.
    code : Out(4)
        :class:`~tensorfab.isa.ErrorCode` of the first broken rule (``NONE`` if ok).
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        super().__init__({"word": In(insn_width(cfg)), "ok": Out(1), "code": Out(4)})

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        views = {op: insn_layout(cfg, op)(self.word) for op in Opcode}
        fmts = insn_formats(cfg)
        bad_field = Signal()
        reserved = Signal()
        known = Signal()
        opcode = views[Opcode.LOAD].opcode
        with m.Switch(opcode):
            for op in Opcode:
                if op is Opcode.ALU and not cfg.vector_alu:
                    continue  # not an instruction of the config: BAD_OPCODE
                with m.Case(op):
                    v = views[op]
                    m.d.comb += known.eq(1)
                    if fmts[op].width > fmts[op].used_bits:
                        m.d.comb += reserved.eq(getattr(v, RESERVED) != 0)
                    m.d.comb += bad_field.eq(self._field_rules(op, v))
        with m.If(~known):
            m.d.comb += self.code.eq(ErrorCode.BAD_OPCODE)
        with m.Elif(reserved):
            m.d.comb += self.code.eq(ErrorCode.RESERVED_BITS)
        with m.Elif(bad_field):
            m.d.comb += self.code.eq(ErrorCode.BAD_FIELD)
        with m.Else():
            m.d.comb += self.code.eq(ErrorCode.NONE)
        m.d.comb += self.ok.eq(self.code == ErrorCode.NONE)
        return m

    def _field_rules(self, op: Opcode, v: data.View) -> Value | int:
        """Whether any BAD_FIELD rule of ``op`` is broken by the word viewed as ``v``."""
        cfg = self.cfg
        bad = []
        if op == Opcode.LOAD:
            bad += [v.pop_prev, v.push_prev, v.y == 0, v.x == 0]
            for buf in Buffer:
                bad.append((v.buffer == buf) & (v.sram >= buffer_depth(cfg, buf)))
            pads = (v.pad_top != 0) | (v.pad_bottom != 0) | (v.pad_left != 0) | (v.pad_right != 0)
            bad.append((v.buffer == Buffer.UOP) & pads)
        elif op == Opcode.STORE:
            bad += [v.pop_next, v.push_next, v.y == 0, v.x == 0, v.sram >= cfg.acc_depth]
            if requant_supported(cfg):
                bad += [v.requant & (v.rec > cfg.acc_depth - REQUANT_RECORD_WORDS),
                        ~v.requant & (v.rec != 0)]
        elif op in (Opcode.GEMM, Opcode.ALU):
            bad += [v.uop_end > cfg.uop_depth, v.uop_begin >= v.uop_end,
                    v.iter_out == 0, v.iter_in == 0]
            if op == Opcode.ALU:
                bad.append(v.op >= len(AluOp))
                shift = 0
                for s in SHIFT_OPS:
                    shift = shift | (v.op == s)
                bad.append(v.use_imm & shift & ((v.imm < 0) | (v.imm > MAX_SHIFT)))
                bad.append(~v.use_imm & (v.imm != 0))
                requant = v.op == AluOp.REQUANT
                bad.append(requant & (v.use_imm if alu_requant_supported(cfg) else 1))
        out = 0
        for b in bad:
            out = out | b
        return out

"""The vector ALU: one element-wise int32 operation over an accumulator vector per cycle."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import AluOp, HwConfig, Opcode, insn_formats
from tensorfab.isa.formats import (
    MAX_SHIFT,
    REQUANT_MAX_SHIFT,
    REQUANT_MULTIPLIER_BITS,
    REQUANT_RECORD,
    SHIFT_OPS,
    requant_supported,
)

from .signatures import WGT_OFFSET, wgt_entry_order

__all__ = ["AluSignature", "VectorAlu", "alu_lane", "requant_lane"]


def alu_lane(m: Module, op: Value, a: Value, b: Value, width: int) -> Value:
    """Combinational logic of one lane: ``OP(a, b)`` as specified in docs/isa.md.

    Parameters
    ----------
    m : Module
        Module the lane's logic is added to.
    op : Value
        AluOp code; codes outside :class:`~tensorfab.isa.AluOp` give 0.
    a, b : Value
        Signed operands of ``width`` bits.
    width : int
        Element width (32).

    Returns
    -------
    Value
        A signed ``width``-bit signal holding the result. For a shift operation only
        the low five bits of ``b`` count here; :class:`VectorAlu` flags other amounts.
    """
    shift_bits = (width - 1).bit_length()
    out = Signal(signed(width))
    s = b.as_unsigned()[:shift_bits]
    # Values used more than once are Mux(op is theirs, value, <a signal>): Verilator
    # evaluates all logic every cycle, and keeps such a conditional as a branch (see
    # requant_lane), so each operation's arithmetic runs only when it is selected.
    mask = Signal(unsigned(width))
    m.d.comb += mask.eq(Mux(op == AluOp.SHR_RND, ((Const(1, width + 1) << s) - 1)[:width],
                            a.as_unsigned()))
    rem = a.as_unsigned() & mask
    thr = (mask >> 1) + a[width - 1]
    lo = ~b  # -b - 1, wrapping: the one's complement of b
    clipped_lo = Signal(signed(width))
    m.d.comb += clipped_lo.eq(Mux(op == AluOp.CLIP, Mux(a > lo, a, lo), a))
    # one 32x32 -> 64-bit product serves MUL (low half) and MULHI (rounded high half)
    prod = Signal(signed(2 * width))
    m.d.comb += prod.eq(Mux((op == AluOp.MUL) | (op == AluOp.MULHI), a * b, a))
    most_negative = Const(-(1 << (width - 1)), signed(width))
    # (a*b + 2^30) >> 31: gemmlowp's nudge and truncation
    high = ((prod + (1 << (width - 2))) >> (width - 1))[:width]
    with m.Switch(op):
        with m.Case(AluOp.ADD):
            m.d.comb += out.eq((a + b)[:width])
        with m.Case(AluOp.MUL):
            m.d.comb += out.eq(prod[:width])
        with m.Case(AluOp.MIN):
            m.d.comb += out.eq(Mux(a < b, a, b))
        with m.Case(AluOp.MAX):
            m.d.comb += out.eq(Mux(a > b, a, b))
        with m.Case(AluOp.SHR):
            m.d.comb += out.eq(a >> s)
        with m.Case(AluOp.SHR_RND):
            m.d.comb += out.eq((a >> s) + (rem > thr))
        with m.Case(AluOp.SHL):
            m.d.comb += out.eq((a << s)[:width])
        with m.Case(AluOp.CLIP):
            m.d.comb += out.eq(Mux(clipped_lo < b, clipped_lo, b))
        with m.Case(AluOp.MOV):
            m.d.comb += out.eq(b)
        with m.Case(AluOp.MULHI):  # saturate the one overflow, (-2^31)^2
            m.d.comb += out.eq(Mux((a == most_negative) & (b == most_negative),
                                   (1 << (width - 1)) - 1, high))
        with m.Default():
            m.d.comb += out.eq(0)
    return out


def requant_lane(m: Module, go: Value, a: Value, record: dict[str, Value]) -> Value:
    """Combinational REQUANT of one lane (docs/isa.md): ``clamp(RDBPOT((a + bias) ·
    multiplier, shift) + zero_point, lo, hi)``.

    Parameters
    ----------
    m : Module
        Module the lane's logic is added to.
    go : Value
        The operation is REQUANT (the result is only defined with ``go``; see the
        comment in the body on why the lane is written around it).
    a : Value
        The signed 32-bit accumulator.
    record : dict[str, Value]
        The channel's record fields (signed or unsigned as :data:`REQUANT_RECORD`
        declares them).

    Returns
    -------
    Value
        A signed 32-bit signal (the clamped result, with ``go``). Shifts past
        REQUANT_MAX_SHIFT give an unspecified result; :class:`VectorAlu` flags them.
    """
    # Intermediates are at most 64 bits wide (Verilator handles wider ones word by
    # word). Each is Mux(go, value, <another signal>): a conditional whose other arm is
    # a signal stays a branch in Verilator's C++, so the arithmetic runs only for
    # REQUANT (an arm of 0 would become a mask and always run).
    t = (a + record["bias"])[:32].as_signed()
    p = Signal(signed(63))  # |t · M| < 2^62 with the 31-bit multiplier
    m.d.comb += p.eq(Mux(go, t * record["multiplier"][:REQUANT_MULTIPLIER_BITS], a))
    n = record["shift"][:6]
    sh = Signal(7)  # 64 - n: masks made by right shifts keep 64 bits
    m.d.comb += sh.eq(Mux(go, 64 - n, n))
    # RoundingDivideByPOT as (p + nudge) >> n: nudge 2^(n-1), less one for p < 0
    nudge = Mux(p[62], Const((1 << 63) - 1, 64) >> sh, Const(1 << 63, 64) >> sh)[:62]
    r = Signal(signed(64))
    m.d.comb += r.eq(Mux(go, (p + nudge) >> n, p))
    # clamp(r + Z, lo, hi) = clamp(r, lo - Z, hi - Z) + Z: the wide value compared
    zp = record["zero_point"]
    lo = Signal(signed(9))
    hi = Signal(signed(9))
    m.d.comb += [lo.eq(Mux(go, record["lo"] - zp, zp)), hi.eq(Mux(go, record["hi"] - zp, zp))]
    r_lo = Signal(signed(64))
    m.d.comb += r_lo.eq(Mux(go, Mux(r > lo, r, lo), r))
    out = Signal(signed(32))  # within [lo, hi] or hi: 10 bits hold the clamped value
    m.d.comb += out.eq(Mux(go, Mux(r_lo < hi, r_lo, hi)[:10].as_signed() + zp, r_lo[:32]))
    return out


def AluSignature(cfg: HwConfig) -> wiring.Signature:
    """The vector ALU's ports, as :class:`VectorAlu` sees them.

    ``op``, ``a``, ``b``, ``rec`` and ``in_valid`` in; ``result``, ``out_valid`` and
    ``shift_error`` out. Vectors are ``ArrayLayout(signed(acc_width), batch·block_out)``;
    ``rec`` is a weight-buffer entry (REQUANT's records, as the buffer stores them).
    """
    vec = data.ArrayLayout(signed(cfg.acc_width), cfg.batch * cfg.block_out)
    op_width = insn_formats(cfg)[Opcode.ALU].field("op").width
    return wiring.Signature({
        "op": In(op_width),
        "a": In(vec),
        "b": In(vec),
        "rec": In(cfg.block_out * cfg.block_in * cfg.wgt_width),
        "in_valid": In(1),
        "result": Out(vec),
        "out_valid": Out(1),
        "shift_error": Out(1),
    })


class VectorAlu(wiring.Component):
    """Element-wise ALU over ``batch × block_out`` int32 lanes; the compute engine's ALU.

    Combinational (:attr:`LATENCY` = 0): the compute engine feeds it the outputs of
    the accumulator buffer's read ports and writes its result back in the same cycle,
    so a read-modify-write of one entry spans one cycle and back-to-back micro-ops on
    one entry need no stall. Operations follow the ALU table of docs/isa.md bit for
    bit; an op code outside :class:`~tensorfab.isa.AluOp` (which the decoder rejects
    as ``BAD_FIELD``) yields zeros. MULHI shares MUL's 32×32-bit multiplier (MUL keeps
    the low half of the product, MULHI the rounded high half), so it adds no pipeline
    stage. REQUANT (where :func:`~tensorfab.isa.formats.requant_supported`) takes each
    lane's channel record from :attr:`rec` instead of ``b``.

    Parameters
    ----------
    cfg : HwConfig
        Gives the lane count (``batch * block_out``), the element width
        (``acc_width``) and the op field width.

    Attributes
    ----------
    op : In(unsigned)
        AluOp code, as wide as the ALU instruction's ``op`` field.
    a, b : In(ArrayLayout(signed(acc_width), lanes))
        Operand vectors; lane ``i`` occupies bits ``[32 i, 32 i + 32)``.
    rec : In(block_out · block_in · wgt_width)
        The weight entry holding REQUANT's records (column-major, offset binary, as
        :func:`~tensorfab.hw.signatures.wgt_entry_order` stores weights).
    in_valid : In(1)
        The inputs hold an operation this cycle.
    result : Out(ArrayLayout(signed(acc_width), lanes))
        ``OP(a, b)`` per lane (for a shift, by the low five bits of ``b``).
    out_valid : Out(1)
        ``in_valid``, :attr:`LATENCY` cycles later.
    shift_error : Out(1)
        With ``out_valid``: the operation is a shift and some lane's ``b`` is outside
        ``0..MAX_SHIFT``, or REQUANT and some record's shift is past
        ``REQUANT_MAX_SHIFT`` (the engine's ``SHIFT_RANGE``; the result must not be
        written).
    """

    #: Cycles from an accepted input to its result.
    LATENCY = 0

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        self.lanes = cfg.batch * cfg.block_out
        self.width = cfg.acc_width
        super().__init__(AluSignature(cfg))

    def elaborate(self, platform: object) -> Module:
        """Build the lanes."""
        m = Module()
        cfg = self.cfg
        bad = []
        records = self._records() if requant_supported(cfg) else None
        is_requant = Signal()
        m.d.comb += is_requant.eq(self.op == AluOp.REQUANT)
        for i in range(self.lanes):
            a, b = self.a[i].as_signed(), self.b[i].as_signed()
            lane = alu_lane(m, self.op, a, b, self.width)
            if records is not None:
                lane = Mux(is_requant, requant_lane(m, is_requant, a,
                                                    records[i % cfg.block_out]), lane)
            m.d.comb += self.result[i].eq(lane)
            bad.append(b.as_unsigned() > MAX_SHIFT)
        is_shift = Signal()
        m.d.comb += is_shift.eq(Cat(*(self.op == op for op in sorted(SHIFT_OPS))).any())
        shift_bad = is_shift & Cat(*bad).any()
        if records is not None:
            rec_bad = Signal()  # the other arm a signal: checked only for REQUANT
            m.d.comb += rec_bad.eq(Mux(is_requant, Cat(*(r["shift"] > REQUANT_MAX_SHIFT
                                                         for r in records)).any(), is_requant))
            shift_bad = shift_bad | rec_bad
        m.d.comb += [self.out_valid.eq(self.in_valid),
                     self.shift_error.eq(self.in_valid & shift_bad)]
        return m

    def _records(self) -> list[dict[str, Value]]:
        """Each channel's REQUANT record fields, wired out of :attr:`rec`."""
        cfg = self.cfg
        order = wgt_entry_order(cfg)  # buffer byte of row byte w[o][k]
        rec = self.rec
        out = []
        for o in range(cfg.block_out):
            row = [rec[8 * order[o * cfg.block_in + k]:][:8] ^ WGT_OFFSET
                   for k in range(cfg.block_in)]
            fields: dict[str, Value] = {}
            for name, offset, size, is_signed in REQUANT_RECORD:
                raw = Cat(*row[offset:offset + size])
                fields[name] = raw.as_signed() if is_signed else raw
            out.append(fields)
        return out

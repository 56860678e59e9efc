"""The compute engine's fast reset: a resetting GEMM's accumulator lines zeroed
many entries per cycle through the zero flags."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import ErrorCode, HwConfig, Opcode
from tensorfab.isa.config import log2
from tensorfab.isa.formats import LOOP_ITER_WIDTH

from .layouts import insn_layout, uop_layout
from .signatures import ZeroSignature, zero_lanes
from .uop_loop import INDEX_WIDTH

__all__ = ["FastReset"]


class FastReset(wiring.Component):
    """Zeroes lines ``acc + i·acc_factor_out + [0, iter_in)`` for ``i < iter_out``.

    A GEMM with ``reset`` whose accumulator indices run in contiguous lines
    (:func:`~tensorfab.isa.insn.fast_reset_condition`) does not go through the
    micro-op pipeline: after ``start`` it reads its one micro-op (``uop_rd_en``, the
    compute engine registers it into ``acc``, ``src`` and ``wgt`` two cycles later),
    checks its fields as the micro-op loop would, then zeroes each line through
    :attr:`acc_zero`, up to :func:`~.signatures.zero_lanes` entries per cycle (the
    part of the line within one row of zero flags). States: ``IDLE``, ``UOP`` (the
    read), ``READ`` (the read data registered), ``CHECK``, ``ZERO``; ``stop`` returns
    to ``IDLE`` from any of them.

    Parameters
    ----------
    cfg : HwConfig
        Accelerator configuration.

    Attributes
    ----------
    start : In(1)
        Begin (the instruction's fields are read from then on until ``done``).
    stop : In(1)
        Halt or an error: back to idle.
    iter_out, iter_in, acc_factor_out : In(...)
        The GEMM's fields.
    acc, src, wgt : In(...)
        The micro-op's fields, registered (valid from the ``CHECK`` state).
    uop_rd_en : Out(1)
        Read the micro-op this cycle.
    acc_zero : Out(ZeroSignature(cfg))
        The zero flags' write port: ``en`` in every ``ZERO`` cycle, the mask empty
        when nothing is zeroed.
    acc_zero_next : Out(1)
        ``acc_zero.en``'s next value (its register's input): the next cycle is a
        ``ZERO`` cycle.
    zeroing, zeroed : Out(1), Out(range(lanes + 1))
        Entries are zeroed this cycle, and how many.
    fail, code : Out(1), Out(4)
        An index is out of range (``UOP_RANGE``: the micro-op's input field;
        ``SRAM_RANGE``: its weight field or an accumulator entry); the state is kept
        until ``stop``.
    done : Out(1)
        The last entry is zeroed this cycle.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        uop = uop_layout(cfg)
        self.lanes = zero_lanes(cfg)
        super().__init__({
            "start": In(1),
            "stop": In(1),
            "iter_out": In(LOOP_ITER_WIDTH),
            "iter_in": In(LOOP_ITER_WIDTH),
            "acc_factor_out": In(insn_layout(cfg, Opcode.GEMM)["acc_factor_out"].shape),
            "acc": In(uop["acc"].shape),
            "src": In(uop["src"].shape),
            "wgt": In(uop["wgt"].shape),
            "uop_rd_en": Out(1),
            "acc_zero": Out(ZeroSignature(cfg)),
            "acc_zero_next": Out(1),
            "zeroing": Out(1),
            "zeroed": Out(range(self.lanes + 1)),
            "fail": Out(1),
            "code": Out(4),
            "done": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        lanes = self.lanes
        lb = log2(lanes)
        f_out = Signal.like(self.acc_factor_out)
        line, line_last = Signal(LOOP_ITER_WIDTH), Signal(LOOP_ITER_WIDTH)
        z_next_line = Signal(INDEX_WIDTH)  # first entry of the next line
        z_a = Signal(INDEX_WIDTH)  # next entry to zero
        z_left = Signal(LOOP_ITER_WIDTH + 1)  # entries of the line still to zero
        z_off = Signal(lb)
        # the mask: lanes z_off .. min(z_off + z_left, lanes) - 1, each bit compared
        # with one sum (a shifted run of ones took three carry chains in a row to the
        # zero flags' write enables, an FPGA critical path). The sum is of z_off and
        # min(z_left, lanes + 1), lb + 2 bits wide, which decides the mask and the
        # line's end as the full sum would, without a carry chain of z_left's width.
        # The mask is a register, z_mask, set with z_a and z_left from their new
        # values (the sum and comparisons from z_left fed the flags' write enables and
        # the read ports' flag registers in one cycle, an FPGA critical path).
        z_end = Signal(lb + 2)
        z_mask = Signal(lanes)
        # z_left > lanes and iter_in > lanes as registers (set with z_left, and in
        # READ), so that no comparison of their full width precedes the sums;
        # min(iter_in, lanes + 1) too, and the next line's start, so that a new line's
        # mask is one short sum of registers and its comparisons (from the
        # instruction's fields, an FPGA critical path)
        z_over = Signal()
        z_iter_over = Signal()
        z_iter_len = Signal(lb + 2)

        def clipped(left: Value, over: Value) -> Value:
            """``min(left, lanes + 1)``, given ``over`` = ``left > lanes`` (only
            ``left``'s low lb + 1 bits are read)."""
            return Mux(over, lanes + 1, left[:lb + 1])

        def lane_mask(off: Value, length: Value) -> Value:
            """The lanes ``off .. min(off + length, lanes) - 1``."""
            end = off + length
            return Cat(*((end > k) & (off <= k if k < lanes - 1 else 1)  # (off < lanes)
                         for k in range(lanes)))
        line_end = Signal()  # the rest of the line fits this cycle's row of flags
        m.d.comb += [z_off.eq(z_a[:lb]),
                     z_end.eq(z_off + clipped(z_left, z_over)), line_end.eq(z_end <= lanes),
                     self.zeroed.eq(Mux(self.zeroing,
                                        Mux(line_end, z_left, lanes - z_off), 0)),
                     self.acc_zero.row.eq(z_a >> lb),
                     self.acc_zero.mask.eq(Mux(self.zeroing, z_mask, 0))]

        def fail(code: ErrorCode) -> list:
            return [self.fail.eq(1), self.code.eq(code)]

        # in the ZERO state, as a register of its own set and cleared with the state's
        # transitions: acc_zero.en takes the accumulators' write port from the load
        # engine, whose ready then starts at a flip-flop, not at the state's decode (an
        # FPGA critical path into the load engine's transfer state). Its input is an
        # output too (``acc_zero_next``): the load engine registers from it whether
        # the port is taken.
        in_zero = Signal()
        in_zero_next = Signal()
        m.d.comb += [self.acc_zero.en.eq(in_zero), self.acc_zero_next.eq(in_zero_next),
                     in_zero_next.eq(in_zero)]
        m.d.sync += in_zero.eq(in_zero_next)

        with m.FSM():
            with m.State("IDLE"), m.If(self.start):
                m.d.sync += [f_out.eq(self.acc_factor_out), line.eq(0),
                             line_last.eq(self.iter_out - 1)]
                m.next = "UOP"
            with m.State("UOP"):  # read the micro-op
                m.d.comb += self.uop_rd_en.eq(1)
                m.next = "READ"
                with m.If(self.stop):
                    m.next = "IDLE"
            with m.State("READ"):  # the micro-op is registered
                iter_over = self.iter_in > lanes
                m.d.sync += [z_iter_over.eq(iter_over),
                             z_iter_len.eq(clipped(self.iter_in, iter_over))]
                m.next = "CHECK"
                with m.If(self.stop):
                    m.next = "IDLE"
            with m.State("CHECK"):  # its fields, as the micro-op loop checks them
                with m.If(self.stop):
                    m.next = "IDLE"
                with m.Elif(self.src >= cfg.inp_depth):
                    m.d.comb += fail(ErrorCode.UOP_RANGE)
                with m.Elif(self.wgt >= cfg.wgt_depth):
                    m.d.comb += fail(ErrorCode.SRAM_RANGE)
                with m.Else():
                    m.d.sync += [z_next_line.eq(self.acc + f_out), z_a.eq(self.acc),
                                 z_left.eq(self.iter_in), z_over.eq(z_iter_over),
                                 z_mask.eq(lane_mask(self.acc[:lb], z_iter_len))]
                    m.d.comb += in_zero_next.eq(1)
                    m.next = "ZERO"
            with m.State("ZERO"):  # zero up to `lanes` entries per cycle
                with m.If(self.stop):
                    m.d.comb += in_zero_next.eq(0)
                    m.next = "IDLE"
                with m.Elif(z_a[cfg.acc_bits:].any()):  # z_a >= acc_depth
                    m.d.comb += fail(ErrorCode.SRAM_RANGE)
                with m.Else():
                    m.d.comb += self.zeroing.eq(1)
                    with m.If(line_end):  # line done
                        m.d.sync += [z_next_line.eq(z_next_line + f_out),
                                     z_a.eq(z_next_line), z_left.eq(self.iter_in),
                                     z_over.eq(z_iter_over),
                                     z_mask.eq(lane_mask(z_next_line[:lb], z_iter_len)),
                                     line.eq(line + 1)]
                        with m.If(line == line_last):
                            m.d.comb += self.done.eq(1)
                            m.d.comb += in_zero_next.eq(0)
                            m.next = "IDLE"
                    with m.Else():  # the rest of the row: on to the next row's start
                        # the new z_left (z_left + z_off - lanes) and its mask from
                        # a short sum of z_left's low bits and z_off, and its high
                        # bits, not from the new value's carry chain: lane k is
                        # zeroed if the new z_left exceeds k
                        low = z_left[:lb + 2] + z_off
                        rest_over = z_left[lb + 2:].any() | (low > 2 * lanes)
                        m.d.sync += [z_a.eq(Cat(Const(0, lb), z_a[lb:] + 1)),
                                     z_left.eq(z_left + z_off - lanes),
                                     z_over.eq(rest_over),
                                     z_mask.eq(Cat(*(rest_over | (low > lanes + k)
                                                     for k in range(lanes))))]
        return m

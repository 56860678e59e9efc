"""The compute engine's micro-op loop: which micro-op to read next and the index
offsets to add to it."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa.formats import LOOP_ITER_WIDTH

__all__ = ["INDEX_WIDTH", "OFFSETS", "UopLoop"]

#: Width of the index arithmetic: wide enough for any base + (2^14-1) * factor sum.
INDEX_WIDTH = 32
#: Offsets kept per micro-op: accumulator (destination), input (source), weight.
OFFSETS = 3


class UopLoop(wiring.Component):
    """The loops of a GEMM or ALU instruction (docs/isa.md)::

        for i in range(iter_out):
            for j in range(iter_in):
                for u in range(uop_begin, uop_end):
                    offsets = i * factor_out + j * factor_in   # per index kind

    ``start`` loads the instruction's fields (the decoder rejects empty loops); each
    cycle with ``step`` moves to the next iteration. The offsets are sums kept
    incrementally (one adder per kind, no multiplier); the next values are computed
    whether or not the loop steps, so ``step`` (the compute engine's interlock, late in
    the cycle) only enables the registers. The loop ends and the factors are registered
    at the start: each end is one comparison of two registers.

    Parameters
    ----------
    uop_bits : int
        Width of a micro-op index (``uop_end`` is one bit wider).
    factor_width : int
        Width of the factor fields.

    Attributes
    ----------
    start : In(1)
        Load ``uop_begin`` .. ``factor_out`` and restart at the first iteration.
    uop_begin, uop_end, iter_out, iter_in : In(...)
        The instruction's loop bounds (read at ``start``).
    factor_in, factor_out : In(ArrayLayout(factor_width, 3))
        Steps of the accumulator, input and weight offsets (read at ``start``).
    step : In(1)
        Move to the next iteration this cycle.
    uop : Out(uop_bits + 1)
        The micro-op of the current iteration.
    offsets : Out(ArrayLayout(INDEX_WIDTH, 3))
        Its accumulator, input and weight offsets.
    last : Out(1)
        The current iteration is the last one.
    """

    def __init__(self, uop_bits: int, factor_width: int) -> None:
        self.uop_bits = uop_bits
        factors = data.ArrayLayout(unsigned(factor_width), OFFSETS)
        super().__init__({
            "start": In(1),
            "uop_begin": In(uop_bits + 1),
            "uop_end": In(uop_bits + 1),
            "iter_out": In(LOOP_ITER_WIDTH),
            "iter_in": In(LOOP_ITER_WIDTH),
            "factor_in": In(factors),
            "factor_out": In(factors),
            "step": In(1),
            "uop": Out(uop_bits + 1),
            "offsets": Out(data.ArrayLayout(unsigned(INDEX_WIDTH), OFFSETS)),
            "last": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        u = Signal(self.uop_bits + 1)
        j = Signal(LOOP_ITER_WIDTH)
        i = Signal(LOOP_ITER_WIDTH)
        # row: the offsets at the start of the current j loop; cur: of this iteration
        row = [Signal(INDEX_WIDTH, name=f"row{k}") for k in range(OFFSETS)]
        cur = [Signal(INDEX_WIDTH, name=f"cur{k}") for k in range(OFFSETS)]
        u_last, j_last, i_last = Signal.like(u), Signal.like(j), Signal.like(i)
        q_uop_begin = Signal.like(u)
        q_f_in = [Signal.like(self.factor_in[k], name=f"q_f_in{k}") for k in range(OFFSETS)]
        q_f_out = [Signal.like(self.factor_out[k], name=f"q_f_out{k}")
                   for k in range(OFFSETS)]
        last_u = u == u_last
        last_j = j == j_last
        last_i = i == i_last
        m.d.comb += [self.uop.eq(u), self.last.eq(last_u & last_j & last_i)]
        m.d.comb += [self.offsets[k].eq(cur[k]) for k in range(OFFSETS)]

        u_next, j_next, i_next = Signal.like(u), Signal.like(j), Signal.like(i)
        row_next = [Signal(INDEX_WIDTH, name=f"row_next{k}") for k in range(OFFSETS)]
        cur_next = [Signal(INDEX_WIDTH, name=f"cur_next{k}") for k in range(OFFSETS)]
        row_step = [row[k] + q_f_out[k] for k in range(OFFSETS)]
        m.d.comb += [u_next.eq(Mux(last_u, q_uop_begin, u + 1)),
                     j_next.eq(Mux(last_u, Mux(last_j, 0, j + 1), j)),
                     i_next.eq(Mux(last_u & last_j & ~last_i, i + 1, i))]
        m.d.comb += [row_next[k].eq(Mux(last_u & last_j, row_step[k], row[k]))
                     for k in range(OFFSETS)]
        m.d.comb += [cur_next[k].eq(Mux(~last_u, cur[k],
                                        Mux(last_j, row_step[k], cur[k] + q_f_in[k])))
                     for k in range(OFFSETS)]
        with m.If(self.start):
            m.d.sync += [u.eq(self.uop_begin), j.eq(0), i.eq(0),
                         u_last.eq(self.uop_end - 1), j_last.eq(self.iter_in - 1),
                         i_last.eq(self.iter_out - 1), q_uop_begin.eq(self.uop_begin)]
            m.d.sync += [row[k].eq(0) for k in range(OFFSETS)]
            m.d.sync += [cur[k].eq(0) for k in range(OFFSETS)]
            m.d.sync += [q_f_in[k].eq(self.factor_in[k]) for k in range(OFFSETS)]
            m.d.sync += [q_f_out[k].eq(self.factor_out[k]) for k in range(OFFSETS)]
        with m.Elif(self.step):
            m.d.sync += [u.eq(u_next), j.eq(j_next), i.eq(i_next)]
            m.d.sync += [row[k].eq(row_next[k]) for k in range(OFFSETS)]
            m.d.sync += [cur[k].eq(cur_next[k]) for k in range(OFFSETS)]
        return m

"""The compute engine's GEMM write-back: each GEMM micro-op's products added to its
accumulator entry (or the entry zeroed with ``reset``)."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import HwConfig

from .signatures import ReadRequestSignature, WriteRequestSignature, acc_entry_bits

__all__ = ["GemmWriteBack"]


class GemmWriteBack(wiring.Component):
    """``acc[a] = 0 if reset else acc[a] + products``, one GEMM micro-op per cycle.

    A micro-op enters at S2 (``valid``, ``addr``, ``reset``), when its operands enter
    the :class:`~.gemm.GemmCore`; its products come out ``latency`` cycles later, at
    S2+L (zero for a resetting micro-op: the core's ``in_clear``). A delay line carries
    the micro-op along; its destination entry is read three cycles before the
    write-back (S2+L-3, ``acc_rd``). The engine registers the read data as it leaves
    the block RAM, in a register the ALU reads too (``fetched``, at S2+L-1: an FPGA's
    block RAM output comes late in its cycle, and the accumulator's blocks are spread
    over the die, so nothing but one register follows them). This block registers the
    entry again at S2+L-1 (``acc_reg``) and at S2+L writes the sum of that register and
    the products (wrapping at ``acc_width`` bits, each lane; ``acc_wr``).

    Back-to-back micro-ops on one entry need no stall. The read port is transparent to
    the write port, so the read sees every write up to its own cycle; the two writes
    after it come from the write-back itself and are taken instead of ``fetched``: the
    sum written now (from the micro-op one ahead) or, failing that, the one written in
    the cycle before (from the micro-op two ahead, kept in ``written``), each chosen by
    an address comparison made a cycle ahead from the delay line. ``acc_reg`` takes zero
    for a resetting micro-op. Nothing but the adders lies between it and the write
    port. Nothing else writes the accumulators while GEMM micro-ops are in flight (the
    compute engine drains its pipeline between instructions).

    Parameters
    ----------
    cfg : HwConfig
        Accelerator configuration.
    latency : int
        The GEMM core's latency (``GemmCore.LATENCY``, at least 3).

    Attributes
    ----------
    valid, addr, reset : In(1), In(acc_bits), In(1)
        A GEMM micro-op enters the GEMM core; the entry it accumulates into; it resets.
    products : In(ArrayLayout(signed(acc_width), batch · block_out))
        The GEMM core's result for the micro-op at S2+L (zero for one that resets).
    acc_rd : Out(ReadRequestSignature(acc_bits))
        The destination read (transparent to the accumulator write port).
    fetched : In(acc entry)
        ``acc_rd``'s data registered: two cycles after ``acc_rd.en``, at S2+L-1.
    acc_wr : Out(WriteRequestSignature(acc_bits, acc entry))
        The write-back of the micro-op at S2+L.
    acc_wr_next : Out(1)
        ``acc_wr.en``'s next value: a micro-op is at S2+L-1, written back in the next
        cycle.
    busy : Out(1)
        A micro-op is between S2 and S2+L.
    """

    def __init__(self, cfg: HwConfig, latency: int) -> None:
        if latency < 3:
            raise ValueError(f"GemmWriteBack: latency = {latency}; at least 3 (the"
                             " destination is read three cycles before the write-back)")
        self.cfg = cfg
        self.latency = latency
        vec_bits = acc_entry_bits(cfg)
        lanes = cfg.batch * cfg.block_out
        super().__init__({
            "valid": In(1),
            "addr": In(cfg.acc_bits),
            "reset": In(1),
            "products": In(data.ArrayLayout(signed(cfg.acc_width), lanes)),
            "acc_rd": Out(ReadRequestSignature(cfg.acc_bits)),
            "fetched": In(vec_bits),
            "acc_wr": Out(WriteRequestSignature(cfg.acc_bits, vec_bits)),
            "acc_wr_next": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        lat = self.latency
        lanes = cfg.batch * cfg.block_out
        vec_shape = unsigned(len(self.acc_wr.data))
        # the delay line: entry k is the micro-op at stage S2+k
        dl_valid = [Signal(name=f"dl_valid{k}") for k in range(lat + 1)]
        dl_addr = [Signal(cfg.acc_bits, name=f"dl_addr{k}") for k in range(lat + 1)]
        dl_reset = [Signal(name=f"dl_reset{k}") for k in range(lat + 1)]
        m.d.comb += [dl_valid[0].eq(self.valid), dl_addr[0].eq(self.addr),
                     dl_reset[0].eq(self.reset)]
        for k in range(1, lat + 1):
            m.d.sync += [dl_valid[k].eq(dl_valid[k - 1]), dl_addr[k].eq(dl_addr[k - 1]),
                         dl_reset[k].eq(dl_reset[k - 1])]
        wb_valid, wb_addr = dl_valid[lat], dl_addr[lat]
        # the destination read three cycles before the write-back; its data comes
        # registered (`fetched`) at S2+L-1
        m.d.comb += [self.acc_rd.addr.eq(dl_addr[lat - 3]), self.acc_rd.en.eq(dl_valid[lat - 3])]

        # wide datapath registers below have no reset: with one, Verilator copies every
        # word of them on every cycle; the valid bits say what they hold.
        # for the micro-op at S2+L-1: the one at S2+L accumulates into its entry
        # (`take_sum`, unless it resets: the sum now is its value) or, failing that, the
        # one at S2+L in the cycle before did (`ahead2`: the sum then, `written`); both
        # compared a cycle ahead
        take_sum = Signal()
        ahead2 = Signal()
        m.d.sync += [take_sum.eq(dl_valid[lat - 1] & (dl_addr[lat - 1] == dl_addr[lat - 2])
                                 & ~dl_reset[lat - 2]),
                     ahead2.eq(wb_valid & (wb_addr == dl_addr[lat - 2]))]
        written = Signal(vec_shape, reset_less=True)  # the sum written in the cycle before
        acc_reg = Signal(vec_shape, reset_less=True)  # the entry's value, at S2+L
        acc_old = data.View(data.ArrayLayout(unsigned(cfg.acc_width), lanes), acc_reg)
        sums = Signal(vec_shape)
        m.d.comb += sums.eq(Cat(*[(acc_old[k] + self.products[k].as_unsigned())[:cfg.acc_width]
                                  for k in range(lanes)]))
        with m.If(wb_valid):
            m.d.sync += written.eq(sums)
        older = Mux(dl_reset[lat - 1], 0, Mux(ahead2, written, self.fetched))
        with m.If(dl_valid[lat - 1]):
            m.d.sync += acc_reg.eq(Mux(take_sum, sums, older))
        m.d.comb += [self.acc_wr.addr.eq(wb_addr), self.acc_wr.data.eq(sums),
                     self.acc_wr.en.eq(wb_valid), self.acc_wr_next.eq(dl_valid[lat - 1]),
                     self.busy.eq(Cat(*dl_valid).any())]
        return m

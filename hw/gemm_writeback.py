"""The compute engine's GEMM write-back: the accumulator entry each GEMM micro-op adds
its products to, read ahead and written back."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import HwConfig

__all__ = ["GemmWriteback"]


class GemmWriteback(wiring.Component):
    """GEMM micro-ops from the compute engine's S2 to their accumulator write at S2+L.

    A micro-op entering at S2 (``valid``, its entry ``addr``, ``reset``) moves down a
    delay line of ``latency`` (L, the :class:`~.gemm.GemmCore`'s) stages. Two cycles
    before its write-back it asks for its entry (``rd_en``, ``rd_addr``); the read data
    is registered, and the accumulator write of the cycle in between, which the read
    could not see, is forwarded (``acc_wr_*``, whoever wrote it): back-to-back
    micro-ops on one entry need no stall. At S2+L the write request (``wb_valid``,
    ``wb_addr``, ``wb_data``) holds the entry plus the products, or 0 with ``reset``.
    Whether to forward is compared a cycle ahead, with the delay line's address one
    stage before the write-back, so that a register, not a comparison, selects the
    data ahead of the adders.

    Parameters
    ----------
    cfg : HwConfig
        Accelerator configuration.
    latency : int
        The GEMM core's latency (at least 2).

    Attributes
    ----------
    valid, addr, reset : In(1), In(cfg.acc_bits), In(1)
        A GEMM micro-op at S2: its accumulator entry, and whether it resets it.
    products : In(ArrayLayout(signed(acc_width), lanes))
        The GEMM core's result for the micro-op at S2+L.
    rd_en, rd_addr : Out(1), Out(cfg.acc_bits)
        The read of the entry written back two cycles later.
    rd_data : In(acc entry)
        The read's data (a cycle after ``rd_en``).
    acc_wr_en, acc_wr_addr, acc_wr_data : In(1), In(cfg.acc_bits), In(acc entry)
        The accumulator port's write this cycle (this unit's or another's).
    wb_valid, wb_addr, wb_data : Out(1), Out(cfg.acc_bits), Out(acc entry)
        The write-back of the micro-op at S2+L.
    busy : Out(1)
        A micro-op is in the delay line (S3 to S2+L).
    """

    def __init__(self, cfg: HwConfig, latency: int) -> None:
        if latency < 2:
            raise ValueError(f"latency = {latency}: the destination is read two cycles "
                             "before the write-back, so at least 2")
        self.cfg = cfg
        self.latency = latency
        lanes = cfg.batch * cfg.block_out
        acc_bits = lanes * cfg.acc_width
        super().__init__({
            "valid": In(1),
            "addr": In(cfg.acc_bits),
            "reset": In(1),
            "products": In(data.ArrayLayout(unsigned(cfg.acc_width), lanes)),
            "rd_en": Out(1),
            "rd_addr": Out(cfg.acc_bits),
            "rd_data": In(acc_bits),
            "acc_wr_en": In(1),
            "acc_wr_addr": In(cfg.acc_bits),
            "acc_wr_data": In(acc_bits),
            "wb_valid": Out(1),
            "wb_addr": Out(cfg.acc_bits),
            "wb_data": Out(acc_bits),
            "busy": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        lat = self.latency
        lanes = cfg.batch * cfg.block_out
        # entry k is the micro-op at stage S2+k
        dl_valid = [Signal(name=f"dl_valid{k}") for k in range(lat + 1)]
        dl_addr = [Signal(cfg.acc_bits, name=f"dl_addr{k}") for k in range(lat + 1)]
        dl_reset = [Signal(name=f"dl_reset{k}") for k in range(lat + 1)]
        m.d.comb += [dl_valid[0].eq(self.valid), dl_addr[0].eq(self.addr),
                     dl_reset[0].eq(self.reset)]
        for k in range(1, lat + 1):
            m.d.sync += [dl_valid[k].eq(dl_valid[k - 1]), dl_addr[k].eq(dl_addr[k - 1]),
                         dl_reset[k].eq(dl_reset[k - 1])]
        m.d.comb += [self.rd_en.eq(dl_valid[lat - 2]), self.rd_addr.eq(dl_addr[lat - 2])]

        shape = self.wb_data.shape()
        # wide datapath registers without a reset (the valid bits say what they hold):
        # with one, Verilator copies every word of them on every cycle
        acc_reg = Signal(shape, reset_less=True)  # the read data, one cycle later
        last_data = Signal(shape, reset_less=True)  # the previous cycle's write
        forward = Signal()  # ... was to the entry written back now
        acc_cur = Signal(shape)
        with m.If(dl_valid[lat - 1]):
            m.d.sync += acc_reg.eq(self.rd_data)
        m.d.sync += forward.eq(self.acc_wr_en & (self.acc_wr_addr == dl_addr[lat - 1]))
        with m.If(self.acc_wr_en):
            m.d.sync += last_data.eq(self.acc_wr_data)
        m.d.comb += acc_cur.eq(Mux(forward, last_data, acc_reg))
        acc_old = data.View(data.ArrayLayout(unsigned(cfg.acc_width), lanes), acc_cur)
        wb_reset = dl_reset[lat]
        m.d.comb += [
            self.wb_valid.eq(dl_valid[lat]), self.wb_addr.eq(dl_addr[lat]),
            self.wb_data.eq(Cat(*[
                Mux(wb_reset, 0, (acc_old[k] + self.products[k])[:cfg.acc_width])
                for k in range(lanes)])),
            self.busy.eq(Cat(*dl_valid[1:]).any()),
        ]
        return m

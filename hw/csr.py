"""The CSR block: registers of :data:`tensorfab.isa.CSRS` on a simple register bus."""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import CSRS
from tensorfab.isa.csr import STATUS_BUSY, STATUS_DONE, STATUS_ERROR

__all__ = ["COUNTERS", "KEPT_COUNTER", "CsrBlock", "CsrBusSignature"]

CsrBusSignature = wiring.Signature({
    "addr": Out(8),
    "w_en": Out(1),
    "w_data": Out(32),
    "r_data": In(32),
})
"""A register bus from the host's side: byte address, write strobe and data; the read
data is combinational (valid in the cycle ``addr`` is presented)."""

#: The counter a core without performance counters keeps (a run's hardware time).
KEPT_COUNTER = "CYCLES"

#: Counter registers and the event input of :class:`CsrBlock` that increments each
#: (by one per cycle it is high; ``gemm_uops`` is a count added every cycle).
COUNTERS: dict[str, str] = {
    "CYCLES": "running",
    "LOAD_BUSY": "load_busy", "LOAD_STALL": "load_stall",
    "COMPUTE_BUSY": "compute_busy", "COMPUTE_STALL": "compute_stall",
    "STORE_BUSY": "store_busy", "STORE_STALL": "store_stall",
    "GEMM_BUSY": "gemm_uops", "ALU_BUSY": "alu_busy",
    "LOAD_INSNS": "load_retire", "COMPUTE_INSNS": "compute_retire",
    "STORE_INSNS": "store_retire",
}

_WRITABLE = ("INSN_BASE", "INSN_COUNT", "DRAM_SIZE")


class CsrBlock(wiring.Component):
    """Control and status registers.

    ``start`` pulses for one cycle when the host writes 1 to bit 0 of CTRL while the
    core is not busy; it clears the counters and the error registers. Counters
    count cycles in which their event input is high (GEMM_BUSY adds ``gemm_uops``,
    the micro-ops executed that cycle), from ``start`` until ``done`` or ``error``.

    Parameters
    ----------
    counters : bool, optional
        Keep every one of the :data:`COUNTERS` (default). Without them
        (:attr:`~tensorfab.isa.HwConfig.perf_counters` False) only CYCLES counts, the
        run's hardware time a host reads; the other eleven CSRs read 0 and their event
        inputs are unused: eleven 32-bit adders and their read multiplexer less.

    Attributes
    ----------
    bus : In(CsrBusSignature)
        Host access.
    start : Out(1)
        Start pulse.
    insn_base, insn_count, dram_size : Out(32)
        The writable registers.
    busy, done, error : In(1)
        Core status (``error`` together with ``error_code`` and ``error_index``).
    """

    def __init__(self, counters: bool = True) -> None:
        self.counters = counters
        members = {
            "bus": In(CsrBusSignature),
            "start": Out(1),
            "busy": In(1),
            "done": In(1),
            "error": In(1),
            "error_code": In(4),
            "error_index": In(32),
        }
        members |= {name.lower(): Out(32) for name in _WRITABLE}
        members |= {event: In(1) for event in COUNTERS.values()}
        members["gemm_uops"] = In(8)
        super().__init__(members)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        regs = {c.name: Signal(32, name=f"csr_{c.name.lower()}") for c in CSRS}
        start = Signal()
        m.d.comb += start.eq(self.bus.w_en & (self.bus.addr == 0x00) & self.bus.w_data[0]
                             & ~self.busy)
        m.d.comb += self.start.eq(start)
        for name in _WRITABLE:
            m.d.comb += getattr(self, name.lower()).eq(regs[name])
        for c in CSRS:
            if c.name in _WRITABLE:
                with m.If(self.bus.w_en & (self.bus.addr == c.offset)):
                    m.d.sync += regs[c.name].eq(self.bus.w_data)
        counting = self.busy & ~start
        for name, event in COUNTERS.items():
            if not self.counters and name != KEPT_COUNTER:
                continue
            with m.If(start):
                m.d.sync += regs[name].eq(0)
            with m.Elif(counting & (getattr(self, event) != 0)):
                m.d.sync += regs[name].eq(regs[name] + getattr(self, event))
        m.d.comb += regs["STATUS"].eq((self.busy * STATUS_BUSY) | (self.done * STATUS_DONE)
                                      | (self.error * STATUS_ERROR))
        m.d.comb += [regs["ERROR_CODE"].eq(self.error_code),
                     regs["ERROR_INDEX"].eq(self.error_index)]
        with m.Switch(self.bus.addr):
            for c in CSRS:
                if not self.counters and c.name in COUNTERS and c.name != KEPT_COUNTER:
                    continue  # reads 0
                with m.Case(c.offset):
                    m.d.comb += self.bus.r_data.eq(regs[c.name])
        return m

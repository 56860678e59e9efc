"""The host bridge: host-link frames (:mod:`tensorfab.isa.hostlink`) to CSR and memory access.

A :class:`~tensorfab.hw.soc.framer.Framer` (frames, CRC, timeout) and a
:class:`~tensorfab.hw.soc.executor.CommandExecutor` (commands, retries, the CSR bus
and the memory port), joined by a request and a response stream and the payload
buffer.
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from tensorfab.hw.csr import CsrBusSignature
from tensorfab.hw.mem_port import MemPortSignature
from tensorfab.isa import HwConfig
from tensorfab.isa import hostlink as hl

from .executor import CommandExecutor
from .framer import Framer, crc32_step

__all__ = ["HostBridge", "crc32_step", "link_info"]


def link_info(cfg: HwConfig, mem_bytes: int, clk_hz: int, baud: int) -> hl.LinkInfo:
    """What an SoC answers to INFO."""
    return hl.LinkInfo(version=hl.VERSION, beat_bytes=cfg.mem_bus_bytes,
                       max_payload=hl.MAX_PAYLOAD, mem_bytes=mem_bytes, clock_hz=int(clk_hz),
                       baud=int(baud), config_crc=hl.config_crc(cfg))


class HostBridge(wiring.Component):
    """Receives request frames from a byte stream, executes them, sends responses.

    A frame is buffered whole (payload in a block RAM of :data:`hl.MAX_PAYLOAD`
    bytes) and checked (CRC, version, command, length, address) before anything
    happens, so a bad frame has no effect but its NAK; a retried request (same seq
    and CRC as the last one executed) is not executed twice if it has a side effect.
    Memory accesses go out as one burst on a memory port, which the SoC gives the
    bridge while the core is not running (otherwise the bridge answers BUSY).

    Parameters
    ----------
    cfg : HwConfig
        Bus width of the memory port.
    info : LinkInfo
        The INFO response (memory size, clock, baud...).
    rx_timeout : int
        Clock cycles without a byte after which a partial frame is dropped (NAK
        TIMEOUT).

    Attributes
    ----------
    rx : In(stream.Signature(8))
        Received bytes.
    tx : Out(stream.Signature(8))
        Bytes to send.
    csr : Out(CsrBusSignature)
        The core's CSR bus.
    mem : Out(MemPortSignature(cfg))
        A memory port.
    core_busy : In(1)
        The core runs (memory and START refused).
    core_reset : Out(1)
        One-cycle pulse (from a register) after the response to RESET is sent.
    """

    def __init__(self, cfg: HwConfig, info: hl.LinkInfo, rx_timeout: int) -> None:
        self.cfg = cfg
        self.info = info
        self.rx_timeout = rx_timeout
        super().__init__({
            "rx": In(stream.Signature(8)),
            "tx": Out(stream.Signature(8)),
            "csr": Out(CsrBusSignature),
            "mem": Out(MemPortSignature(cfg)),
            "core_busy": In(1),
            "core_reset": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.framer = framer = Framer(self.rx_timeout)
        m.submodules.executor = executor = CommandExecutor(self.cfg, self.info)
        connect(m, flipped(self.rx), framer.rx)
        connect(m, framer.tx, flipped(self.tx))
        connect(m, framer.request, executor.request)
        connect(m, executor.response, framer.response)
        connect(m, executor.buf, framer.buf)
        connect(m, executor.csr, flipped(self.csr))
        connect(m, executor.mem, flipped(self.mem))
        m.d.comb += [executor.core_busy.eq(self.core_busy),
                     self.core_reset.eq(executor.core_reset)]
        return m

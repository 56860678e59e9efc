"""The host bridge: host-link frames (:mod:`tensorfab.isa.hostlink`) to CSR and memory access.

Every constant, command code and payload layout comes from
:mod:`tensorfab.isa.hostlink`; this file only says how the gateware walks them.
"""

from __future__ import annotations

import zlib

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tensorfab.hw.csr import CsrBusSignature
from tensorfab.hw.mem_port import MemPortSignature
from tensorfab.isa import CSR_BY_NAME, HwConfig
from tensorfab.isa import hostlink as hl
from tensorfab.isa.config import log2

__all__ = ["HostBridge", "crc32_step", "link_info"]

_POLY = 0xEDB88320


def _crc_matrix() -> list[tuple[int, int]]:
    """For each bit of the next CRC register: the masks of the register bits and of
    the byte bits it is the XOR of (the recurrence is linear over GF(2))."""

    def step(crc: int, byte: int) -> int:
        c = crc ^ byte
        for _ in range(8):
            c = (c >> 1) ^ (_POLY if c & 1 else 0)
        return c

    rows = []
    for bit in range(32):
        crc_mask = sum(1 << i for i in range(32) if step(1 << i, 0) >> bit & 1)
        byte_mask = sum(1 << i for i in range(8) if step(0, 1 << i) >> bit & 1)
        rows.append((crc_mask, byte_mask))
    return rows


_CRC_ROWS = _crc_matrix()


def crc32_step(crc: Value, byte: Value) -> Value:
    """The CRC-32 register after one more byte (reflected, before the final inversion),
    the recurrence of :func:`tensorfab.isa.hostlink.crc32`, as one XOR per bit."""
    bits = []
    for crc_mask, byte_mask in _CRC_ROWS:
        terms = [crc[i] for i in range(32) if crc_mask >> i & 1]
        terms += [byte[i] for i in range(8) if byte_mask >> i & 1]
        bits.append(Cat(*terms).xor())
    return Cat(*bits)


def link_info(cfg: HwConfig, mem_bytes: int, clk_hz: int, baud: int) -> hl.LinkInfo:
    """What an SoC answers to INFO."""
    return hl.LinkInfo(version=hl.VERSION, beat_bytes=cfg.mem_bus_bytes,
                       max_payload=hl.MAX_PAYLOAD, mem_bytes=mem_bytes, clock_hz=int(clk_hz),
                       baud=int(baud), config_crc=zlib.crc32(cfg.to_json().encode()))


class HostBridge(wiring.Component):
    """Receives request frames from a byte stream, executes them, sends responses.

    A frame is buffered whole (payload in a block RAM of :data:`hl.MAX_PAYLOAD`
    bytes) and checked (CRC, version, command, length, address) before anything
    happens, so a bad frame has no effect but its NAK. Memory accesses go out as
    one burst on a memory port, which the SoC gives the bridge while the core is
    not running (otherwise the bridge answers BUSY).

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
        One-cycle pulse after the response to RESET is sent.
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
        cfg = self.cfg
        m = Module()
        beat = cfg.mem_bus_bytes
        beat_shift = log2(beat)
        mem_bytes = self.info.mem_bytes
        m.submodules.buf = buf = Memory(shape=unsigned(8), depth=1 << (hl.MAX_PAYLOAD - 1)
                                        .bit_length(), init=[])
        wp = buf.write_port()
        rp = buf.read_port()

        rx, tx = self.rx, self.tx
        crc = Signal(32, init=0xFFFFFFFF)
        rx_crc = Signal(32)
        version = Signal(8)
        seq = Signal(8)
        cmd = Signal(8)
        length = Signal(16)
        args = Signal(96)
        idx = Signal(16)
        timer = Signal(range(self.rx_timeout + 1))
        nak = Signal()
        reason = Signal(8)
        resp_len = Signal(16)
        reset_after = Signal()

        addr = args[:32]
        rd_len = args[32:48]
        wr_len = Signal(16)
        m.d.comb += wr_len.eq(length - 4)
        n_bytes = Signal(16)  # data bytes of a memory access
        burst = Signal(8)
        m.d.comb += burst.eq((n_bytes >> beat_shift) - 1)
        beat_reg = Signal(cfg.mem_bus_width)
        bpos = Signal(range(beat))
        have = Signal()

        rx_byte = rx.payload
        take = rx.valid & rx.ready

        # CSR lists of STATUS and COUNTERS, then the argument of READ_CSR
        table = [CSR_BY_NAME[n].offset for n in hl.STATUS_CSRS + hl.COUNTER_CSRS]
        offsets = Array(Const(o, 8) for o in table)
        dump_first = Signal(range(len(table)))
        dump_count = Signal(range(len(table) + 1))
        dump_arg = Signal()
        dump_addr = Signal(8)
        dump_word = Signal(32)
        info_bytes = Array(Const(b, 8) for b in self.info.pack())

        def respond(n: int | Value) -> list:
            return [nak.eq(0), resp_len.eq(n), idx.eq(0), crc.eq(0xFFFFFFFF)]

        def refuse(why: hl.NakReason) -> list:
            return [nak.eq(1), reason.eq(why), resp_len.eq(2), idx.eq(0),
                    crc.eq(0xFFFFFFFF)]

        def bad_range(a: Value, n: Value) -> Value:
            return ((n == 0) | (n[:beat_shift] != 0 if beat_shift else Const(0))
                    | (a[:beat_shift] != 0 if beat_shift else Const(0))
                    | (a + n > mem_bytes))

        in_frame = Signal()
        with m.If(in_frame & ~take):
            m.d.sync += timer.eq(timer + 1)
        with m.Else():
            m.d.sync += timer.eq(0)
        timed_out = in_frame & (timer == self.rx_timeout)

        with m.FSM():
            # ------------------------------------------------------------ receive
            with m.State("HUNT"):
                m.d.comb += rx.ready.eq(1)
                with m.If(take & (rx_byte == hl.MAGIC[0])):
                    m.d.sync += crc.eq(crc32_step(Const(0xFFFFFFFF, 32), rx_byte))
                    m.next = "MAGIC1"
            with m.State("MAGIC1"):
                m.d.comb += [rx.ready.eq(1), in_frame.eq(1)]
                with m.If(timed_out):
                    m.next = "HUNT"
                with m.Elif(take):
                    with m.If(rx_byte == hl.MAGIC[1]):
                        m.d.sync += [crc.eq(crc32_step(crc, rx_byte)), idx.eq(0),
                                     seq.eq(0), cmd.eq(0)]
                        m.next = "HEADER"
                    with m.Elif(rx_byte == hl.MAGIC[0]):
                        m.d.sync += crc.eq(crc32_step(Const(0xFFFFFFFF, 32), rx_byte))
                    with m.Else():
                        m.next = "HUNT"
            with m.State("HEADER"):
                m.d.comb += [rx.ready.eq(1), in_frame.eq(1)]
                with m.If(timed_out):
                    m.d.sync += refuse(hl.NakReason.TIMEOUT)
                    m.next = "TX_HEADER"
                with m.Elif(take):
                    m.d.sync += [crc.eq(crc32_step(crc, rx_byte)), idx.eq(idx + 1)]
                    with m.Switch(idx):
                        with m.Case(0):
                            m.d.sync += version.eq(rx_byte)
                        with m.Case(1):
                            m.d.sync += seq.eq(rx_byte)
                        with m.Case(2):
                            m.d.sync += cmd.eq(rx_byte)
                        with m.Case(3):
                            m.d.sync += length[:8].eq(rx_byte)
                        with m.Case(4):
                            total = Cat(length[:8], rx_byte)
                            m.d.sync += [length[8:].eq(rx_byte), idx.eq(0)]
                            with m.If(total > hl.MAX_PAYLOAD):
                                m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                                m.next = "TX_HEADER"
                            with m.Elif(total == 0):
                                m.next = "RX_CRC"
                            with m.Else():
                                m.next = "PAYLOAD"
            with m.State("PAYLOAD"):
                m.d.comb += [rx.ready.eq(1), in_frame.eq(1),
                             wp.addr.eq(idx), wp.data.eq(rx_byte), wp.en.eq(take)]
                with m.If(timed_out):
                    m.d.sync += refuse(hl.NakReason.TIMEOUT)
                    m.next = "TX_HEADER"
                with m.Elif(take):
                    m.d.sync += [crc.eq(crc32_step(crc, rx_byte)), idx.eq(idx + 1)]
                    with m.Switch(idx):
                        for i in range(len(args) // 8):
                            with m.Case(i):
                                m.d.sync += args[8 * i:8 * i + 8].eq(rx_byte)
                    with m.If(idx == length - 1):
                        m.d.sync += idx.eq(0)
                        m.next = "RX_CRC"
            with m.State("RX_CRC"):
                m.d.comb += [rx.ready.eq(1), in_frame.eq(1)]
                with m.If(timed_out):
                    m.d.sync += refuse(hl.NakReason.TIMEOUT)
                    m.next = "TX_HEADER"
                with m.Elif(take):
                    m.d.sync += [rx_crc.eq(Cat(rx_crc[8:], rx_byte)), idx.eq(idx + 1)]
                    with m.If(idx == hl.CRC_BYTES - 1):
                        m.next = "CHECK"
            with m.State("CHECK"):
                with m.If(rx_crc != ~crc):
                    m.d.sync += refuse(hl.NakReason.BAD_CRC)
                    m.next = "TX_HEADER"
                with m.Elif(version != hl.VERSION):
                    m.d.sync += refuse(hl.NakReason.BAD_VERSION)
                    m.next = "TX_HEADER"
                with m.Else():
                    m.next = "DECODE"
            # ------------------------------------------------------------ execute
            with m.State("DECODE"):
                m.d.sync += idx.eq(0)

                def need(n: int) -> Value:
                    return length != n

                with m.Switch(cmd):
                    with m.Case(hl.Command.INFO):
                        with m.If(need(0)):
                            m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                            m.next = "TX_HEADER"
                        with m.Else():
                            m.next = "FILL_INFO"
                    with m.Case(hl.Command.READ_MEM):
                        m.d.sync += n_bytes.eq(rd_len)
                        with m.If(need(6) | (rd_len > hl.MAX_DATA)):
                            m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                            m.next = "TX_HEADER"
                        with m.Elif(bad_range(addr, rd_len)):
                            m.d.sync += refuse(hl.NakReason.BAD_ADDRESS)
                            m.next = "TX_HEADER"
                        with m.Elif(self.core_busy):
                            m.d.sync += refuse(hl.NakReason.BUSY)
                            m.next = "TX_HEADER"
                        with m.Else():
                            m.d.sync += have.eq(0)
                            m.next = "RD_CMD"
                    with m.Case(hl.Command.WRITE_MEM):
                        m.d.sync += n_bytes.eq(wr_len)
                        with m.If(length < 4):
                            m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                            m.next = "TX_HEADER"
                        with m.Elif(bad_range(addr, wr_len)):
                            m.d.sync += refuse(hl.NakReason.BAD_ADDRESS)
                            m.next = "TX_HEADER"
                        with m.Elif(self.core_busy):
                            m.d.sync += refuse(hl.NakReason.BUSY)
                            m.next = "TX_HEADER"
                        with m.Else():
                            m.d.sync += [idx.eq(4), bpos.eq(0)]
                            m.next = "WR_CMD"
                    with m.Case(hl.Command.READ_CSR):
                        m.d.sync += [dump_arg.eq(1), dump_count.eq(1)]
                        with m.If(need(1)):
                            m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                            m.next = "TX_HEADER"
                        with m.Else():
                            m.next = "DUMP"
                    with m.Case(hl.Command.WRITE_CSR):
                        with m.If(need(5)):
                            m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                            m.next = "TX_HEADER"
                        with m.Else():
                            m.d.comb += [self.csr.addr.eq(args[:8]),
                                         self.csr.w_data.eq(args[8:40]), self.csr.w_en.eq(1)]
                            m.d.sync += respond(0)
                            m.next = "TX_HEADER"
                    with m.Case(hl.Command.START):
                        with m.If(need(12)):
                            m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                            m.next = "TX_HEADER"
                        with m.Elif(self.core_busy):
                            m.d.sync += refuse(hl.NakReason.BUSY)
                            m.next = "TX_HEADER"
                        with m.Else():
                            m.next = "START"
                    with m.Case(hl.Command.STATUS):
                        m.d.sync += [dump_arg.eq(0), dump_first.eq(0),
                                     dump_count.eq(len(hl.STATUS_CSRS))]
                        with m.If(need(0)):
                            m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                            m.next = "TX_HEADER"
                        with m.Else():
                            m.next = "DUMP"
                    with m.Case(hl.Command.COUNTERS):
                        m.d.sync += [dump_arg.eq(0), dump_first.eq(len(hl.STATUS_CSRS)),
                                     dump_count.eq(len(hl.COUNTER_CSRS))]
                        with m.If(need(0)):
                            m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                            m.next = "TX_HEADER"
                        with m.Else():
                            m.next = "DUMP"
                    with m.Case(hl.Command.RESET):
                        with m.If(need(0)):
                            m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                        with m.Else():
                            m.d.sync += [respond(0), reset_after.eq(1)]
                        m.next = "TX_HEADER"
                    with m.Default():
                        m.d.sync += refuse(hl.NakReason.BAD_COMMAND)
                        m.next = "TX_HEADER"
            with m.State("FILL_INFO"):
                n_info = len(self.info.pack())
                m.d.comb += [wp.addr.eq(idx), wp.data.eq(info_bytes[idx[:8]]), wp.en.eq(1)]
                m.d.sync += idx.eq(idx + 1)
                with m.If(idx == n_info - 1):
                    m.d.sync += respond(n_info)
                    m.next = "TX_HEADER"
            # a CSR per three states, each a register: its address, its value (read
            # once, so its four bytes are of one cycle), its bytes into the buffer
            with m.State("DUMP"):
                m.d.sync += dump_addr.eq(Mux(dump_arg, args[:8],
                                             offsets[dump_first + (idx >> 2)]))
                m.next = "DUMP_READ"
            with m.State("DUMP_READ"):
                m.d.comb += self.csr.addr.eq(dump_addr)
                m.d.sync += dump_word.eq(self.csr.r_data)
                m.next = "DUMP_BYTES"
            with m.State("DUMP_BYTES"):
                m.d.comb += [wp.addr.eq(idx), wp.en.eq(1),
                             wp.data.eq(dump_word.word_select(idx[:2], 8))]
                m.d.sync += idx.eq(idx + 1)
                with m.If(idx == (dump_count << 2) - 1):
                    m.d.sync += respond(dump_count << 2)
                    m.next = "TX_HEADER"
                with m.Elif(idx[:2] == 3):
                    m.next = "DUMP"
            with m.State("START"):
                # INSN_BASE, INSN_COUNT, DRAM_SIZE from the arguments, then CTRL
                regs = [("INSN_BASE", args[:32]), ("INSN_COUNT", args[32:64]),
                        ("DRAM_SIZE", args[64:96]), ("CTRL", Const(1, 32))]
                m.d.comb += self.csr.w_en.eq(1)
                m.d.sync += idx.eq(idx + 1)
                with m.Switch(idx):
                    for i, (name, value) in enumerate(regs):
                        with m.Case(i):
                            m.d.comb += [self.csr.addr.eq(CSR_BY_NAME[name].offset),
                                         self.csr.w_data.eq(value)]
                with m.If(idx == len(regs) - 1):
                    m.d.sync += respond(0)
                    m.next = "TX_HEADER"
            with m.State("RD_CMD"):
                m.d.comb += [self.mem.cmd.valid.eq(1), self.mem.cmd.payload.addr.eq(addr),
                             self.mem.cmd.payload.write.eq(0), self.mem.cmd.payload.len.eq(burst)]
                with m.If(self.mem.cmd.ready):
                    m.next = "RD_DATA"
            with m.State("RD_DATA"):
                m.d.comb += self.mem.rdata.ready.eq(~have)
                with m.If(self.mem.rdata.valid & ~have):
                    m.d.sync += [beat_reg.eq(self.mem.rdata.payload.data), have.eq(1),
                                 bpos.eq(0)]
                with m.If(have):
                    m.d.comb += [wp.addr.eq(idx), wp.en.eq(1),
                                 wp.data.eq(beat_reg.word_select(bpos, 8))]
                    m.d.sync += [idx.eq(idx + 1), bpos.eq(bpos + 1)]
                    with m.If(bpos == beat - 1):
                        m.d.sync += have.eq(0)
                    with m.If(idx == n_bytes - 1):
                        m.d.sync += respond(n_bytes)
                        m.next = "TX_HEADER"
            with m.State("WR_CMD"):
                m.d.comb += [self.mem.cmd.valid.eq(1), self.mem.cmd.payload.addr.eq(addr),
                             self.mem.cmd.payload.write.eq(1), self.mem.cmd.payload.len.eq(burst)]
                with m.If(self.mem.cmd.ready):
                    m.next = "WR_FETCH"
            with m.State("WR_FETCH"):
                m.d.comb += rp.addr.eq(idx)
                m.d.sync += idx.eq(idx + 1)
                m.next = "WR_SHIFT"
            with m.State("WR_SHIFT"):
                m.d.sync += [beat_reg.eq(Cat(beat_reg[8:], rp.data)), bpos.eq(bpos + 1)]
                with m.If(bpos == beat - 1):
                    m.next = "WR_BEAT"
                with m.Else():
                    m.next = "WR_FETCH"
            with m.State("WR_BEAT"):
                m.d.comb += [self.mem.wdata.valid.eq(1),
                             self.mem.wdata.payload.data.eq(beat_reg)]
                with m.If(self.mem.wdata.ready):
                    with m.If(idx == length):
                        m.d.sync += respond(0)
                        m.next = "TX_HEADER"
                    with m.Else():
                        m.next = "WR_FETCH"
            # ------------------------------------------------------------ respond
            with m.State("TX_HEADER"):
                resp_cmd = Mux(nak, hl.NAK, cmd | hl.RESPONSE)
                header = Array([Const(hl.MAGIC[0], 8), Const(hl.MAGIC[1], 8),
                                Const(hl.VERSION, 8), seq, resp_cmd[:8], resp_len[:8],
                                resp_len[8:]])
                byte = header[idx[:3]]
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(byte)]
                with m.If(tx.ready):
                    m.d.sync += [crc.eq(crc32_step(crc, byte)), idx.eq(idx + 1)]
                    with m.If(idx == hl.HEADER_BYTES - 1):
                        m.d.sync += idx.eq(0)
                        with m.If(resp_len == 0):
                            m.next = "TX_CRC"
                        with m.Else():
                            m.next = "TX_FETCH"
            with m.State("TX_FETCH"):
                m.d.comb += rp.addr.eq(idx)
                m.next = "TX_PAYLOAD"
            with m.State("TX_PAYLOAD"):
                byte = Mux(nak, Mux(idx == 0, reason, cmd), rp.data)
                m.d.comb += [rp.addr.eq(idx), tx.valid.eq(1), tx.payload.eq(byte)]
                with m.If(tx.ready):
                    m.d.sync += [crc.eq(crc32_step(crc, byte)), idx.eq(idx + 1)]
                    with m.If(idx == resp_len - 1):
                        m.d.sync += idx.eq(0)
                        m.next = "TX_CRC"
                    with m.Else():
                        m.next = "TX_FETCH"
            with m.State("TX_CRC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq((~crc).word_select(idx[:2], 8))]
                with m.If(tx.ready):
                    m.d.sync += idx.eq(idx + 1)
                    with m.If(idx == hl.CRC_BYTES - 1):
                        m.next = "TX_DONE"
            with m.State("TX_DONE"):
                # the transmitter took the last byte: a reset waits for nothing else
                m.d.comb += self.core_reset.eq(reset_after)
                m.d.sync += [reset_after.eq(0), nak.eq(0)]
                m.next = "HUNT"
        return m

"""The host bridge: host-link frames (:mod:`tensorfab.isa.hostlink`) to CSR and memory access.

Every constant, command code and payload layout comes from
:mod:`tensorfab.isa.hostlink`; this file only says how the gateware walks them.
"""

from __future__ import annotations

import struct
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

#: What an accepted command does, as DECODE's small code (the CSR dumps share one).
_GO: dict[hl.Command, int] = {
    hl.Command.INFO: 0, hl.Command.READ_MEM: 1, hl.Command.WRITE_MEM: 2,
    hl.Command.READ_CSR: 3, hl.Command.STATUS: 3, hl.Command.COUNTERS: 3,
    hl.Command.WRITE_CSR: 4, hl.Command.START: 5, hl.Command.RESET: 6,
}


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
        # Timing: every decision that crosses many bits (CRC and length checks, the
        # address range, the last byte of a block) is taken a cycle before it is
        # used and kept in a register; what the bridge hands the core (CSR address,
        # write strobe and data, the reset pulse) leaves it from registers; a byte
        # read from the payload buffer is registered as it leaves the block RAM; the
        # CRC steps one cycle after its byte, from registers. Each costs a cycle or
        # two per frame, against thousands per UART byte.
        cfg = self.cfg
        m = Module()
        beat = cfg.mem_bus_bytes
        beat_shift = log2(beat)
        mem_bytes = self.info.mem_bytes
        depth = 1 << (hl.MAX_PAYLOAD - 1).bit_length()
        m.submodules.buf = buf = Memory(shape=unsigned(8), depth=depth, init=[])
        wp = buf.write_port()
        rp = buf.read_port()
        # the block RAM's inputs are registers: a byte is written a cycle after the
        # state that stores it, and the read address is always idx; the byte read
        # is registered as it leaves the block RAM (the byte at idx two cycles before)
        buf_we = Signal()
        buf_waddr = Signal(range(depth))
        buf_wdata = Signal(8)
        rd_byte = Signal(8)
        m.d.sync += [buf_we.eq(0), rd_byte.eq(rp.data)]
        m.d.comb += [wp.addr.eq(buf_waddr), wp.data.eq(buf_wdata), wp.en.eq(buf_we)]

        rx, tx = self.rx, self.tx
        rx_crc = Signal(32)
        version = Signal(8)
        seq = Signal(8)
        cmd = Signal(8)
        length = Signal(16)
        args = Signal(96)
        idx = Signal(range(depth))
        m.d.comb += rp.addr.eq(idx)

        def store(byte: Value) -> list:
            return [buf_we.eq(1), buf_waddr.eq(idx), buf_wdata.eq(byte)]

        timer = Signal(range(self.rx_timeout + 1))
        timed_out = Signal()
        nak = Signal()
        reason = Signal(8)
        resp_len = Signal(16)
        reset_after = Signal()

        addr = args[:32]
        rd_len = args[32:48]
        n_bytes = Signal(16)  # data bytes of a memory access
        burst = Signal(8)
        beat_reg = Signal(cfg.mem_bus_width)
        bpos = Signal(range(beat))
        have = Signal()
        fetched_all = Signal()

        # items (bytes, words) after the current one, and whether it is the last
        left = Signal(range(hl.MAX_PAYLOAD + 1))
        last = Signal()

        def count_from(n: int | Value) -> list:
            return [left.eq(n - 1), last.eq(n == 1)]

        def count_step() -> list:
            return [left.eq(left - 1), last.eq(left == 1)]

        # the checks of a received frame, registered before DECODE acts on them
        crc_bad = Signal()
        version_bad = Signal()
        len_bad = Signal()
        known = Signal()
        mem_cmd = Signal()
        needs_idle = Signal()
        range_bad = Signal()
        go = Signal(range(max(_GO.values()) + 1))
        refused = Signal()
        why = Signal(8)

        rx_byte = rx.payload
        take = rx.valid & rx.ready

        # the CRC register steps one cycle after its byte was taken or sent
        crc = Signal(32, init=0xFFFFFFFF)
        crc_byte = Signal(8)
        crc_feed = Signal()
        crc_restart = Signal()
        crc_clear = Signal()
        m.d.sync += [crc_feed.eq(0), crc_restart.eq(0), crc_clear.eq(0)]
        with m.If(crc_restart):
            m.d.sync += crc.eq(crc32_step(Const(0xFFFFFFFF, 32), crc_byte))
        with m.Elif(crc_feed):
            m.d.sync += crc.eq(crc32_step(crc, crc_byte))
        with m.Elif(crc_clear):
            m.d.sync += crc.eq(0xFFFFFFFF)

        def feed(byte: Value, *, restart: bool = False) -> list:
            return [crc_byte.eq(byte), (crc_restart if restart else crc_feed).eq(1)]

        # the CSR bus and the core's reset leave the bridge from registers; a write
        # strobe lasts one cycle
        csr_addr = Signal(8)
        csr_w_en = Signal()
        csr_w_data = Signal(32)
        core_reset = Signal()
        m.d.sync += [csr_w_en.eq(0), core_reset.eq(0)]
        m.d.comb += [self.csr.addr.eq(csr_addr), self.csr.w_en.eq(csr_w_en),
                     self.csr.w_data.eq(csr_w_data), self.core_reset.eq(core_reset)]

        # CSR lists of STATUS and COUNTERS, then the argument of READ_CSR
        table = [CSR_BY_NAME[n].offset for n in hl.STATUS_CSRS + hl.COUNTER_CSRS]
        offsets = Array(Const(o, 8) for o in table)
        dump_pos = Signal(range(len(table)))
        dump_count = Signal(range(len(table) + 1))
        dump_arg = Signal()
        dump_word = Signal(32)
        info_bytes = Array(Const(b, 8) for b in self.info.pack())

        tx_byte = Signal(8)
        tx_end = Signal()
        resp_empty = Signal()

        def respond(n: int | Value) -> list:
            return [nak.eq(0), resp_len.eq(n), idx.eq(0), crc_clear.eq(1)]

        def refuse(reason_code: int | Value) -> list:
            return [nak.eq(1), reason.eq(reason_code), resp_len.eq(2), idx.eq(0),
                    crc_clear.eq(1)]

        def bad_range(a: Value, n: Value) -> Value:
            return ((n == 0) | (n[:beat_shift] != 0 if beat_shift else Const(0))
                    | (a[:beat_shift] != 0 if beat_shift else Const(0))
                    | (a + n > mem_bytes))

        def payload_bytes(c: hl.Command) -> int:
            return struct.calcsize(hl.REQUEST_ARGS[c])

        in_frame = Signal()
        with m.If(in_frame & ~take):
            m.d.sync += timer.eq(timer + 1)
        with m.Else():
            m.d.sync += timer.eq(0)
        # high in the cycle the timer reaches rx_timeout, decided the cycle before
        m.d.sync += timed_out.eq(in_frame & ~take & (timer == self.rx_timeout - 1))

        with m.FSM():
            # ------------------------------------------------------------ receive
            with m.State("HUNT"):
                m.d.comb += rx.ready.eq(1)
                with m.If(take & (rx_byte == hl.MAGIC[0])):
                    m.d.sync += feed(rx_byte, restart=True)
                    m.next = "MAGIC1"
            with m.State("MAGIC1"):
                m.d.comb += [rx.ready.eq(1), in_frame.eq(1)]
                with m.If(timed_out):
                    m.next = "HUNT"
                with m.Elif(take):
                    with m.If(rx_byte == hl.MAGIC[1]):
                        m.d.sync += [feed(rx_byte), idx.eq(0), seq.eq(0), cmd.eq(0)]
                        m.next = "HEADER"
                    with m.Elif(rx_byte == hl.MAGIC[0]):
                        m.d.sync += feed(rx_byte, restart=True)
                    with m.Else():
                        m.next = "HUNT"
            with m.State("HEADER"):
                m.d.comb += [rx.ready.eq(1), in_frame.eq(1)]
                with m.If(timed_out):
                    m.d.sync += refuse(hl.NakReason.TIMEOUT)
                    m.next = "TX_HEADER"
                with m.Elif(take):
                    m.d.sync += [feed(rx_byte), idx.eq(idx + 1)]
                    with m.Switch(idx[:3]):
                        with m.Case(0):
                            m.d.sync += version.eq(rx_byte)
                        with m.Case(1):
                            m.d.sync += seq.eq(rx_byte)
                        with m.Case(2):
                            m.d.sync += cmd.eq(rx_byte)
                        with m.Case(3):
                            m.d.sync += length[:8].eq(rx_byte)
                        with m.Case(4):
                            m.d.sync += length[8:].eq(rx_byte)
                            m.next = "LENGTH"
            with m.State("LENGTH"):
                # the length is whole: checked here, a cycle after its last byte
                m.d.sync += [idx.eq(0), count_from(length)]
                with m.If(length > hl.MAX_PAYLOAD):
                    m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                    m.next = "TX_HEADER"
                with m.Elif(length == 0):
                    m.next = "RX_CRC"
                with m.Else():
                    m.next = "PAYLOAD"
            with m.State("PAYLOAD"):
                m.d.comb += [rx.ready.eq(1), in_frame.eq(1)]
                with m.If(timed_out):
                    m.d.sync += refuse(hl.NakReason.TIMEOUT)
                    m.next = "TX_HEADER"
                with m.Elif(take):
                    m.d.sync += [feed(rx_byte), store(rx_byte), idx.eq(idx + 1), count_step()]
                    with m.Switch(idx):
                        for i in range(len(args) // 8):
                            with m.Case(i):
                                m.d.sync += args[8 * i:8 * i + 8].eq(rx_byte)
                    with m.If(last):
                        m.d.sync += idx.eq(0)
                        m.next = "RX_CRC"
            with m.State("RX_CRC"):
                m.d.comb += [rx.ready.eq(1), in_frame.eq(1)]
                with m.If(timed_out):
                    m.d.sync += refuse(hl.NakReason.TIMEOUT)
                    m.next = "TX_HEADER"
                with m.Elif(take):
                    m.d.sync += [rx_crc.eq(Cat(rx_crc[8:], rx_byte)), idx.eq(idx + 1)]
                    with m.If(idx[:2] == hl.CRC_BYTES - 1):
                        m.next = "CHECK"
            # ------------------------------------------------------------ check
            with m.State("CHECK"):
                # the checks that need only the frame's fields, the data size, and
                # what an accepted command does (``go``, a small code for DECODE)
                m.d.sync += [crc_bad.eq(rx_crc != ~crc), version_bad.eq(version != hl.VERSION),
                             known.eq(0), mem_cmd.eq(0), needs_idle.eq(0), len_bad.eq(0),
                             n_bytes.eq(rd_len)]
                with m.Switch(cmd):
                    for c in hl.Command:
                        with m.Case(c):
                            m.d.sync += [known.eq(1), go.eq(_GO[c])]
                            if c is hl.Command.READ_MEM:
                                m.d.sync += len_bad.eq((length != payload_bytes(c))
                                                       | (rd_len > hl.MAX_DATA))
                            elif c is hl.Command.WRITE_MEM:
                                m.d.sync += [len_bad.eq(length < payload_bytes(c)),
                                             n_bytes.eq(length - payload_bytes(c))]
                            else:
                                m.d.sync += len_bad.eq(length != payload_bytes(c))
                            if c in (hl.Command.READ_MEM, hl.Command.WRITE_MEM):
                                m.d.sync += mem_cmd.eq(1)
                            if c in (hl.Command.READ_MEM, hl.Command.WRITE_MEM,
                                     hl.Command.START):
                                m.d.sync += needs_idle.eq(1)
                m.next = "RANGE"
            with m.State("RANGE"):
                m.d.sync += [range_bad.eq(mem_cmd & bad_range(addr, n_bytes)),
                             burst.eq((n_bytes >> beat_shift) - 1), count_from(n_bytes),
                             have.eq(0), bpos.eq(0)]
                # a CSR dump counts words instead
                for c, first, n in ((hl.Command.READ_CSR, 0, 1),
                                    (hl.Command.STATUS, 0, len(hl.STATUS_CSRS)),
                                    (hl.Command.COUNTERS, len(hl.STATUS_CSRS),
                                     len(hl.COUNTER_CSRS))):
                    with m.If(cmd == c):
                        m.d.sync += [dump_arg.eq(c == hl.Command.READ_CSR),
                                     dump_pos.eq(first), dump_count.eq(n), count_from(n)]
                m.next = "VERDICT"
            with m.State("VERDICT"):
                # the refusal, if any, in the order CRC, version, command, length, address
                checks = [(crc_bad, hl.NakReason.BAD_CRC),
                          (version_bad, hl.NakReason.BAD_VERSION),
                          (~known, hl.NakReason.BAD_COMMAND),
                          (len_bad, hl.NakReason.BAD_LENGTH),
                          (range_bad, hl.NakReason.BAD_ADDRESS)]
                m.d.sync += refused.eq(0)
                for i, (bad, code) in enumerate(checks):
                    with (m.If if i == 0 else m.Elif)(bad):
                        m.d.sync += [refused.eq(1), why.eq(code)]
                m.next = "DECODE"
            # ------------------------------------------------------------ execute
            with m.State("DECODE"):
                m.d.sync += idx.eq(0)
                with m.If(refused):
                    m.d.sync += refuse(why)
                    m.next = "TX_HEADER"
                with m.Elif(needs_idle & self.core_busy):
                    m.d.sync += refuse(hl.NakReason.BUSY)
                    m.next = "TX_HEADER"
                with m.Else(), m.Switch(go):
                    with m.Case(_GO[hl.Command.INFO]):
                        m.next = "FILL_INFO"
                    with m.Case(_GO[hl.Command.READ_MEM]):
                        m.next = "RD_CMD"
                    with m.Case(_GO[hl.Command.WRITE_MEM]):
                        m.d.sync += idx.eq(payload_bytes(hl.Command.WRITE_MEM))
                        m.next = "WR_CMD"
                    with m.Case(_GO[hl.Command.STATUS]):  # READ_CSR, COUNTERS too
                        m.next = "DUMP"
                    with m.Case(_GO[hl.Command.WRITE_CSR]):
                        m.d.sync += [csr_addr.eq(args[:8]), csr_w_data.eq(args[8:40]),
                                     csr_w_en.eq(1), respond(0)]
                        m.next = "TX_HEADER"
                    with m.Case(_GO[hl.Command.START]):
                        m.next = "START"
                    with m.Case(_GO[hl.Command.RESET]):
                        m.d.sync += [respond(0), reset_after.eq(1)]
                        m.next = "TX_HEADER"
            with m.State("FILL_INFO"):
                n_info = len(self.info.pack())
                m.d.sync += [store(info_bytes[idx]), idx.eq(idx + 1)]
                with m.If(idx == n_info - 1):
                    m.d.sync += respond(n_info)
                    m.next = "TX_HEADER"
            # a CSR per three states, each a register: its address (on the CSR bus),
            # its value (read once, so its four bytes are of one cycle), its bytes
            # into the buffer
            with m.State("DUMP"):
                m.d.sync += [csr_addr.eq(Mux(dump_arg, args[:8], offsets[dump_pos])),
                             dump_pos.eq(dump_pos + 1)]
                m.next = "DUMP_READ"
            with m.State("DUMP_READ"):
                m.d.sync += dump_word.eq(self.csr.r_data)
                m.next = "DUMP_BYTES"
            with m.State("DUMP_BYTES"):
                m.d.sync += [store(dump_word.word_select(idx[:2], 8)), idx.eq(idx + 1)]
                with m.If(idx[:2] == 3):
                    with m.If(last):
                        m.d.sync += respond(dump_count << 2)
                        m.next = "TX_HEADER"
                    with m.Else():
                        m.d.sync += count_step()
                        m.next = "DUMP"
            with m.State("START"):
                # INSN_BASE, INSN_COUNT, DRAM_SIZE from the arguments, then CTRL; each
                # write reaches the CSR block a cycle later, from the bus registers
                regs = [("INSN_BASE", args[:32]), ("INSN_COUNT", args[32:64]),
                        ("DRAM_SIZE", args[64:96]), ("CTRL", Const(1, 32))]
                m.d.sync += [idx.eq(idx + 1), csr_w_en.eq(1)]
                with m.Switch(idx[:2]):
                    for i, (name, value) in enumerate(regs):
                        with m.Case(i):
                            m.d.sync += [csr_addr.eq(CSR_BY_NAME[name].offset),
                                         csr_w_data.eq(value)]
                with m.If(idx[:2] == len(regs) - 1):
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
                    m.d.sync += [store(beat_reg.word_select(bpos, 8)), idx.eq(idx + 1),
                                 bpos.eq(bpos + 1), count_step()]
                    with m.If(bpos == beat - 1):
                        m.d.sync += have.eq(0)
                    with m.If(last):
                        m.d.sync += respond(n_bytes)
                        m.next = "TX_HEADER"
            with m.State("WR_CMD"):
                m.d.comb += [self.mem.cmd.valid.eq(1), self.mem.cmd.payload.addr.eq(addr),
                             self.mem.cmd.payload.write.eq(1), self.mem.cmd.payload.len.eq(burst)]
                with m.If(self.mem.cmd.ready):
                    m.next = "WR_FETCH"
            # a byte per three states: its address, the block RAM's read, the
            # registered byte shifted into the beat
            with m.State("WR_FETCH"):
                m.d.sync += [idx.eq(idx + 1), count_step(), fetched_all.eq(last)]
                m.next = "WR_WAIT"
            with m.State("WR_WAIT"):
                m.next = "WR_SHIFT"
            with m.State("WR_SHIFT"):
                m.d.sync += [beat_reg.eq(Cat(beat_reg[8:], rd_byte)), bpos.eq(bpos + 1)]
                with m.If(bpos == beat - 1):
                    m.next = "WR_BEAT"
                with m.Else():
                    m.next = "WR_FETCH"
            with m.State("WR_BEAT"):
                m.d.comb += [self.mem.wdata.valid.eq(1),
                             self.mem.wdata.payload.data.eq(beat_reg)]
                with m.If(self.mem.wdata.ready):
                    with m.If(fetched_all):
                        m.d.sync += respond(0)
                        m.next = "TX_HEADER"
                    with m.Else():
                        m.next = "WR_FETCH"
            # ------------------------------------------------------------ respond
            # every byte sent is first loaded into tx_byte (with whether it ends its
            # part of the frame), then offered to the transmitter and fed to the CRC
            with m.State("TX_HEADER"):
                resp_cmd = Mux(nak, hl.NAK, cmd | hl.RESPONSE)
                header = Array([Const(hl.MAGIC[0], 8), Const(hl.MAGIC[1], 8),
                                Const(hl.VERSION, 8), seq, resp_cmd[:8], resp_len[:8],
                                resp_len[8:]])
                m.d.sync += [tx_byte.eq(header[idx[:3]]),
                             tx_end.eq(idx[:3] == hl.HEADER_BYTES - 1),
                             resp_empty.eq(resp_len == 0)]
                m.next = "TX_HEADER_SEND"
            with m.State("TX_HEADER_SEND"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(tx_byte)]
                with m.If(tx.ready):
                    m.d.sync += [feed(tx_byte), idx.eq(idx + 1)]
                    with m.If(~tx_end):
                        m.next = "TX_HEADER"
                    with m.Else():
                        m.d.sync += idx.eq(0)
                        with m.If(resp_empty):
                            m.next = "TX_CRC_WAIT"
                        with m.Else():
                            m.next = "TX_FETCH"
            with m.State("TX_FETCH"):
                m.next = "TX_WAIT"
            with m.State("TX_WAIT"):
                m.next = "TX_LOAD"
            with m.State("TX_LOAD"):
                m.d.sync += [tx_byte.eq(Mux(nak, Mux(idx == 0, reason, cmd), rd_byte)),
                             tx_end.eq(idx + 1 == resp_len)]
                m.next = "TX_SEND"
            with m.State("TX_SEND"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq(tx_byte)]
                with m.If(tx.ready):
                    m.d.sync += [feed(tx_byte), idx.eq(idx + 1)]
                    with m.If(tx_end):
                        m.d.sync += idx.eq(0)
                        m.next = "TX_CRC_WAIT"
                    with m.Else():
                        m.next = "TX_FETCH"
            with m.State("TX_CRC_WAIT"):
                # the CRC takes the last byte sent in this cycle
                m.next = "TX_CRC"
            with m.State("TX_CRC"):
                m.d.comb += [tx.valid.eq(1), tx.payload.eq((~crc).word_select(idx[:2], 8))]
                with m.If(tx.ready):
                    m.d.sync += idx.eq(idx + 1)
                    with m.If(idx[:2] == hl.CRC_BYTES - 1):
                        m.next = "TX_DONE"
            with m.State("TX_DONE"):
                # the transmitter took the last byte: a reset waits for nothing else
                m.d.sync += [core_reset.eq(reset_after), reset_after.eq(0), nak.eq(0)]
                m.next = "HUNT"
        return m

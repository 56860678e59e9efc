"""UART and host bridge in Amaranth's simulator, against isa/hostlink.py's host side."""

from __future__ import annotations

import random
import struct

import pytest
from amaranth.hdl import Module
from amaranth.lib.wiring import connect
from amaranth.sim import Simulator

from tensorfab.hw.csr import CsrBlock
from tensorfab.hw.soc.bridge import HostBridge, link_info
from tensorfab.hw.soc.memory import OnChipMemory
from tensorfab.hw.soc.uart import UartRx, UartTx
from tensorfab.isa import CSR_BY_NAME, PRESETS
from tensorfab.isa import hostlink as hl

CFG = PRESETS["tiny"]  # 4-byte beats
MEM = 1024
TIMEOUT = 200


@pytest.mark.parametrize("divisor", [4, 7])
def test_uart_loopback(divisor: int) -> None:
    m = Module()
    m.submodules.tx = tx = UartTx(divisor)
    m.submodules.rx = rx = UartRx(divisor)
    m.d.comb += rx.rx.eq(tx.tx)
    data = bytes(random.Random(divisor).randbytes(24)) + b"\x00\xff"
    got = []

    async def bench(ctx):
        ctx.set(rx.data.ready, 1)
        for b in data:
            ctx.set(tx.data.payload, b)
            ctx.set(tx.data.valid, 1)
            await ctx.tick().until(tx.data.ready)
            ctx.set(tx.data.valid, 0)
        for _ in range(divisor * 12):
            await ctx.tick()

    async def collect(ctx):
        async for _clk, _rst, valid, payload in ctx.tick().sample(rx.data.valid,
                                                                   rx.data.payload):
            if valid:
                got.append(payload)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.add_process(collect)
    sim.run()
    assert bytes(got) == data


def test_uart_rx_framing_error_drops_byte() -> None:
    div = 4
    m = Module()
    m.submodules.rx = rx = UartRx(div)

    async def bench(ctx):
        ctx.set(rx.data.ready, 0)
        # start bit, 0xA5, stop bit LOW: dropped; then 0x3C correctly framed
        for byte, stop in ((0xA5, 0), (0x3C, 1)):
            for bit in [0, *((byte >> i) & 1 for i in range(8)), stop, 1]:
                ctx.set(rx.rx, bit)
                for _ in range(div):
                    await ctx.tick()
        for _ in range(3 * div):
            await ctx.tick()
        assert ctx.get(rx.data.valid) and ctx.get(rx.data.payload) == 0x3C

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


class BridgeBench:
    """The bridge with a real CSR block and on-chip memory; bytes in, bytes out."""

    def __init__(self) -> None:
        self.m = m = Module()
        self.info = link_info(CFG, MEM, 24_000_000, 115200)
        m.submodules.bridge = self.bridge = HostBridge(CFG, self.info, rx_timeout=TIMEOUT)
        m.submodules.csrs = self.csrs = CsrBlock()
        m.submodules.mem = mem = OnChipMemory(CFG, MEM)
        connect(m, self.bridge.csr, self.csrs.bus)
        connect(m, self.bridge.mem, mem.port)

    def run(self, script, *processes) -> None:
        """Run the testbench ``script``, with ``processes`` beside it (background)."""
        sim = Simulator(self.m)
        sim.add_clock(1e-6)
        sim.add_testbench(script)
        for process in processes:
            sim.add_process(process)
        sim.run()


async def exchange(ctx, bridge: HostBridge, frame: bytes, *, gap: int = 0) -> hl.Frame:
    """Send ``frame`` byte by byte and read one response frame."""
    for b in frame:
        ctx.set(bridge.rx.payload, b)
        ctx.set(bridge.rx.valid, 1)
        for _ in range(100):
            taken = ctx.get(bridge.rx.ready)
            await ctx.tick()
            if taken:
                break
        else:
            raise AssertionError("the bridge stopped taking bytes")
        ctx.set(bridge.rx.valid, 0)
        for _ in range(gap):
            await ctx.tick()
    return await receive(ctx, bridge)


async def receive(ctx, bridge: HostBridge) -> hl.Frame:
    reader = hl.FrameReader()
    ctx.set(bridge.tx.ready, 1)
    for _ in range(5000):
        valid, byte = ctx.get(bridge.tx.valid), ctx.get(bridge.tx.payload)
        await ctx.tick()  # a valid byte is taken at this edge
        if valid:
            frames = reader.feed(bytes([byte]))
            if frames:
                ctx.set(bridge.tx.ready, 0)
                return frames[0]
    raise AssertionError("no response")


def call(frame: hl.Frame, seq: int, cmd: hl.Command, *args: int) -> bytes:
    return hl.response_payload(frame, seq, cmd, *args)


def test_bridge_commands() -> None:
    tb = BridgeBench()
    br = tb.bridge
    rng = random.Random(1)
    data = rng.randbytes(hl.MAX_DATA)

    async def script(ctx):
        r = await exchange(ctx, br, hl.request(1, hl.Command.INFO))
        assert hl.LinkInfo.unpack(call(r, 1, hl.Command.INFO)) == tb.info
        r = await exchange(ctx, br, hl.request(2, hl.Command.WRITE_MEM, 0x40, data=data))
        assert call(r, 2, hl.Command.WRITE_MEM) == b""
        r = await exchange(ctx, br, hl.request(3, hl.Command.READ_MEM, 0x40, hl.MAX_DATA))
        assert call(r, 3, hl.Command.READ_MEM, 0x40, hl.MAX_DATA) == data
        r = await exchange(ctx, br, hl.request(4, hl.Command.READ_MEM, 0x44, 8))
        assert call(r, 4, hl.Command.READ_MEM, 0x44, 8) == data[4:12]
        off = CSR_BY_NAME["INSN_COUNT"].offset
        r = await exchange(ctx, br, hl.request(5, hl.Command.WRITE_CSR, off, 0xCAFE1234))
        call(r, 5, hl.Command.WRITE_CSR)
        r = await exchange(ctx, br, hl.request(6, hl.Command.READ_CSR, off))
        assert hl.u32s(call(r, 6, hl.Command.READ_CSR)) == (0xCAFE1234,)
        # START writes the three registers and pulses CTRL
        r = await exchange(ctx, br, hl.request(7, hl.Command.START, 0x100, 9, MEM))
        call(r, 7, hl.Command.START)
        assert ctx.get(tb.csrs.insn_base) == 0x100
        assert ctx.get(tb.csrs.insn_count) == 9
        assert ctx.get(tb.csrs.dram_size) == MEM
        # STATUS / COUNTERS read the CSR block
        ctx.set(tb.csrs.error, 1)
        ctx.set(tb.csrs.error_code, 5)
        ctx.set(tb.csrs.error_index, 77)
        r = await exchange(ctx, br, hl.request(8, hl.Command.STATUS))
        st = hl.LinkStatus(*hl.u32s(call(r, 8, hl.Command.STATUS)))
        assert st.error and not st.busy and (st.error_code, st.error_index) == (5, 77)
        r = await exchange(ctx, br, hl.request(9, hl.Command.COUNTERS))
        assert len(hl.u32s(call(r, 9, hl.Command.COUNTERS))) == len(hl.COUNTER_CSRS)
        # RESET answers, then pulses core_reset
        r = await exchange(ctx, br, hl.request(10, hl.Command.RESET))
        call(r, 10, hl.Command.RESET)

    tb.run(script)


def nak_of(frame: hl.Frame) -> hl.NakReason:
    with pytest.raises(hl.NakError) as info:
        hl.response_payload(frame, frame.seq, hl.Command.INFO)
    return info.value.reason


def test_bridge_refuses_bad_frames() -> None:
    tb = BridgeBench()
    br = tb.bridge

    async def script(ctx):
        good = hl.request(1, hl.Command.WRITE_MEM, 0, data=b"\x11\x22\x33\x44")
        bad = bytearray(good)
        bad[9] ^= 0x40
        r = await exchange(ctx, br, bytes(bad))
        assert nak_of(r) is hl.NakReason.BAD_CRC
        # the write did not happen
        r = await exchange(ctx, br, hl.request(2, hl.Command.READ_MEM, 0, 4))
        assert call(r, 2, hl.Command.READ_MEM, 0, 4) == b"\0\0\0\0"
        # noise before a frame is skipped
        r = await exchange(ctx, br, b"\x00T\x13" + hl.request(3, hl.Command.READ_MEM, 0, 4))
        assert r.seq == 3
        cases = [
            (hl.encode_frame(4, 0x42), hl.NakReason.BAD_COMMAND),
            (hl.encode_frame(5, hl.Command.INFO, b"x"), hl.NakReason.BAD_LENGTH),
            (hl.request(6, hl.Command.READ_MEM, 2, 4), hl.NakReason.BAD_ADDRESS),
            (hl.request(7, hl.Command.READ_MEM, 0, 6), hl.NakReason.BAD_ADDRESS),
            (hl.request(8, hl.Command.READ_MEM, MEM - 4, 8), hl.NakReason.BAD_ADDRESS),
            (hl.request(9, hl.Command.READ_MEM, 0, hl.MAX_DATA + 4), hl.NakReason.BAD_LENGTH),
            (hl.request(10, hl.Command.WRITE_MEM, 0, data=b"abc"), hl.NakReason.BAD_ADDRESS),
        ]
        for frame, reason in cases:
            r = await exchange(ctx, br, frame)
            assert nak_of(r) is reason, (frame, reason)
            assert r.payload[1] == frame[4]
        # a version the bridge does not speak
        body = b"TF" + bytes([hl.VERSION - 1, 11, hl.Command.INFO, 0, 0])
        r = await exchange(ctx, br, body + struct.pack("<I", hl.crc32(body)))
        assert nak_of(r) is hl.NakReason.BAD_VERSION
        # an oversized length is refused at once
        body = b"TF" + bytes([hl.VERSION, 12, hl.Command.WRITE_MEM]) + struct.pack("<H", 1000)
        r = await exchange(ctx, br, body)
        assert nak_of(r) is hl.NakReason.BAD_LENGTH
        for _ in range(TIMEOUT + 10):  # let the rest of that frame be forgotten
            await ctx.tick()
        # a frame that stops arriving times out
        r = await exchange(ctx, br, hl.request(13, hl.Command.READ_MEM, 0, 4)[:9])
        assert nak_of(r) is hl.NakReason.TIMEOUT and r.seq == 13
        # memory and START refused while the core runs
        ctx.set(br.core_busy, 1)
        for seq, frame in ((14, hl.request(14, hl.Command.READ_MEM, 0, 4)),
                           (15, hl.request(15, hl.Command.START, 0, 1, MEM))):
            r = await exchange(ctx, br, frame)
            assert nak_of(r) is hl.NakReason.BUSY and r.seq == seq
        ctx.set(br.core_busy, 0)
        # slow but in time: bytes 40 cycles apart are accepted
        r = await exchange(ctx, br, hl.request(16, hl.Command.READ_MEM, 0, 4), gap=40)
        assert call(r, 16, hl.Command.READ_MEM, 0, 4) == b"\0\0\0\0"

    tb.run(script)


def test_bridge_strobes_to_the_core_are_single_registered_pulses() -> None:
    """What the bridge hands the core leaves it as one-cycle pulses: WRITE_CSR writes
    once, START writes its three registers then CTRL (one start), RESET pulses
    core_reset for one cycle after the last byte of its response; a refused RESET
    pulses nothing."""
    tb = BridgeBench()
    br = tb.bridge
    writes: list[tuple[int, int, int]] = []  # (cycle, address, data)
    starts: list[int] = []
    resets: list[int] = []
    sent: list[int] = []  # cycles a response byte was taken

    async def monitor(ctx):
        cycle = 0
        async for _clk, _rst, w_en, addr, data, start, reset, valid, ready in ctx.tick().sample(
                br.csr.w_en, br.csr.addr, br.csr.w_data, tb.csrs.start, br.core_reset,
                br.tx.valid, br.tx.ready):
            if w_en:
                writes.append((cycle, addr, data))
            if start:
                starts.append(cycle)
            if reset:
                resets.append(cycle)
            if valid and ready:
                sent.append(cycle)
            cycle += 1

    off = CSR_BY_NAME["DRAM_SIZE"].offset

    async def script(ctx):
        r = await exchange(ctx, br, hl.request(1, hl.Command.WRITE_CSR, off, 0x5A5A0F0F))
        call(r, 1, hl.Command.WRITE_CSR)
        assert [(a, d) for _, a, d in writes] == [(off, 0x5A5A0F0F)]
        assert not starts and not resets
        writes.clear()
        r = await exchange(ctx, br, hl.request(2, hl.Command.START, 0x40, 3, MEM))
        call(r, 2, hl.Command.START)
        assert [(a, d) for _, a, d in writes] == [
            (CSR_BY_NAME["INSN_BASE"].offset, 0x40), (CSR_BY_NAME["INSN_COUNT"].offset, 3),
            (CSR_BY_NAME["DRAM_SIZE"].offset, MEM), (CSR_BY_NAME["CTRL"].offset, 1)]
        assert [c for c, _, _ in writes] == list(range(writes[0][0], writes[0][0] + 4))
        assert len(starts) == 1 and not resets
        sent.clear()
        r = await exchange(ctx, br, hl.request(3, hl.Command.RESET))
        call(r, 3, hl.Command.RESET)
        for _ in range(5):
            await ctx.tick()
        assert len(resets) == 1 and resets[0] > max(sent), (resets, sent)
        r = await exchange(ctx, br, hl.encode_frame(4, hl.Command.RESET, b"x"))
        assert nak_of(r) is hl.NakReason.BAD_LENGTH
        for _ in range(5):
            await ctx.tick()
        assert len(resets) == 1 and len(starts) == 1

    tb.run(script, monitor)


def test_bridge_dumps_a_csr_read_in_one_cycle() -> None:
    """A CSR that changes every cycle (ERROR_INDEX, its four bytes equal and counting)
    is dumped whole: its four bytes come from one read, not from four cycles."""
    tb = BridgeBench()
    br = tb.bridge

    async def changing(ctx):
        k = 0
        while True:
            ctx.set(tb.csrs.error_index, (k & 0xFF) * 0x01010101)
            k += 1
            await ctx.tick()

    async def script(ctx):
        values = []
        for seq in range(1, 4):
            r = await exchange(ctx, br, hl.request(seq, hl.Command.STATUS))
            values.append(hl.LinkStatus(*hl.u32s(call(r, seq, hl.Command.STATUS))).error_index)
        off = CSR_BY_NAME["ERROR_INDEX"].offset
        r = await exchange(ctx, br, hl.request(4, hl.Command.READ_CSR, off))
        values += hl.u32s(call(r, 4, hl.Command.READ_CSR))
        for v in values:
            assert v == (v & 0xFF) * 0x01010101, hex(v)
        assert len(set(values)) > 1, values  # the value was read live

    tb.run(script, changing)


def test_bridge_checks_the_crc_up_to_the_last_byte() -> None:
    """The CRC steps a cycle after each byte: a frame whose last payload byte (or, with
    no payload, its seq byte: a wrong length byte would fail its length check) or whose
    last CRC byte is wrong is refused, and the same frames intact are answered."""
    tb = BridgeBench()
    br = tb.bridge

    async def script(ctx):
        frames = [hl.request(1, hl.Command.READ_MEM, 0, 4), hl.request(2, hl.Command.INFO)]
        for good in frames:
            crc_start = len(good) - hl.CRC_BYTES
            last_counted = crc_start - 1 if crc_start > hl.HEADER_BYTES else 3
            for pos in (last_counted, len(good) - 1):
                bad = bytearray(good)
                bad[pos] ^= 0x01
                r = await exchange(ctx, br, bytes(bad))
                assert nak_of(r) is hl.NakReason.BAD_CRC, pos
            r = await exchange(ctx, br, good)
            assert r.seq == good[3] and r.cmd == good[4] | hl.RESPONSE

    tb.run(script)


def test_bridge_retries_are_answered_and_not_executed_again() -> None:
    """Through framer and executor: a request sent again with the same bytes gets the
    same response frame; START then pulses the core's start once (the retry arrives
    while the core runs and is not BUSY), WRITE_CSR writes once, RESET resets once; a
    retry whose first attempt was NAKed BAD_CRC executes."""
    tb = BridgeBench()
    br = tb.bridge
    starts: list[int] = []
    writes: list[tuple[int, int]] = []
    resets: list[int] = []

    async def monitor(ctx):
        async for _clk, _rst, start, w_en, addr, data, reset in ctx.tick().sample(
                tb.csrs.start, br.csr.w_en, br.csr.addr, br.csr.w_data, br.core_reset):
            if start:
                starts.append(1)
            if w_en:
                writes.append((addr, data))
            if reset:
                resets.append(1)

    async def resend(ctx, frame: bytes) -> tuple[hl.Frame, hl.Frame]:
        first = await exchange(ctx, br, frame)
        return first, await exchange(ctx, br, frame)

    off = CSR_BY_NAME["DRAM_SIZE"].offset

    async def script(ctx):
        start = hl.request(1, hl.Command.START, 0x40, 3, MEM)
        first = await exchange(ctx, br, start)
        ctx.set(br.core_busy, 1)  # the first START started the core
        again = await exchange(ctx, br, start)
        assert first == again and call(again, 1, hl.Command.START) == b""
        ctx.set(br.core_busy, 0)
        assert len(starts) == 1 and len(writes) == 4
        first, again = await resend(ctx, hl.request(2, hl.Command.WRITE_CSR, off, 0x1234))
        assert first == again and call(again, 2, hl.Command.WRITE_CSR) == b""
        assert writes[4:] == [(off, 0x1234)]
        first, again = await resend(ctx, hl.request(3, hl.Command.RESET))
        assert first == again and call(again, 3, hl.Command.RESET) == b""
        for _ in range(5):
            await ctx.tick()
        assert len(resets) == 1
        write = hl.request(4, hl.Command.WRITE_MEM, 0x20, data=b"\x01\x02\x03\x04")
        bad = bytearray(write)
        bad[-1] ^= 0x80
        r = await exchange(ctx, br, bytes(bad))
        assert nak_of(r) is hl.NakReason.BAD_CRC
        first, again = await resend(ctx, write)
        assert first == again and call(again, 4, hl.Command.WRITE_MEM) == b""
        r = await exchange(ctx, br, hl.request(5, hl.Command.READ_MEM, 0x20, 4))
        assert call(r, 5, hl.Command.READ_MEM, 0x20, 4) == b"\x01\x02\x03\x04"
        # a new request with the old seq but other bytes executes
        r = await exchange(ctx, br, hl.request(5, hl.Command.WRITE_CSR, off, 0x99))
        call(r, 5, hl.Command.WRITE_CSR)
        assert writes[-1] == (off, 0x99) and len(starts) == 1

    tb.run(script, monitor)

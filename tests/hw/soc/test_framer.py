"""The host-link framer in Amaranth's simulator, against isa/hostlink.py's encoder.

The testbench stands in for the command executor: it takes each request, reads its
payload out of the lent buffer, writes a response payload (or answers a NAK) and
checks that every byte the framer sends is the frame :func:`hl.encode_frame` gives.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections import deque
from dataclasses import dataclass, field

import pytest
from amaranth.sim import Simulator

from tensorfab.hw.soc.framer import Crc32, Framer
from tensorfab.isa import hostlink as hl

TIMEOUT = 60


@dataclass
class Exchange:
    """What one request frame led to."""

    seq: int
    cmd: int
    length: int
    crc: int
    payload: bytes


@dataclass
class Bench:
    """The framer, a byte queue into ``rx``, and the executor model's answers."""

    tx_ready: float = 1.0  # probability that tx is ready in a cycle
    seed: int = 0
    framer: Framer = field(default_factory=lambda: Framer(TIMEOUT))
    rx_queue: deque = field(default_factory=deque)  # bytes, or ("gap", cycles)
    requests: list[Exchange] = field(default_factory=list)
    sent: bytearray = field(default_factory=bytearray)
    #: cycles a response was taken and cycles a response byte was sent
    taken_at: list[int] = field(default_factory=list)
    sent_at: list[int] = field(default_factory=list)

    def send(self, *items: bytes | int) -> None:
        """Queue bytes (``bytes``) or a pause of that many cycles (``int``)."""
        for item in items:
            self.rx_queue.extend(item if isinstance(item, bytes) else [("gap", item)])

    @staticmethod
    def answer(ex: Exchange) -> tuple[int | None, bytes]:
        """The model executor: a NAK BUSY for cmd 0x66, else the payload reversed."""
        if ex.cmd == 0x66:
            return hl.NakReason.BUSY, b""
        return None, ex.payload[::-1]

    def run(self, until_responses: int, *, max_cycles: int = 40_000) -> list[hl.Frame]:
        fr = self.framer
        rng = random.Random(self.seed)
        frames: list[hl.Frame] = []
        reader = hl.FrameReader()

        async def rx_driver(ctx):
            while True:
                if self.rx_queue and isinstance(self.rx_queue[0], tuple):
                    ctx.set(fr.rx.valid, 0)
                    for _ in range(self.rx_queue.popleft()[1]):
                        await ctx.tick()
                    continue
                ctx.set(fr.rx.valid, bool(self.rx_queue))
                ctx.set(fr.rx.payload, self.rx_queue[0] if self.rx_queue else 0)
                taken = self.rx_queue and ctx.get(fr.rx.ready)
                await ctx.tick()
                if taken:
                    self.rx_queue.popleft()

        async def main(ctx):
            cycle = 0
            drain = 8  # cycles after the last response byte (its answer is taken then)
            while len(frames) < until_responses or drain:
                drain -= len(frames) >= until_responses
                assert cycle < max_cycles, (frames, bytes(self.sent))
                if ctx.get(fr.request.valid):
                    req = ctx.get(fr.request.payload)
                    ctx.set(fr.request.ready, 1)
                    await ctx.tick()
                    ctx.set(fr.request.ready, 0)
                    data = bytearray()
                    for i in range(req.length):  # the buffer reads with a cycle's latency
                        ctx.set(fr.buf.addr, i)
                        await ctx.tick()
                        data.append(ctx.get(fr.buf.r_data))
                    ex = Exchange(req.seq, req.cmd, req.length, req.crc, bytes(data))
                    self.requests.append(ex)
                    reason, out = self.answer(ex)
                    for i, b in enumerate(out):
                        ctx.set(fr.buf.addr, i)
                        ctx.set(fr.buf.w_data, b)
                        ctx.set(fr.buf.w_en, 1)
                        await ctx.tick()
                    ctx.set(fr.buf.w_en, 0)
                    ctx.set(fr.response.valid, 1)
                    ctx.set(fr.response.payload, {"nak": reason is not None,
                                                  "reason": reason or 0, "length": len(out)})
                    cycle += len(data) + len(out) + 1
                ready = rng.random() < self.tx_ready
                ctx.set(fr.tx.ready, ready)
                valid, byte = ctx.get(fr.tx.valid), ctx.get(fr.tx.payload)
                if ctx.get(fr.response.valid) and ctx.get(fr.response.ready):
                    self.taken_at.append(cycle)
                    ctx.set(fr.response.valid, 0)
                await ctx.tick()
                cycle += 1
                if valid and ready:
                    self.sent.append(byte)
                    self.sent_at.append(cycle - 1)
                    frames.extend(reader.feed(bytes([byte])))

        sim = Simulator(fr)
        sim.add_clock(1e-6)
        sim.add_testbench(rx_driver, background=True)
        sim.add_testbench(main)
        sim.run()
        return frames


def nak(seq: int, reason: hl.NakReason, cmd: int) -> bytes:
    return hl.encode_frame(seq, hl.NAK, bytes([reason, cmd]))


@pytest.mark.parametrize("tx_ready", [1.0, 0.3])
def test_good_frames_reach_the_executor_and_answers_are_framed(tx_ready: float) -> None:
    rng = random.Random(7)
    payloads = [b"", b"\x5a", rng.randbytes(13), rng.randbytes(hl.MAX_PAYLOAD)]
    frames = [hl.encode_frame(i + 3, rng.randrange(1, 0x66), p) for i, p in enumerate(payloads)]
    tb = Bench(tx_ready=tx_ready, seed=int(tx_ready * 10))
    tb.send(*frames)  # back to back: the next frame waits for the framer
    tb.run(len(frames))
    want = []
    for raw, p in zip(frames, payloads, strict=True):
        f = hl.decode_frame(raw)
        assert Exchange(f.seq, f.cmd, len(p), zlib.crc32(raw[:-4]), p) in tb.requests
        want.append(hl.encode_frame(f.seq, f.cmd | hl.RESPONSE, p[::-1]))
    assert [(r.seq, r.payload) for r in tb.requests] == [(f[3], p) for f, p in
                                                          zip(frames, payloads, strict=True)]
    assert bytes(tb.sent) == b"".join(want)


def test_executor_nak_and_response_taken_after_the_last_byte() -> None:
    tb = Bench(tx_ready=0.5, seed=3)
    tb.send(hl.encode_frame(9, 0x66, b"abc"), hl.encode_frame(10, 0x12, b"xy"))
    tb.run(2)
    assert bytes(tb.sent) == nak(9, hl.NakReason.BUSY, 0x66) + hl.encode_frame(10, 0x92, b"yx")
    # each answer is taken only once its frame's last byte was sent
    ends = [tb.sent_at[len(nak(9, hl.NakReason.BUSY, 0x66)) - 1], tb.sent_at[-1]]
    assert len(tb.taken_at) == 2
    assert all(e < t <= e + 3 for e, t in zip(ends, tb.taken_at, strict=True)), (ends,
                                                                                   tb.taken_at)


def test_bad_frames_are_refused_without_a_request() -> None:
    good = hl.encode_frame(4, 0x21, b"payload")
    bad_crc = bytearray(good)
    bad_crc[8] ^= 0x10
    body = b"TF" + bytes([hl.VERSION + 1, 5, 0x22, 1, 0, 0xEE])
    bad_version = body + struct.pack("<I", zlib.crc32(body))
    too_long = b"TF" + bytes([hl.VERSION, 6, 0x23]) + struct.pack("<H", hl.MAX_PAYLOAD + 1)
    tb = Bench()
    tb.send(bytes(bad_crc), bad_version, too_long, TIMEOUT + 10, good)
    tb.run(4)
    assert bytes(tb.sent) == (nak(4, hl.NakReason.BAD_CRC, 0x21)
                              + nak(5, hl.NakReason.BAD_VERSION, 0x22)
                              + nak(6, hl.NakReason.BAD_LENGTH, 0x23)
                              + hl.encode_frame(4, 0x21 | hl.RESPONSE, b"daolyap"))
    assert [r.seq for r in tb.requests] == [4]


def test_over_long_length_is_refused_before_its_payload() -> None:
    tb = Bench()
    tb.send(b"TF" + bytes([hl.VERSION, 6, 0x23]) + struct.pack("<H", 0xFFFF))
    tb.run(1)
    assert bytes(tb.sent) == nak(6, hl.NakReason.BAD_LENGTH, 0x23)


def test_truncated_frame_times_out_then_the_next_is_taken() -> None:
    good = hl.encode_frame(12, 0x31, b"0123456789")
    tb = Bench()
    # a lone magic byte times out silently; a frame cut in its payload, in its
    # header or in its CRC is NAKed TIMEOUT with the seq received
    tb.send(b"T", TIMEOUT + 5, good[:9], TIMEOUT + 5, good[:-1], TIMEOUT + 5,
            hl.encode_frame(13, 0x32, b"ok"))
    tb.run(3)
    assert bytes(tb.sent) == (nak(12, hl.NakReason.TIMEOUT, 0x31) * 2
                              + hl.encode_frame(13, 0x32 | hl.RESPONSE, b"ko"))
    assert [r.seq for r in tb.requests] == [13]


@pytest.mark.parametrize("gap", [TIMEOUT, TIMEOUT + 1])
def test_a_byte_in_the_cycle_of_the_timeout_starts_the_next_frame(gap: int) -> None:
    """The next frame's first byte offered in the very cycle the frame before times
    out (``gap`` = TIMEOUT) is not taken with it: the next frame is received whole."""
    cut = hl.encode_frame(12, 0x31, b"0123456789")[:9]
    tb = Bench()
    tb.send(cut, gap, hl.encode_frame(13, 0x32, b"ok"))
    tb.run(2)
    assert bytes(tb.sent) == (nak(12, hl.NakReason.TIMEOUT, 0x31)
                              + hl.encode_frame(13, 0x32 | hl.RESPONSE, b"ko"))
    assert [r.seq for r in tb.requests] == [13]


def test_slow_bytes_within_the_timeout_are_accepted() -> None:
    frame = hl.encode_frame(1, 0x41, b"slow")
    tb = Bench()
    for b in frame:
        tb.send(bytes([b]), TIMEOUT - 5)
    tb.run(1)
    assert bytes(tb.sent) == hl.encode_frame(1, 0x41 | hl.RESPONSE, b"wols")


def test_garbage_before_the_magic_is_skipped() -> None:
    frames = [hl.encode_frame(20, 0x51, b"a"), hl.encode_frame(21, 0x52, b"bc"),
              hl.encode_frame(22, 0x53, b"")]
    tb = Bench()
    # noise, a T not followed by F, a doubled T
    tb.send(b"\x00\xffT\x13", frames[0], b"zzT", frames[1], b"T", frames[2])
    tb.run(3)
    assert bytes(tb.sent) == b"".join(hl.encode_frame(f[3], f[4] | hl.RESPONSE,
                                                      hl.decode_frame(f).payload[::-1])
                                      for f in frames)


def test_every_single_bit_error_is_refused() -> None:
    good = hl.encode_frame(30, 0x61, b"\x01\x02\x03")
    tb = Bench()
    expect = []
    for bit in range(8 * len(good)):
        bad = bytearray(good)
        bad[bit // 8] ^= 1 << (bit % 8)
        tb.send(bytes(bad), TIMEOUT + 5)
        try:
            hl.decode_frame(bytes(bad))
        except hl.FrameMagicError:
            continue  # not a frame: never answered
        except hl.FrameTooLongError:
            expect.append(nak(bad[3], hl.NakReason.BAD_LENGTH, bad[4]))
        except hl.FrameTruncatedError:  # a shorter length: the CRC is then wrong
            length = int.from_bytes(bad[5:7], "little")
            if length + hl.HEADER_BYTES + hl.CRC_BYTES <= len(bad):
                expect.append(nak(bad[3], hl.NakReason.BAD_CRC, bad[4]))
            else:
                expect.append(nak(bad[3], hl.NakReason.TIMEOUT, bad[4]))
        except hl.FrameCrcError:
            expect.append(nak(bad[3], hl.NakReason.BAD_CRC, bad[4]))
        else:
            raise AssertionError(f"bit {bit} not caught by the decoder")
    tb.run(len(expect), max_cycles=200_000)
    assert bytes(tb.sent) == b"".join(expect)
    assert not tb.requests


def test_crc_unit_computes_crc32_of_what_it_is_fed() -> None:
    """The unit the framer's formal spec abstracts (tests/formal/test_framer_proof.py)
    against zlib: restart with a frame's first byte, feed the rest (with idle cycles
    between), the complement of its value is the CRC-32; clear starts over."""
    rng = random.Random(11)
    messages = [b"T", b"TF", rng.randbytes(7), rng.randbytes(hl.MAX_PAYLOAD)]
    unit = Crc32()
    got: list[tuple[int, int]] = []

    async def bench(ctx):
        for message in messages:
            for i, byte in enumerate(message):
                ctx.set(unit.byte, byte)
                ctx.set(unit.restart, i == 0)
                ctx.set(unit.feed, i != 0)
                await ctx.tick()
                ctx.set(unit.restart, 0)
                ctx.set(unit.feed, 0)
                for _ in range(rng.randrange(2)):
                    await ctx.tick()
            got.append((~ctx.get(unit.value) & 0xFFFFFFFF, zlib.crc32(message)))
        ctx.set(unit.clear, 1)
        await ctx.tick()
        got.append((ctx.get(unit.value), 0xFFFFFFFF))

    sim = Simulator(unit)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert [g for g, _ in got] == [want for _, want in got]

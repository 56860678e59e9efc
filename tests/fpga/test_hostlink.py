"""The host-link frame format (isa/hostlink.py) on the host side."""

from __future__ import annotations

import random
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorfab.isa import TensorfabError
from tensorfab.isa import hostlink as hl


@given(st.binary(max_size=300))
def test_crc32_is_zlibs(data: bytes) -> None:
    assert hl.crc32(data) == zlib.crc32(data)


@given(st.integers(0, 255), st.integers(0, 255), st.binary(max_size=hl.MAX_PAYLOAD))
def test_round_trip(seq: int, cmd: int, payload: bytes) -> None:
    raw = hl.encode_frame(seq, cmd, payload)
    assert len(raw) == hl.HEADER_BYTES + len(payload) + hl.CRC_BYTES
    assert raw[:2] == b"TF"
    frame = hl.decode_frame(raw)
    assert (frame.seq, frame.cmd, frame.payload) == (seq, cmd, payload)


def test_layout_by_hand() -> None:
    raw = hl.request(7, hl.Command.READ_MEM, 0x01020304, 0x20)
    body = b"TF" + bytes([2, 7, 0x02, 6, 0]) + bytes([4, 3, 2, 1, 0x20, 0])
    assert raw == body + zlib.crc32(body).to_bytes(4, "little")


def test_every_corrupted_bit_is_caught() -> None:
    raw = hl.request(3, hl.Command.WRITE_MEM, 0x40, data=bytes(range(16)))
    for bit in range(8 * len(raw)):
        bad = bytearray(raw)
        bad[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(hl.FrameError):
            hl.decode_frame(bytes(bad))


def test_named_errors() -> None:
    raw = hl.encode_frame(1, 2, b"abc")
    with pytest.raises(hl.FrameTruncatedError, match="announces 14"):
        hl.decode_frame(raw[:-1])
    with pytest.raises(hl.FrameTruncatedError, match="header"):
        hl.decode_frame(raw[:4])
    with pytest.raises(hl.FrameTruncatedError, match="only"):
        hl.decode_frame(raw + b"x")
    with pytest.raises(hl.FrameCrcError):
        hl.decode_frame(raw[:-1] + bytes([raw[-1] ^ 1]))
    with pytest.raises(hl.FrameMagicError):
        hl.decode_frame(b"XY" + raw[2:])
    with pytest.raises(hl.FrameTooLongError, match="MAX_PAYLOAD"):
        hl.encode_frame(0, 1, bytes(hl.MAX_PAYLOAD + 1))
    big = bytearray(raw)
    big[5:7] = (hl.MAX_PAYLOAD + 1).to_bytes(2, "little")
    with pytest.raises(hl.FrameTooLongError):
        hl.decode_frame(bytes(big))
    body = b"TF" + bytes([9, 0, 1, 0, 0])
    with pytest.raises(hl.FrameVersionError, match="version 9"):
        hl.decode_frame(body + zlib.crc32(body).to_bytes(4, "little"))
    assert issubclass(hl.HostLinkError, TensorfabError)


def test_reader_hunts_and_splits() -> None:
    rng = random.Random(5)
    frames = [hl.encode_frame(i, rng.randrange(256), rng.randbytes(rng.randrange(40)))
              for i in range(20)]
    stream = b"".join(rng.randbytes(rng.randrange(4)).replace(b"T", b"t") + f
                      for f in frames)
    reader = hl.FrameReader()
    got = []
    pos = 0
    while pos < len(stream):
        n = rng.randrange(1, 9)
        got += reader.feed(stream[pos:pos + n])
        pos += n
    assert [hl.encode_frame(f.seq, f.cmd, f.payload) for f in got] == frames
    assert reader.pending == 0


def test_reader_resumes_after_bad_crc() -> None:
    good = hl.encode_frame(1, 2, b"xy")
    bad = bytearray(hl.encode_frame(0, 2, b"zz"))
    bad[-1] ^= 0xFF
    reader = hl.FrameReader()
    with pytest.raises(hl.FrameCrcError):
        reader.feed(bytes(bad) + good)
    assert reader.feed(b"") == [hl.decode_frame(good)]


def test_response_checks() -> None:
    ok = hl.decode_frame(hl.encode_frame(4, 0x82, bytes(8)))
    assert hl.response_payload(ok, 4, hl.Command.READ_MEM, 0, 8) == bytes(8)
    with pytest.raises(hl.ResponseMismatch, match="seq"):
        hl.response_payload(ok, 5, hl.Command.READ_MEM, 0, 8)
    with pytest.raises(hl.ResponseMismatch, match="8 bytes, expected 16"):
        hl.response_payload(ok, 4, hl.Command.READ_MEM, 0, 16)
    nak = hl.decode_frame(hl.encode_frame(4, hl.NAK, bytes([hl.NakReason.BAD_CRC, 0x02])))
    with pytest.raises(hl.NakError, match="BAD_CRC for command READ_MEM") as info:
        hl.response_payload(nak, 4, hl.Command.READ_MEM, 0, 8)
    assert info.value.reason is hl.NakReason.BAD_CRC


def test_info_round_trip() -> None:
    info = hl.LinkInfo(1, 4, hl.MAX_PAYLOAD, 65536, 25_000_000, 115200, 0xDEADBEEF)
    assert hl.LinkInfo.unpack(info.pack()) == info

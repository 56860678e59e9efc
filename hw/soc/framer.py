"""The host-link framer: request frames in, response frames out (:mod:`tensorfab.isa.hostlink`).

The framer knows the frame (magic, header, CRC-32, timeout) and nothing of the
commands: it hands an accepted request to a command executor
(:class:`tensorfab.hw.soc.executor.CommandExecutor`) on :attr:`Framer.request`,
lends it the payload buffer, and sends the response it gets back on
:attr:`Framer.response`.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tensorfab.isa import hostlink as hl

__all__ = ["BUFFER_DEPTH", "Crc32", "Framer", "PayloadBufferSignature", "RequestLayout",
           "ResponseLayout", "crc32_step"]

_POLY = 0xEDB88320
#: Bytes of the payload buffer (a block RAM): MAX_PAYLOAD rounded up to a power of two.
BUFFER_DEPTH = 1 << (hl.MAX_PAYLOAD - 1).bit_length()
_LENGTH = unsigned(hl.MAX_PAYLOAD.bit_length())
_FIELD_BITS = {name: 8 * size for name, size in hl.HEADER_FIELDS}

#: An accepted request (CRC and version good, payload in the buffer from byte 0).
RequestLayout = data.StructLayout({"seq": _FIELD_BITS["seq"], "cmd": _FIELD_BITS["cmd"],
                                   "length": _LENGTH, "crc": 8 * hl.CRC_BYTES})
#: The executor's answer: a NAK with its reason, or success with ``length`` payload
#: bytes at the start of the buffer.
ResponseLayout = data.StructLayout({"nak": 1, "reason": 8, "length": _LENGTH})
#: The payload buffer as the executor sees it: ``r_data`` is the byte at the ``addr``
#: of the cycle before; a byte is written where ``addr`` points while ``w_en``.
PayloadBufferSignature = wiring.Signature({
    "addr": Out(range(BUFFER_DEPTH)), "w_en": Out(1), "w_data": Out(8), "r_data": In(8)})


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


class Crc32(wiring.Component):
    """The CRC-32 register of a frame (reflected, before the final inversion).

    Attributes
    ----------
    byte : In(8)
        The byte to take.
    restart : In(1)
        Start over with ``byte`` as the first byte.
    feed : In(1)
        Take ``byte`` after the bytes so far (unless ``restart``).
    clear : In(1)
        Back to the initial value (unless ``restart`` or ``feed``).
    value : Out(32)
        The register: after ``restart``/``feed``, :func:`crc32_step` of the value
        before and ``byte``, in the next cycle.
    """

    def __init__(self) -> None:
        super().__init__({"byte": In(8), "restart": In(1), "feed": In(1), "clear": In(1),
                          "value": Out(32, init=0xFFFFFFFF)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        with m.If(self.restart):
            m.d.sync += self.value.eq(crc32_step(Const(0xFFFFFFFF, 32), self.byte))
        with m.Elif(self.feed):
            m.d.sync += self.value.eq(crc32_step(self.value, self.byte))
        with m.Elif(self.clear):
            m.d.sync += self.value.eq(0xFFFFFFFF)
        return m


class Framer(wiring.Component):
    """Receives host-link request frames from a byte stream and sends response frames.

    It hunts for :data:`~tensorfab.isa.hostlink.MAGIC`, receives the header and the
    payload (into a block RAM of :data:`BUFFER_DEPTH` bytes), and checks the length
    (above ``MAX_PAYLOAD``: NAK BAD_LENGTH at once), the CRC-32 (NAK BAD_CRC) and
    the version (NAK BAD_VERSION). A frame whose bytes stop arriving for
    ``rx_timeout`` cycles after its magic is dropped with a NAK TIMEOUT (silently
    before the header starts); a byte offered in the cycle it is dropped is not taken
with it, HUNT takes it. An accepted frame is offered on :attr:`request`; from
    then until the framer takes the :attr:`response`, the buffer is the executor's
    (:attr:`buf`). A response is sent with its payload from the buffer (a NAK's is
    the reason and the command byte), and the response stream's transfer completes
    when its last byte has been taken by :attr:`tx`. No byte is read from :attr:`rx`
    between a frame's last byte and the end of its response.

    Parameters
    ----------
    rx_timeout : int
        Clock cycles without a byte after which a partial frame is dropped.
    crc_unit : Crc32 or None
        The CRC-32 register (a new :class:`Crc32` if ``None``; the formal spec of
        the framer gives it one whose value is a free input).

    Attributes
    ----------
    rx : In(stream.Signature(8))
        Received bytes.
    tx : Out(stream.Signature(8))
        Bytes to send.
    request : Out(stream.Signature(RequestLayout))
        Accepted requests.
    response : In(stream.Signature(ResponseLayout))
        The answer to the request; taken when the response frame is sent.
    buf : In(PayloadBufferSignature)
        The payload buffer, driven by the executor between request and response.
    """

    def __init__(self, rx_timeout: int, crc_unit: Crc32 | None = None) -> None:
        self.rx_timeout = rx_timeout
        self.crc_unit = Crc32() if crc_unit is None else crc_unit
        super().__init__({
            "rx": In(stream.Signature(8)),
            "tx": Out(stream.Signature(8)),
            "request": Out(stream.Signature(RequestLayout)),
            "response": In(stream.Signature(ResponseLayout)),
            "buf": In(PayloadBufferSignature),
        })

    def elaborate(self, platform: object) -> Module:
        # Timing: the block RAM's inputs are registers (or the executor's registers
        # through one multiplexer), a byte read is registered as it leaves the RAM,
        # the CRC steps a cycle after its byte, and the length and CRC checks are
        # registered a cycle before they are acted on.
        # (one signal per assignment, so that each is named: the framer's formal spec
        # states invariants of its registers by name)
        m = Module()
        m.submodules.ram = ram = Memory(shape=unsigned(8), depth=BUFFER_DEPTH, init=[])
        wp, rp = ram.write_port(), ram.read_port()
        rx, buf = self.rx, self.buf
        idx = Signal(range(BUFFER_DEPTH))
        we = Signal()
        waddr = Signal(range(BUFFER_DEPTH))
        wdata = Signal(8)
        rd_byte = Signal(8)
        lend = Signal()  # the executor owns the buffer
        m.d.sync += [we.eq(0), rd_byte.eq(rp.data)]
        m.d.comb += [wp.addr.eq(Mux(lend, buf.addr, waddr)), wp.en.eq(Mux(lend, buf.w_en, we)),
                     wp.data.eq(Mux(lend, buf.w_data, wdata)),
                     rp.addr.eq(Mux(lend, buf.addr, idx)), buf.r_data.eq(rp.data)]

        # the header after the magic, as received; the CRC field
        head = Signal(data.StructLayout({n: b for n, b in _FIELD_BITS.items() if n != "magic"}))
        head_bytes = len(head.as_value()) // 8
        rx_crc = Signal(8 * hl.CRC_BYTES)
        left = Signal(range(hl.MAX_PAYLOAD + 1))  # payload bytes after this one
        last = Signal()

        m.submodules.crc = crc_unit = self.crc_unit
        crc = crc_unit.value
        crc_byte = Signal(8)
        crc_feed = Signal()
        crc_restart = Signal()
        crc_clear = Signal()
        m.d.sync += [crc_feed.eq(0), crc_restart.eq(0), crc_clear.eq(0)]
        m.d.comb += [crc_unit.byte.eq(crc_byte), crc_unit.feed.eq(crc_feed),
                     crc_unit.restart.eq(crc_restart), crc_unit.clear.eq(crc_clear)]

        def feed(byte: Value, *, restart: bool = False) -> list:
            return [crc_byte.eq(byte), (crc_restart if restart else crc_feed).eq(1)]

        # the response being sent
        nak = Signal()
        reason = Signal(8)
        resp_len = Signal(_LENGTH)
        answered = Signal()  # the response came from the executor
        crc_bad = Signal()
        version_bad = Signal()
        too_long = Signal()

        def refuse(code: int) -> list:
            return [nak.eq(1), reason.eq(code), resp_len.eq(2), answered.eq(0), idx.eq(0),
                    crc_clear.eq(1)]

        take = rx.valid & rx.ready
        timer = Signal(range(self.rx_timeout + 1))
        timed_out = Signal()
        in_frame = Signal()
        m.d.sync += timer.eq(Mux(in_frame & ~take, timer + 1, 0))
        # high in the cycle the timer reaches rx_timeout, decided the cycle before
        m.d.sync += timed_out.eq(in_frame & ~take & (timer == self.rx_timeout - 1))
        # inside a frame, a byte is taken unless the frame times out in this cycle: a
        # byte that comes just then belongs to what follows (HUNT takes it)
        frame_ready = ~timed_out

        with m.FSM():
            # ------------------------------------------------------------ receive
            with m.State("HUNT"):
                m.d.comb += rx.ready.eq(1)
                with m.If(take & (rx.payload == hl.MAGIC[0])):
                    m.d.sync += feed(rx.payload, restart=True)
                    m.next = "MAGIC1"
            with m.State("MAGIC1"):
                m.d.comb += [rx.ready.eq(frame_ready), in_frame.eq(1)]
                with m.If(timed_out):
                    m.next = "HUNT"
                with m.Elif(take):
                    with m.If(rx.payload == hl.MAGIC[1]):
                        m.d.sync += [feed(rx.payload), idx.eq(0), head.eq(0)]
                        m.next = "HEADER"
                    with m.Elif(rx.payload == hl.MAGIC[0]):
                        m.d.sync += feed(rx.payload, restart=True)
                    with m.Else():
                        m.next = "HUNT"
            with m.State("HEADER"):
                m.d.comb += [rx.ready.eq(frame_ready), in_frame.eq(1)]
                with m.If(timed_out):
                    m.d.sync += refuse(hl.NakReason.TIMEOUT)
                    m.next = "TX_HEADER"
                with m.Elif(take):
                    m.d.sync += [feed(rx.payload), idx.eq(idx + 1),
                                 head.as_value().word_select(idx[:3], 8).eq(rx.payload)]
                    with m.If(idx[:3] == head_bytes - 1):
                        m.next = "LENGTH"
            with m.State("LENGTH"):
                m.d.sync += [idx.eq(0), too_long.eq(head.length > hl.MAX_PAYLOAD),
                             left.eq(head.length - 1), last.eq(head.length == 1)]
                m.next = "LENGTH_CHECK"
            with m.State("LENGTH_CHECK"):
                with m.If(too_long):
                    m.d.sync += refuse(hl.NakReason.BAD_LENGTH)
                    m.next = "TX_HEADER"
                with m.Elif(head.length == 0):
                    m.next = "RX_CRC"
                with m.Else():
                    m.next = "PAYLOAD"
            with m.State("PAYLOAD"):
                m.d.comb += [rx.ready.eq(frame_ready), in_frame.eq(1)]
                with m.If(timed_out):
                    m.d.sync += refuse(hl.NakReason.TIMEOUT)
                    m.next = "TX_HEADER"
                with m.Elif(take):
                    m.d.sync += [feed(rx.payload), we.eq(1), waddr.eq(idx), wdata.eq(rx.payload),
                                 idx.eq(idx + 1), left.eq(left - 1), last.eq(left == 1)]
                    with m.If(last):
                        m.d.sync += idx.eq(0)
                        m.next = "RX_CRC"
            with m.State("RX_CRC"):
                m.d.comb += [rx.ready.eq(frame_ready), in_frame.eq(1)]
                with m.If(timed_out):
                    m.d.sync += refuse(hl.NakReason.TIMEOUT)
                    m.next = "TX_HEADER"
                with m.Elif(take):
                    m.d.sync += [rx_crc.eq(Cat(rx_crc[8:], rx.payload)), idx.eq(idx + 1)]
                    with m.If(idx[:2] == hl.CRC_BYTES - 1):
                        m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [crc_bad.eq(rx_crc != ~crc), version_bad.eq(head.version != hl.VERSION)]
                m.next = "VERDICT"
            with m.State("VERDICT"):
                with m.If(crc_bad):
                    m.d.sync += refuse(hl.NakReason.BAD_CRC)
                    m.next = "TX_HEADER"
                with m.Elif(version_bad):
                    m.d.sync += refuse(hl.NakReason.BAD_VERSION)
                    m.next = "TX_HEADER"
                with m.Else():
                    m.d.sync += lend.eq(1)
                    m.next = "REQUEST"
            # ------------------------------------------------------------ execute
            with m.State("REQUEST"):
                m.d.comb += [self.request.valid.eq(1), self.request.payload.seq.eq(head.seq),
                             self.request.payload.cmd.eq(head.cmd),
                             self.request.payload.length.eq(head.length),
                             self.request.payload.crc.eq(rx_crc)]
                with m.If(self.request.ready):
                    m.next = "EXECUTE"
            with m.State("EXECUTE"):
                answer = self.response.payload
                with m.If(self.response.valid):
                    m.d.sync += [lend.eq(0), nak.eq(answer.nak), reason.eq(answer.reason),
                                 resp_len.eq(Mux(answer.nak, 2, answer.length)),
                                 answered.eq(1), idx.eq(0), crc_clear.eq(1)]
                    m.next = "TX_HEADER"
            self._transmit(m, SimpleNamespace(
                idx=idx, rd_byte=rd_byte, nak=nak, reason=reason, resp_len=resp_len,
                answered=answered, head=head, crc=crc, feed=feed))
        return m

    def _transmit(self, m: Module, r: SimpleNamespace) -> None:
        """The states that send a response: header, payload (a NAK's or the buffer's),
        CRC; the executor's answer is taken once its last byte has gone."""
        tx = self.tx
        idx, rd_byte, nak, reason, resp_len, head, crc, feed = (
            r.idx, r.rd_byte, r.nak, r.reason, r.resp_len, r.head, r.crc, r.feed)
        # every byte sent is first loaded into tx_byte (with whether it ends its
        # part of the frame), then offered to the transmitter and fed to the CRC
        tx_byte = Signal(8)
        tx_end = Signal()
        resp_empty = Signal()
        with m.State("TX_HEADER"):
            fields = {"magic": Const(int.from_bytes(hl.MAGIC, "little"), 16),
                      "version": Const(hl.VERSION, 8), "seq": head.seq,
                      "cmd": Mux(nak, hl.NAK, head.cmd | hl.RESPONSE), "length": resp_len}
            header = Cat(*(Cat(Value.cast(fields[n]), Const(0, b))[:b]
                           for n, b in _FIELD_BITS.items()))
            m.d.sync += [tx_byte.eq(header.word_select(idx[:3], 8)),
                         tx_end.eq(idx[:3] == hl.HEADER_BYTES - 1),
                         resp_empty.eq(resp_len == 0)]
            m.next = "TX_HEADER_SEND"
        with m.State("TX_HEADER_SEND"):
            m.d.comb += [tx.valid.eq(1), tx.payload.eq(tx_byte)]
            with m.If(tx.ready):
                m.d.sync += [feed(tx_byte), idx.eq(idx + 1)]
                with m.If(tx_end):
                    m.d.sync += idx.eq(0)
                    with m.If(resp_empty):
                        m.next = "TX_CRC_WAIT"
                    with m.Else():
                        m.next = "TX_FETCH"
                with m.Else():
                    m.next = "TX_HEADER"
        with m.State("TX_FETCH"):
            m.next = "TX_WAIT"
        with m.State("TX_WAIT"):
            m.next = "TX_LOAD"
        with m.State("TX_LOAD"):
            m.d.sync += [tx_byte.eq(Mux(nak, Mux(idx == 0, reason, head.cmd), rd_byte)),
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
            # the transmitter took the last byte: the executor's answer is done
            m.d.comb += self.response.ready.eq(r.answered)
            m.d.sync += [r.answered.eq(0), nak.eq(0)]
            m.next = "HUNT"

"""The host bridge's framer (hw/soc/framer.py), by k-induction: a frame whose CRC the
CRC unit did not accept never reaches the executor, a request and its response carry
the header's sequence number, and the framer cannot be wedged: once the link falls
silent it is back in HUNT within ``SILENCE_BOUND`` cycles.

The CRC unit is abstracted: the framer gets a :class:`~tensorfab.hw.soc.framer.Crc32`
whose value is a free input every cycle (``FreeCrc``), so the solver never unrolls the
CRC-32 recurrence (a BMC against the real one does not finish in minutes). What is
proved is the framer's side of the CRC: while receiving it feeds the unit only the byte
it took in the cycle before, and it offers a request only if the unit's value, in the
cycle after the frame's last byte, is the complement of the CRC field it received (and
the request carries that field). That the unit computes CRC-32 of what it is fed is
tested in simulation against ``zlib.crc32`` (tests/hw/soc/test_framer.py). The executor
never touches the payload buffer here (the payload bytes play no part in these
properties).

The properties are made inductive by helper invariants over the framer's registers,
which the spec reads by name from the elaborated framer (:func:`driven_signals`); the
silence bound by a ranking function (:func:`silence_spec`). Each mutation check (a
framer built from its own source with one expression replaced, :func:`mutated_framer`)
runs the properties without the helpers, by BMC from reset, so the counterexample is a
real trace that breaks the property itself.
"""

from __future__ import annotations

from pathlib import Path

from amaranth.hdl import Assert, Assume, Cat, Cover, Fragment, Module, Signal, Value

import tensorfab.hw.soc.framer as framer_module
from formal.symbiyosys import assert_proved, assert_refuted, driven_signals, free, mutant
from tensorfab.hw.soc.framer import Crc32, Framer
from tensorfab.isa import hostlink as hl

#: cycles without a byte after which a partial frame is dropped (small: the silence
#: property's bound grows with it, and every count of the timer is the same logic)
RX_TIMEOUT = 3
#: the executor's answer in the silence spec: at most this many payload bytes
ANSWER_BYTES = 1
#: cycles a response takes from its TX_CRC_WAIT state to HUNT: the wait, the CRC, done
CRC_CYCLES = 1 + hl.CRC_BYTES + 1
#: cycles a NAK (2 payload bytes) takes from TX_HEADER to HUNT: 2 per header byte,
#: 4 per payload byte, then the CRC
NAK_CYCLES = 2 * hl.HEADER_BYTES + 4 * 2 + CRC_CYCLES
#: a silent link leaves the framer in HUNT after at most this many cycles (the worst
#: case: the header just in, a payload to come; LENGTH, LENGTH_CHECK, the timeout,
#: then the NAK)
SILENCE_BOUND = 2 + RX_TIMEOUT + 1 + NAK_CYCLES
TX_STATES = ("TX_HEADER", "TX_HEADER_SEND", "TX_FETCH", "TX_WAIT", "TX_LOAD", "TX_SEND",
             "TX_CRC_WAIT", "TX_CRC", "TX_DONE")


class FreeCrc(Crc32):
    """The CRC unit abstracted: its value is whatever the solver chooses, every cycle."""

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.d.comb += self.value.eq(free(32))
        return m


class FramerSpec:
    """The framer between a free byte stream and a free executor (one that never
    touches the buffer), its state and registers in view.

    Attributes
    ----------
    m : Module
        The spec; the framer is its submodule ``framer``.
    framer : Framer
    reg : dict of str to Signal
        The framer's registers by name (``fsm_state``, ``idx``, ``head``...).
    """

    def __init__(self, framer: Framer) -> None:
        self.m = m = Module()
        self.framer = framer
        fragment = Fragment.get(framer, None)
        m.submodules.framer = fragment
        self.encoding = dict(fragment.generated["fsm"].encoding)
        self.reg = driven_signals(fragment)
        answer = framer.response.payload
        m.d.comb += [framer.rx.valid.eq(free(1)), framer.rx.payload.eq(free(8)),
                     answer.nak.eq(free(1)), answer.reason.eq(free(8)),
                     answer.length.eq(free(answer.length.shape())),
                     framer.buf.addr.eq(0), framer.buf.w_en.eq(0), framer.buf.w_data.eq(0)]

    def in_state(self, *names: str) -> Value:
        """The framer is in one of the states ``names``."""
        state = self.reg["fsm_state"]
        return Cat(*(state == self.encoding[n] for n in names)).any()

    def free_environment(self) -> None:
        """Transmitter and executor handshakes all free."""
        f = self.framer
        self.m.d.comb += [f.tx.ready.eq(free(1)), f.request.ready.eq(free(1)),
                          f.response.valid.eq(free(1))]

    def taken_bytes(self) -> Signal:
        """The last five bytes taken from ``rx``, the newest in the top byte: the
        header after its magic once that is in, the CRC field in the top four once
        that is in."""
        taken = Signal(40)
        rx = self.framer.rx
        with self.m.If(rx.valid & rx.ready):
            self.m.d.sync += taken.eq(Cat(taken[8:], rx.payload))
        return taken


def crc_gate_spec(framer: Framer, *, helpers: bool = True) -> Module:
    """A request is offered only if the CRC unit's value, in the cycle after the
    frame's last byte (CHECK), was the complement of the CRC field received, and it
    carries that field; while receiving, the unit is fed the byte taken in the cycle
    before, and every byte of a frame before its CRC field is fed (none is taken and
    dropped, not even in the cycle the frame times out)."""
    spec = FramerSpec(framer)
    spec.free_environment()
    m, reg, in_state, rx = spec.m, spec.reg, spec.in_state, framer.rx
    taken = spec.taken_bytes()
    took, took_byte = Signal(), Signal(8)
    m.d.sync += [took.eq(rx.valid & rx.ready), took_byte.eq(rx.payload)]
    # a byte of a frame before its CRC field: a magic byte that starts or continues
    # one, a byte of its header or payload
    took_frame_byte = Signal()
    m.d.sync += took_frame_byte.eq(
        rx.valid & rx.ready
        & (in_state("HEADER", "PAYLOAD")
           | (in_state("HUNT", "MAGIC1") & (rx.payload == hl.MAGIC[0]))
           | (in_state("MAGIC1") & (rx.payload == hl.MAGIC[1]))))
    crc_unit = framer.crc_unit
    crc_field = taken[8:]
    crc_ok = Signal()
    with m.If(in_state("CHECK")):
        m.d.sync += crc_ok.eq(crc_field == ~crc_unit.value)
    with m.Elif(in_state("HUNT")):
        m.d.sync += crc_ok.eq(0)
    receiving = in_state("MAGIC1", "HEADER", "PAYLOAD", "RX_CRC", "CHECK")
    fed = crc_unit.feed | crc_unit.restart
    request = framer.request
    idx, rx_crc = reg["idx"], reg["rx_crc"]
    m.d.comb += [
        Assert(~request.valid | crc_ok, "a request whose CRC the unit did not accept"),
        Assert(~request.valid | (request.payload.crc == crc_field),
               "a request's CRC is not the CRC field received"),
        Assert(~(fed & receiving) | (took & (crc_unit.byte == took_byte)),
               "the CRC unit fed a byte that was not the one just taken"),
        Assert(~took_frame_byte | fed, "a byte of a frame taken but not fed to the CRC unit"),
        Cover(request.valid & request.ready),
        Cover(in_state("VERDICT") & ~crc_ok),
    ]
    if not helpers:
        return m
    # the framer's CRC field is the spec's, and a request stays accepted
    m.d.comb += [
        Assert(~in_state("CHECK", "VERDICT", "REQUEST", "EXECUTE") | (rx_crc == crc_field)),
        *(Assert(~(in_state("RX_CRC") & (idx[:2] == n))
                 | (rx_crc[32 - 8 * n:] == taken[40 - 8 * n:]))
          for n in range(1, hl.CRC_BYTES)),
        Assert(~in_state("REQUEST", "EXECUTE") | crc_ok),
    ]
    return m


def sequence_spec(framer: Framer, *, helpers: bool = True) -> Module:
    """A request carries its header's sequence number, and so does the response
    (the fourth byte of the response frame); responses start with the magic."""
    spec = FramerSpec(framer)
    spec.free_environment()
    m, reg, in_state, tx = spec.m, spec.reg, spec.in_state, framer.tx
    taken = spec.taken_bytes()
    seq, seq_known = Signal(8), Signal()
    with m.If(in_state("LENGTH")):
        m.d.sync += [seq.eq(taken[8:16]), seq_known.eq(1)]
    with m.Elif(in_state("HUNT")):
        m.d.sync += seq_known.eq(0)
    sent = Signal(4)  # bytes of the response sent so far
    tx_fired = tx.valid & tx.ready
    with m.If(~in_state(*TX_STATES)):
        m.d.sync += sent.eq(0)
    with m.Elif(tx_fired & (sent != 15)):
        m.d.sync += sent.eq(sent + 1)
    executed = Signal()  # the response being sent answers an executed request
    request = framer.request
    with m.If(request.valid & request.ready):
        m.d.sync += executed.eq(1)
    with m.Elif(in_state("HUNT")):
        m.d.sync += executed.eq(0)
    idx, head = reg["idx"], reg["head"]
    m.d.comb += [
        Assert(~request.valid | (seq_known & (request.payload.seq == seq)),
               "a request's sequence number is not its header's"),
        Assert(~(tx_fired & (sent == 3) & seq_known) | (tx.payload == seq),
               "a response's sequence number is not its request's"),
        Assert(~(tx_fired & (sent == 0)) | (tx.payload == hl.MAGIC[0]),
               "a response does not start with the magic"),
        Cover(tx_fired & (sent == 3) & executed),
    ]
    if not helpers:
        return m
    # the framer's header is the spec's; the header byte it sends is the one counted
    m.d.comb += [
        Assert(~seq_known | (head[8:16] == seq)),
        Assert(~in_state("LENGTH") | (head == taken)),
        Assert(~in_state("MAGIC1", "HEADER") | ~seq_known),
        Assert(~in_state("HEADER") | (idx < len(head) // 8)),
        *(Assert(~(in_state("HEADER") & (idx == n)) | (head[:8 * n] == taken[40 - 8 * n:]))
          for n in range(1, len(head) // 8)),
        Assert(~in_state("LENGTH_CHECK", "PAYLOAD", "RX_CRC", "CHECK", "VERDICT", "REQUEST",
                         "EXECUTE") | seq_known),
        Assert(~in_state("TX_HEADER", "TX_HEADER_SEND")
               | ((sent == idx) & (idx < hl.HEADER_BYTES))),
        Assert(~in_state(*TX_STATES[2:]) | (sent >= hl.HEADER_BYTES)),
        Assert(~in_state("TX_HEADER_SEND") | (reg["tx_end"] == (idx == hl.HEADER_BYTES - 1))),
        Assert(~(in_state("TX_HEADER_SEND") & (idx == 0)) | (reg["tx_byte"] == hl.MAGIC[0])),
        Assert(~(in_state("TX_HEADER_SEND") & (idx == 3) & seq_known) | (reg["tx_byte"] == seq)),
        Assert(~executed | seq_known),
    ]
    return m


def silence_spec(framer: Framer, *, helpers: bool = True) -> Module:
    """The transmitter always ready, the executor taking a request at once and
    answering in the next cycle with at most ``ANSWER_BYTES`` payload bytes: after
    ``SILENCE_BOUND`` cycles in which ``rx`` offers no byte the framer is in HUNT.

    Proved with a ranking function: ``remaining``, the most cycles the framer can
    still take to reach HUNT from its state (and registers) on a silent link; the
    cycles of silence so far plus ``remaining`` never exceed the bound, so every
    silent cycle takes the framer a cycle closer to HUNT."""
    spec = FramerSpec(framer)
    m, f, reg, in_state = spec.m, framer, spec.reg, spec.in_state
    m.d.comb += [f.tx.ready.eq(1), f.request.ready.eq(1), f.response.valid.eq(1),
                 Assume(f.response.payload.length <= ANSWER_BYTES)]
    silent = Signal(range(SILENCE_BOUND + 1))
    with m.If(f.rx.valid):
        m.d.sync += silent.eq(0)
    with m.Elif(silent != SILENCE_BOUND):
        m.d.sync += silent.eq(silent + 1)
    idx, timer, resp_len = reg["idx"], reg["timer"], reg["resp_len"]
    tx_end = reg["tx_end"]
    head_bytes, crc_bytes = hl.HEADER_BYTES, hl.CRC_BYTES
    remaining = Signal(range(4 * SILENCE_BOUND))
    left_to_send = 4 * (resp_len - idx)  # cycles for the payload bytes from idx on
    after_header = 4 * resp_len + CRC_CYCLES
    timing_out = RX_TIMEOUT - timer + 1  # cycles until the timeout has moved on
    with m.If(in_state("HUNT")):
        m.d.comb += remaining.eq(0)
    with m.Elif(in_state("TX_DONE")):
        m.d.comb += remaining.eq(1)
    with m.Elif(in_state("TX_CRC")):
        m.d.comb += remaining.eq(crc_bytes - idx[:2] + 1)
    with m.Elif(in_state("TX_CRC_WAIT")):
        m.d.comb += remaining.eq(CRC_CYCLES)
    for extra, name in enumerate(("TX_SEND", "TX_LOAD", "TX_WAIT", "TX_FETCH"), start=3):
        with m.Elif(in_state(name)):
            m.d.comb += remaining.eq(left_to_send + extra)
    with m.Elif(in_state("TX_HEADER_SEND")):
        m.d.comb += remaining.eq(2 * (head_bytes - idx) - 1 + after_header)
    with m.Elif(in_state("TX_HEADER")):
        m.d.comb += remaining.eq(2 * (head_bytes - idx) + after_header)
    with m.Elif(in_state("EXECUTE")):
        m.d.comb += remaining.eq(1 + NAK_CYCLES)
    with m.Elif(in_state("REQUEST")):
        m.d.comb += remaining.eq(2 + NAK_CYCLES)
    with m.Elif(in_state("VERDICT")):
        m.d.comb += remaining.eq(3 + NAK_CYCLES)
    with m.Elif(in_state("CHECK")):
        m.d.comb += remaining.eq(4 + NAK_CYCLES)
    with m.Elif(in_state("MAGIC1")):
        m.d.comb += remaining.eq(timing_out)
    with m.Elif(in_state("HEADER", "PAYLOAD", "RX_CRC")):
        m.d.comb += remaining.eq(timing_out + NAK_CYCLES)
    with m.Elif(in_state("LENGTH_CHECK")):
        m.d.comb += remaining.eq(1 + RX_TIMEOUT + 1 + NAK_CYCLES)
    with m.Elif(in_state("LENGTH")):
        m.d.comb += remaining.eq(2 + RX_TIMEOUT + 1 + NAK_CYCLES)
    with m.Else():
        m.d.comb += remaining.eq(4 * SILENCE_BOUND - 1)
    receiving = in_state("MAGIC1", "HEADER", "PAYLOAD", "RX_CRC")
    sending_payload = in_state("TX_FETCH", "TX_WAIT", "TX_LOAD", "TX_SEND")
    hunt = in_state("HUNT")
    m.d.comb += [
        Assert(~(silent == SILENCE_BOUND) | hunt,
               f"not back in HUNT after {SILENCE_BOUND} silent cycles"),
        Cover((silent == SILENCE_BOUND - 1) & ~hunt),
    ]
    if not helpers:
        return m
    # the ranking function, and the registers it reads in range
    m.d.comb += [
        Assert(silent + remaining <= SILENCE_BOUND, "a silent cycle without progress"),
        Assert(~receiving | ((timer <= RX_TIMEOUT)
                             & (reg["timed_out"] == (timer == RX_TIMEOUT)))),
        Assert(~in_state(*TX_STATES) | (resp_len <= 2)),
        Assert(~in_state("TX_HEADER", "TX_HEADER_SEND") | (idx < head_bytes)),
        Assert(~in_state("TX_HEADER_SEND") | ((tx_end == (idx == head_bytes - 1))
                                              & (reg["resp_empty"] == (resp_len == 0)))),
        Assert(~sending_payload | (idx < resp_len)),
        Assert(~in_state("TX_SEND") | (tx_end == (idx + 1 == resp_len))),
        Assert(~in_state("TX_CRC_WAIT") | (idx[:2] == 0)),
    ]
    return m


def mutated_framer(original: str, replacement: str) -> Framer:
    """A framer built from hw/soc/framer.py's source with ``original`` (found exactly
    once) replaced by ``replacement``: a deliberately broken variant."""
    return mutant(framer_module, "Framer", original, replacement)(RX_TIMEOUT, crc_unit=FreeCrc())


def test_framer_crc_gate_proved(tmp_path: Path) -> None:
    spec = crc_gate_spec(Framer(RX_TIMEOUT, crc_unit=FreeCrc()))
    assert_proved(spec, tmp_path, depth=4, cover_depth=18)


def test_framer_sequence_numbers_proved(tmp_path: Path) -> None:
    spec = sequence_spec(Framer(RX_TIMEOUT, crc_unit=FreeCrc()))
    assert_proved(spec, tmp_path, depth=4, cover_depth=27)


def test_framer_back_in_hunt_after_silence_proved(tmp_path: Path) -> None:
    spec = silence_spec(Framer(RX_TIMEOUT, crc_unit=FreeCrc()))
    assert_proved(spec, tmp_path, depth=4, cover_depth=SILENCE_BOUND + 12)


def test_framer_ignoring_the_crc_refuted(tmp_path: Path) -> None:
    framer = mutated_framer("crc_bad.eq(rx_crc != ~crc)", "crc_bad.eq(0)")
    assert_refuted(crc_gate_spec(framer, helpers=False), tmp_path, depth=18,
                   failing="~request.valid | crc_ok")


def test_framer_dropping_a_byte_at_the_timeout_refuted(tmp_path: Path) -> None:
    """The framer before its fix: a byte offered in the cycle a frame times out was
    taken and dropped (the next frame's magic, so that frame was lost)."""
    framer = mutated_framer("frame_ready = ~timed_out", "frame_ready = Const(1)")
    assert_refuted(crc_gate_spec(framer, helpers=False), tmp_path, depth=12,
                   failing="took_frame_byte | fed")


def test_framer_wrong_response_sequence_number_refuted(tmp_path: Path) -> None:
    framer = mutated_framer('"seq": head.seq,', '"seq": head.seq ^ 1,')
    assert_refuted(sequence_spec(framer, helpers=False), tmp_path, depth=18,
                   failing="tx.payload == seq")


def test_framer_without_timeout_refuted(tmp_path: Path) -> None:
    framer = mutated_framer("Mux(in_frame & ~take, timer + 1, 0)",
                            "Mux(in_frame & ~take, timer, 0)")
    assert_refuted(silence_spec(framer, helpers=False), tmp_path, depth=SILENCE_BOUND + 3,
                   failing="| hunt")

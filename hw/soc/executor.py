"""The host-link command executor: an accepted request to CSR and memory accesses.

Every command code, argument layout and CSR list comes from
:mod:`tensorfab.isa.hostlink`; this file only says how the gateware walks them.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.hw.csr import CsrBusSignature
from tensorfab.hw.mem_port import MemPortSignature
from tensorfab.isa import CSR_BY_NAME, HwConfig
from tensorfab.isa import hostlink as hl
from tensorfab.isa.config import log2

from .framer import PayloadBufferSignature, RequestLayout, ResponseLayout

__all__ = ["ARG_BYTES", "CommandExecutor", "request_args"]

#: What an accepted command does, as a small code (the CSR dumps share one).
_GO: dict[hl.Command, int] = {
    hl.Command.INFO: 0, hl.Command.READ_MEM: 1, hl.Command.WRITE_MEM: 2,
    hl.Command.READ_CSR: 3, hl.Command.STATUS: 3, hl.Command.COUNTERS: 3,
    hl.Command.WRITE_CSR: 4, hl.Command.START: 5, hl.Command.RESET: 6,
}
#: Commands that access the memory (their address range is checked).
_MEMORY = (hl.Command.READ_MEM, hl.Command.WRITE_MEM)
#: Commands refused (BUSY) while the core runs.
_IDLE = (*_MEMORY, hl.Command.START)
#: The CSR dumps: first entry of STATUS_CSRS + COUNTER_CSRS and number of CSRs (READ_CSR
#: reads its argument instead).
_DUMPS: dict[hl.Command, tuple[int, int]] = {
    hl.Command.READ_CSR: (0, 1), hl.Command.STATUS: (0, len(hl.STATUS_CSRS)),
    hl.Command.COUNTERS: (len(hl.STATUS_CSRS), len(hl.COUNTER_CSRS))}
#: Bytes of the longest fixed argument list (START's).
ARG_BYTES = max(struct.calcsize(f) for f in hl.REQUEST_ARGS.values())


def _arg_bytes(cmd: hl.Command) -> int:
    return struct.calcsize(hl.REQUEST_ARGS[cmd])


def request_args(args: Value, cmd: hl.Command) -> list[Value]:
    """The fields of ``cmd``'s fixed arguments (:data:`hl.REQUEST_ARGS`) in ``args``,
    the first payload bytes with byte 0 in the low bits."""
    fields, offset = [], 0
    for code in hl.REQUEST_ARGS[cmd].lstrip("<"):
        width = 8 * struct.calcsize("<" + code)
        fields.append(args[offset:offset + width])
        offset += width
    return fields


class CommandExecutor(wiring.Component):
    """Executes an accepted host-link request and produces its response.

    It copies the fixed arguments out of the payload buffer, checks the command,
    the payload length and the address range (NAK BAD_COMMAND, BAD_LENGTH,
    BAD_ADDRESS, in that order; BUSY for memory accesses and START while the core
    runs), then accesses the CSR bus or the memory port, writes a response payload
    into the buffer and offers the response. A refused request has no effect.

    The executor remembers the seq and CRC of the last request it executed. A
    request with both equal is a retry: a command of :data:`hl.SIDE_EFFECTS` is
    answered with success without being executed again, any other executes again
    (see :mod:`tensorfab.isa.hostlink`).

    Parameters
    ----------
    cfg : HwConfig
        Bus width of the memory port.
    info : LinkInfo
        The INFO response (memory size, clock, baud...).

    Attributes
    ----------
    request : In(stream.Signature(RequestLayout))
        Accepted requests, their payload in the buffer.
    response : Out(stream.Signature(ResponseLayout))
        The answer; held until the framer has sent it.
    buf : Out(PayloadBufferSignature)
        The payload buffer (arguments and data in, response payload out).
    csr : Out(CsrBusSignature)
        The core's CSR bus.
    mem : Out(MemPortSignature(cfg))
        A memory port.
    core_busy : In(1)
        The core runs (memory and START refused).
    core_reset : Out(1)
        One-cycle pulse (from a register) once the response to RESET is sent.
    """

    def __init__(self, cfg: HwConfig, info: hl.LinkInfo) -> None:
        self.cfg = cfg
        self.info = info
        super().__init__({
            "request": In(stream.Signature(RequestLayout)),
            "response": Out(stream.Signature(ResponseLayout)),
            "buf": Out(PayloadBufferSignature),
            "csr": Out(CsrBusSignature),
            "mem": Out(MemPortSignature(self.cfg)),
            "core_busy": In(1),
            "core_reset": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        # Timing: decisions over many bits (length, range, retry) are registered a
        # cycle before they are acted on; the buffer's inputs, the CSR bus and the
        # core's reset leave from registers; a buffer byte is registered on arrival.
        m = Module()
        r = SimpleNamespace()
        r.req = req = Signal(RequestLayout)
        r.args = args = Signal(8 * ARG_BYTES)
        # the buffer: a byte is written in the cycle after store(), then pos advances
        r.pos = pos = Signal.like(self.buf.addr)
        buf_we, buf_wdata = Signal(), Signal(8)
        r.rd_byte = Signal(8)
        m.d.sync += [buf_we.eq(0), r.rd_byte.eq(self.buf.r_data)]
        with m.If(buf_we):
            m.d.sync += pos.eq(pos + 1)
        m.d.comb += [self.buf.addr.eq(pos), self.buf.w_en.eq(buf_we),
                     self.buf.w_data.eq(buf_wdata)]
        r.store = lambda byte: [buf_we.eq(1), buf_wdata.eq(byte)]

        # items (bytes, words, cycles) after the current one, and whether it is the last
        r.left = left = Signal(range(max(hl.MAX_PAYLOAD, ARG_BYTES + 2) + 1))
        r.last = last = Signal()
        # (one: a register that says n == 1, where the count has one)
        r.count_from = lambda n, one=None: [left.eq(n - 1),
                                            last.eq((n == 1) if one is None else one)]
        r.count_step = lambda: [left.eq(left - 1), last.eq(left == 1)]

        # the core's side: registers; a write strobe and the reset pulse last a cycle
        r.csr_addr, r.csr_w_en, r.csr_w_data = Signal(8), Signal(), Signal(32)
        core_reset, r.reset_after = Signal(), Signal()
        m.d.sync += [r.csr_w_en.eq(0), core_reset.eq(0)]
        m.d.comb += [self.csr.addr.eq(r.csr_addr), self.csr.w_en.eq(r.csr_w_en),
                     self.csr.w_data.eq(r.csr_w_data), self.core_reset.eq(core_reset)]

        resp = Signal(ResponseLayout)
        m.d.comb += self.response.payload.eq(resp)
        r.respond = lambda n: [resp.nak.eq(0), resp.length.eq(n)]
        refuse = lambda code: [resp.nak.eq(1), resp.reason.eq(code)]  # noqa: E731

        # what was last executed; the checks of this request
        last_seq, last_crc, remembered = Signal(8), Signal(32), Signal()
        retry, side_effect = Signal(), Signal()
        known, mem_cmd, needs_idle, len_bad, range_bad = (Signal() for _ in range(5))
        r.go = Signal(range(max(_GO.values()) + 1))
        refused, why = Signal(), Signal(8)
        r.n_bytes = n_bytes = Signal(16)
        # n_bytes == 1, kept with it: a command's first step then counts from it with
        # no comparison before `last` (an FPGA critical path at 100 MHz)
        r.n_one = n_one = Signal()
        addr, rd_len = request_args(args, hl.Command.READ_MEM)
        table = hl.STATUS_CSRS + hl.COUNTER_CSRS
        r.dump_pos, r.dump_count = Signal(range(len(table))), Signal(range(len(table) + 1))
        r.dump_arg = Signal()
        r.k = Signal(range(max(len(self.info.pack()), 4)))  # a byte or register of a step

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.request.ready.eq(1)
                with m.If(self.request.valid):
                    m.d.sync += [req.eq(self.request.payload), pos.eq(0),
                                 r.count_from(ARG_BYTES + 2)]
                    m.next = "ARGS"
            with m.State("ARGS"):
                # the first payload bytes, each two cycles behind its address
                m.d.sync += [pos.eq(pos + 1), args.eq(Cat(args[8:], r.rd_byte)),
                             r.count_step()]
                with m.If(last):
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [retry.eq(remembered & (req.seq == last_seq) & (req.crc == last_crc)),
                             known.eq(0), len_bad.eq(0), n_bytes.eq(rd_len),
                             n_one.eq(rd_len[:len(n_bytes)] == 1)]
                with m.Switch(req.cmd):
                    for c in hl.Command:
                        with m.Case(c):
                            m.d.sync += [known.eq(1), r.go.eq(_GO[c]),
                                         side_effect.eq(c in hl.SIDE_EFFECTS),
                                         mem_cmd.eq(c in _MEMORY), needs_idle.eq(c in _IDLE)]
                            if c is hl.Command.READ_MEM:
                                m.d.sync += len_bad.eq((req.length != _arg_bytes(c))
                                                       | (rd_len > hl.MAX_DATA))
                            elif c is hl.Command.WRITE_MEM:
                                data_bytes = (req.length - _arg_bytes(c))[:len(n_bytes)]
                                m.d.sync += [len_bad.eq(req.length < _arg_bytes(c)),
                                             n_bytes.eq(data_bytes), n_one.eq(data_bytes == 1)]
                            else:
                                m.d.sync += len_bad.eq(req.length != _arg_bytes(c))
                            if c in _DUMPS:
                                first, n = _DUMPS[c]
                                m.d.sync += [r.dump_arg.eq(c is hl.Command.READ_CSR),
                                             r.dump_pos.eq(first), r.dump_count.eq(n)]
                m.next = "RANGE"
            with m.State("RANGE"):
                shift = log2(self.cfg.mem_bus_bytes)
                unaligned = (n_bytes[:shift] != 0) | (addr[:shift] != 0) if shift else Const(0)
                m.d.sync += range_bad.eq(mem_cmd & ((n_bytes == 0) | unaligned
                                                    | (addr + n_bytes > self.info.mem_bytes)))
                m.next = "VERDICT"
            with m.State("VERDICT"):
                checks = [(~known, hl.NakReason.BAD_COMMAND), (len_bad, hl.NakReason.BAD_LENGTH),
                          (range_bad, hl.NakReason.BAD_ADDRESS)]
                m.d.sync += refused.eq(0)
                for i, (bad, code) in enumerate(checks):
                    with (m.If if i == 0 else m.Elif)(bad):
                        m.d.sync += [refused.eq(1), why.eq(code)]
                m.next = "DECODE"
            with m.State("DECODE"):
                m.d.sync += pos.eq(0)
                with m.If(refused):
                    m.d.sync += refuse(why)
                    m.next = "RESPOND"
                with m.Elif(retry & side_effect):  # done already: answer as then
                    m.d.sync += r.respond(0)
                    m.next = "RESPOND"
                with m.Elif(needs_idle & self.core_busy):
                    m.d.sync += refuse(hl.NakReason.BUSY)
                    m.next = "RESPOND"
                with m.Else():
                    m.d.sync += [last_seq.eq(req.seq), last_crc.eq(req.crc), remembered.eq(1)]
                    self._dispatch(m, r)
            self._csr_states(m, r)
            self._memory_states(m, r)
            with m.State("RESPOND"):
                m.d.comb += self.response.valid.eq(1)
                with m.If(self.response.ready):
                    m.d.sync += [core_reset.eq(r.reset_after), r.reset_after.eq(0)]
                    m.next = "IDLE"
        return m

    def _dispatch(self, m: Module, r: SimpleNamespace) -> None:
        """DECODE of a command that executes: its first step."""
        m.d.sync += [r.k.eq(0), r.count_from(r.n_bytes, r.n_one)]
        with m.Switch(r.go):
            with m.Case(_GO[hl.Command.INFO]):
                m.next = "FILL_INFO"
            with m.Case(_GO[hl.Command.READ_MEM]):
                m.next = "RD_CMD"
            with m.Case(_GO[hl.Command.WRITE_MEM]):
                m.d.sync += r.pos.eq(_arg_bytes(hl.Command.WRITE_MEM))
                m.next = "WR_CMD"
            with m.Case(_GO[hl.Command.STATUS]):  # READ_CSR, COUNTERS too
                m.d.sync += r.count_from(r.dump_count)
                m.next = "DUMP"
            with m.Case(_GO[hl.Command.WRITE_CSR]):
                offset, value = request_args(r.args, hl.Command.WRITE_CSR)
                m.d.sync += [r.csr_addr.eq(offset), r.csr_w_data.eq(value), r.csr_w_en.eq(1),
                             r.respond(0)]
                m.next = "RESPOND"
            with m.Case(_GO[hl.Command.START]):
                m.next = "START"
            with m.Case(_GO[hl.Command.RESET]):
                m.d.sync += [r.respond(0), r.reset_after.eq(1)]
                m.next = "RESPOND"

    def _csr_states(self, m: Module, r: SimpleNamespace) -> None:
        """INFO, the CSR dumps (READ_CSR, STATUS, COUNTERS) and START."""
        info = self.info.pack()
        with m.State("FILL_INFO"):
            m.d.sync += [r.store(Const(int.from_bytes(info, "little"), 8 * len(info))
                                 .word_select(r.k, 8)), r.k.eq(r.k + 1)]
            with m.If(r.k == len(info) - 1):
                m.d.sync += r.respond(len(info))
                m.next = "RESPOND"
        # a CSR per three states, each a register: its address (on the CSR bus), its
        # value (read once, so its four bytes are of one cycle), its bytes
        table = [CSR_BY_NAME[n].offset for n in hl.STATUS_CSRS + hl.COUNTER_CSRS]
        offsets = Array(Const(o, 8) for o in table)
        word = Signal(32)
        with m.State("DUMP"):
            arg = request_args(r.args, hl.Command.READ_CSR)[0]
            m.d.sync += [r.csr_addr.eq(Mux(r.dump_arg, arg, offsets[r.dump_pos])),
                         r.dump_pos.eq(r.dump_pos + 1), r.k.eq(0)]
            m.next = "DUMP_READ"
        with m.State("DUMP_READ"):
            m.d.sync += word.eq(self.csr.r_data)
            m.next = "DUMP_BYTES"
        with m.State("DUMP_BYTES"):
            m.d.sync += [r.store(word.word_select(r.k[:2], 8)), r.k.eq(r.k + 1)]
            with m.If(r.k[:2] == 3):
                with m.If(r.last):
                    m.d.sync += r.respond(r.dump_count << 2)
                    m.next = "RESPOND"
                with m.Else():
                    m.d.sync += r.count_step()
                    m.next = "DUMP"
        with m.State("START"):
            # INSN_BASE, INSN_COUNT, DRAM_SIZE from the arguments, then CTRL; each write
            # reaches the CSR block a cycle later, from the bus registers
            names = ("INSN_BASE", "INSN_COUNT", "DRAM_SIZE", "CTRL")
            values = [*request_args(r.args, hl.Command.START), Const(1, 32)]
            m.d.sync += [r.k.eq(r.k + 1), r.csr_w_en.eq(1)]
            with m.Switch(r.k[:2]):
                for i, (name, value) in enumerate(zip(names, values, strict=True)):
                    with m.Case(i):
                        m.d.sync += [r.csr_addr.eq(CSR_BY_NAME[name].offset),
                                     r.csr_w_data.eq(value)]
            with m.If(r.k[:2] == len(names) - 1):
                m.d.sync += r.respond(0)
                m.next = "RESPOND"

    def _memory_states(self, m: Module, r: SimpleNamespace) -> None:
        """READ_MEM and WRITE_MEM: one burst on the memory port."""
        beat = self.cfg.mem_bus_bytes
        mem = self.mem
        addr = request_args(r.args, hl.Command.READ_MEM)[0]
        burst = (r.n_bytes >> log2(beat)) - 1
        beat_reg = Signal(self.cfg.mem_bus_width)
        bpos = Signal(range(beat))
        have, fetched_all = Signal(), Signal()
        # RD_DATA as a register of its own, set and cleared with the state's transitions:
        # the read's ready is then a gate of two registers, not a decode of the state
        # (the state through the SoC's choice of reader into its read slice's enables
        # was an FPGA critical path)
        reading = Signal()
        for write in (0, 1):
            with m.State("WR_CMD" if write else "RD_CMD"):
                m.d.comb += [mem.cmd.valid.eq(1), mem.cmd.payload.addr.eq(addr),
                             mem.cmd.payload.write.eq(write), mem.cmd.payload.len.eq(burst)]
                m.d.sync += [have.eq(0), bpos.eq(0)]
                with m.If(mem.cmd.ready):
                    if not write:
                        m.d.sync += reading.eq(1)
                    m.next = "WR_FETCH" if write else "RD_DATA"
        m.d.comb += mem.rdata.ready.eq(reading & ~have)
        with m.State("RD_DATA"):
            with m.If(mem.rdata.valid & ~have):
                m.d.sync += [beat_reg.eq(mem.rdata.payload.data), have.eq(1), bpos.eq(0)]
            with m.If(have):
                # the beat shifted a byte at a time: the buffer's write data takes a
                # fixed byte, with no multiplexer by bpos in front of it
                m.d.sync += [r.store(beat_reg[:8]), beat_reg.eq(beat_reg[8:]),
                             bpos.eq(bpos + 1), r.count_step()]
                with m.If(bpos == beat - 1):
                    m.d.sync += have.eq(0)
                with m.If(r.last):
                    m.d.sync += [r.respond(r.n_bytes), reading.eq(0)]
                    m.next = "RESPOND"
        # a byte per three states: its address, the buffer's read, the registered
        # byte shifted into the beat
        with m.State("WR_FETCH"):
            m.d.sync += [r.pos.eq(r.pos + 1), r.count_step(), fetched_all.eq(r.last)]
            m.next = "WR_WAIT"
        with m.State("WR_WAIT"):
            m.next = "WR_SHIFT"
        with m.State("WR_SHIFT"):
            m.d.sync += [beat_reg.eq(Cat(beat_reg[8:], r.rd_byte)), bpos.eq(bpos + 1)]
            with m.If(bpos == beat - 1):
                m.next = "WR_BEAT"
            with m.Else():
                m.next = "WR_FETCH"
        with m.State("WR_BEAT"):
            m.d.comb += [mem.wdata.valid.eq(1), mem.wdata.payload.data.eq(beat_reg)]
            with m.If(mem.wdata.ready):
                with m.If(fetched_all):
                    m.d.sync += r.respond(0)
                    m.next = "RESPOND"
                with m.Else():
                    m.next = "WR_FETCH"

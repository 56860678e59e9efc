"""The host-link command executor in Amaranth's simulator, against models written here.

The testbench is the executor's world: the framer's side (a request, its payload in
a model of the buffer, the response taken), a dict of CSRs on the CSR bus and a
numpy memory behind the memory port (random back-pressure on every stream). Each
request's effect and response are compared with :class:`Model`, a Python executor
of the protocol's rules (isa/hostlink.py).
"""

from __future__ import annotations

import random
import struct
import zlib
from dataclasses import dataclass

import numpy as np
from amaranth.sim import Simulator

from tensorfab.hw.soc.bridge import link_info
from tensorfab.hw.soc.executor import CommandExecutor
from tensorfab.hw.soc.framer import BUFFER_DEPTH
from tensorfab.isa import CSR_BY_NAME, PRESETS
from tensorfab.isa import hostlink as hl

CFG = PRESETS["tiny"]  # 4-byte beats
MEM = 1024
BEAT = CFG.mem_bus_bytes
INFO = link_info(CFG, MEM, 24_000_000, 115200)
READABLE = hl.STATUS_CSRS + hl.COUNTER_CSRS + ("INSN_BASE", "INSN_COUNT", "DRAM_SIZE")


@dataclass(frozen=True)
class Answer:
    nak: hl.NakReason | None
    payload: bytes = b""


class Model:
    """The protocol's executor in Python: memory, CSRs, the remembered request."""

    def __init__(self, csrs: dict[int, int]) -> None:
        self.mem = np.zeros(MEM, np.uint8)
        self.csrs = dict(csrs)
        self.writes: list[tuple[int, int]] = []
        self.resets = 0
        self.last: tuple[int, int] | None = None

    def execute(self, frame: bytes, busy: bool) -> Answer:
        f = hl.decode_frame(frame)
        crc = zlib.crc32(frame[:-4])
        try:
            cmd = hl.Command(f.cmd)
        except ValueError:
            return Answer(hl.NakReason.BAD_COMMAND)
        n_args = struct.calcsize(hl.REQUEST_ARGS[cmd])
        p = f.payload
        if len(p) < n_args or (len(p) != n_args and cmd is not hl.Command.WRITE_MEM):
            return Answer(hl.NakReason.BAD_LENGTH)
        args = struct.unpack_from(hl.REQUEST_ARGS[cmd], p)
        if cmd is hl.Command.READ_MEM and args[1] > hl.MAX_DATA:
            return Answer(hl.NakReason.BAD_LENGTH)
        if cmd in (hl.Command.READ_MEM, hl.Command.WRITE_MEM):
            addr = args[0]
            n = args[1] if cmd is hl.Command.READ_MEM else len(p) - 4
            if n == 0 or n % BEAT or addr % BEAT or addr + n > MEM:
                return Answer(hl.NakReason.BAD_ADDRESS)
        if (f.seq, crc) == self.last and cmd in hl.SIDE_EFFECTS:
            return Answer(None)
        if busy and cmd in (hl.Command.READ_MEM, hl.Command.WRITE_MEM, hl.Command.START):
            return Answer(hl.NakReason.BUSY)
        self.last = (f.seq, crc)
        u32 = struct.Struct("<I")
        match cmd:
            case hl.Command.INFO:
                return Answer(None, INFO.pack())
            case hl.Command.READ_MEM:
                return Answer(None, self.mem[addr:addr + n].tobytes())
            case hl.Command.WRITE_MEM:
                self.mem[addr:addr + n] = np.frombuffer(p[4:], np.uint8)
            case hl.Command.READ_CSR:
                return Answer(None, u32.pack(self.csrs.get(args[0], 0)))
            case hl.Command.STATUS | hl.Command.COUNTERS:
                names = hl.STATUS_CSRS if cmd is hl.Command.STATUS else hl.COUNTER_CSRS
                return Answer(None, b"".join(u32.pack(self.csrs[CSR_BY_NAME[n].offset])
                                             for n in names))
            case hl.Command.WRITE_CSR:
                self.write_csr(*args)
            case hl.Command.START:
                for name, v in zip(("INSN_BASE", "INSN_COUNT", "DRAM_SIZE", "CTRL"),
                                   (*args, 1), strict=True):
                    self.write_csr(CSR_BY_NAME[name].offset, v)
            case hl.Command.RESET:
                self.resets += 1
        return Answer(None)

    def write_csr(self, offset: int, value: int) -> None:
        self.writes.append((offset, value))
        self.csrs[offset] = value


class Bench:
    """The executor with models of the buffer, the CSR bus and the memory."""

    def __init__(self, seed: int = 0, ready: float = 0.6) -> None:
        self.ex = CommandExecutor(CFG, INFO)
        self.rng = random.Random(seed)
        self.ready = ready  # probability of ready / valid on the memory streams
        offsets = [CSR_BY_NAME[n].offset for n in READABLE]
        self.csrs = {o: self.rng.getrandbits(32) for o in offsets}
        self.model = Model(self.csrs)
        self.mem = np.zeros(MEM, np.uint8)
        self.buf = bytearray(BUFFER_DEPTH)
        self.writes: list[tuple[int, int]] = []
        self.resets = 0
        self.busy = False
        self.script: list = []

    def frame(self, frame: bytes, *, busy: bool = False) -> None:
        """Queue a request (the model decides its answer when it is sent)."""
        self.script.append((frame, busy))

    def poke(self, name: str, value: int | bytes, at: int = 0) -> None:
        """Queue a change made by another agent (the core) between two requests: a CSR
        (by name) or memory bytes at ``at``, in the world and in the model."""
        self.script.append((name, value, at))

    def _apply(self, name: str, value: int | bytes, at: int) -> None:
        if name == "mem":
            self.mem[at:at + len(value)] = self.model.mem[at:at + len(value)] = \
                np.frombuffer(value, np.uint8)
        else:
            self.csrs[CSR_BY_NAME[name].offset] = value
            self.model.csrs[CSR_BY_NAME[name].offset] = value

    def run(self) -> None:
        ex, rng = self.ex, self.rng
        self.results: list[Answer] = []

        async def world(ctx):
            """Buffer (a cycle's read latency), CSR bus, memory port, reset pulses."""
            pending: list[list[int]] = []  # [addr, beats left, write]
            while True:
                addr, we, wd = (ctx.get(ex.buf.addr), ctx.get(ex.buf.w_en),
                                ctx.get(ex.buf.w_data))
                c_we, c_addr, c_wd = (ctx.get(ex.csr.w_en), ctx.get(ex.csr.addr),
                                      ctx.get(ex.csr.w_data))
                reset = ctx.get(ex.core_reset)
                cmd_ready = rng.random() < self.ready
                ctx.set(ex.mem.cmd.ready, cmd_ready)
                cmd_take = cmd_ready and ctx.get(ex.mem.cmd.valid)
                cmd = ctx.get(ex.mem.cmd.payload)
                w_ready = bool(pending) and pending[0][2] and rng.random() < self.ready
                ctx.set(ex.mem.wdata.ready, w_ready)
                w_take = w_ready and ctx.get(ex.mem.wdata.valid)
                wbeat = ctx.get(ex.mem.wdata.payload.data)
                r_valid = bool(pending) and not pending[0][2] and rng.random() < self.ready
                if r_valid:
                    a = pending[0][0]
                    ctx.set(ex.mem.rdata.payload.data,
                            int.from_bytes(self.mem[a:a + BEAT].tobytes(), "little"))
                ctx.set(ex.mem.rdata.valid, r_valid)
                r_take = r_valid and ctx.get(ex.mem.rdata.ready)
                await ctx.tick()
                ctx.set(ex.buf.r_data, self.buf[addr])
                if we:
                    self.buf[addr] = wd
                if c_we:
                    self.writes.append((c_addr, c_wd))
                    self.csrs[c_addr] = c_wd
                ctx.set(ex.csr.r_data, self.csrs.get(ctx.get(ex.csr.addr), 0))
                self.resets += reset
                if w_take or r_take:
                    if w_take:
                        a = pending[0][0]
                        self.mem[a:a + BEAT] = np.frombuffer(wbeat.to_bytes(BEAT, "little"),
                                                             np.uint8)
                    pending[0][0] += BEAT
                    pending[0][1] -= 1
                    if not pending[0][1]:
                        pending.pop(0)
                if cmd_take:
                    pending.append([cmd.addr, cmd.len + 1, cmd.write])

        async def host(ctx):
            for item in self.script:
                if len(item) == 3:
                    self._apply(*item)
                    continue
                frame, busy = item
                want = self.model.execute(frame, busy)
                f = hl.decode_frame(frame)
                self.buf[:len(f.payload)] = f.payload
                ctx.set(ex.core_busy, busy)
                ctx.set(ex.request.payload, {"seq": f.seq, "cmd": f.cmd,
                                             "length": len(f.payload),
                                             "crc": zlib.crc32(frame[:-4])})
                ctx.set(ex.request.valid, 1)
                await ctx.tick().until(ex.request.ready)
                ctx.set(ex.request.valid, 0)
                for _ in range(20_000):
                    if ctx.get(ex.response.valid):
                        break
                    await ctx.tick()
                else:
                    raise AssertionError(f"no response to {f}")
                resp = ctx.get(ex.response.payload)
                for _ in range(rng.randrange(4)):  # the framer sends it meanwhile
                    await ctx.tick()
                    assert ctx.get(ex.response.valid)
                    assert ctx.get(ex.response.payload) == resp
                ctx.set(ex.response.ready, 1)
                await ctx.tick()
                ctx.set(ex.response.ready, 0)
                for _ in range(3):
                    await ctx.tick()
                got = Answer(hl.NakReason(resp.reason) if resp.nak else None,
                             b"" if resp.nak else bytes(self.buf[:resp.length]))
                assert got == want, (f, got, want)
                self.results.append(got)

        sim = Simulator(ex)
        sim.add_clock(1e-6)
        sim.add_testbench(world, background=True)
        sim.add_testbench(host)
        sim.run()
        assert np.array_equal(self.mem, self.model.mem)
        assert self.writes == self.model.writes
        assert self.resets == self.model.resets


def r(seq: int, cmd: hl.Command, *args: int, data: bytes = b"") -> bytes:
    return hl.request(seq, cmd, *args, data=data)


def test_every_command_against_the_model() -> None:
    tb = Bench(seed=1)
    rng = random.Random(2)
    data = rng.randbytes(hl.MAX_DATA)
    tb.frame(r(1, hl.Command.INFO))
    tb.frame(r(2, hl.Command.WRITE_MEM, 0x40, data=data))
    tb.frame(r(3, hl.Command.READ_MEM, 0x40, hl.MAX_DATA))
    tb.frame(r(4, hl.Command.READ_MEM, 0x44, 8))
    tb.frame(r(5, hl.Command.WRITE_MEM, MEM - 4, data=b"\xde\xad\xbe\xef"))
    tb.frame(r(6, hl.Command.READ_MEM, MEM - 8, 8))
    off = CSR_BY_NAME["INSN_COUNT"].offset
    tb.frame(r(7, hl.Command.WRITE_CSR, off, 0xCAFE1234))
    tb.frame(r(8, hl.Command.READ_CSR, off))
    tb.frame(r(9, hl.Command.READ_CSR, CSR_BY_NAME["LOAD_STALL"].offset))
    tb.frame(r(10, hl.Command.START, 0x100, 9, MEM))
    tb.frame(r(11, hl.Command.STATUS))
    tb.frame(r(12, hl.Command.COUNTERS))
    tb.frame(r(13, hl.Command.RESET))
    tb.frame(r(14, hl.Command.READ_MEM, 0, 4), busy=True)  # BUSY
    tb.frame(r(15, hl.Command.START, 0, 1, MEM), busy=True)  # BUSY
    tb.frame(r(16, hl.Command.STATUS), busy=True)  # CSRs are served while the core runs
    tb.run()


def test_refusals_have_no_effect() -> None:
    tb = Bench(seed=3)
    for seq, frame in enumerate([
            hl.encode_frame(0, 0x42), hl.encode_frame(0, hl.Command.INFO, b"x"),
            hl.encode_frame(0, hl.Command.RESET, b"x"),
            hl.encode_frame(0, hl.Command.WRITE_CSR, b"\x00\x01"),
            r(0, hl.Command.READ_MEM, 2, 4), r(0, hl.Command.READ_MEM, 0, 6),
            r(0, hl.Command.READ_MEM, 0, 0), r(0, hl.Command.READ_MEM, MEM - 4, 8),
            r(0, hl.Command.READ_MEM, 0, hl.MAX_DATA + 4),
            r(0, hl.Command.WRITE_MEM, 0, data=b"abc"), r(0, hl.Command.WRITE_MEM, 0),
            r(0, hl.Command.WRITE_MEM, MEM, data=b"abcd")], start=1):
        f = hl.decode_frame(frame)
        tb.frame(hl.encode_frame(seq, f.cmd, f.payload))
    tb.run()
    assert not tb.writes and not tb.resets and not tb.mem.any()


def test_random_requests_against_the_model() -> None:
    rng = random.Random(4)
    tb = Bench(seed=5, ready=0.4)
    sent: list[bytes] = []
    for seq in range(60):
        kind = rng.randrange(8)
        addr = rng.randrange(0, MEM // BEAT) * BEAT + rng.choice([0, 0, 0, 1])
        n = rng.randrange(1, 17) * BEAT + rng.choice([0, 0, 0, 2])
        if kind == 0:
            frame = r(seq, hl.Command.WRITE_MEM, addr, data=rng.randbytes(n))
        elif kind == 1:
            frame = r(seq, hl.Command.READ_MEM, addr, n)
        elif kind == 2:
            frame = r(seq, hl.Command.WRITE_CSR, rng.choice(
                [CSR_BY_NAME[c].offset for c in ("INSN_BASE", "INSN_COUNT", "DRAM_SIZE")]),
                rng.getrandbits(32))
        elif kind == 3 and sent:  # a retry of the request just sent
            frame = sent[-1]
        else:  # any command code, often with a payload of the wrong length
            code = rng.randrange(12)
            size = struct.calcsize(hl.REQUEST_ARGS.get(code, "<"))
            frame = hl.encode_frame(seq, code, rng.randbytes(rng.choice([size, size, 1, 3])))
        sent.append(frame)
        tb.frame(frame, busy=rng.random() < 0.15)
    tb.run()


# ------------------------------------------------------------------ retries
def test_a_retried_write_is_not_applied_again() -> None:
    """WRITE_MEM A (seq 1); the memory then changes by another writer (the core, here
    the testbench); the very same frame again is a retry: answered with success and
    not applied, the memory keeps the other writer's bytes."""
    tb = Bench(seed=6)
    first = r(1, hl.Command.WRITE_MEM, 0x80, data=b"AAAA")
    tb.frame(first)
    tb.poke("mem", b"BBBB", 0x80)
    tb.frame(first)
    tb.frame(r(2, hl.Command.READ_MEM, 0x80, 4))
    tb.run()
    assert tb.results == [Answer(None), Answer(None), Answer(None, b"BBBB")]


def test_only_the_last_executed_request_is_remembered() -> None:
    """A frame resent after another request executed is not a retry (a host retries
    only the request it is waiting on): it executes again."""
    tb = Bench(seed=7)
    first = r(1, hl.Command.WRITE_MEM, 0x80, data=b"AAAA")
    tb.frame(first)
    tb.frame(r(2, hl.Command.WRITE_MEM, 0x80, data=b"BBBB"))
    tb.frame(first)
    tb.frame(r(3, hl.Command.READ_MEM, 0x80, 4))
    tb.run()
    assert tb.results[-1] == Answer(None, b"AAAA")


def test_same_seq_with_other_bytes_executes() -> None:
    tb = Bench(seed=8)
    tb.frame(r(1, hl.Command.WRITE_MEM, 0x80, data=b"AAAA"))
    tb.frame(r(1, hl.Command.WRITE_MEM, 0x80, data=b"BBBB"))
    tb.frame(r(1, hl.Command.WRITE_MEM, 0x84, data=b"AAAA"))
    tb.frame(r(2, hl.Command.READ_MEM, 0x80, 8))
    off = CSR_BY_NAME["INSN_BASE"].offset
    tb.frame(r(3, hl.Command.WRITE_CSR, off, 5))
    tb.frame(r(3, hl.Command.WRITE_CSR, off, 6))
    tb.run()
    assert tb.results[3] == Answer(None, b"BBBBAAAA")
    assert tb.writes == [(off, 5), (off, 6)]


def test_retried_start_csr_write_and_reset_happen_once() -> None:
    """A retried START is answered with success even though the core now runs (its
    first execution started it), and writes its CSRs once; a retried WRITE_CSR
    writes once, a retried RESET pulses the core's reset once."""
    tb = Bench(seed=9)
    start = r(1, hl.Command.START, 0x40, 3, MEM)
    tb.frame(start)
    tb.frame(start, busy=True)
    tb.frame(start, busy=True)
    off = CSR_BY_NAME["DRAM_SIZE"].offset
    tb.frame(r(2, hl.Command.WRITE_CSR, off, 77), busy=True)
    tb.frame(r(2, hl.Command.WRITE_CSR, off, 77), busy=True)
    tb.frame(r(3, hl.Command.RESET))
    tb.frame(r(3, hl.Command.RESET))
    tb.run()
    assert tb.results == [Answer(None)] * 7
    names = ("INSN_BASE", "INSN_COUNT", "DRAM_SIZE", "CTRL")
    assert tb.writes == [(CSR_BY_NAME[n].offset, v) for n, v in
                         zip(names, (0x40, 3, MEM, 1), strict=True)] + [(off, 77)]
    assert tb.resets == 1


def test_retried_reads_execute_again() -> None:
    tb = Bench(seed=10)
    read = r(1, hl.Command.READ_CSR, CSR_BY_NAME["CYCLES"].offset)
    status = r(2, hl.Command.STATUS)
    tb.poke("CYCLES", 100)
    tb.frame(read)
    tb.poke("CYCLES", 200)
    tb.frame(read)
    tb.frame(status)
    tb.poke("CYCLES", 300)
    tb.frame(status)
    tb.run()
    assert [hl.u32s(a.payload)[-1] for a in tb.results] == [100, 200, 200, 300]


def test_a_refused_request_is_not_remembered() -> None:
    """BUSY is not an execution: the same frame once the core is idle is written; a NAK
    in between does not make the executed request before it forgotten."""
    tb = Bench(seed=11)
    write = r(1, hl.Command.WRITE_MEM, 0x10, data=b"WXYZ")
    tb.frame(write, busy=True)
    tb.frame(write)
    tb.poke("mem", b"\0\0\0\0", 0x10)
    tb.frame(hl.encode_frame(2, 0x42))
    tb.frame(write)
    tb.frame(r(3, hl.Command.READ_MEM, 0x10, 4))
    tb.run()
    assert tb.results == [Answer(hl.NakReason.BUSY), Answer(None),
                          Answer(hl.NakReason.BAD_COMMAND), Answer(None), Answer(None, bytes(4))]


def _forge_crc(prefix: bytes, target: int) -> bytes:
    """Four bytes that, appended to ``prefix``, give the CRC-32 ``target`` (the CRC is
    affine in them over GF(2): solve for the 32 bits)."""
    base = zlib.crc32(prefix + bytes(4)) ^ target
    cols = [zlib.crc32(prefix + (1 << i).to_bytes(4, "little"))
            ^ zlib.crc32(prefix + bytes(4)) for i in range(32)]
    rows: list[tuple[int, int]] = []  # (combination of columns, their XOR), reduced
    for i, c in enumerate(cols):
        combo = 1 << i
        for pivot, (pc, pv) in rows:
            if c >> pivot & 1:
                c, combo = c ^ pv, combo ^ pc
        if c:
            rows.append(((c.bit_length() - 1), (combo, c)))
    x, v = 0, base
    for pivot, (pc, pv) in rows:
        if v >> pivot & 1:
            v, x = v ^ pv, x ^ pc
    assert v == 0
    return x.to_bytes(4, "little")


def test_nothing_is_remembered_after_power_up() -> None:
    """The first request is executed even if its seq and CRC are the registers' reset
    values (0, 0)."""
    off = CSR_BY_NAME["INSN_BASE"].offset
    head = hl.HEADER.pack(hl.MAGIC, hl.VERSION, 0, hl.Command.WRITE_CSR, 5) + bytes([off])
    frame = head + _forge_crc(head, 0)
    frame += zlib.crc32(frame).to_bytes(4, "little")
    assert zlib.crc32(frame[:-4]) == 0 and frame[3] == 0
    tb = Bench(seed=12)
    tb.frame(frame)
    tb.frame(frame)
    tb.run()
    assert len(tb.writes) == 1

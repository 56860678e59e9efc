"""cocotb testbench of the load and store engines behind the memory arbiter.

The design is :class:`hw.dma_top.LoadStoreTop`. The testbench plays the rest of the
core: it feeds the two instruction streams, acts as the four token queues and as a
compute engine that only relays tokens (load→compute to compute→store,
store→compute to compute→load), serves the memory port with
:class:`tensorfab.sim.testing.cocotb_memory.MemModel` and records every buffer write. Results are
compared with :class:`Reference`, a sequential numpy model of LOAD and STORE
written from docs/isa.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

from tensorfab.hw.signatures import InsnStreamLayout
from tensorfab.isa import (
    PRESETS,
    Buffer,
    ErrorCode,
    HwConfig,
    Insn,
    Load,
    Store,
    buffer_depth,
    buffer_entry_bytes,
    encode_insn,
    insn_width,
    uop_format,
)
from tensorfab.sim.testing.cocotb_memory import MemModel
from tensorfab.sim.testing.cocotb_runner import params_from_env

BUF_NAMES = {Buffer.INP: "inp", Buffer.WGT: "wgt", Buffer.UOP: "uop", Buffer.ACC: "acc"}


def config() -> HwConfig:
    """The configuration of the build under test (a preset, or a whole config)."""
    params = params_from_env()
    if "config" in params:
        return HwConfig.from_dict(params["config"])
    return PRESETS[params["preset"]]


# ----------------------------------------------------------------------- reference
class Reference:
    """Sequential model of LOAD and STORE (docs/isa.md) over byte-level state.

    Buffers hold one Python int per entry in the on-chip format (bytes of the DRAM
    entry, little-endian; a micro-op keeps its used low bits; a weight tile,
    ``block_out × block_in`` row-major in DRAM, is kept column-major with every
    byte's sign bit inverted, so a padding weight entry is all ``0x80``).
    """

    def __init__(self, cfg: HwConfig, dram: np.ndarray, bufs: dict[str, list[int]]) -> None:
        self.cfg = cfg
        self.dram = dram.copy()
        self.bufs = {k: list(v) for k, v in bufs.items()}

    def load(self, insn: Load) -> None:
        cfg = self.cfg
        eb = buffer_entry_bytes(cfg, insn.buffer)
        buf = self.bufs[BUF_NAMES[insn.buffer]]
        mask = (1 << uop_format(cfg).used_bits) - 1 if insn.buffer is Buffer.UOP else -1
        for r in range(insn.rows):
            for c in range(insn.cols):
                dr, dc = r - insn.pad_top, c - insn.pad_left
                raw = np.zeros(eb, dtype=np.uint8)
                if 0 <= dr < insn.y and 0 <= dc < insn.x:
                    a = (insn.dram + dr * insn.stride + dc) * eb
                    raw = self.dram[a: a + eb]
                if insn.buffer is Buffer.WGT:
                    raw = raw.reshape(cfg.block_out, cfg.block_in).T ^ 0x80
                value = int.from_bytes(raw.tobytes(), "little") & mask
                buf[insn.sram + r * insn.cols + c] = value

    def store(self, insn: Store) -> None:
        cfg = self.cfg
        lanes = cfg.batch * cfg.block_out
        eb = cfg.out_entry_bytes
        for r in range(insn.y):
            for c in range(insn.x):
                v = self.bufs["acc"][insn.sram + r * insn.x + c]
                out = bytes((v >> (32 * i)) & 0xFF for i in range(lanes))
                a = (insn.dram + r * insn.stride + c) * eb
                self.dram[a: a + eb] = np.frombuffer(out, dtype=np.uint8)


# ----------------------------------------------------------------------- testbench
@dataclass
class Stream:
    """An instruction stream the testbench feeds: (index, word) pairs."""

    prefix: str
    items: list[tuple[int, int]] = field(default_factory=list)
    pos: int = 0
    offered: bool = False


class TB:
    """Clock, reset, memory model, instruction feeders, token queues, write monitors."""

    def __init__(self, dut, *, seed: int, mem_size: int, **mem_kwargs) -> None:
        self.dut = dut
        self.cfg = cfg = config()
        self.rng = random.Random(seed)
        self.mem = MemModel(dut, cfg, prefix="port__", size=mem_size, seed=seed, **mem_kwargs)
        lay = InsnStreamLayout(cfg)
        self.word_off = lay["word"].offset
        self.index_off = lay["index"].offset
        self.streams = {"load": Stream("load_insn__"), "store": Stream("store_insn__")}
        self.cap = cfg.dep_queue_depth
        self.q = {"l2c": 0, "c2l": 0, "c2s": 0, "s2c": 0}
        self.writes: dict[str, list[tuple[int, int]]] = {n: [] for n in BUF_NAMES.values()}
        self.errors: list[tuple[str, int, int]] = []
        self.retired = {"load": 0, "store": 0}
        self.ready_p = {"inp": 1.0, "wgt": 1.0, "uop": 1.0, "acc": 0.7}
        self.gap_p = 0.2
        self.cycle = 0
        self.stall_cycles = {"load": 0, "store": 0}
        self.acc_write_at_retire: list[int] = []  # cycles a LOAD retired with one waiting
        self.acc_waits = 0  # cycles an accumulator write waited for the port

    @classmethod
    def full_speed(cls, dut, *, seed: int, mem_size: int) -> TB:
        """A testbench where nothing stalls: memory latency 1, every handshake ready,
        no gaps between instructions, every buffer write accepted at once."""
        tb = cls(dut, seed=seed, mem_size=mem_size, latency=(1, 1), cmd_ready=1.0,
                 wdata_ready=1.0, rdata_valid=1.0, max_outstanding=8)
        tb.gap_p = 0.0
        tb.ready_p = dict.fromkeys(tb.ready_p, 1.0)
        return tb

    async def reset(self) -> None:
        dut = self.dut
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        for name in ("load_insn__valid", "store_insn__valid", "load_pop__valid",
                     "load_push__ready", "store_pop__valid", "store_push__ready", "halt",
                     "inp_wr__ready", "wgt_wr__ready", "uop_wr__ready", "acc_taken_next"):
            getattr(dut, name).value = 0
        dut.dram_size.value = self.mem.data.size
        dut.insn_base.value = 0
        dut.insn_count.value = 0
        dut.rst.value = 1
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        self.mem.start()
        cocotb.start_soon(self._loop())

    def feed(self, engine: str, index: int, insn: Insn) -> None:
        """Queue ``insn`` (encoded, with ``index``) for ``engine``."""
        self.streams[engine].items.append((index, encode_insn(insn, self.cfg)))

    def feed_raw(self, engine: str, index: int, word: int) -> None:
        """Queue an already encoded word."""
        self.streams[engine].items.append((index, word))

    async def _loop(self) -> None:
        dut = self.dut
        rng = self.rng
        while True:
            await FallingEdge(dut.clk)
            self.cycle += 1
            # drive
            for s in self.streams.values():
                valid = getattr(dut, s.prefix + "valid")
                if s.pos < len(s.items) and (s.offered or rng.random() >= self.gap_p):
                    idx, word = s.items[s.pos]
                    getattr(dut, s.prefix + "payload").value = (
                        (word << self.word_off) | (idx << self.index_off))
                    valid.value = 1
                    s.offered = True
                else:
                    valid.value = 0
            q = self.q
            dut.load_pop__valid.value = int(q["c2l"] > 0)
            dut.store_pop__valid.value = int(q["c2s"] > 0)
            push_l = q["l2c"] < self.cap and rng.random() < 0.8
            push_s = q["s2c"] < self.cap and rng.random() < 0.8
            dut.load_push__ready.value = int(push_l)
            dut.store_push__ready.value = int(push_s)
            ready = {n: rng.random() < p for n, p in self.ready_p.items()}
            for n, r in ready.items():
                if n != "acc":
                    getattr(dut, f"{n}_wr__ready").value = int(r)
            # the accumulator port: the draw is for the next cycle (the design registers
            # it); this cycle's is the one drawn before
            dut.acc_taken_next.value = int(not ready["acc"])
            await ReadOnly()
            ready["acc"] = not int(dut.acc_taken.value)
            # sample
            for s in self.streams.values():
                if s.offered and int(getattr(dut, s.prefix + "ready").value):
                    s.pos += 1
                    s.offered = False
            if q["c2l"] and int(dut.load_pop__ready.value):
                q["c2l"] -= 1
            if q["c2s"] and int(dut.store_pop__ready.value):
                q["c2s"] -= 1
            if push_l and int(dut.load_push__valid.value):
                q["l2c"] += 1
            if push_s and int(dut.store_push__valid.value):
                q["s2c"] += 1
            if int(dut.acc_wr__en.value) and not ready["acc"]:
                self.acc_waits += 1
            for n in BUF_NAMES.values():
                if ready[n] and int(getattr(dut, f"{n}_wr__en").value):
                    self.writes[n].append((getattr(dut, f"{n}_wr__addr").value.to_unsigned(),
                                           getattr(dut, f"{n}_wr__data").value.to_unsigned()))
            for eng in ("load", "store"):
                if int(getattr(dut, f"{eng}_error__valid").value):
                    self.errors.append((eng, getattr(dut, f"{eng}_error__code").value
                                        .to_unsigned(), getattr(dut, f"{eng}_error__index")
                                        .value.to_unsigned()))
                if int(getattr(dut, f"{eng}_retire").value):
                    self.retired[eng] += 1
                    # a LOAD retires only once its accumulator writes have landed:
                    # the compute engine may read them as soon as it has the token
                    if eng == "load" and int(dut.acc_wr__en.value):
                        self.acc_write_at_retire.append(self.cycle)
                if int(getattr(dut, f"{eng}_stall").value):
                    self.stall_cycles[eng] += 1
            # the compute engine's part: relay tokens
            if q["l2c"] and q["c2s"] < self.cap:
                q["l2c"] -= 1
                q["c2s"] += 1
            if q["s2c"] and q["c2l"] < self.cap:
                q["s2c"] -= 1
                q["c2l"] += 1

    async def run_until(self, loads: int, stores: int, errors: int = 0,
                        timeout: int = 40000) -> int:
        """Wait until ``loads`` and ``stores`` retired, ``errors`` reported, all idle."""
        start = self.cycle
        dut = self.dut
        while True:
            await FallingEdge(dut.clk)
            done = (self.retired["load"] + sum(e[0] == "load" for e in self.errors) >= loads
                    and self.retired["store"] + sum(e[0] == "store" for e in self.errors)
                    >= stores and len(self.errors) >= errors)
            if (done and self.mem.idle and int(dut.load_idle.value)
                    and int(dut.store_idle.value)
                    and all(s.pos == len(s.items) for s in self.streams.values())):
                return self.cycle - start
            assert self.cycle - start < timeout, (
                f"timeout: retired {self.retired}, errors {self.errors}, queues {self.q}, "
                f"memory pending {list(self.mem.pending)[:3]}")

    def buffer_state(self, init: dict[str, list[int]]) -> dict[str, list[int]]:
        """``init`` with every recorded write applied in order."""
        out = {k: list(v) for k, v in init.items()}
        for n, ws in self.writes.items():
            for a, d in ws:
                out[n][a] = d
        return out


def random_buffers(cfg: HwConfig, rng: random.Random) -> dict[str, list[int]]:
    """Distinct random contents standing for the buffers' state before the test."""
    bits = {"inp": cfg.inp_entry_bytes * 8, "wgt": cfg.wgt_entry_bytes * 8,
            "uop": uop_format(cfg).used_bits, "acc": cfg.acc_entry_bytes * 8}
    return {BUF_NAMES[b]: [rng.getrandbits(bits[BUF_NAMES[b]])
                           for _ in range(buffer_depth(cfg, b))] for b in Buffer}


def random_load(cfg: HwConfig, rng: random.Random, buf: Buffer, src_bytes: int,
                max_x: int = 4, **flags: bool) -> Load:
    """A legal LOAD of ``buf`` reading below ``src_bytes`` with random padding and stride."""
    eb = buffer_entry_bytes(cfg, buf)
    depth = buffer_depth(cfg, buf)
    while True:
        x = rng.randint(1, max_x)
        y = rng.randint(1, 3)
        stride = rng.choice([x, x, x + rng.randint(1, 3), max(0, x - 1), 0])
        pads = [0, 0, 0, 0] if buf is Buffer.UOP else [rng.choice([0, 0, 1, 2])
                                                       for _ in range(4)]
        rows, cols = pads[0] + y + pads[1], pads[2] + x + pads[3]
        extent = (y - 1) * stride + x
        if rows * cols > depth or extent * eb > src_bytes:
            continue
        return Load(buffer=buf, sram=rng.randrange(depth - rows * cols + 1),
                    dram=rng.randrange(src_bytes // eb - extent + 1), y=y, x=x, stride=stride,
                    pad_top=pads[0], pad_bottom=pads[1], pad_left=pads[2], pad_right=pads[3],
                    **flags)


def compare_buffers(want: dict[str, list[int]], got: dict[str, list[int]]) -> None:
    for n in want:
        bad = [i for i, (a, b) in enumerate(zip(want[n], got[n], strict=True)) if a != b]
        assert not bad, (f"{n}: {len(bad)} entries differ, first {bad[:5]}: "
                         f"want {[hex(want[n][i]) for i in bad[:2]]} "
                         f"got {[hex(got[n][i]) for i in bad[:2]]}")


# ----------------------------------------------------------------------- tests
async def random_program(dut, seed: int, n_loads: int, n_pairs: int, **mem_kwargs) -> None:
    """Random LOADs of every buffer interleaved with LOAD acc → STORE pairs ordered by
    tokens, under random memory timing; buffers and DRAM against :class:`Reference`."""
    cfg = config()
    rng = random.Random(seed)
    src_bytes = 16 * max(buffer_entry_bytes(cfg, b) for b in Buffer)
    out_base = src_bytes
    mem_size = src_bytes + 64 * cfg.out_entry_bytes + 256
    tb = TB(dut, seed=seed, mem_size=mem_size, **mem_kwargs)
    tb.mem.data[:src_bytes] = np.frombuffer(rng.randbytes(src_bytes), dtype=np.uint8)
    init = random_buffers(cfg, rng)
    ref = Reference(cfg, tb.mem.data, init)
    index = 0
    n_writes = 0
    plain = [Buffer.INP, Buffer.WGT, Buffer.UOP, Buffer.ACC]
    order: list[str] = []
    for k in range(n_pairs):
        for _ in range(n_loads // max(n_pairs, 1)):
            order.append("load")
        order.append(f"pair{k}")
    loads = stores = 0
    for item in order:
        if item == "load":
            buf = rng.choice(plain[:3])  # acc is only loaded in pairs (ordered by tokens)
            insn = random_load(cfg, rng, buf, src_bytes)
            tb.feed("load", index, insn)
            ref.load(insn)
            n_writes += insn.rows * insn.cols
            loads += 1
        else:
            first = item == "pair0"
            ld = random_load(cfg, rng, Buffer.ACC, src_bytes, pop_next=not first,
                             push_next=True)
            tb.feed("load", index, ld)
            ref.load(ld)
            n_writes += ld.rows * ld.cols
            index += 1
            # a store whose source lies inside the block just loaded
            n = ld.rows * ld.cols
            x = rng.randint(1, min(n, 6))
            y = rng.randint(1, n // x)
            stride = rng.choice([x, x + 2, max(1, x - 1)])
            sram = ld.sram + rng.randrange(n - x * y + 1)
            dram = rng.randrange(0, 64 - ((y - 1) * stride + x) + 1)
            st = Store(sram=sram, dram=out_base // cfg.out_entry_bytes + dram, y=y, x=x,
                       stride=stride, pop_prev=True, push_prev=True)
            tb.feed("store", index, st)
            ref.store(st)
            loads += 1
            stores += 1
        index += 1
    # the last store's token comes back to compute: drain it so the queues end empty
    await tb.reset()
    cycles = await tb.run_until(loads, stores)
    await ClockCycles(dut.clk, 2)
    tb.q["c2l"] = 0  # the final store→compute token, relayed but never popped
    assert not tb.errors, tb.errors
    assert tb.retired == {"load": loads, "store": stores}
    assert not tb.acc_write_at_retire, (
        f"LOADs retired with an accumulator write still waiting, cycles "
        f"{tb.acc_write_at_retire[:5]}")
    assert tb.acc_waits, "no accumulator write waited for the port"
    assert sum(len(w) for w in tb.writes.values()) == n_writes, "extra or missing writes"
    compare_buffers(ref.bufs, tb.buffer_state(init))
    bad = np.nonzero(ref.dram != tb.mem.data)[0]
    assert bad.size == 0, f"DRAM differs at {bad[:8].tolist()}"
    assert not tb.mem.log or min(c.addr for c in tb.mem.log if c.write) >= out_base
    dut._log.info("%d loads, %d stores in %d cycles; %d B read, %d B written", loads, stores,
                  cycles, tb.mem.bytes_read, tb.mem.bytes_written)


@cocotb.test()
async def random_loads_and_stores(dut) -> None:
    """Random LOADs (all buffers, padding, strides) and token-ordered STOREs."""
    await random_program(dut, seed=1, n_loads=40, n_pairs=8)


@cocotb.test()
async def random_slow_memory(dut) -> None:
    """The same under heavy back-pressure, long latency and a bandwidth limit."""
    await random_program(dut, seed=2, n_loads=16, n_pairs=4, latency=(2, 20), cmd_ready=0.4,
                         wdata_ready=0.5, rdata_valid=0.5, beats_per_cycle=0.5)


@cocotb.test()
async def long_rows_full_speed(dut) -> None:
    """Rows longer than 256 beats (split bursts) from a memory that never stalls:
    one beat per cycle, so the load takes about as many cycles as it moves beats."""
    cfg = config()
    rng = random.Random(3)
    bus = cfg.mem_bus_bytes
    src_bytes = 2 * 300 * max(cfg.inp_entry_bytes, cfg.wgt_entry_bytes, bus)
    tb = TB.full_speed(dut, seed=3, mem_size=src_bytes + 4096)
    tb.mem.data[:src_bytes] = np.frombuffer(rng.randbytes(src_bytes), dtype=np.uint8)
    init = random_buffers(cfg, rng)
    ref = Reference(cfg, tb.mem.data, init)
    await tb.reset()
    tested = 0
    for buf in Buffer:
        eb = buffer_entry_bytes(cfg, buf)
        depth = buffer_depth(cfg, buf)
        x = -(-300 * bus // eb)  # more than 256 beats a row
        pad = 0 if buf is Buffer.UOP else 1
        y = 2 if 2 * (x + pad) <= depth else 1
        if x + pad > depth:
            continue
        insn = Load(buffer=buf, sram=0, dram=3, y=y, x=x, stride=x + 1, pad_left=pad)
        tb.feed("load", tested, insn)
        ref.load(insn)
        tested += 1
        beats = y * x * eb // bus
        cycles = await tb.run_until(tested, 0)
        dut._log.info("%s: %d beats, %d entries in %d cycles", BUF_NAMES[buf], beats,
                      insn.rows * insn.cols, cycles)
        assert cycles <= beats + insn.rows * insn.cols - y * x + 20, (
            f"{cycles} cycles for {beats} beats")
    assert tested >= 2
    compare_buffers(ref.bufs, tb.buffer_state(init))
    assert all(c.beats <= 256 for c in tb.mem.log)


@cocotb.test()
async def store_full_speed(dut) -> None:
    """A long STORE (rows split into bursts where the config allows) from a memory that
    never stalls writes one beat per cycle."""
    cfg = config()
    rng = random.Random(6)
    bus = cfg.mem_bus_bytes
    ob = cfg.out_entry_bytes
    x = min(cfg.acc_depth // 2, -(-300 * bus // ob))
    out_base = 4 * cfg.acc_depth * cfg.acc_entry_bytes
    tb = TB.full_speed(dut, seed=6, mem_size=out_base + 4 * x * ob)
    tb.mem.data[:out_base] = np.frombuffer(rng.randbytes(out_base), dtype=np.uint8)
    init = random_buffers(cfg, rng)
    ref = Reference(cfg, tb.mem.data, init)
    await tb.reset()
    ld = Load(buffer=Buffer.ACC, sram=0, dram=5, y=1, x=2 * x, push_next=True)
    tb.feed("load", 0, ld)
    ref.load(ld)
    await tb.run_until(1, 0)
    st = Store(sram=0, dram=out_base // ob, y=2, x=x, stride=x + 1, pop_prev=True)
    tb.feed("store", 1, st)
    ref.store(st)
    cycles = await tb.run_until(1, 1)
    beats = 2 * x * ob // bus
    dut._log.info("store: %d beats in %d cycles", beats, cycles)
    assert cycles <= beats + 20, f"{cycles} cycles for {beats} beats"
    assert (ref.dram == tb.mem.data).all()
    assert all(c.beats <= 256 for c in tb.mem.log)


@cocotb.test()
async def range_errors(dut) -> None:
    """SRAM_RANGE and DRAM_RANGE are reported with the instruction's index before any
    memory access; the engines go on with the next instruction."""
    cfg = config()
    rng = random.Random(4)
    iw_bytes = insn_width(cfg) // 8
    dram_size = 64 * cfg.wgt_entry_bytes
    tb = TB(dut, seed=4, mem_size=dram_size + 4096)
    tb.mem.data[:] = np.frombuffer(rng.randbytes(tb.mem.data.size), dtype=np.uint8)
    await tb.reset()
    dut.dram_size.value = dram_size
    insn_base = dram_size - 4 * iw_bytes
    dut.insn_base.value = insn_base
    dut.insn_count.value = 2  # the stream occupies [insn_base, insn_base + 2 words)
    eb = cfg.inp_entry_bytes
    ob = cfg.out_entry_bytes
    depth = cfg.inp_depth
    cases: list[tuple[str, int, Insn, ErrorCode | None]] = [
        # LOAD: block one entry past the depth (with padding), and exactly fitting
        ("load", 10, Load(buffer=Buffer.INP, sram=depth - 6, y=1, x=2, pad_left=2,
                          pad_right=2, pad_top=0, pad_bottom=0, stride=2), None),
        ("load", 11, Load(buffer=Buffer.INP, sram=depth - 6, y=1, x=3, pad_left=2,
                          pad_right=2, stride=3), ErrorCode.SRAM_RANGE),
        # LOAD: the last row's end one entry past dram_size, and exactly at it
        ("load", 12, Load(buffer=Buffer.WGT, sram=0, dram=61, y=2, x=2, stride=2),
         ErrorCode.DRAM_RANGE),
        ("load", 13, Load(buffer=Buffer.WGT, sram=0, dram=60, y=2, x=2, stride=2), None),
        ("load", 14, Load(buffer=Buffer.INP, sram=0, dram=dram_size // eb, y=1, x=1),
         ErrorCode.DRAM_RANGE),
        ("store", 20, Store(sram=cfg.acc_depth - 4, y=2, x=3, stride=3),
         ErrorCode.SRAM_RANGE),
        ("store", 21, Store(sram=0, dram=insn_base // ob - 1, y=1, x=1), None),
        ("store", 22, Store(sram=0, dram=insn_base // ob - 1, y=1, x=2, stride=2),
         ErrorCode.DRAM_RANGE),
        ("store", 23, Store(sram=0, dram=(insn_base + 2 * iw_bytes) // ob, y=1, x=1), None),
        ("store", 24, Store(sram=0, dram=0, y=3, x=1, stride=(insn_base // ob) - 1),
         ErrorCode.DRAM_RANGE),
        ("store", 25, Store(sram=0, dram=dram_size // ob - 2, y=1, x=3), ErrorCode.DRAM_RANGE),
    ]
    expected = []
    for eng, idx, insn, code in cases:
        tb.feed(eng, idx, insn)
        if code is not None:
            expected.append((eng, int(code), idx))
    n_load = sum(c[0] == "load" for c in cases)
    n_store = len(cases) - n_load
    await tb.run_until(n_load, n_store, errors=len(expected))
    assert sorted(tb.errors) == sorted(expected), f"errors {tb.errors}, want {expected}"
    assert tb.retired == {"load": n_load - sum(e[0] == "load" for e in expected),
                          "store": n_store - sum(e[0] == "store" for e in expected)}
    # only the legal instructions touched memory
    legal_bytes = {"r": 0, "w": 0}
    for eng, _, insn, code in cases:
        if code is None:
            if eng == "load":
                legal_bytes["r"] += insn.y * insn.x * buffer_entry_bytes(cfg, insn.buffer)
            else:
                legal_bytes["w"] += insn.y * insn.x * ob
    assert tb.mem.bytes_read == legal_bytes["r"]
    assert tb.mem.bytes_written == legal_bytes["w"]


@cocotb.test()
async def halt_drains(dut) -> None:
    """``halt`` in the middle of a long LOAD and STORE: both stop issuing, drain what the
    memory owes or is owed, go idle without retiring; the port stays legal."""
    cfg = config()
    rng = random.Random(5)
    tb = TB(dut, seed=5, mem_size=1 << 16)
    tb.mem.data[:] = np.frombuffer(rng.randbytes(tb.mem.data.size), dtype=np.uint8)
    await tb.reset()
    x = min(cfg.inp_depth, (1 << 15) // cfg.inp_entry_bytes) // 16
    tb.feed("load", 0, Load(buffer=Buffer.INP, sram=0, y=16, x=x, stride=x))
    xs = min(cfg.acc_depth, (1 << 15) // cfg.out_entry_bytes) // 16
    tb.feed("store", 1, Store(sram=0, dram=(1 << 15) // cfg.out_entry_bytes, y=16, x=xs,
                              stride=xs))
    await ClockCycles(dut.clk, 60)
    dut.halt.value = 1
    for _ in range(5000):
        await FallingEdge(dut.clk)
        if (tb.mem.idle and int(dut.load_idle.value)
                and int(dut.store_idle.value)):
            break
    else:
        raise AssertionError("engines did not go idle after halt")
    assert tb.retired == {"load": 0, "store": 0}
    assert tb.mem.bytes_read < 16 * x * cfg.inp_entry_bytes
    assert tb.mem.bytes_written < 16 * xs * cfg.out_entry_bytes
    assert len(tb.writes["inp"]) < 16 * x
    n_w = len(tb.writes["inp"])
    await ClockCycles(dut.clk, 20)
    assert len(tb.writes["inp"]) == n_w
    # after halt is released, a new instruction runs normally
    dut.halt.value = 0
    insn = Load(buffer=Buffer.WGT, sram=2, dram=1, y=2, x=2, stride=3, pad_top=1)
    init = random_buffers(cfg, rng)
    ref = Reference(cfg, tb.mem.data, init)
    ref.load(insn)
    tb.feed("load", 2, insn)
    await tb.run_until(1, 0)
    assert tb.buffer_state(init)["wgt"] == ref.bufs["wgt"]

"""cocotb testbench of the fetch unit behind the memory arbiter
(:class:`hw.dma_top.FetchTop`).

The testbench writes instruction words into
:class:`tensorfab.sim.testing.cocotb_memory.MemModel`, starts the unit, takes the three
dispatch streams with random back-pressure and compares what each engine received, and
the error reported, with what docs/isa.md and :func:`tensorfab.isa.decode_insn` say.
"""

from __future__ import annotations

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

from tensorfab.hw.signatures import InsnStreamLayout
from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    ErrorCode,
    Finish,
    Gemm,
    HwConfig,
    Insn,
    Load,
    Opcode,
    Store,
    encode_insn,
    insn_formats,
    insn_width,
)
from tensorfab.isa.formats import BINARY_ALU_OPS
from tensorfab.sim.testing.cocotb_memory import MemModel
from tensorfab.sim.testing.cocotb_runner import params_from_env

STREAMS = ("load", "compute", "store")
ENGINE = {Opcode.LOAD: "load", Opcode.STORE: "store", Opcode.GEMM: "compute",
          Opcode.ALU: "compute", Opcode.FINISH: "compute"}


def config() -> HwConfig:
    """The configuration of the build under test (a preset, its fetch buffer in block
    RAM when the build's parameters say so)."""
    params = params_from_env()
    return PRESETS[params["preset"]].replace(
        block_ram_fifos=bool(params.get("block_ram_fifos", False)))


def random_insn(cfg: HwConfig, rng: random.Random) -> Insn:
    """A random legal instruction other than FINISH."""
    kind = rng.choice(["load", "store", "gemm", "alu"])
    if kind == "load":
        buf = rng.choice(list(Buffer))
        pads = {} if buf is Buffer.UOP else {"pad_top": rng.randint(0, 3),
                                              "pad_left": rng.randint(0, 3)}
        return Load(buffer=buf, sram=rng.randrange(cfg.uop_depth if buf is Buffer.UOP
                                                   else cfg.wgt_depth),
                    dram=rng.getrandbits(20), y=rng.randint(1, 9), x=rng.randint(1, 9),
                    stride=rng.randint(0, 20), pop_next=rng.random() < 0.3,
                    push_next=rng.random() < 0.3, **pads)
    if kind == "store":
        return Store(sram=rng.randrange(cfg.acc_depth), dram=rng.getrandbits(20),
                     y=rng.randint(1, 5), x=rng.randint(1, 5), stride=rng.randint(1, 9),
                     pop_prev=rng.random() < 0.3, push_prev=rng.random() < 0.3)
    begin = rng.randrange(cfg.uop_depth)
    loop = {"uop_begin": begin, "uop_end": rng.randint(begin + 1, cfg.uop_depth),
            "iter_out": rng.randint(1, 5), "iter_in": rng.randint(1, 5),
            "pop_prev": rng.random() < 0.3, "push_next": rng.random() < 0.3}
    if kind == "gemm":
        return Gemm(reset=rng.random() < 0.3, acc_factor_out=rng.randrange(cfg.acc_depth),
                    inp_factor_in=rng.randrange(cfg.inp_depth), **loop)
    op = rng.choice(BINARY_ALU_OPS)
    imm = rng.randint(0, 31) if rng.random() < 0.5 else 0
    return Alu(op=op, use_imm=bool(imm), imm=imm, dst_factor_in=rng.randrange(cfg.acc_depth),
               **loop)


class TB:
    """Clock, reset, memory model and the three dispatch-stream sinks."""

    def __init__(self, dut, seed: int, **mem_kwargs) -> None:
        self.dut = dut
        self.cfg = cfg = config()
        self.rng = random.Random(seed)
        self.mem = MemModel(dut, cfg, prefix="port__", size=1 << 16, seed=seed, **mem_kwargs)
        lay = InsnStreamLayout(cfg)
        self.word_off, self.index_off = lay["word"].offset, lay["index"].offset
        self.word_mask = (1 << insn_width(cfg)) - 1
        self.got: dict[str, list[tuple[int, int]]] = {s: [] for s in STREAMS}
        self.order: list[int] = []  # indices in dispatch order, all streams
        self.errors: list[tuple[int, int]] = []
        self.ready_p = 0.6

    async def reset(self) -> None:
        dut = self.dut
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        dut.start.value = 0
        dut.halt.value = 0
        dut.insn_base.value = 0
        dut.insn_count.value = 0
        for s in STREAMS:
            getattr(dut, f"{s}_insn__ready").value = 0
        dut.rst.value = 1
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        self.mem.start()
        cocotb.start_soon(self._sink())

    async def _sink(self) -> None:
        dut = self.dut
        while True:
            await FallingEdge(dut.clk)
            ready = {s: self.rng.random() < self.ready_p for s in STREAMS}
            for s in STREAMS:
                getattr(dut, f"{s}_insn__ready").value = int(ready[s])
            await ReadOnly()
            for s in STREAMS:
                if ready[s] and int(getattr(dut, f"{s}_insn__valid").value):
                    p = getattr(dut, f"{s}_insn__payload").value.to_unsigned()
                    idx = (p >> self.index_off) & 0xFFFFFFFF
                    self.got[s].append((idx, (p >> self.word_off) & self.word_mask))
                    self.order.append(idx)
            if int(dut.error__valid.value):
                self.errors.append((dut.error__code.value.to_unsigned(),
                                    dut.error__index.value.to_unsigned()))

    async def run(self, words: list[int], base: int, count: int | None = None,
                  timeout: int = 20000) -> int:
        """Put ``words`` at ``base``, start, wait until fetch is idle again."""
        dut = self.dut
        ib = insn_width(self.cfg) // 8
        for i, w in enumerate(words):
            self.mem.write(base + i * ib, w.to_bytes(ib, "little"))
        for s in STREAMS:
            self.got[s].clear()
        self.order.clear()
        self.errors.clear()
        read0 = self.mem.bytes_read
        await FallingEdge(dut.clk)
        dut.insn_base.value = base
        dut.insn_count.value = len(words) if count is None else count
        dut.start.value = 1
        await FallingEdge(dut.clk)
        dut.start.value = 0
        for _ in range(timeout):
            await FallingEdge(dut.clk)
            if int(dut.idle.value) and self.mem.idle:
                break
        else:
            raise AssertionError("fetch did not finish")
        await ClockCycles(dut.clk, 2)
        return self.mem.bytes_read - read0

    def expect_dispatch(self, words: list[int], upto: int) -> None:
        """Words ``0 .. upto-1`` went to their engines, in order, with their indices."""
        want: dict[str, list[tuple[int, int]]] = {s: [] for s in STREAMS}
        for i, w in enumerate(words[:upto]):
            want[ENGINE[Opcode(w & 7)]].append((i, w))
        for s in STREAMS:
            assert self.got[s] == want[s], (f"{s} stream: got indices "
                                            f"{[i for i, _ in self.got[s]]}, want "
                                            f"{[i for i, _ in want[s]]}")
        assert self.order == list(range(upto)), f"dispatch order {self.order}"


@cocotb.test()
async def dispatch_in_order(dut) -> None:
    """Random legal programs reach their engines in program order, with their indices;
    FINISH sets ``finished``; exactly the stream is read."""
    cfg = config()
    tb = TB(dut, seed=1)
    await tb.reset()
    ib = insn_width(cfg) // 8
    for n, timing in enumerate(((0.6, {}), (1.0, {"cmd_ready": 1.0, "rdata_valid": 1.0}),
                                (0.3, {"latency": (3, 15), "rdata_valid": 0.5}))):
        tb.ready_p, kw = timing
        for k, v in kw.items():
            setattr(tb.mem, {"cmd_ready": "p_cmd", "rdata_valid": "p_rdata"}.get(k, k), v)
        words = [encode_insn(random_insn(cfg, tb.rng), cfg) for _ in range(20 + 7 * n)]
        words.append(encode_insn(Finish(pop_prev=True), cfg))
        base = ib * (3 + 5 * n)
        n_log = len(tb.mem.log)
        read = await tb.run(words, base)
        assert not tb.errors, tb.errors
        tb.expect_dispatch(words, len(words))
        assert int(dut.finished.value)
        assert read == len(words) * ib
        assert all(base <= c.addr < base + len(words) * ib for c in tb.mem.log[n_log:])


@cocotb.test()
async def illegal_words(dut) -> None:
    """The first illegal word stops dispatch and is reported with its code and index;
    the words before it were dispatched, none after it."""
    cfg = config()
    tb = TB(dut, seed=2)
    await tb.reset()
    fmts = insn_formats(cfg)
    gemm = encode_insn(Gemm(uop_begin=0, uop_end=1), cfg)
    cases = [
        (7, ErrorCode.BAD_OPCODE),
        (5 | (1 << 40), ErrorCode.BAD_OPCODE),
        (encode_insn(Finish(), cfg) | (1 << (insn_width(cfg) - 1)), ErrorCode.RESERVED_BITS),
        (encode_insn(Store(), cfg) | (1 << fmts[Opcode.STORE].used_bits),
         ErrorCode.RESERVED_BITS),
        (fmts[Opcode.GEMM].pack({"opcode": Opcode.GEMM, "uop_begin": 0,
                                 "uop_end": cfg.uop_depth + 1, "iter_out": 1, "iter_in": 1}),
         ErrorCode.BAD_FIELD),
        (fmts[Opcode.ALU].pack({"opcode": Opcode.ALU, "op": len(AluOp), "uop_end": 1,
                                "iter_out": 1,
                                "iter_in": 1}), ErrorCode.BAD_FIELD),
        (fmts[Opcode.LOAD].pack({"opcode": Opcode.LOAD, "pop_prev": 1, "y": 1, "x": 1}),
         ErrorCode.BAD_FIELD),
        (fmts[Opcode.LOAD].pack({"opcode": Opcode.LOAD, "buffer": Buffer.UOP, "y": 1, "x": 1,
                                 "pad_right": 1}), ErrorCode.BAD_FIELD),
        (fmts[Opcode.STORE].pack({"opcode": Opcode.STORE, "y": 1, "x": 0}),
         ErrorCode.BAD_FIELD),
    ]
    for n, (bad, code) in enumerate(cases):
        k = tb.rng.randint(0, 12)
        words = [encode_insn(random_insn(cfg, tb.rng), cfg) for _ in range(k)]
        words += [bad, gemm, encode_insn(Finish(), cfg)]
        await tb.run(words, base=64 * n)
        assert tb.errors == [(int(code), k)], f"case {n}: errors {tb.errors}, want {code} @ {k}"
        tb.expect_dispatch(words, k)
        assert not int(dut.finished.value)


@cocotb.test()
async def no_finish(dut) -> None:
    """NO_FINISH: the count runs out (index = count, also for an empty stream), or FINISH
    is not the last instruction (index = FINISH's)."""
    cfg = config()
    tb = TB(dut, seed=3)
    await tb.reset()
    words = [encode_insn(random_insn(cfg, tb.rng), cfg) for _ in range(9)]
    await tb.run(words, base=32)
    assert tb.errors == [(int(ErrorCode.NO_FINISH), 9)], tb.errors
    tb.expect_dispatch(words, 9)
    await tb.run([], base=32)
    assert tb.errors == [(int(ErrorCode.NO_FINISH), 0)], tb.errors
    words = words[:4] + [encode_insn(Finish(), cfg)] + words[4:]
    await tb.run(words, base=0)
    assert tb.errors == [(int(ErrorCode.NO_FINISH), 4)], tb.errors
    tb.expect_dispatch(words, 4)
    # the stream is cut short by insn_count: FINISH past the count is never read
    words = words[:3] + [encode_insn(Finish(), cfg)]
    await tb.run(words, base=0, count=3)
    assert tb.errors == [(int(ErrorCode.NO_FINISH), 3)], tb.errors
    tb.expect_dispatch(words, 3)
    # and a good program runs after all these errors
    words = [encode_insn(random_insn(cfg, tb.rng), cfg) for _ in range(5)]
    words.append(encode_insn(Finish(), cfg))
    await tb.run(words, base=96)
    assert not tb.errors
    tb.expect_dispatch(words, 6)
    assert int(dut.finished.value)


@cocotb.test()
async def halt_stops_dispatch(dut) -> None:
    """``halt`` stops dispatch at once; fetch drains its reads and goes idle."""
    cfg = config()
    tb = TB(dut, seed=4)
    await tb.reset()
    tb.ready_p = 0.1
    words = [encode_insn(random_insn(cfg, tb.rng), cfg) for _ in range(40)]
    words.append(encode_insn(Finish(), cfg))
    ib = insn_width(cfg) // 8
    for i, w in enumerate(words):
        tb.mem.write(i * ib, w.to_bytes(ib, "little"))
    dut.insn_base.value = 0
    dut.insn_count.value = len(words)
    await FallingEdge(dut.clk)
    dut.start.value = 1
    await FallingEdge(dut.clk)
    dut.start.value = 0
    await ClockCycles(dut.clk, 40)
    dut.halt.value = 1
    await FallingEdge(dut.clk)
    n = len(tb.order)
    for _ in range(2000):
        await FallingEdge(dut.clk)
        if int(dut.idle.value) and tb.mem.idle:
            break
    else:
        raise AssertionError("fetch did not go idle after halt")
    assert len(tb.order) == n and n < len(words)
    assert tb.order == list(range(n))
    assert not tb.errors
    dut.halt.value = 0

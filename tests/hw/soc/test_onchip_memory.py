"""The on-chip memory in block RAM and in iCE40 SPRAM (its simulation model), through
the memory-port protocol, against a Python dict; and the SPRAM primitive on a build."""

from __future__ import annotations

import random

import pytest
from amaranth.back import rtlil
from amaranth.sim import Simulator
from amaranth_boards.icebreaker import ICEBreakerPlatform

from tensorfab.fpga_builds.boards import board_config
from tensorfab.hw.soc.memory import OnChipMemory
from tensorfab.hw.soc.spram import WRITE_GARBAGE, Ice40Spram

CFG = board_config("up5k")  # 16-bit beats, one SPRAM wide
DEPTH = 64


def _run(spram: bool, seed: int) -> None:
    """Random write and read bursts, random back-pressure on ``rdata``, a command
    often issued while the last read beat still waits (the SPRAM hazard)."""
    mem = OnChipMemory(CFG, DEPTH * CFG.mem_bus_bytes, spram=spram)
    port = mem.port
    rng = random.Random(seed)
    model: dict[int, int] = {}
    cmds = []
    for _ in range(40):
        base, n = rng.randrange(DEPTH), rng.randrange(1, 9)
        addrs = [(base + i) % DEPTH for i in range(n)]
        if rng.random() < 0.5 or not model:
            cmds.append(("w", base, [rng.randrange(1 << 16) for _ in addrs]))
        else:
            cmds.append(("r", base, n))
    expected: list[int] = []
    for kind, base, arg in cmds:
        if kind == "w":
            for i, v in enumerate(arg):
                model[(base + i) % DEPTH] = v
        else:
            expected += [model.get((base + i) % DEPTH) for i in range(arg)]
    got: list[int] = []

    async def host(ctx):
        for kind, base, arg in cmds:
            ctx.set(port.cmd.payload, {"addr": base * CFG.mem_bus_bytes,
                                       "write": kind == "w",
                                       "len": (len(arg) if kind == "w" else arg) - 1})
            ctx.set(port.cmd.valid, 1)
            await ctx.tick().until(port.cmd.ready)
            ctx.set(port.cmd.valid, 0)
            if kind == "w":
                for v in arg:
                    ctx.set(port.wdata.payload, {"data": v})
                    ctx.set(port.wdata.valid, 1)
                    await ctx.tick().until(port.wdata.ready)
                ctx.set(port.wdata.valid, 0)
        for _ in range(400):
            await ctx.tick()

    async def sink(ctx):
        while True:
            ready = rng.random() < 0.4
            ctx.set(port.rdata.ready, ready)
            await ctx.tick()

    async def collect(ctx):
        async for _clk, _rst, valid, ready, data in ctx.tick().sample(
                port.rdata.valid, port.rdata.ready, port.rdata.payload.data):
            if valid and ready:
                got.append(data)

    sim = Simulator(mem)
    sim.add_clock(1e-6)
    sim.add_testbench(host)
    sim.add_testbench(sink, background=True)
    sim.add_process(collect)
    sim.run()
    unknown = [i for i, v in enumerate(expected) if v is None]
    assert not unknown
    assert got == expected, f"spram={spram}: first difference at beat " \
        f"{next(i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b)}" \
        if len(got) == len(expected) else f"{len(got)} beats read, {len(expected)} expected"


@pytest.mark.parametrize("spram", [False, True], ids=["bram", "spram"])
@pytest.mark.parametrize("seed", [1, 2])
def test_memory_port_bursts(spram: bool, seed: int) -> None:
    _run(spram, seed)


@pytest.mark.parametrize("spram", [False, True], ids=["bram", "spram"])
def test_write_after_read_keeps_the_waiting_beat(spram: bool) -> None:
    """A one-beat read whose beat is not taken, then a write command: the beat still
    holds the old word when it is finally taken (SPRAM: the write waits for it)."""
    mem = OnChipMemory(CFG, DEPTH * CFG.mem_bus_bytes, spram=spram)
    port = mem.port

    async def command(ctx, write: bool, data: int | None = None) -> None:
        ctx.set(port.cmd.payload, {"addr": 8, "write": write, "len": 0})
        ctx.set(port.cmd.valid, 1)
        if data is not None:
            ctx.set(port.wdata.payload, {"data": data})
            ctx.set(port.wdata.valid, 1)

    async def cycles(ctx, n: int) -> None:
        for _ in range(n):
            taken = [ctx.get(s.valid) and ctx.get(s.ready) for s in (port.cmd, port.wdata)]
            await ctx.tick()
            for s, t in zip((port.cmd, port.wdata), taken, strict=True):
                if t:
                    ctx.set(s.valid, 0)

    async def bench(ctx):
        ctx.set(port.rdata.ready, 1)
        await command(ctx, True, 0x1111)
        await ctx.tick().until(port.wdata.ready)
        ctx.set(port.wdata.valid, 0)
        ctx.set(port.rdata.ready, 0)
        await command(ctx, False)
        await ctx.tick().until(port.cmd.ready)
        await command(ctx, True, 0x2222)  # a write while the read beat waits
        await cycles(ctx, 10)
        assert ctx.get(port.rdata.valid)
        assert ctx.get(port.rdata.payload.data) == 0x1111
        ctx.set(port.rdata.ready, 1)
        await ctx.tick()
        ctx.set(port.rdata.ready, 0)
        await cycles(ctx, 10)
        assert not ctx.get(port.cmd.valid) and not ctx.get(port.wdata.valid), \
            "the write was taken after the beat"

    sim = Simulator(mem)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def test_spram_model_output_after_write_is_garbage() -> None:
    """The model follows the primitive: data holds without ``en``, a write makes it
    undefined, so a memory that read it after a write would fail the test above."""
    ram = Ice40Spram(16, 256)

    async def bench(ctx):
        ctx.set(ram.addr, 5)
        ctx.set(ram.wdata, 0x1234)
        ctx.set(ram.en, 1)
        ctx.set(ram.we, 1)
        await ctx.tick()
        ctx.set(ram.we, 0)
        ctx.set(ram.en, 0)
        await ctx.tick()
        assert ctx.get(ram.rdata) == WRITE_GARBAGE
        ctx.set(ram.en, 1)
        await ctx.tick()
        ctx.set(ram.en, 0)
        assert ctx.get(ram.rdata) == 0x1234
        ctx.set(ram.addr, 6)
        await ctx.tick()
        assert ctx.get(ram.rdata) == 0x1234  # held

    sim = Simulator(ram)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("width", [16, 32, 64])
def test_spram_primitive_on_a_build(width: int) -> None:
    text = rtlil.convert(Ice40Spram(width, 1024), platform=ICEBreakerPlatform())
    assert text.count("cell \\SB_SPRAM256KA ") == width // 16
    assert "connect \\POWEROFF 1'1" in text


@pytest.mark.parametrize(("width", "depth", "match"), [
    (8, 1024, "SPRAM width 8"), (80, 1024, "SPRAM width 80"),
    (16, 32768, "SPRAM depth 32768"), (16, 1000, "SPRAM depth 1000")])
def test_spram_bad_shape(width: int, depth: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Ice40Spram.check_shape(width, depth)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_memory_too_big_for_spram() -> None:
    with pytest.raises(ValueError, match="SPRAM depth 32768"):
        OnChipMemory(CFG, 64 * 1024, spram=True)


@pytest.mark.parametrize("spram", [False, True], ids=["bram", "spram"])
def test_read_burst_one_beat_per_cycle(spram: bool) -> None:
    """A reader always ready gets a burst's beats on consecutive cycles, the first three
    cycles after the command is taken; a reader that stalls for a while gets them
    again one per cycle when it resumes (the output queue covers the RAM's read)."""
    mem = OnChipMemory(CFG, DEPTH * CFG.mem_bus_bytes, spram=spram)
    port = mem.port
    n = 16
    data = [(0x1000 + 37 * i) & 0xFFFF for i in range(n)]

    async def bench(ctx):
        ctx.set(port.cmd.payload, {"addr": 0, "write": 1, "len": n - 1})
        ctx.set(port.cmd.valid, 1)
        await ctx.tick().until(port.cmd.ready)
        ctx.set(port.cmd.valid, 0)
        for v in data:
            ctx.set(port.wdata.payload, {"data": v})
            ctx.set(port.wdata.valid, 1)
            await ctx.tick().until(port.wdata.ready)
        ctx.set(port.wdata.valid, 0)
        for stall in (0, 5):
            ctx.set(port.rdata.ready, 1)
            ctx.set(port.cmd.payload, {"addr": 0, "write": 0, "len": n - 1})
            ctx.set(port.cmd.valid, 1)
            await ctx.tick().until(port.cmd.ready)
            ctx.set(port.cmd.valid, 0)
            got: list[tuple[int, int]] = []  # (cycle after the command, beat)
            cycle = 0
            while len(got) < n:
                if len(got) == n // 2 and stall:
                    ctx.set(port.rdata.ready, 0)
                    for _ in range(stall):
                        await ctx.tick()
                    cycle += stall
                    stall = 0
                    ctx.set(port.rdata.ready, 1)
                cycle += 1
                if ctx.get(port.rdata.valid):
                    got.append((cycle, ctx.get(port.rdata.payload.data)))
                await ctx.tick()
                assert cycle < 4 * n, got
            assert [d for _, d in got] == data
            cycles = [c for c, _ in got]
            assert cycles[0] == 3, cycles  # the address, the RAM's read, the queue
            first, second = cycles[:n // 2], cycles[n // 2:]
            assert first == list(range(first[0], first[0] + len(first))), cycles
            assert second == list(range(second[0], second[0] + len(second))), cycles

    sim = Simulator(mem)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()

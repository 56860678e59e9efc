"""The SDRAM controller against the chip model (which checks every timing rule it
knows): random bursts against a Python dict, refresh under traffic, the
initialization, the read latency and throughput."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from amaranth.sim import Simulator

from tensorfab.fpga_builds.boards import board_config
from tensorfab.hw.soc.sdram import SdramController, SdramTiming, mode_register
from tensorfab.sim.sdram_chip import SdramChip, SdramViolation

#: A short power-up wait (both sides use it), so a test spends its cycles on traffic.
QUICK = replace(SdramTiming(), t_init=2000.0)


def simulate(cfg_name: str, clk_hz: int, cmds: list, *, timing: SdramTiming = QUICK,
             board_delay: int = 0, seed: int = 0, ready_p: float = 0.5,
             wdata_p: float = 0.8, tail: int = 300) -> tuple[list[int], SdramChip, int]:
    """Run ``cmds`` (("w", byte address, [beats]) or ("r", byte address, n)) through
    the controller and the chip; the beats read, the chip, the cycles taken."""
    cfg = board_config(cfg_name)
    ctl = SdramController(cfg, clk_hz, timing=timing, board_delay=board_delay)
    chip = SdramChip(ctl.sdram, clk_hz, timing=timing, board_delay=board_delay)
    port = ctl.port
    rng = random.Random(seed)
    got: list[int] = []
    cycles = [0]

    async def host(ctx):
        await ctx.tick().until(ctl.ready)
        start = chip.cycle
        for kind, addr, arg in cmds:
            n = len(arg) if kind == "w" else arg
            ctx.set(port.cmd.payload, {"addr": addr, "write": kind == "w", "len": n - 1})
            ctx.set(port.cmd.valid, 1)
            await ctx.tick().until(port.cmd.ready)
            ctx.set(port.cmd.valid, 0)
            if kind == "w":
                for v in arg:
                    while rng.random() > wdata_p:  # a gap in the write data
                        ctx.set(port.wdata.valid, 0)
                        await ctx.tick()
                    ctx.set(port.wdata.payload, {"data": v})
                    ctx.set(port.wdata.valid, 1)
                    await ctx.tick().until(port.wdata.ready)
                ctx.set(port.wdata.valid, 0)
        want = sum(arg for kind, _a, arg in cmds if kind == "r")
        for _ in range(100 * want + 1000):  # bounded: a lost beat fails, not hangs
            if len(got) >= want:
                break
            await ctx.tick()
        cycles[0] = chip.cycle - start
        for _ in range(tail):
            await ctx.tick()

    async def sink(ctx):
        while True:
            ctx.set(port.rdata.ready, rng.random() < ready_p)
            await ctx.tick()

    async def collect(ctx):
        async for _clk, _rst, valid, ready, data in ctx.tick().sample(
                port.rdata.valid, port.rdata.ready, port.rdata.payload.data):
            if valid and ready:
                got.append(data)

    sim = Simulator(ctl)
    sim.add_clock(1 / clk_hz)
    sim.add_testbench(host)
    sim.add_testbench(sink, background=True)
    sim.add_process(collect)
    sim.add_process(chip.process)
    sim.run()
    return got, chip, cycles[0]


def random_traffic(cfg_name: str, seed: int, n: int) -> tuple[list, list[int]]:
    """Commands over a few rows of every bank (row hits, misses, bank changes) and the
    beats a dict model says the reads return."""
    cfg = board_config(cfg_name)
    rng = random.Random(seed)
    beat = cfg.mem_bus_bytes
    # byte address of (row, bank, column 0): 512 columns of 2 bytes, 4 banks
    bases = [(row << 12 | bank << 10) for row in (0, 1, 7) for bank in range(4)]
    model: dict[int, int] = {}
    cmds, expected = [], []
    for _ in range(n):
        base = rng.choice(bases) + rng.randrange(0, 1024, beat)
        count = rng.randrange(1, 12)
        addrs = [base + i * beat for i in range(count)]
        if rng.random() < 0.5 or not model:
            data = [rng.randrange(1 << cfg.mem_bus_width) for _ in addrs]
            cmds.append(("w", base, data))
            model.update(zip(addrs, data, strict=True))
        else:
            addrs = [a for a in addrs if a in model] or [next(iter(model))]
            cmds.append(("r", addrs[0], 1))
            expected.append(model[addrs[0]])
            known = [a for a in (addrs[0] + i * beat for i in range(count)) if a in model]
            run = 1
            while run < len(known) and known[run] == addrs[0] + run * beat:
                run += 1
            if run > 1:
                cmds.append(("r", addrs[0], run))
                expected += [model[addrs[0] + i * beat] for i in range(run)]
    return cmds, expected


@pytest.mark.parametrize(("cfg_name", "clk_hz", "seed"), [
    ("tiny", 100_000_000, 1), ("ecp5-25f", 60_000_000, 2), ("small", 100_000_000, 3)])
def test_random_bursts_against_a_dict(cfg_name: str, clk_hz: int, seed: int) -> None:
    """Random write and read bursts crossing banks and rows, random back-pressure on
    both streams: every beat read is the last written, and the chip saw no timing
    violation (it raises); refreshes came in time under the traffic."""
    cmds, expected = random_traffic(cfg_name, seed, 60)
    got, chip, cycles = simulate(cfg_name, clk_hz, cmds, seed=seed)
    assert got == expected
    refi = int(7812.5 * clk_hz / 1e9)
    assert chip.stats.commands["REFRESH"] >= 8 + cycles // refi - 1
    assert 0 < chip.stats.max_refresh_gap <= refi
    assert chip.stats.commands["PRECHARGE"] > 2 and chip.stats.commands["ACTIVE"] > 12


def test_refresh_under_continuous_traffic() -> None:
    """A reader that never stalls and bursts of 256 beats back to back for several
    refresh intervals: refresh still comes within tREFI (the chip checks it)."""
    rng = random.Random(5)
    data = [rng.randrange(1 << 32) for _ in range(256)]
    cmds = [("w", 0x1000, data)] + [("r", 0x1000, 256)] * 8
    got, chip, cycles = simulate("tiny", 100_000_000, cmds, ready_p=1.0, wdata_p=1.0)
    assert got == data * 8
    assert cycles > 5 * 781 and chip.stats.commands["REFRESH"] - 8 >= cycles // 781
    assert chip.stats.max_refresh_gap <= 781


def test_read_throughput_and_latency() -> None:
    """In an open row with a reader always ready, a burst moves one word a cycle: a
    256-beat read of 2-word beats takes about 512 cycles plus the latency."""
    cmds = [("w", 0, list(range(256))), ("r", 0, 256)]
    got, _chip, cycles = simulate("tiny", 100_000_000, cmds, ready_p=1.0, wdata_p=1.0)
    assert got == list(range(256))
    assert cycles < 2 * (2 * 256) + 200, cycles


def test_full_initialization_at_25_mhz() -> None:
    """The real 200 µs power-up (5000 cycles at 25 MHz), eight refreshes, the mode
    register (burst 2 for a 32-bit bus, CAS latency 3), then a write and a read."""
    got, chip, _ = simulate("tiny", 25_000_000, [("w", 64, [7, 8]), ("r", 64, 2)],
                            timing=SdramTiming())
    assert got == [7, 8]
    assert chip.mode == mode_register(2, 3) == 0x31
    assert chip.refreshes >= 8


def test_board_delay() -> None:
    """One more cycle of read latency (the ULX3S's inverted SDRAM clock) on both sides."""
    cmds, expected = random_traffic("tiny", 9, 20)
    got, _chip, _ = simulate("tiny", 60_000_000, cmds, board_delay=1, seed=9)
    assert got == expected


def test_chip_model_catches_a_controller_too_fast() -> None:
    """The chip's checks are live: a controller that believes tRCD is shorter than the
    chip's gets a violation naming the rule."""
    cfg = board_config("tiny")
    fast = replace(QUICK, t_rcd=5.0)
    ctl = SdramController(cfg, 100_000_000, timing=fast)
    chip = SdramChip(ctl.sdram, 100_000_000, timing=QUICK)

    async def host(ctx):
        await ctx.tick().until(ctl.ready)
        ctx.set(ctl.port.cmd.payload, {"addr": 0, "write": 0, "len": 0})
        ctx.set(ctl.port.cmd.valid, 1)
        ctx.set(ctl.port.rdata.ready, 1)
        for _ in range(40):
            await ctx.tick()

    sim = Simulator(ctl)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.add_process(chip.process)
    # a tRCD of 1 cycle: the READ comes 2 cycles after the ACTIVE (the cycle after an
    # ACTIVE decides nothing, its row hit is being registered)
    with pytest.raises(SdramViolation, match=r"READ: tRCD \(bank 0\) is 3 cycles, only 2"):
        sim.run()


def test_bad_bus_width() -> None:
    cfg = replace(board_config("tiny"), mem_bus_width=8)
    with pytest.raises(ValueError, match="memory bus of 8 bits"):
        SdramController(cfg, 100_000_000)

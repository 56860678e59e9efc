"""BurstIssuer in Amaranth's simulator: the commands of random 2-D transfers against the
list a Python model splits, under random back-pressure, with halts mid-transfer; the
next-cycle values transfer_phases reports."""

from __future__ import annotations

import gc
import random
import warnings

import pytest
from amaranth.hdl import Module, Signal, UnusedElaboratable
from amaranth.lib import wiring
from amaranth.sim import Simulator

from tensorfab.hw.burst import BurstIssuer, owed_limit_bits, transfer_phases
from tensorfab.hw.sequencer import ExecSignature
from tensorfab.isa import PRESETS

CFG = PRESETS["tiny"]


def expected_commands(addr: int, rows: int, row_beats: int, stride: int,
                      max_burst: int) -> list[tuple[int, int]]:
    """``(addr, len)`` of every command: each row split into bursts of ``max_burst``."""
    bus = CFG.mem_bus_bytes
    mask = (1 << CFG.dram_addr_width) - 1
    out = []
    for r in range(rows):
        a, left = addr + r * stride, row_beats
        while left:
            n = min(left, max_burst)
            out.append((a & mask, n - 1))
            a += n * bus
            left -= n
    return out


@pytest.mark.parametrize("max_burst", [1, 3, 32])
def test_burst_issuer_random_transfers(max_burst: int) -> None:
    dut = BurstIssuer(CFG, max_burst)
    rng = random.Random(max_burst)
    bus = CFG.mem_bus_bytes
    seen = {"stuck": 0, "halted": 0, "split": 0}

    async def bench(ctx) -> None:
        for n in range(40):
            rows = rng.randint(1, 4)
            row_beats = rng.choice([1, 2, max_burst, max_burst + 1, 2 * max_burst + 3,
                                    rng.randint(1, 70)])
            addr = rng.randrange(0, 1 << 12) * bus
            stride = (row_beats + rng.randint(0, 3)) * bus
            want = expected_commands(addr, rows, row_beats, stride, max_burst)
            seen["split"] += len(want) > rows
            halt_at = rng.randint(1, 2 * len(want)) if n % 4 == 3 else None
            ctx.set(dut.addr, addr)
            ctx.set(dut.rows, rows)
            ctx.set(dut.row_beats, row_beats)
            ctx.set(dut.stride, stride)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            got: list[tuple[int, int]] = []
            owed = 0
            offered = None  # payload offered and not taken last cycle
            halted = False
            for cycle in range(4000):
                halted = halted or (halt_at is not None and cycle >= halt_at)
                ctx.set(dut.issue, not halted)
                ready = rng.random() < 0.6
                beat = owed > 0 and rng.random() < 0.7
                ctx.set(dut.cmd.ready, ready)
                ctx.set(dut.beat, beat)
                valid = ctx.get(dut.cmd.valid)
                payload = (ctx.get(dut.cmd.payload.addr), ctx.get(dut.cmd.payload.len))
                assert ctx.get(dut.owed) == owed
                assert ctx.get(dut.owing) == (owed != 0)  # the flag kept beside owed
                assert ctx.get(dut.drained) == (offered is None and owed == 0)
                assert ctx.get(dut.issued) == (len(got) == len(want))
                if offered is not None:  # the stream rule: held until taken
                    assert valid and payload == offered
                if (halted or owed >= 1 << owed_limit_bits(max_burst)) and offered is None:
                    assert not valid
                if valid and ready:
                    got.append(payload)
                    owed += payload[1] + 1
                offered = payload if valid and not ready else None
                seen["stuck"] += offered is not None
                owed -= beat
                done = len(got) == len(want) if not halted else ctx.get(dut.drained)
                await ctx.tick()
                if done and owed == 0 and offered is None:
                    break
            else:
                raise AssertionError(f"transfer {n} did not finish: {got} of {want}")
            if halted:
                seen["halted"] += len(got) < len(want)
                assert got == want[:len(got)]
            else:
                assert got == want
            while owed:  # the memory delivers what it owes before the next transfer
                ctx.set(dut.beat, 1)
                await ctx.tick()
                owed -= 1
            ctx.set(dut.beat, 0)
            assert ctx.get(dut.drained)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert all(seen.values()), seen


def test_burst_issuer_rejects_bad_max_burst() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        for bad in (0, 257):
            with pytest.raises(ValueError, match="max_burst") as excinfo:
                BurstIssuer(CFG, bad)
            del excinfo
        gc.collect()


@pytest.mark.parametrize("max_burst", [1, 3, 32])
def test_burst_issuer_holds_back_at_owed_limit(max_burst: int) -> None:
    """With no beat moving, commands stop once 2^owed_limit_bits beats are owed (owed
    then fits its register); one moved beat below the limit lets the next one out."""
    dut = BurstIssuer(CFG, max_burst)
    limit = 1 << owed_limit_bits(max_burst)
    assert limit >= 32 * max_burst
    assert len(dut.owed) == owed_limit_bits(max_burst) + 1
    rows = 2 * limit // max_burst + 4  # more than the limit in whole bursts
    log = {"owed_max": 0, "taken": 0}

    async def bench(ctx) -> None:
        ctx.set(dut.addr, 0)
        ctx.set(dut.rows, rows)
        ctx.set(dut.row_beats, max_burst)
        ctx.set(dut.stride, max_burst * CFG.mem_bus_bytes)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.issue, 1)
        ctx.set(dut.cmd.ready, 1)
        owed = 0
        for _ in range(rows + 8):
            valid = ctx.get(dut.cmd.valid)
            assert ctx.get(dut.owed) == owed
            assert valid == (owed < limit)
            if valid:
                owed += max_burst
                log["taken"] += 1
            log["owed_max"] = max(log["owed_max"], owed)
            await ctx.tick()
        assert ctx.get(dut.owed) == owed and not ctx.get(dut.cmd.valid)
        # beats move one per cycle until owed drops below the limit: then it offers
        ctx.set(dut.cmd.ready, 0)
        ctx.set(dut.beat, 1)
        while owed >= limit:
            assert not ctx.get(dut.cmd.valid)
            await ctx.tick()
            owed -= 1
        ctx.set(dut.beat, 0)
        assert ctx.get(dut.owed) == owed and ctx.get(dut.cmd.valid)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert log["owed_max"] == -(-limit // max_burst) * max_burst  # the first burst at or over it
    assert log["taken"] < rows


def test_transfer_phases_next_values() -> None:
    """The phases against a model of their state machine under random starts, checks,
    halts, ends and memory handshakes: ``check_next``, ``run_next`` and ``drain_next``
    are the model's next ``check``, ``run`` and ``drain``, ``beats_next`` the next
    ``run`` but in RUN's first cycle, ``moving_next`` that or the next ``drain`` with
    beats owed; the issuer's ``drained_next`` is its next ``drained``."""
    m = Module()
    m.submodules.bursts = bursts = BurstIssuer(CFG, 3)
    ex = wiring.PureInterface(ExecSignature(CFG).flip())
    ins = {n: Signal(name=n) for n in ("start", "halt", "sram_bad", "dram_bad", "last")}
    m.d.comb += ex.start.eq(ins["start"])
    ph = transfer_phases(m, ex, bursts, ins["halt"], ins["sram_bad"], ins["dram_bad"],
                         ins["last"])
    m.d.comb += [bursts.addr.eq(0), bursts.rows.eq(2), bursts.row_beats.eq(4),
                 bursts.stride.eq(0)]
    rng = random.Random(7)
    seen = {"run": 0, "drain": 0, "moving_drain": 0, "failed": 0}

    async def bench(ctx) -> None:
        owed = 0
        state, ok = "WAIT", False  # the model: the state and the checks' verdict
        moving = None  # moving_next of the cycle before
        first = False  # this cycle is RUN's first (CHECK was the cycle before)
        drained = None  # drained_next of the cycle before
        for _ in range(6000):
            v = {n: rng.random() < {"halt": 0.05, "last": 0.1}.get(n, 0.3) for n in ins}
            for n, sig in ins.items():
                ctx.set(sig, v[n])
            beat = owed > 0 and rng.random() < 0.5
            ctx.set(bursts.cmd.ready, rng.random() < 0.5)
            ctx.set(bursts.beat, beat)
            run, drain = state == "RUN" and ok, state == "DRAIN"
            assert (ctx.get(ph.check), ctx.get(ph.run), ctx.get(ph.drain)) == (
                state == "CHECK", run, drain)
            if moving is not None:
                assert moving == ((run and not first) or (drain and ctx.get(bursts.owing)))
                assert drained == ctx.get(bursts.drained)
            first = state == "CHECK"
            if state == "WAIT" and v["start"]:
                state = "CHECK"
            elif state == "CHECK":
                state, ok = ("WAIT", ok) if v["halt"] else (
                    "RUN", not (v["sram_bad"] or v["dram_bad"]))
            elif state == "RUN":
                seen["failed"] += not ok and not v["halt"]
                if v["halt"]:
                    state, ok = "DRAIN", False
                elif not ok or v["last"]:
                    state, ok = "WAIT", False
            elif state == "DRAIN" and ctx.get(bursts.drained):
                state = "WAIT"
            assert (ctx.get(ph.check_next), ctx.get(ph.run_next), ctx.get(ph.drain_next)) == (
                state == "CHECK", state == "RUN" and ok, state == "DRAIN")
            assert ctx.get(ph.beats_next) == (state == "RUN" and ok and not first)
            moving = ctx.get(ph.moving_next)
            drained = ctx.get(bursts.drained_next)
            seen["run"] += run
            seen["drain"] += drain
            seen["moving_drain"] += drain and ctx.get(bursts.owing)
            if ctx.get(bursts.cmd.valid) and ctx.get(bursts.cmd.ready):
                owed += ctx.get(bursts.cmd.payload.len) + 1
            owed -= beat
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert all(seen.values()), seen

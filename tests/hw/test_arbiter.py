"""MemArbiter against a Python memory and three random masters, cycle by cycle: every
beat reaches its master in order, writes follow their commands, and the read beats in
flight stay within ``read_beats``."""

from __future__ import annotations

import gc
import random
import warnings
from collections import deque

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from tensorfab.hw.arbiter import MemArbiter
from tensorfab.hw.mem_port import MAX_BURST
from tensorfab.isa.config import get_config

CFG = get_config("tiny")


def beat_data(addr: int, k: int) -> int:
    """What the model memory returns for beat ``k`` of a read at ``addr``."""
    return (addr * 7 + k * 3 + 1) % (1 << CFG.mem_bus_width)


@pytest.mark.parametrize(("seed", "read_beats", "longest", "outstanding"),
                         [(0, 64, (8, 32), 16), (1, 64, (32, 32), 16), (2, 16, (4, 16), 16),
                          (3, 8, (16, 4), 16), (4, 64, (2, 2), 2), (5, 64, (1, 3), 3)])
def test_arbiter_routes_every_beat_and_bounds_the_reads_in_flight(
        seed: int, read_beats: int, longest: tuple[int, int], outstanding: int) -> None:
    """(Two or three outstanding commands: the FIFOs fill, and a beat of a command
    the full FIFO dropped would reach no master.)"""
    dut = MemArbiter(CFG, read_beats=read_beats, longest_reads=longest,
                     outstanding=outstanding)
    rng = random.Random(seed)
    masters = {"fetch": dut.fetch, "load": dut.load}
    want = {"fetch": 40, "load": 40, "store": 30}  # commands each master issues
    seen = {"most_in_flight": 0, "most_open": 0, "reads_granted": 0, "writes_granted": 0}

    async def bench(ctx) -> None:
        # each master's commands (addr, len) and what it still expects back
        todo = {name: deque((rng.randrange(1 << 12), rng.randrange(n))
                            for _ in range(want[name]))
                for name, n in (("fetch", longest[0]), ("load", longest[1]),
                                ("store", MAX_BURST // 8))}
        expect = {name: deque() for name in masters}
        store_beats: deque[int] = deque()  # data the store still has to send
        mem_queue: deque = deque()  # commands the memory took: [write, addr, len, done]
        written: list[tuple[int, int]] = []
        in_flight = 0  # read beats granted, not yet delivered
        over_ok = False
        wdata_next = 1
        for _ in range(20_000):
            # ---- masters
            for name, port in (*masters.items(), ("store", dut.store)):
                offer = bool(todo[name]) and rng.random() < 0.7
                ctx.set(port.cmd.valid, offer)
                if todo[name]:
                    addr, ln = todo[name][0]
                    ctx.set(port.cmd.payload.addr, addr)
                    ctx.set(port.cmd.payload.len, ln)
            for port in masters.values():
                ctx.set(port.rdata.ready, rng.random() < 0.8)
            ctx.set(dut.store.wdata.valid, bool(store_beats) and rng.random() < 0.8)
            if store_beats:
                ctx.set(dut.store.wdata.payload.data, store_beats[0])
            # ---- memory: takes a command when it holds fewer than 4, serves in order
            ctx.set(dut.port.cmd.ready, len(mem_queue) < 4 and rng.random() < 0.8)
            head = mem_queue[0] if mem_queue else None
            reading = head is not None and not head[0]
            ctx.set(dut.port.rdata.valid, reading and rng.random() < 0.9)
            if reading:
                ctx.set(dut.port.rdata.payload.data, beat_data(head[1], head[3]))
            ctx.set(dut.port.wdata.ready, head is not None and head[0] and rng.random() < 0.9)

            # ---- what moves this cycle
            took = {name: ctx.get(port.cmd.valid) and ctx.get(port.cmd.ready)
                    for name, port in (*masters.items(), ("store", dut.store))}
            cmd_fire = ctx.get(dut.port.cmd.valid) and ctx.get(dut.port.cmd.ready)
            cmd = (ctx.get(dut.port.cmd.payload.write), ctx.get(dut.port.cmd.payload.addr),
                   ctx.get(dut.port.cmd.payload.len))
            r_fire = ctx.get(dut.port.rdata.valid) and ctx.get(dut.port.rdata.ready)
            delivered = {name: ctx.get(port.rdata.valid) and ctx.get(port.rdata.ready)
                         for name, port in masters.items()}
            got = {name: ctx.get(port.rdata.payload.data) for name, port in masters.items()}
            w_fire = ctx.get(dut.port.wdata.valid) and ctx.get(dut.port.wdata.ready)
            w_data = ctx.get(dut.port.wdata.payload.data)
            s_fire = ctx.get(dut.store.wdata.valid) and ctx.get(dut.store.wdata.ready)

            assert sum(delivered.values()) == r_fire, "a read beat went to no master or two"
            # a write beat is offered only once the memory has taken a write command
            assert not ctx.get(dut.port.wdata.valid) or any(c[0] for c in mem_queue), \
                "a write beat offered before its command"
            assert w_fire == s_fire
            for name, fired in delivered.items():
                if fired:
                    assert expect[name], f"{name} got a beat it did not ask for"
                    assert got[name] == expect[name].popleft(), f"{name}: wrong beat"
            for name, fired in took.items():
                if fired:
                    addr, ln = todo[name].popleft()
                    if name == "store":
                        store_beats.extend(range(wdata_next, wdata_next + ln + 1))
                        wdata_next += ln + 1
                    else:
                        expect[name].extend(beat_data(addr, k) for k in range(ln + 1))
            if cmd_fire:
                if cmd[0]:
                    seen["writes_granted"] += 1
                else:
                    seen["reads_granted"] += 1
                    # a command longer than read_beats is granted when none are in flight
                    over_ok |= in_flight == 0
                    in_flight += cmd[2] + 1
                mem_queue.append([cmd[0], cmd[1], cmd[2], 0])
            if r_fire:
                in_flight -= 1
            over_ok &= in_flight > read_beats
            assert in_flight <= read_beats or over_ok, \
                f"{in_flight} read beats in flight, over read_beats = {read_beats}"
            seen["most_in_flight"] = max(seen["most_in_flight"], in_flight)
            # commands the memory holds are the arbiter's outstanding ones
            for write in (False, True):
                n_open = sum(1 for c in mem_queue if c[0] == write)
                assert n_open <= outstanding, f"{n_open} commands outstanding"
                seen["most_open"] = max(seen["most_open"], n_open)
            if w_fire:
                assert head is not None and head[0], "a write beat before its command"
                written.append((head[1] + head[3], w_data))
            if s_fire:
                store_beats.popleft()
            if head is not None and ((r_fire and not head[0]) or w_fire):
                head[3] += 1
                if head[3] > head[2]:
                    mem_queue.popleft()
            await ctx.tick()
            if not any(todo.values()) and not any(expect.values()) and not mem_queue:
                break
        assert not any(todo.values()) and not any(expect.values()), "the traffic stalled"
        assert [d for _a, d in written] == list(range(1, wdata_next))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen["reads_granted"] == 80 and seen["writes_granted"] == 30
    # the bounds were reached, not merely respected by a trickle of commands (the
    # memory model holds up to four)
    if outstanding < 4:
        assert seen["most_open"] == outstanding
    else:
        assert seen["most_in_flight"] > read_beats - max(longest)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"outstanding": 1}, r"outstanding = 1; at least 2"),
    ({"longest_reads": (0, 32)}, r"longest_reads = \(0, 32\); give the fetch's and the load's"),
    ({"longest_reads": (8, MAX_BURST + 1)}, rf"longest_reads = \(8, {MAX_BURST + 1}\)"),
    ({"longest_reads": (8,)}, r"longest_reads = \(8,\)"),
])
def test_arbiter_rejects_bad_parameters(kwargs: dict, message: str) -> None:
    with warnings.catch_warnings():
        # the half-built component is collected unelaborated; that is expected here
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match=r"MemArbiter: " + message) as excinfo:
            MemArbiter(CFG, **kwargs)
        del excinfo
        gc.collect()

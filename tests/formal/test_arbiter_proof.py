"""MemArbiter: no command invented or lost in flight, read beats only to a master that
asked for them, no write beat before its command reached the port, the read-beat
budget never exceeded; bounded model checking from reset.

The arbiter is proved at ``outstanding=4``, ``read_beats=8`` and longest reads of 2
(fetch) and 4 (load) beats, so that the bound reaches full FIFOs and a spent budget
(the core's 16 and 64 are the same logic with wider counters). The memory behind the
port returns read beats only for read commands it took; everything else (commands,
lengths, every ``ready`` and ``valid``) is the solver's choice each cycle.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from amaranth.hdl import Assert, Assume, Cover, Module, Signal

from formal.symbiyosys import assert_proved, assert_refuted, free
from tensorfab.hw.arbiter import MemArbiter
from tensorfab.isa import get_config

OUTSTANDING, READ_BEATS, LONGEST_READS = 2, 4, (1, 2)
#: commands a master's slice (2) and the port's slice (2) hold between grant and port
SLICE_ENTRIES = 2
#: the longest write the store sends in the proof, in beats
STORE_LONGEST = 2
#: cycles checked
BOUND = 9


def arbiter_spec(dut: MemArbiter, group: tuple[str, ...],
                 longest_reads: tuple[int, int] = LONGEST_READS) -> Module:
    """The arbiter between three free masters and a memory that answers reads, with the
    properties of ``group`` (``commands``, ``beats``, ``budget``: one solver run each,
    which together take a fraction of the time of all in one)."""
    m = Module()
    m.submodules.dut = dut
    masters = {"fetch": dut.fetch, "load": dut.load, "store": dut.store}
    # (addresses and data stay zero: no property looks at them, and every bit of them
    # multiplies the solver's work)
    for name, mst in masters.items():
        longest = dict(zip(("fetch", "load", "store"), (*longest_reads, STORE_LONGEST),
                           strict=True))[name]
        m.d.comb += [mst.cmd.valid.eq(free(1)), mst.cmd.payload.len.eq(free(8)),
                     Assume(~mst.cmd.valid | (mst.cmd.payload.len < longest))]
    for mst in (dut.fetch, dut.load):
        m.d.comb += mst.rdata.ready.eq(free(1))
    m.d.comb += dut.store.wdata.valid.eq(free(1))
    port = dut.port
    m.d.comb += [port.cmd.ready.eq(free(1)), port.wdata.ready.eq(free(1)),
                 port.rdata.valid.eq(free(1))]

    def fired(stream) -> object:
        return stream.valid & stream.ready

    wide = 8
    # commands taken from the masters, and that left on the port, by kind
    taken_reads, taken_writes = Signal(wide), Signal(wide)
    port_reads, port_writes = Signal(wide), Signal(wide)
    m.d.sync += [
        taken_reads.eq(taken_reads + fired(dut.fetch.cmd) + fired(dut.load.cmd)),
        taken_writes.eq(taken_writes + fired(dut.store.cmd)),
        port_reads.eq(port_reads + (fired(port.cmd) & ~port.cmd.payload.write)),
        port_writes.eq(port_writes + (fired(port.cmd) & port.cmd.payload.write)),
    ]
    # beats owed: by the memory for the reads it took, to each read master for the
    # reads it issued, and by the store for the writes the port took
    mem_owed, store_owed = Signal(wide), Signal(wide)
    owed = {name: Signal(wide, name=f"{name}_owed") for name in ("fetch", "load")}
    port_len = port.cmd.payload.len + 1
    m.d.sync += [
        mem_owed.eq(mem_owed + (fired(port.cmd) & ~port.cmd.payload.write) * port_len
                    - fired(port.rdata)),
        store_owed.eq(store_owed + (fired(port.cmd) & port.cmd.payload.write) * port_len
                      - fired(port.wdata)),
    ]
    for name, counter in owed.items():
        mst = masters[name]
        m.d.sync += counter.eq(counter + fired(mst.cmd) * (mst.cmd.payload.len + 1)
                               - fired(mst.rdata))
    m.d.comb += Assume(~port.rdata.valid | (mem_owed != 0))

    in_slices = 4 * SLICE_ENTRIES
    properties = {
        "commands": lambda: [
            Assert(port_reads <= taken_reads, "a read command invented"),
            Assert(port_writes <= taken_writes, "a write command invented"),
            Assert(taken_reads + taken_writes - port_reads - port_writes <= in_slices,
                   "more commands in flight than the slices hold (one lost or stuck)"),
        ],
        "beats": lambda: [
            Assert(~port.wdata.valid | (store_owed != 0), "a write beat before its command"),
            Assert(~dut.fetch.rdata.valid | (owed["fetch"] != 0),
                   "a read beat fetch did not ask for"),
            Assert(~dut.load.rdata.valid | (owed["load"] != 0),
                   "a read beat load did not ask for"),
            Assert(~(dut.fetch.rdata.valid & dut.load.rdata.valid), "a beat to two masters"),
        ],
        "budget": lambda: [Assert(mem_owed <= dut.read_beats, "read-beat budget exceeded")],
    }
    for name in group:
        m.d.comb += properties[name]()
    m.d.comb += [
        # the budget spent while a write still goes out
        Cover((mem_owed == dut.read_beats) & fired(port.cmd) & port.cmd.payload.write),
        # a write beat the cycle its command left
        Cover(fired(port.wdata) & (store_owed == 1) & (port_writes == 1)),
        # both read masters owed beats, one served
        Cover(fired(dut.fetch.rdata) & (owed["load"] != 0)),
    ]
    return m


def _arbiter(longest_reads: tuple[int, int] = LONGEST_READS) -> MemArbiter:
    return MemArbiter(get_config("tiny"), outstanding=OUTSTANDING, read_beats=READ_BEATS,
                      longest_reads=longest_reads)


@pytest.mark.parametrize("group", ["commands", "beats", "budget"])
def test_arbiter_proved(group: str, tmp_path: Path) -> None:
    cover_depth = BOUND if group == "budget" else None
    assert_proved(arbiter_spec(_arbiter(), (group,)), tmp_path, mode="bmc", depth=BOUND,
                  cover_depth=cover_depth)


def test_arbiter_with_understated_longest_read_refuted(tmp_path: Path) -> None:
    """Mutant: the arbiter is told the load's reads are one beat long, the load sends
    up to four: the budget must be seen exceeded."""
    assert_refuted(arbiter_spec(_arbiter(longest_reads=(1, 1)), ("budget",), (1, 4)),
                   tmp_path, depth=BOUND)

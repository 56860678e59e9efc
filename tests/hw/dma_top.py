"""Test tops: the DMA engines and the fetch unit wired to one memory port.

:class:`LoadStoreTop` holds a :class:`~tensorfab.hw.load.LoadEngine`, a
:class:`~tensorfab.hw.store.StoreEngine`, the accumulator buffer between them and a
:class:`~tensorfab.hw.arbiter.MemArbiter` (its fetch master idle). The testbench
drives the two instruction streams and the token queues, serves ``port`` with a
memory model and watches the four buffer write ports (the ``ready`` of three comes
from the testbench; so does ``acc_taken_next``, standing in for the compute engine's
priority on the accumulator port, registered here as ``acc_taken``: the accumulator
write lands where ``acc_wr.en`` is high and ``acc_taken`` low).

:class:`FetchTop` holds a :class:`~tensorfab.hw.fetch.Fetch` behind the arbiter
(load and store masters idle); the dispatch streams go to the testbench.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tensorfab.hw.arbiter import MemArbiter
from tensorfab.hw.fetch import Fetch
from tensorfab.hw.load import LoadEngine
from tensorfab.hw.mem_port import MemPortSignature
from tensorfab.hw.signatures import (
    BufWriteSignature,
    ErrorSignature,
    InsnStreamLayout,
    TokenSignature,
    WriteRequestSignature,
    acc_entry_bits,
    inp_entry_bits,
    uop_entry_bits,
    wgt_entry_bits,
)
from tensorfab.hw.store import StoreEngine
from tensorfab.isa import HwConfig

__all__ = ["FetchTop", "LoadStoreTop"]


class LoadStoreTop(wiring.Component):
    """Load and store engines, the accumulator buffer and the arbiter.

    Parameters
    ----------
    cfg : HwConfig
        Configuration.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        isl = InsnStreamLayout(cfg)
        super().__init__({
            "load_insn": In(stream.Signature(isl)),
            "store_insn": In(stream.Signature(isl)),
            "load_pop": In(TokenSignature),
            "load_push": Out(TokenSignature),
            "store_pop": In(TokenSignature),
            "store_push": Out(TokenSignature),
            "port": Out(MemPortSignature(cfg)),
            "inp_wr": Out(BufWriteSignature(cfg.inp_bits, inp_entry_bits(cfg))),
            "wgt_wr": Out(BufWriteSignature(cfg.wgt_bits, wgt_entry_bits(cfg))),
            "uop_wr": Out(BufWriteSignature(cfg.uop_bits, uop_entry_bits(cfg))),
            "acc_wr": Out(WriteRequestSignature(cfg.acc_bits, acc_entry_bits(cfg))),
            "acc_taken_next": In(1),
            "acc_taken": Out(1),
            "dram_size": In(32),
            "insn_base": In(32),
            "insn_count": In(32),
            "halt": In(1),
            "load_error": Out(ErrorSignature),
            "store_error": Out(ErrorSignature),
            "load_retire": Out(1),
            "store_retire": Out(1),
            "load_idle": Out(1),
            "store_idle": Out(1),
            "load_stall": Out(1),
            "store_stall": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        m.submodules.load = load = LoadEngine(cfg)
        m.submodules.store = store = StoreEngine(cfg)
        m.submodules.arb = arb = MemArbiter(cfg, longest_reads=(1, load.max_burst))
        m.submodules.acc = acc = Memory(shape=acc_entry_bits(cfg), depth=cfg.acc_depth, init=[])
        wiring.connect(m, wiring.flipped(self.load_insn), load.insn)
        wiring.connect(m, wiring.flipped(self.store_insn), store.insn)
        wiring.connect(m, wiring.flipped(self.load_pop), load.pop_next)
        wiring.connect(m, wiring.flipped(self.load_push), load.push_next)
        wiring.connect(m, wiring.flipped(self.store_pop), store.pop_prev)
        wiring.connect(m, wiring.flipped(self.store_push), store.push_prev)
        wiring.connect(m, load.mem, arb.load)
        wiring.connect(m, store.mem, arb.store)
        wiring.connect(m, wiring.flipped(self.port), arb.port)
        for name in ("inp_wr", "wgt_wr", "uop_wr", "acc_wr"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(load, name))
        # the accumulator port is taken (by the compute engine this stands in for) in
        # the cycles after the testbench's acc_taken_next
        taken = Signal()
        m.d.sync += taken.eq(self.acc_taken_next)
        wp = acc.write_port()
        m.d.comb += [load.acc_taken_next.eq(self.acc_taken_next), self.acc_taken.eq(taken),
                     wp.addr.eq(load.acc_wr.addr), wp.data.eq(load.acc_wr.data),
                     wp.en.eq(load.acc_wr.en & ~taken)]
        rp = acc.read_port(domain="sync")
        m.d.comb += [rp.addr.eq(store.acc_rd.addr), rp.en.eq(store.acc_rd.en),
                     store.acc_rd.data.eq(rp.data)]
        m.d.comb += [arb.fetch.cmd.valid.eq(0), arb.fetch.rdata.ready.eq(0)]
        for eng, pre in ((load, "load"), (store, "store")):
            m.d.comb += [eng.dram_size.eq(self.dram_size), eng.halt.eq(self.halt)]
            m.d.comb += [getattr(self, f"{pre}_{n}").eq(getattr(eng, n))
                         for n in ("retire", "idle", "stall")]
            wiring.connect(m, wiring.flipped(getattr(self, f"{pre}_error")), eng.error)
        m.d.comb += [store.insn_base.eq(self.insn_base), store.insn_count.eq(self.insn_count)]
        return m


class FetchTop(wiring.Component):
    """The fetch unit behind the arbiter.

    Parameters
    ----------
    cfg : HwConfig
        Configuration.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        isl = InsnStreamLayout(cfg)
        super().__init__({
            "start": In(1),
            "insn_base": In(32),
            "insn_count": In(32),
            "halt": In(1),
            "port": Out(MemPortSignature(cfg)),
            "load_insn": Out(stream.Signature(isl)),
            "compute_insn": Out(stream.Signature(isl)),
            "store_insn": Out(stream.Signature(isl)),
            "error": Out(ErrorSignature),
            "busy": Out(1),
            "idle": Out(1),
            "finished": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.fetch = fetch = Fetch(self.cfg)
        m.submodules.arb = arb = MemArbiter(self.cfg, longest_reads=(fetch.longest_read, 1))
        wiring.connect(m, fetch.mem, arb.fetch)
        wiring.connect(m, wiring.flipped(self.port), arb.port)
        for name in ("load_insn", "compute_insn", "store_insn", "error"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(fetch, name))
        m.d.comb += [fetch.start.eq(self.start), fetch.insn_base.eq(self.insn_base),
                     fetch.insn_count.eq(self.insn_count), fetch.halt.eq(self.halt),
                     self.busy.eq(fetch.busy), self.idle.eq(fetch.idle),
                     self.finished.eq(fetch.finished),
                     arb.load.cmd.valid.eq(0), arb.load.rdata.ready.eq(0),
                     arb.store.cmd.valid.eq(0), arb.store.wdata.valid.eq(0)]
        return m

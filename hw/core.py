"""The accelerator core: fetch, three engines, token queues, buffers, CSRs, one memory port."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal, Value, unsigned
from amaranth.lib import fifo, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect

from tensorfab.isa import Engine, HwConfig
from tensorfab.isa.config import log2
from tensorfab.isa.formats import TOKEN_QUEUES

from .arbiter import MemArbiter
from .compute import ComputeEngine
from .csr import CsrBlock, CsrBusSignature
from .fetch import Fetch
from .load import LoadEngine
from .mem_port import MemPortSignature
from .register_slice import BufferedFifo
from .signatures import (
    InsnStreamLayout,
    acc_entry_bits,
    inp_entry_bits,
    uop_entry_bits,
    wgt_entry_bits,
    zero_lanes,
)
from .store import StoreEngine
from .token_queue import TokenQueue

__all__ = ["ACTIVITY", "Core"]

#: Bits of :attr:`Core.activity`, LSB first: what each engine does this cycle, for
#: timelines (busy = holds an instruction, stall = waits on a dependency token).
ACTIVITY: tuple[str, ...] = ("load_busy", "load_stall", "compute_busy", "compute_stall",
                             "gemm_busy", "alu_busy", "store_busy", "store_stall")


class Core(wiring.Component):
    """The whole accelerator behind a CSR bus and one memory port.

    The host writes INSN_BASE, INSN_COUNT and DRAM_SIZE, then 1 to CTRL; the core
    runs until FINISH has retired and the load and store engines are idle (STATUS
    done) or until the first error (STATUS error, with ERROR_CODE and ERROR_INDEX).
    A start clears the engines, queues, counters and error registers.

    Parameters
    ----------
    cfg : HwConfig
        Accelerator configuration.

    Attributes
    ----------
    csr : In(CsrBusSignature)
        Host register access (see :data:`tensorfab.isa.CSRS`).
    mem : Out(MemPortSignature(cfg))
        The memory port (docs/architecture.md).
    done : Out(1)
        STATUS.done, for an interrupt line.
    running, error : Out(1)
        STATUS.busy and STATUS.error (for an SoC: memory ownership, LEDs).
    activity : Out(len(ACTIVITY))
        Per-cycle engine activity bits, named by :data:`ACTIVITY`.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        super().__init__({
            "csr": In(CsrBusSignature),
            "mem": Out(MemPortSignature(cfg)),
            "done": Out(1),
            "running": Out(1),
            "error": Out(1),
            "activity": Out(len(ACTIVITY)),
        })

    def elaborate(self, platform: object) -> Module:
        cfg = self.cfg
        m = Module()
        m.submodules.csrs = csrs = CsrBlock(counters=cfg.perf_counters)
        connect(m, wiring.flipped(self.csr), csrs.bus)
        # A start the host asks for (CTRL) clears STATUS at once; the units start when
        # none has work or a read in flight (``quiet``). After an error the fetch unit
        # and the engines may still be draining reads owed to them: the start waits
        # for them (``pending``, the units stay halted), so that no beat of the old run
        # reaches the new one. After a normal end every unit is quiet already and the
        # start takes effect in the next cycle: ``start`` is a register, because it
        # resets every unit (a net to thousands of flip-flops) and the CSR write that
        # asks for it comes through the host bridge's logic.
        start_req = csrs.start
        pending = Signal()
        pending_next = Signal()
        quiet = Signal()
        start = Signal()
        m.d.sync += start.eq((start_req | pending) & quiet & ~start)
        m.d.comb += pending_next.eq(~start & (start_req | pending))
        m.d.sync += pending.eq(pending_next)

        def cleared(name: str, block: wiring.Component) -> wiring.Component:
            """Add ``block`` under ``name``, reset by every start."""
            m.submodules[name] = ResetInserter(start)(block)
            return block

        m.submodules.fetch = fetch = Fetch(cfg)
        load = cleared("load", LoadEngine(cfg))
        compute = cleared("compute", ComputeEngine(cfg))
        store = cleared("store", StoreEngine(cfg))
        m.submodules.arbiter = arbiter = MemArbiter(
            cfg, longest_reads=(fetch.longest_read, load.max_burst))
        connect(m, fetch.mem, arbiter.fetch)
        connect(m, load.mem, arbiter.load)
        connect(m, store.mem, arbiter.store)
        connect(m, arbiter.port, wiring.flipped(self.mem))

        m.d.comb += [fetch.start.eq(start), fetch.insn_base.eq(csrs.insn_base),
                     fetch.insn_count.eq(csrs.insn_count)]
        for engine in (load, store):
            m.d.comb += engine.dram_size.eq(csrs.dram_size)
        m.d.comb += [store.insn_base.eq(csrs.insn_base), store.insn_count.eq(csrs.insn_count)]

        # command queues: with the instruction an engine holds, each engine takes up to
        # cmd_queue_depth + 1 instructions, as the functional simulator models
        isl = InsnStreamLayout(cfg)
        queues_empty = []
        for name, src, dst in (("load", fetch.load_insn, load.insn),
                               ("compute", fetch.compute_insn, compute.insn),
                               ("store", fetch.store_insn, store.insn)):
            # (SyncFIFOBuffered's timing with a registered w_rdy; one of depth 2 would
            # hold a one-entry SyncFIFO whose pointers are zero bits wide, which Amaranth
            # 0.5 writes as `[-1:0]` and Verilator reads as two bits: a plain FIFO holds
            # the same two instructions)
            depth = cfg.cmd_queue_depth
            q = cleared(f"{name}_cmds",
                        BufferedFifo(isl.size, depth) if depth > 2
                        else fifo.SyncFIFO(width=isl.size, depth=depth))
            connect(m, src, q.w_stream)
            connect(m, q.r_stream, dst)
            queues_empty.append(q.level == 0)

        # dependency-token queues
        engines = {Engine.LOAD: load, Engine.COMPUTE: compute, Engine.STORE: store}
        for spec in TOKEN_QUEUES:
            producer = getattr(engines[spec.producer], spec.push)
            consumer = getattr(engines[spec.consumer], spec.pop)
            tq = cleared(f"tokens_{spec.name}", TokenQueue(cfg.dep_queue_depth))
            connect(m, producer, tq.push)
            connect(m, tq.pop, consumer)

        # on-chip buffers
        def buffer(name: str, width: int, depth: int) -> Memory:
            mem = Memory(shape=unsigned(width), depth=depth, init=[])
            m.submodules[f"{name}_buf"] = mem
            return mem

        inp = buffer("inp", inp_entry_bits(cfg), cfg.inp_depth)
        uop = buffer("uop", uop_entry_bits(cfg), cfg.uop_depth)
        acc = buffer("acc", acc_entry_bits(cfg), cfg.acc_depth)
        for mem, wr, rd in ((inp, load.inp_wr, compute.inp_rd),
                            (uop, load.uop_wr, compute.uop_rd)):
            wp = mem.write_port()
            rp = mem.read_port(transparent_for=(wp,))
            m.d.comb += [wp.addr.eq(wr.addr), wp.data.eq(wr.data), wp.en.eq(wr.en),
                         wr.ready.eq(1), rp.addr.eq(rd.addr), rp.en.eq(rd.en),
                         rd.data.eq(rp.data)]
        # the weights: banks of 64 bits, written together, read together. The GEMM core
        # takes each 64-bit half of a weight column from its own bank, which Verilator
        # then holds as one machine word. The read port is not transparent: a race-free
        # program never reads an entry in the cycle the load engine writes it (the
        # compute engine waits for the load's token).
        bank_bits = min(64, wgt_entry_bits(cfg))
        wgt_data = []
        for i in range(wgt_entry_bits(cfg) // bank_bits):
            bank = buffer(f"wgt{i}", bank_bits, cfg.wgt_depth)
            wp = bank.write_port()
            rp = bank.read_port()
            m.d.comb += [wp.addr.eq(load.wgt_wr.addr), wp.en.eq(load.wgt_wr.en),
                         wp.data.eq(load.wgt_wr.data[bank_bits * i:][:bank_bits]),
                         rp.addr.eq(compute.wgt_rd.addr), rp.en.eq(compute.wgt_rd.en)]
            wgt_data.append(rp.data)
        m.d.comb += [load.wgt_wr.ready.eq(1), compute.wgt_rd.data.eq(Cat(*wgt_data))]
        # the accumulators: one write port shared by compute (priority) and load
        acc_wp = acc.write_port()
        with m.If(compute.acc_wr.en):
            m.d.comb += [acc_wp.addr.eq(compute.acc_wr.addr),
                         acc_wp.data.eq(compute.acc_wr.data), acc_wp.en.eq(1)]
        with m.Else():
            m.d.comb += [acc_wp.addr.eq(load.acc_wr.addr), acc_wp.data.eq(load.acc_wr.data),
                         acc_wp.en.eq(load.acc_wr.en & ~compute.acc_zero.en)]
        # (the load's write waits while the compute engine writes or zeroes: the load
        # engine registers that from the compute engine's next claim of the port)
        m.d.comb += [compute.acc_wr.ready.eq(1), load.acc_taken_next.eq(compute.acc_port_next)]
        # zero flags (fast reset): one bit per accumulator entry, `lanes` per row; a set
        # flag makes its entry read as zero, every write of the entry clears it
        lanes = zero_lanes(cfg)
        lb = log2(lanes)
        zflags = Memory(shape=unsigned(lanes), depth=cfg.acc_depth // lanes, init=[])
        m.submodules.acc_zero_flags = zflags
        # A flag write waits a cycle in registers (`pend_*`) before it reaches the
        # memory, whose write enables, address and data then come from flip-flops (the
        # load's write enable into the LUT RAM's write pins was an FPGA critical path);
        # the reads below take the waiting write into account.
        zf_wp = zflags.write_port(granularity=1)
        pend_row = Signal.like(zf_wp.addr)
        pend_en = Signal(lanes)
        pend_set = Signal()
        m.d.sync += pend_en.eq(0)
        with m.If(compute.acc_zero.en):
            m.d.sync += [pend_row.eq(compute.acc_zero.row), pend_en.eq(compute.acc_zero.mask),
                         pend_set.eq(1)]
        with m.Elif(acc_wp.en):
            m.d.sync += [pend_row.eq(acc_wp.addr >> lb),
                         pend_en.eq(Const(1, lanes) << acc_wp.addr[:lb]), pend_set.eq(0)]
        m.d.comb += [zf_wp.addr.eq(pend_row), zf_wp.en.eq(pend_en),
                     zf_wp.data.eq(Mux(pend_set, Const((1 << lanes) - 1, lanes), 0))]
        # Each read registers its row of flags as this cycle's writes leave it: the
        # waiting write, then a fast reset of the row sets a lane's flag, a write of
        # the lane's entry clears it.
        # The three writers are compared with the read address one by one, not through
        # the shared port's multiplexers (a transparent read port of the flag memory put
        # the load's write enable, the port's choice, its address compare and the
        # bypass in a row: an FPGA critical path).
        # Each term is one word of `lanes` bits (a one-hot lane shifted in, a bit
        # replicated), not a bit per lane: Verilator evaluates a word in a few machine
        # operations and the same logic bit by bit in about ten per lane, on every
        # cycle a reader is enabled; synthesis sees the same decoder either way.
        def writes_entry(wr: wiring.PureInterface, en: Value, row: Value) -> Value:
            """The lanes of ``row`` whose entry ``wr`` writes this cycle (one bit at
            most)."""
            hit = en & ((wr.addr >> lb) == row)
            return (hit << wr.addr[:lb])[:lanes] if lb else hit

        compute_writes = compute.acc_wr.en & ~compute.acc_zero.en
        load_writes = load.acc_wr.en & ~compute.acc_wr.en & ~compute.acc_zero.en
        acc_readers = (compute.acc_rd_dst, compute.acc_rd_src, store.acc_rd)
        if not cfg.fast_reset:  # no fast reset: no flag is read (synthesis drops them)
            for rd in acc_readers:
                rp = acc.read_port(transparent_for=(acc_wp,))
                m.d.comb += [rp.addr.eq(rd.addr), rp.en.eq(rd.en), rd.data.eq(rp.data)]
            acc_readers = ()
        for rd in acc_readers:
            rp = acc.read_port(transparent_for=(acc_wp,))
            zp = zflags.read_port(domain="comb")
            row = rd.addr >> lb
            zeroed = compute.acc_zero.en & (compute.acc_zero.row == row)
            waiting = pend_en & (pend_row == row).replicate(lanes)
            stored = Mux(pend_set, zp.data | waiting, zp.data & ~waiting)
            by_compute = writes_entry(compute.acc_wr, compute_writes, row)
            by_load = writes_entry(load.acc_wr, load_writes, row)
            flags = Signal(lanes)
            lane = Signal(max(1, lb))
            with m.If(rd.en):
                m.d.sync += [lane.eq(rd.addr[:lb]), flags.eq(
                    (zeroed.replicate(lanes) & compute.acc_zero.mask)
                    | (stored & ~by_compute & ~by_load))]
            m.d.comb += [rp.addr.eq(rd.addr), rp.en.eq(rd.en), zp.addr.eq(row),
                         rd.data.eq(Mux(flags.bit_select(lane, 1), 0, rp.data))]

        # status, first error, halt
        running = Signal()
        done = Signal()
        error = Signal()
        error_next = Signal()
        err_code = Signal(4)
        err_index = Signal(32)
        reporters = (fetch, load, compute, store)
        m.d.comb += quiet.eq(fetch.idle & load.idle & store.idle & compute.idle)
        # a unit's error is this run's once the start has reset the units (not pending)
        raised = running & ~error & ~pending & Cat(*(r.error.valid for r in reporters)).any()
        m.d.comb += error_next.eq(~start_req & (error | raised))
        m.d.sync += error.eq(error_next)
        with m.If(start_req):
            m.d.sync += [running.eq(1), done.eq(0), err_code.eq(0), err_index.eq(0)]
        with m.Elif(running):
            with m.If(~error & ~pending):
                for r in reversed(reporters):  # the first listed wins a tie
                    with m.If(r.error.valid):
                        m.d.sync += [err_code.eq(r.error.code), err_index.eq(r.error.index)]
            # (the compute engine is idle once FINISH has retired: it retires only with
            # the pipeline drained, and halts the engine; its idle, which starts in the
            # micro-op issue, stays out of `done`'s logic, an FPGA critical path)
            all_idle = compute.finished & fetch.idle & load.idle & store.idle
            for e in queues_empty:
                all_idle &= e
            with m.If(error | (all_idle & ~pending)):
                m.d.sync += running.eq(0)
                with m.If(~error):
                    m.d.sync += done.eq(1)
        # halt = error | pending, kept as a register of its own from their next values
        # (the OR of the two, fanned out to every unit, began FPGA critical paths into
        # the engines' buffer writes)
        halt = Signal()
        m.d.sync += halt.eq(error_next | pending_next)
        for r in reporters:
            m.d.comb += r.halt.eq(halt)
        # GEMM micro-ops counted a cycle late: a fast reset's count is a minimum of
        # sums, too late in its cycle for the counter's adder (the last micro-op is
        # counted long before done: FINISH waits for the pipeline to drain)
        gemm_uops = Signal.like(compute.gemm_uops)
        m.d.sync += gemm_uops.eq(compute.gemm_uops)
        events = {"load_busy": load.busy, "load_stall": load.stall,
                  "compute_busy": compute.busy, "compute_stall": compute.stall,
                  "gemm_busy": compute.gemm_busy, "alu_busy": compute.alu_busy,
                  "store_busy": store.busy, "store_stall": store.stall}
        m.d.comb += [self.activity[k].eq(events[name]) for k, name in enumerate(ACTIVITY)]
        m.d.comb += [
            self.done.eq(done), self.running.eq(running), self.error.eq(error),
            csrs.busy.eq(running), csrs.done.eq(done), csrs.error.eq(error),
            csrs.error_code.eq(err_code), csrs.error_index.eq(err_index),
            csrs.running.eq(running),
            csrs.load_busy.eq(load.busy), csrs.load_stall.eq(load.stall),
            csrs.compute_busy.eq(compute.busy), csrs.compute_stall.eq(compute.stall),
            csrs.store_busy.eq(store.busy), csrs.store_stall.eq(store.stall),
            csrs.gemm_uops.eq(gemm_uops), csrs.alu_busy.eq(compute.alu_busy),
            csrs.load_retire.eq(load.retire), csrs.compute_retire.eq(compute.retire),
            csrs.store_retire.eq(store.retire),
        ]
        return m

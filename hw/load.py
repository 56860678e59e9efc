"""The load engine: LOAD, a zero-padded 2-D DMA from DRAM into an on-chip buffer."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tensorfab.isa import (
    Buffer,
    Engine,
    HwConfig,
    Opcode,
    buffer_depth,
    buffer_entry_bytes,
)
from tensorfab.isa.config import log2

from .burst import BurstIssuer, check_max_burst, dram_limit, transfer_phases
from .dsp import registered_product
from .layouts import insn_layout
from .mem_port import MemReadSignature
from .sequencer import InsnSequencer, engine_members
from .signatures import (
    WGT_OFFSET,
    BufWriteSignature,
    WriteRequestSignature,
    acc_entry_bits,
    inp_entry_bits,
    uop_entry_bits,
    wgt_entry_bits,
    wgt_entry_order,
)

__all__ = ["LoadEngine"]

#: Write port name of each buffer.
PORT_OF: dict[Buffer, str] = {Buffer.INP: "inp_wr", Buffer.WGT: "wgt_wr", Buffer.UOP: "uop_wr",
                              Buffer.ACC: "acc_wr"}


class LoadEngine(wiring.Component):
    """Executes LOAD instructions (docs/isa.md) one at a time.

    An :class:`~.sequencer.InsnSequencer` takes each instruction, pops the
    ``pop_next`` token if asked, pushes ``push_next`` after it and retires it (its
    halt policy is the engine's). The datapath checks the block
    fits the buffer (``SRAM_RANGE``) and every row lies below ``dram_size``
    (``DRAM_RANGE``) before any memory access; issue one burst read per data row
    (split at ``max_burst`` beats) while a sequencer walks the padded block in row-major
    order, writing a zero entry per cycle in the padding and, in the data region,
    one beat per cycle, an entry being written with its last beat. Writes leave from
    registers, a cycle after the sequencer makes them, and wait there while their port
    is not ready or, the accumulators', taken (``acc_taken_next`` a cycle before). The
    instruction is done when its last write is registered, an ACC instruction when
    that write has landed (the accumulator port is shared). The bursts come from a
    :class:`~.burst.BurstIssuer`.

    On ``halt`` the engine issues no further command and writes nothing more; it
    drains the read beats still owed to it, then goes idle without retiring.

    Parameters
    ----------
    cfg : HwConfig
        Configuration.
    max_burst : int
        Longest read burst, in beats: longer rows are split, so the reads of a long
        transfer leave gaps in the memory's command queue for the store engine.

    Attributes
    ----------
    insn, pop_next, push_next, halt, error, busy, stall, retire, idle
        The sequencer's members (:func:`~.sequencer.engine_members`); ``error``
        reports ``SRAM_RANGE`` or ``DRAM_RANGE`` (a one-cycle pulse).
    mem : Out(MemReadSignature(cfg))
        Memory reads.
    inp_wr, wgt_wr, uop_wr : Out(BufWriteSignature(...))
        Buffer write ports.
    acc_wr : Out(WriteRequestSignature(...))
        The accumulator write port, shared: a write lands at an edge where ``en`` is
        high and the port is not taken by another writer (``acc_taken_next`` was high
        in the cycle before); one that does not land stays.
    acc_taken_next : In(1)
        The accumulator write port is taken by another writer in the next cycle
        (registered here: the port's owner is known a cycle ahead).
    dram_size : In(32)
        Bytes of DRAM that may be read (0: the whole address space).
    """

    def __init__(self, cfg: HwConfig, max_burst: int = 32) -> None:
        self.cfg = cfg
        self.max_burst = check_max_burst(max_burst)
        bits = {Buffer.INP: (cfg.inp_bits, inp_entry_bits(cfg)),
                Buffer.WGT: (cfg.wgt_bits, wgt_entry_bits(cfg)),
                Buffer.UOP: (cfg.uop_bits, uop_entry_bits(cfg)),
                Buffer.ACC: (cfg.acc_bits, acc_entry_bits(cfg))}
        members = engine_members(cfg, Engine.LOAD) | {
            "mem": Out(MemReadSignature(cfg)),
            "dram_size": In(32),
            "acc_taken_next": In(1),
        }
        for buf, name in PORT_OF.items():
            signature = WriteRequestSignature if buf == Buffer.ACC else BufWriteSignature
            members[name] = Out(signature(*bits[buf]))
        super().__init__(members)

    @staticmethod
    def _earlier_beats(m: Module, count: int, beat: Value, keep: Value,
                       data: Value) -> list[Value]:
        """The beats of the entry being assembled that came before ``data``: word
        ``beat`` of a small memory is written while ``keep`` (the beat due is not its
        entry's last; its word then holds ``data`` once the beat has come), and the
        words are read in place; ``count`` words (the longest entry's beats but one: at
        least 3, an accumulator entry being four output entries, each at least a
        beat)."""
        m.submodules.beats = kept = Memory(shape=len(data), depth=count, init=[])
        wp = kept.write_port()
        m.d.comb += [wp.addr.eq(beat), wp.data.eq(data), wp.en.eq(keep)]
        words = []
        for j in range(count):
            rp = kept.read_port(domain="comb")
            m.d.comb += rp.addr.eq(j)
            words.append(rp.data)
        return words

    def _weight_entry(self, tile: Value) -> Value:
        """A weight tile as it arrives (row-major) in the buffer's format
        (:func:`wgt_entry_order`: column-major, offset by :data:`WGT_OFFSET`), a
        permutation of wires."""
        cfg = self.cfg
        entry = [Const(0, 8)] * (cfg.block_in * cfg.block_out)
        for src, dst in enumerate(wgt_entry_order(cfg)):
            entry[dst] = (tile[8 * src:][:8] + WGT_OFFSET)[:8]
        return Cat(*entry)

    def elaborate(self, platform: object) -> Module:
        """Build the sequencer, the range checks, the burst issuer and the writer."""
        cfg = self.cfg
        m = Module()
        aw = cfg.dram_addr_width
        bus_shift = log2(cfg.mem_bus_bytes)
        bufs = [Buffer(v) for v in range(len(Buffer))]  # index = Buffer value
        entry_shift = [log2(buffer_entry_bytes(cfg, b)) for b in bufs]  # bytes per entry
        beat_shift = [s - bus_shift for s in entry_shift]  # beats per entry

        # ---- the instruction being executed
        m.submodules.seq = seq = InsnSequencer(cfg, Engine.LOAD)
        seq.connect_engine(m, self)
        ex = seq.exec
        word = insn_layout(cfg, Opcode.LOAD)(ex.word)
        buf = word.buffer
        sh_entry = Signal(range(max(entry_shift) + 1))
        sh_beats = Signal(range(max(beat_shift) + 1))
        m.d.comb += [sh_entry.eq(Array(Const(s) for s in entry_shift)[buf]),
                     sh_beats.eq(Array(Const(s) for s in beat_shift)[buf])]

        # ---- the instruction's sums, products and range checks, in stages that cost
        # no cycle: the sums are registered when the sequencer takes the instruction
        # (from the command queue's word), the products from them in the next cycle,
        # which is the earliest ``ex.start``; the checks in CHECK compare registers.
        # (Computed from ``word`` at start and used in the same cycle, the sums and
        # products were FPGA critical paths.)
        taken = insn_layout(cfg, Opcode.LOAD)(self.insn.payload.word)
        take = self.insn.valid & self.insn.ready
        t_buf = taken.buffer
        t_sh_entry = Array(Const(s) for s in entry_shift)[t_buf]
        rows_m1 = Signal(18)  # padded rows - 1
        cols_m1 = Signal(18)  # padded entries per row - 1
        rows = Signal(18)
        cols = Signal(18)
        # the data region's bounds less one (the first data row or entry, the first
        # padding row or entry after the data), for whether the next row or entry is
        # in the data region without the increment's carry chain before the
        # comparisons (the column counter through them into the read's ready was an
        # FPGA critical path)
        row_lo_m1, row_end_m1, col_lo_m1, col_end_m1 = (
            Signal(signed(19), name=name)
            for name in ("row_lo_m1", "row_end_m1", "col_lo_m1", "col_end_m1"))
        # and less two, and the entries per row less two, for the flags of the entry
        # and row after next
        row_lo_m2, row_end_m2, col_lo_m2, col_end_m2, cols_m2 = (
            Signal(signed(19), name=name)
            for name in ("row_lo_m2", "row_end_m2", "col_lo_m2", "col_end_m2", "cols_m2"))
        y_m1 = Signal(16)
        dram_x = Signal(aw + 1)  # dram + x
        # depth - sram (signed: an engine driven directly may get sram > depth)
        room = Signal(signed(max(cfg.inp_bits, cfg.wgt_bits, cfg.uop_bits, cfg.acc_bits) + 2))
        lim_entries = Signal(33)  # limit >> sh_entry: entries that may be read
        limit = Signal(33, reset_less=True)  # bytes that may be read
        m.d.sync += limit.eq(dram_limit(self.dram_size, aw))
        with m.If(take):
            m.d.sync += [
                rows.eq(taken.pad_top + taken.y + taken.pad_bottom),
                cols.eq(taken.pad_left + taken.x + taken.pad_right),
                rows_m1.eq(taken.pad_top + taken.y + taken.pad_bottom - 1),
                cols_m1.eq(taken.pad_left + taken.x + taken.pad_right - 1),
                row_lo_m1.eq(taken.pad_top - 1), row_end_m1.eq(taken.pad_top + taken.y - 1),
                col_lo_m1.eq(taken.pad_left - 1), col_end_m1.eq(taken.pad_left + taken.x - 1),
                row_lo_m2.eq(taken.pad_top - 2), row_end_m2.eq(taken.pad_top + taken.y - 2),
                col_lo_m2.eq(taken.pad_left - 2), col_end_m2.eq(taken.pad_left + taken.x - 2),
                cols_m2.eq(taken.pad_left + taken.x + taken.pad_right - 2),
                y_m1.eq(taken.y - 1), dram_x.eq(taken.dram + taken.x),
                room.eq(Array(Const(buffer_depth(cfg, b)) for b in bufs)[t_buf] - taken.sram),
                lim_entries.eq(limit >> t_sh_entry),
            ]
        n_entries = registered_product(m, "n_entries", rows, cols)
        span = registered_product(m, "span", y_m1, word.stride)  # (y - 1) * stride
        slack = Signal(signed(35))  # entries left below the limit after dram + x
        m.d.sync += slack.eq(lim_entries - dram_x)
        sram_bad = Signal()
        dram_bad = Signal()
        # sram + n_entries > depth; (dram + (y - 1) * stride + x) << sh_entry > limit
        m.d.comb += [sram_bad.eq(n_entries > room), dram_bad.eq(span > slack)]

        # ---- command issuer
        m.submodules.bursts = bursts = BurstIssuer(cfg, self.max_burst)
        wiring.connect(m, wiring.flipped(self.mem.cmd), bursts.cmd)
        rdata = self.mem.rdata
        rfire = rdata.valid & rdata.ready
        m.d.comb += [bursts.addr.eq(word.dram << sh_entry), bursts.rows.eq(word.y),
                     bursts.row_beats.eq(word.x << sh_beats),
                     bursts.stride.eq(word.stride << sh_entry), bursts.beat.eq(rfire)]

        # ---- write sequencer
        r = Signal(18)
        c = Signal(18)
        waddr = Signal(max(cfg.inp_bits, cfg.wgt_bits, cfg.uop_bits, cfg.acc_bits))
        kall = max(1 << s for s in beat_shift)
        bc = Signal(range(max(kall, 2)))  # beat within the entry
        k_last = Signal(range(max(kall, 2)))
        m.d.comb += k_last.eq((Const(1, range(kall + 1)) << sh_beats) - 1)
        # is_data: (r, c) is in the data region, not the padding. Registered, as
        # flags updated with r and c: the comparisons with the instruction's sums would
        # otherwise feed the write enables and, through the accumulator's shared write
        # port, its zero flags in one cycle (an FPGA critical path)
        row_in = Signal()
        col_in = Signal()
        is_data = Signal()
        m.d.comb += is_data.eq(row_in & col_in)
        # (the flags' next values, and last_beat's, also make the read's ready)
        row_in_next = Signal()
        col_in_next = Signal()
        last_beat_next = Signal()

        def in_rows_after(v: Value) -> Value:
            """Row ``v + 1`` is a data row (``v`` -1: the first row)."""
            return (v >= row_lo_m1) & (v < row_end_m1)

        def in_cols_after(v: Value) -> Value:
            """Entry ``v + 1`` of a row is data (``v`` -1: the first entry)."""
            return (v >= col_lo_m1) & (v < col_end_m1)
        before_first = Const(-1, signed(1))
        # The flags of the entry after c and the row after r, and whether c is the
        # row's last entry, are registers kept with c and r: each is compared as c or
        # r changes (with the bounds less two: the entry or row after the next one),
        # so that the next flags, which make the read's ready, come from flip-flops
        # (the counter through the comparisons into ready_r was an FPGA critical
        # path). Their values at the first entry and row are registers too, loaded
        # from the bounds a cycle after the take that sets those: by CHECK, two cycles
        # after the take at the earliest.
        col_after = Signal()  # in_cols_after(c)
        row_after = Signal()  # in_rows_after(r)
        at_end = Signal()  # c == cols_m1
        first_col_in, first_col_after, first_row_in, first_row_after, first_at_end = (
            Signal(name=name) for name in ("first_col_in", "first_col_after", "first_row_in",
                                           "first_row_after", "first_at_end"))
        m.d.sync += [first_col_in.eq(in_cols_after(before_first)),
                     first_col_after.eq(in_cols_after(Const(0))),
                     first_row_in.eq(in_rows_after(before_first)),
                     first_row_after.eq(in_rows_after(Const(0))),
                     first_at_end.eq(cols_m1 == 0)]
        last_beat = Signal()  # bc == k_last, kept with bc (out of the read's ready)
        m.d.comb += [row_in_next.eq(row_in), col_in_next.eq(col_in),
                     last_beat_next.eq(last_beat)]
        m.d.sync += [row_in.eq(row_in_next), col_in.eq(col_in_next),
                     last_beat.eq(last_beat_next)]
        seq_on = Signal()  # the sequencer may write this cycle
        advance = Signal()
        seq_end = (r == rows_m1) & at_end
        # The writes leave from registers, a cycle late (``w_addr``, ``w_data_*`` and
        # the ports' ``en``), so that the buffers' write pins come from flip-flops (the
        # read beat's ``valid``, through the sequencer, into the accumulator's shared
        # write port and its zero flags was an FPGA critical path). A registered write
        # whose port is not ready, or taken, waits there (``held``) and holds the
        # sequencer. That the accumulators' is taken is a register (``acc_held``) set
        # from the write's next enable and the port's next owner: the compute engine's
        # write enable, through ``held`` into the read's ready, was an FPGA critical path.
        acc_held = Signal()
        acc_held_next = Signal()
        m.d.sync += acc_held.eq(acc_held_next)
        port_held = Signal()  # a write to another buffer waits (never: the core's are ready)
        held = Signal()
        m.d.comb += [port_held.eq(Cat(*(getattr(self, PORT_OF[b]).en
                                        & ~getattr(self, PORT_OF[b]).ready
                                        for b in bufs if b != Buffer.ACC)).any()),
                     held.eq(acc_held | port_held)]
        w_addr = Signal.like(waddr)
        take_write = ~held | self.halt  # a halt drops the waiting write
        with m.If(take_write):
            m.d.sync += w_addr.eq(waddr)
        # (word bc takes the read data on every cycle but a last beat's: until beat bc
        # comes, what it holds is not read, and once it came bc moves on; so the
        # write enable is a register, with neither the read's valid nor its ready
        # before the memory's write pins, each an FPGA critical path)
        earlier = self._earlier_beats(m, kall - 1, bc, ~last_beat, rdata.payload.data)
        # Whether a buffer's write data loads: a register set from the next
        # instruction's buffer and the next flags (for the accumulators, also unless
        # their port is taken next: the waiting write keeps its data), gated only by the
        # port's own wait (none in the core), so that the clock enable of the entry's
        # flip-flops comes from one flip-flop (the decode and ``acc_held`` before that
        # fan-out were FPGA critical paths). A halt, which drops a waiting write, needs
        # no load: the dropped write's data is never written. An accumulator write is
        # never held during another buffer's instruction: an ACC instruction ends once
        # its last write has landed.
        buf_next = Mux(take, t_buf, buf)
        loads_next = last_beat_next | ~(row_in_next & col_in_next)
        for b in bufs:
            port = getattr(self, PORT_OF[b])
            kb = 1 << beat_shift[b]
            loads_r = Signal(name=f"loads_{b.name.lower()}")
            loads_r_next = (buf_next == b) & loads_next
            if b == Buffer.ACC:
                loads_r_next = loads_r_next & ~acc_held_next
            m.d.sync += loads_r.eq(loads_r_next)
            loads = loads_r & ~port_held
            pad = 0
            entry = Cat(*earlier[:kb - 1], rdata.payload.data)
            if b == Buffer.WGT:
                entry = self._weight_entry(entry)
                pad = int.from_bytes(bytes([WGT_OFFSET]) * (len(port.data) // 8), "little")
            w_data = Signal(len(port.data), name=f"w_data_{b.name.lower()}", reset_less=True)
            # (the entry's data loads only when it may be written: assembling an
            # entry, for weights a permutation, is then done once per entry)
            with m.If(loads):
                m.d.sync += w_data.eq(Mux(is_data, entry[:len(port.data)], pad))
            en_next = Signal(name=f"en_next_{b.name.lower()}")
            m.d.comb += en_next.eq(Mux(take_write, seq_on & (buf == b)
                                       & (~is_data | (rdata.valid & last_beat)), port.en))
            m.d.sync += port.en.eq(en_next)
            if b == Buffer.ACC:
                m.d.comb += acc_held_next.eq(en_next & self.acc_taken_next)
            m.d.comb += [port.addr.eq(w_addr), port.data.eq(w_data)]
        # An ACC instruction is done once its last write has landed (``flushing``
        # waits for it): the compute engine, which may hold the shared accumulator port,
        # could otherwise read the entry before it. The other buffers' writes land in
        # the cycle after the last one is registered, before the instruction's token
        # can reach its consumer (the core's ports are always ready).
        flushing = Signal()
        is_acc = buf == Buffer.ACC
        with m.If(advance & seq_end & is_acc):
            m.d.sync += flushing.eq(1)
        last = Mux(is_acc, flushing & ~held, advance & seq_end)
        with m.If(advance):
            m.d.sync += waddr.eq(waddr + 1)
            with m.If(at_end):
                m.d.sync += [c.eq(0), r.eq(r + 1), col_after.eq(first_col_after),
                             at_end.eq(first_at_end),
                             row_after.eq((r >= row_lo_m2) & (r < row_end_m2))]
                m.d.comb += [col_in_next.eq(first_col_in), row_in_next.eq(row_after)]
            with m.Else():
                m.d.sync += [c.eq(c + 1), col_after.eq((c >= col_lo_m2) & (c < col_end_m2)),
                             at_end.eq(c == cols_m2)]
                m.d.comb += col_in_next.eq(col_after)
        with m.If(rfire):
            m.d.sync += bc.eq(Mux(last_beat, 0, bc + 1))
            m.d.comb += last_beat_next.eq(Mux(last_beat, k_last == 0, bc + 1 == k_last))

        # ---- execution: CHECK, RUN; DRAIN after a halt
        ph = transfer_phases(m, ex, bursts, self.halt, sram_bad, dram_bad, last)
        with m.If(ph.check):
            m.d.sync += [r.eq(0), c.eq(0), bc.eq(0), flushing.eq(0), waddr.eq(word.sram),
                         col_after.eq(first_col_after), row_after.eq(first_row_after),
                         at_end.eq(first_at_end)]
            m.d.comb += [last_beat_next.eq(k_last == 0), row_in_next.eq(first_row_in),
                         col_in_next.eq(first_col_in)]
        # The read's ready: 1 in DRAIN and in RUN with halt (the beats are discarded),
        # else in RUN is_data & (~last_beat | ~held) (flushing, r is past the last row,
        # so is_data is low). ready_r is that from the next phase and flags, with
        # acc_held for held; after it come only the halt (a register of the core's) and
        # the other ports' waiting writes (none in DRAIN, none ever in the core, whose
        # ports are always ready). In RUN's first cycle no beat can come (no command
        # was issued before it), so ready_r takes ``beats_next``, without the range
        # checks' verdict. (The FSM's state and the flags through the read's ready,
        # the arbiter and the enables of the SoC's read slice were an FPGA critical
        # path.)
        ready_r = Signal()
        m.d.sync += ready_r.eq(ph.drain_next | (ph.beats_next & row_in_next & col_in_next
                                                & (~last_beat_next | ~acc_held_next)))
        m.d.comb += rdata.ready.eq((ready_r & ~(port_held & last_beat)) | (ph.run & self.halt))
        with m.If(ph.run & ~self.halt & ~flushing):
            m.d.comb += [seq_on.eq(1), advance.eq(Mux(is_data, rfire & last_beat, ~held))]
        return m

"""Lowering of a scheduled operator (:class:`~.tile_plan.TilePlan`) to a Program.

DRAM segments, all in the blocked layouts of :mod:`.layout` (``G`` groups stacked on
the first axis):

``inp``  int8 ``(G·N/BATCH, C/BLOCK_IN, H, W, BATCH, BLOCK_IN)``
``wgt``  int8 ``(G·O/BLOCK_OUT, C/BLOCK_IN, KH, KW, BLOCK_OUT, BLOCK_IN)``
``bias`` int32 ``(G·O/BLOCK_OUT, BATCH, BLOCK_OUT)`` (with a bias epilogue)
``out``  int8 ``(G·N/BATCH, O/BLOCK_OUT, OH, OW, BATCH, BLOCK_OUT)``, the output
``zeros`` int8, only when some input window lies wholly in the padding
``res``  int8, the shape of ``out``: the residual of a residual epilogue

Output tiles are dealt round-robin to the virtual threads in groups of ``vthreads``;
within a group the reduction (input-channel) tiles run outermost, so every thread
advances one step at a time (:mod:`.residency`). A step loads the operand tiles no
region holds yet (the input window with the LOAD's zero padding, the weight tile) and
the bias tile its thread's slot does not hold, then runs: at the first reduction tile,
the bias move into the accumulators (or a GEMM reset), one GEMM over the tile, and at
the last reduction tile the ALU epilogue followed by the stores. Dependency tokens come
from :func:`.tokens.insert_tokens`; :func:`.tokens.dispatch_order` then orders the
instructions for the in-order fetch unit.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tensorfab.isa import Alu, AluOp, Buffer, Gemm, HwConfig, Load, Program, Segment, Store
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.formats import REQUANT_RECORD_WORDS
from tensorfab.isa.layout import pack_bias_for
from tensorfab.isa.program import UOP_SEGMENT

from .epilogue import Epilogue
from .errors import CompileError
from .residency import plan_steps
from .schedule import MAX_XFER
from .tensorize import (
    MAX_ITER,
    Dim,
    Kernel,
    KernelTable,
    alu_kernel,
    channel_kernel,
    gemm_kernel,
    make_kernel,
    record_kernel,
    reset_kernel,
)
from .tile_plan import TilePlan
from .tokens import Emitted, Step, dispatch_order, insert_tokens


class _Geometry:
    """DRAM entry indices of the four tensors."""

    def __init__(self, plan: TilePlan) -> None:
        wl, ext = plan.workload, plan.extents
        self.nb, self.cb, self.ob = ext["b"], ext["ic"], ext["oc"]
        self.h, self.w = wl.height, wl.width
        self.kh, self.kw = wl.kernel
        self.oh, self.ow = wl.out_height, wl.out_width

    def inp(self, g: int, n: int, c: int, y: int, x: int) -> int:
        return (((g * self.nb + n) * self.cb + c) * self.h + y) * self.w + x

    def wgt(self, g: int, o: int, c: int) -> int:
        return ((g * self.ob + o) * self.cb + c) * self.kh * self.kw

    def out(self, g: int, n: int, o: int, y: int, x: int) -> int:
        return (((g * self.nb + n) * self.ob + o) * self.oh + y) * self.ow + x


def _pads(start: int, count: int, step: int, size: int) -> tuple[int, int]:
    """How many window positions ``start + i·step`` (``i < count``) fall before 0 and how
    many at or past ``size``."""
    before = min(count, max(0, -(start // step)))  # ceil(-start / step), clamped
    first_after = max(before, min(count, -((start - size) // step)))  # ceil((size-start)/step)
    return before, count - first_after


def _gemm(kernel: Kernel, span: tuple[int, int], *, reset: bool = False) -> Gemm:
    (no, so), (ni, si) = kernel.outer, kernel.inner
    return Gemm(reset=reset, uop_begin=span[0], uop_end=span[1], iter_out=no, iter_in=ni,
                acc_factor_out=so[0], acc_factor_in=si[0],
                inp_factor_out=so[1] if not reset else 0,
                inp_factor_in=si[1] if not reset else 0,
                wgt_factor_out=so[2] if not reset else 0,
                wgt_factor_in=si[2] if not reset else 0)


def _alu(kernel: Kernel, span: tuple[int, int], op: AluOp, imm: int | None) -> Alu:
    (no, so), (ni, si) = kernel.outer, kernel.inner
    return Alu(op=op, use_imm=imm is not None, imm=imm or 0, uop_begin=span[0],
               uop_end=span[1], iter_out=no, iter_in=ni, dst_factor_out=so[0],
               dst_factor_in=si[0], src_factor_out=so[1], src_factor_in=si[1])


def _requant(kernel: Kernel, span: tuple[int, int]) -> Alu:
    """REQUANT over a :func:`.tensorize.record_kernel` (its record steps are the
    instruction's source factors)."""
    (no, so), (ni, si) = kernel.outer, kernel.inner
    return Alu(op=AluOp.REQUANT, uop_begin=span[0], uop_end=span[1], iter_out=no,
               iter_in=ni, dst_factor_out=so[0], dst_factor_in=si[0], src_factor_out=so[2],
               src_factor_in=si[2])


class _Lowering:
    def __init__(self, plan: TilePlan, epilogue: Epilogue) -> None:
        self.plan = plan
        self.cfg = plan.cfg
        self.ep = epilogue
        self.geo = _Geometry(plan)
        self.kernels = KernelTable()
        self.needs_zeros = False

    # ------------------------------------------------------------------ loads
    def input_loads(self, region: int, t: dict[str, int], c0: int, tic: int
                    ) -> list[Emitted]:
        plan, geo, wl = self.plan, self.geo, self.plan.workload
        rows, cols = plan.window
        rstep = plan.row_step
        sh, sw = wl.stride
        pt, _, pl, _ = wl.padding
        y0, x0 = t["oh"] * sh - pt, t["ow"] * sw - pl
        top, bottom = _pads(y0, rows, rstep, geo.h)
        left, right = _pads(x0, cols, 1, geo.w)
        base = plan.slot_base("inp", region)
        tn = plan.tile("b")
        if (rstep == 1 and (rows, cols) == (geo.h, geo.w) and (y0, x0) == (0, 0)
                and tic * rows * cols <= MAX_XFER and geo.cb * geo.h * geo.w <= MAX_XFER):
            # the window is the whole image: one 2-D transfer over batch × channels
            return [(Load(buffer=Buffer.INP, sram=base, dram=geo.inp(t["g"], t["b"], c0, 0, 0),
                          y=tn, x=tic * rows * cols, stride=geo.cb * geo.h * geo.w), "inp")]
        y, x = rows - top - bottom, cols - left - right
        out: list[Emitted] = []
        for n in range(tn):
            for c in range(tic):
                sram = base + (n * tic + c) * rows * cols
                if y <= 0 or x <= 0:  # the whole window is padding
                    self.needs_zeros = True
                    out.append((Load(buffer=Buffer.INP, sram=sram, dram=0, y=rows, x=cols,
                                     stride=cols), "zeros"))
                    continue
                dram = geo.inp(t["g"], t["b"] + n, c0 + c, y0 + top * rstep, x0 + left)
                out.append((Load(buffer=Buffer.INP, sram=sram, dram=dram, y=y, x=x,
                                 stride=rstep * geo.w, pad_top=top, pad_bottom=bottom,
                                 pad_left=left, pad_right=right), "inp"))
        return out

    def weight_load(self, region: int, t: dict[str, int], c0: int, tic: int) -> Emitted:
        geo = self.geo
        taps = geo.kh * geo.kw
        return (Load(buffer=Buffer.WGT, sram=self.plan.slot_base("wgt", region),
                     dram=geo.wgt(t["g"], t["oc"], c0), y=self.plan.tile("oc"), x=tic * taps,
                     stride=geo.cb * taps), "wgt")

    def channel_names(self) -> list[str]:
        """Per-channel tiles of the accumulator slot after the output tile, in order
        (each also names its DRAM segment): the bias, then the epilogue's vectors."""
        bias = self.ep.bias and not self.ep.one_pass  # one pass: the records hold it
        return (["bias"] if bias else []) + self.ep.vector_tiles()

    def channel_loads(self, v: int, t: dict[str, int]) -> list[Emitted]:
        plan = self.plan
        toc = plan.tile("oc")
        base = plan.slot_base("acc", v) + plan.out_entries
        return [(Load(buffer=Buffer.ACC, sram=base + k * toc, dram=t["g"] * self.geo.ob + t["oc"],
                      y=1, x=toc, stride=toc), name)
                for k, name in enumerate(self.channel_names())]

    def residual_loads(self, v: int, t: dict[str, int]) -> list[Emitted]:
        """LOADs of output tile ``t``'s residual (segment ``res``, the output's layout)
        into ``v``'s residual tile of the input buffer, laid out as the accumulators."""
        return [(Load(buffer=Buffer.INP, sram=st.sram - self.plan.slot_base("acc", v)
                      + self.plan.residual_base(v), dram=st.dram, y=st.y, x=st.x,
                      stride=st.stride), "res")
                for st, _ in self.stores(v, t)]

    def residual_compute(self, v: int) -> list[Gemm | Alu]:
        """Bring ``v``'s residual tile into its (reset) accumulators by a GEMM with the
        identity weight entry, then multiply it by the per-channel factors."""
        plan = self.plan
        a, r = plan.slot_base("acc", v), plan.residual_base(v)
        identity = plan.records_base + plan.records - 1
        if plan.out_entries <= MAX_ITER:
            dims = [Dim("entries", plan.out_entries, (1, 1, 0))]
        else:
            tw = plan.tile("ow")
            dims = [Dim("rows", plan.out_entries // tw, (tw, tw, 0)), Dim("ow", tw, (1, 1, 0))]
        kg = make_kernel(dims, {d.name for d in dims}, (a, r, identity))
        kv = channel_kernel(plan, v, self.channel_names().index("residual_factor"))
        return [_gemm(kg, self.kernels.add(kg)), _alu(kv, self.kernels.add(kv), AluOp.MUL, None)]

    def record_loads(self, loaded: set[str], *, last: bool, residual: bool
                     ) -> tuple[list[Emitted], list[tuple[str, int]]]:
        """The LOADs of a step that bring REQUANT's records (and a residual's identity
        entry, the last of them) to the top of the weight buffer, once, and the resources
        they write; ``loaded`` (updated) holds what earlier steps brought.

        The records of an ALU REQUANT come with the loads of the first step that ends a
        tile (its REQUANT reads them), not with the first step's: the first GEMM then
        waits only for its operands, and the records load while earlier steps compute.
        A residual's first step needs only the identity entry, which loads alone when
        it comes first.

        The records of requantizing STOREs go to the top of the accumulator buffer
        with the first step's loads, ahead of its operands (the identity entry alone to
        the top of the weight buffer): a LOAD into the accumulators shares their write
        port with the GEMMs, which take it first, so while the GEMMs run it would hold
        the load engine, and the later steps' operands, for many times its own
        length."""
        plan = self.plan
        n = plan.records
        ident = n - 1 if self.ep.residual is not None else None
        loads: list[Emitted] = []
        written: list[tuple[str, int]] = []
        if self.ep.store_requant:
            if "records" not in loaded:
                m = plan.acc_records
                loads.append((Load(buffer=Buffer.ACC, sram=plan.acc_records_base, dram=0,
                                   y=1, x=m, stride=m), "records"))
                written.append(("records", 0))
                loaded.add("records")
            if residual and ident is not None and "identity" not in loaded:
                loads.append((Load(buffer=Buffer.WGT, sram=plan.records_base + ident, dram=0,
                                   y=1, x=1, stride=1), "identity"))
                written.append(("identity", 0))
                loaded.add("identity")
            return loads, written
        if "records" not in loaded and last:
            if "identity" in loaded:  # every record but the identity entry
                loads.append((Load(buffer=Buffer.WGT, sram=plan.records_base, dram=0,
                                   y=1, x=n - 1, stride=n - 1), "records"))
            else:
                loads.append((Load(buffer=Buffer.WGT, sram=plan.records_base, dram=0,
                                   y=1, x=n, stride=n), "records"))
                written.append(("identity", 0))
            written.append(("records", 0))
            loaded |= {"records", "identity"}
        elif residual and ident is not None and "identity" not in loaded:
            loads.append((Load(buffer=Buffer.WGT, sram=plan.records_base + ident, dram=ident,
                               y=1, x=1, stride=1), "records"))
            written.append(("identity", 0))
            loaded.add("identity")
        return loads, written

    def uop_loads(self, steps: list[Step]) -> Emitted:
        """The LOAD.UOP ahead of every step: the micro-ops of the first step's kernels
        (the kernel table holds kernels in the order the steps first use them). Each
        later step that uses kernels no earlier step did loads them first among its
        own loads (its computation waits for those), so no GEMM waits for kernels it
        does not run and the table's loads spread over the program."""
        first = max(insn.uop_end for insn in steps[0].compute)
        loaded = first
        for k, step in enumerate(steps[1:], 1):
            end = max(insn.uop_end for insn in step.compute)
            if end > loaded:
                n = end - loaded
                step.loads.insert(0, (Load(buffer=Buffer.UOP, sram=loaded, dram=loaded, y=1,
                                           x=n, stride=n), UOP_SEGMENT))
                step.writes = (*step.written(), ("uops", k))
                step.reads = (*step.read(), ("uops", k))
                loaded = end
        return (Load(buffer=Buffer.UOP, sram=0, dram=0, y=1, x=first, stride=first),
                UOP_SEGMENT)

    # ----------------------------------------------------------------- stores
    def stores(self, v: int, t: dict[str, int], *, requant: bool = False) -> list[Emitted]:
        """The STOREs of output tile ``t`` from ``v``'s slot; with ``requant``,
        requantizing STOREs, each within one block of output channels and reading that
        block's records (:meth:`_records`)."""
        plan, geo = self.plan, self.geo
        tn, toc, th, tw = (plan.tile(a) for a in ("b", "oc", "oh", "ow"))
        base = plan.slot_base("acc", v)
        whole = not requant or toc == 1  # a STORE may span the tile's channel blocks
        if (whole and (th, tw) == (geo.oh, geo.ow) and toc * th * tw <= MAX_XFER
                and geo.ob * th * tw <= MAX_XFER):
            return [(Store(sram=base, dram=geo.out(t["g"], t["b"], t["oc"], 0, 0), y=tn,
                           x=toc * th * tw, stride=geo.ob * th * tw,
                           **self._records(t, 0, requant)), "out")]
        if whole and tw == geo.ow and th * tw <= MAX_XFER and geo.oh * geo.ow <= MAX_XFER:
            # full-width rows: each channel block's rows are contiguous in DRAM
            return [(Store(sram=base + n * toc * th * tw,
                           dram=geo.out(t["g"], t["b"] + n, t["oc"], t["oh"], 0), y=toc,
                           x=th * tw, stride=geo.oh * geo.ow,
                           **self._records(t, 0, requant)), "out") for n in range(tn)]
        out: list[Emitted] = []
        for n in range(tn):
            for o in range(toc):
                sram = base + (n * toc + o) * th * tw
                dram = geo.out(t["g"], t["b"] + n, t["oc"] + o, t["oh"], t["ow"])
                rec = self._records(t, o, requant)
                if tw == geo.ow:
                    out.append((Store(sram=sram, dram=dram, y=1, x=th * tw, stride=th * tw,
                                      **rec), "out"))
                else:
                    out.append((Store(sram=sram, dram=dram, y=th, x=tw, stride=geo.ow,
                                      **rec), "out"))
        return out

    def _records(self, t: dict[str, int], o: int, requant: bool) -> dict[str, object]:
        """A STORE's requantization fields for block ``o`` of tile ``t``'s output
        channels: the first of the block's three record entries at the top of the
        accumulators (none without ``requant``)."""
        if not requant:
            return {}
        block = t["g"] * self.geo.ob + t["oc"] + o
        return {"requant": True,
                "rec": self.plan.acc_records_base + REQUANT_RECORD_WORDS * block}

    # ----------------------------------------------------------------- steps
    def steps(self) -> list[Step]:
        plan = self.plan
        held: dict[int, object] = {}  # thread -> bias tile its slot holds
        gemms: dict[tuple[int, int, int, int], Gemm] = {}  # (thread, tic, regions) -> GEMM
        steps: list[Step] = []
        alu_ops = self.ep.alu_ops()
        one_pass = self.ep.one_pass
        store_requant = self.ep.store_requant
        loaded: set[str] = set()  # "records", "identity": what the weights hold already
        for sl in plan_steps(plan):
            v, t, c0, tic = sl.vthread, sl.start, sl.c0, sl.tic
            step = Step(vthread=v, tile=sl.tile,
                        reads=(("inp", sl.inp_region), ("wgt", sl.wgt_region)))
            writes: list[tuple[str, int]] = []
            residual = sl.first and self.ep.residual is not None
            if one_pass:
                loads, written = self.record_loads(loaded, last=sl.last, residual=residual)
                step.loads += loads
                writes += written
            if sl.first and self.ep.channel_tiles:
                key = (t["g"], t["oc"])
                if held.get(v) != key:
                    step.loads += self.channel_loads(v, t)
                    writes.append(("bias", v))
                    held[v] = key
                step.reads = (*step.reads, ("bias", v))  # type: ignore[misc]
            if residual:
                step.loads += self.residual_loads(v, t)
                writes.append(("res", v))
                step.reads = (*step.reads, ("res", v), ("identity", 0))  # type: ignore[misc]
            if sl.load_inp:
                step.loads += self.input_loads(sl.inp_region, t, c0, tic)
                writes.append(("inp", sl.inp_region))
            if sl.load_wgt:
                step.loads.append(self.weight_load(sl.wgt_region, t, c0, tic))
                writes.append(("wgt", sl.wgt_region))
            step.writes = tuple(writes)
            if sl.first:
                if self.ep.bias and not one_pass:
                    k = channel_kernel(plan, v, 0)
                    step.compute.append(_alu(k, self.kernels.add(k), AluOp.MOV, None))
                else:
                    k = reset_kernel(plan, v)
                    step.compute.append(_gemm(k, self.kernels.add(k), reset=True))
                if residual:
                    step.compute += self.residual_compute(v)
            key = (v, tic, sl.inp_region, sl.wgt_region)
            if key not in gemms:
                k = gemm_kernel(plan, v, tic, sl.inp_region, sl.wgt_region)
                gemms[key] = _gemm(k, self.kernels.add(k))
            step.compute.append(gemms[key])
            if sl.last:
                if self.ep.vector_tiles() and ("bias", v) not in step.reads:
                    # the epilogue reads the per-channel vectors the first step loaded
                    step.reads = (*step.reads, ("bias", v))  # type: ignore[misc]
                k = alu_kernel(plan, v)
                for op, operand in alu_ops:
                    if op is AluOp.REQUANT:
                        step.reads = (*step.reads, ("records", 0))  # type: ignore[misc]
                        kr = record_kernel(plan, v, plan.records_base
                                           + t["g"] * self.geo.ob + t["oc"])
                        step.compute.append(_requant(kr, self.kernels.add(kr)))
                    elif isinstance(operand, str):  # a per-channel vector of the slot
                        kv = channel_kernel(plan, v, self.channel_names().index(operand))
                        step.compute.append(_alu(kv, self.kernels.add(kv), op, None))
                    else:
                        step.compute.append(_alu(k, self.kernels.add(k), op, operand))
                if store_requant and one_pass:
                    # the STOREs read the records: their compute (which the STOREs wait
                    # for) waits for the records' LOAD
                    step.reads = (*step.reads, ("records", 0))  # type: ignore[misc]
                step.stores = self.stores(v, t, requant=store_requant)
            steps.append(step)
        return steps


def lookahead(cfg: HwConfig) -> int:
    """Steps the loads may run ahead of the computation (bounds the tokens in flight
    below the queues' capacity)."""
    return max(1, cfg.dep_queue_depth - 1)


class _EpilogueShape:
    """What the lowering needs of an epilogue when only its shape is known."""

    one_pass = False  # a one-pass epilogue is timed as its one ALU pass

    def __init__(self, channel_tiles: int, n_alu_ops: int, residual: bool = False,
                 store_requant: bool = False) -> None:
        self.store_requant = store_requant  # STOREs split by channel block
        # a residual's factors take the one per-channel tile of a one-pass epilogue
        self.residual = () if residual else None
        self.bias = bool(channel_tiles) and not residual
        self.channel_tiles = int(channel_tiles)
        self._ops = [(AluOp.MAX, 0)] * n_alu_ops

    def alu_ops(self) -> list[tuple[AluOp, int]]:
        return list(self._ops)

    def vector_tiles(self) -> list[str]:
        if self.residual is not None:
            return ["residual_factor"]
        return [f"vector{k}" for k in range(self.channel_tiles - 1)]


def plan_instructions(plan: TilePlan, n_alu_ops: int = 0) -> list[Emitted]:
    """The instructions :func:`lower` emits for ``plan`` (with an epilogue of
    ``n_alu_ops`` ALU instructions and the plan's bias), in dispatch order, without
    FINISH and DRAM addresses: enough to estimate the program's timing."""
    low = _Lowering(plan, _EpilogueShape(plan.bias, n_alu_ops, plan.residual,  # type: ignore[arg-type]
                                         bool(plan.acc_records)))
    steps = low.steps()
    uops = low.uop_loads(steps)
    return [uops, *dispatch_order(insert_tokens(steps, lookahead(plan.cfg)), plan.cfg)]


def _one_image(shape: tuple[int, ...], groups: int) -> tuple[int, ...]:
    """A grouped blocked shape ``(G·nb, cb, ...)`` as one image's ``(1, G·cb, ...)``."""
    if shape[0] != groups:
        raise CompileError(f"one image's shapes need one batch block per group, not "
                           f"{shape[0] // groups}")
    return (1, groups * shape[1], *shape[2:])


def _channel_count_error(name: str, count: int, channels: int) -> CompileError:
    """An epilogue's per-channel ``name`` of ``count`` values for ``channels`` outputs."""
    return CompileError(f"the epilogue has {count} per-channel {name} values, the "
                        f"operator {channels} output channels")


def _group_epilogue(ep: Epilogue, i: int, n: int, groups: int) -> Epilogue:
    """Group ``i``'s epilogue: its ``n`` channels' multipliers, shifts and residual
    factors when ``ep`` has them for all ``groups · n`` channels (a grouped
    convolution), else ``ep``."""
    if groups == 1 or ep.multiplier is None or len(ep.multiplier) != groups * n:
        return ep
    cut = slice(i * n, (i + 1) * n)
    return dataclasses.replace(ep, multiplier=ep.multiplier[cut],
                               shift=ep.shift[cut] if ep.shift else None,
                               residual=None if ep.residual is None else ep.residual[cut])


def lower(plan: TilePlan, epilogue: Epilogue | None = None, *, inp: np.ndarray | None = None,
          wgt: np.ndarray | None = None, bias: np.ndarray | None = None,
          residual: np.ndarray | None = None,
          image_shapes: bool = False) -> Program:
    """The program computing ``plan``'s operator with ``epilogue``.

    Parameters
    ----------
    plan : TilePlan
        A validated tiling (:meth:`.Schedule.plan`); its ``bias`` must match the
        epilogue's.
    epilogue : Epilogue | None
        Fused epilogue (default: none, outputs are the accumulators' low bytes).
    inp, wgt, bias, residual : numpy.ndarray | None
        Packed segment contents (shapes in the module docstring; ``residual`` is the
        ``res`` segment); zeros when omitted.
    image_shapes : bool
        Declare ``inp`` and ``out`` with one image's blocked shapes, every group's
        channels along the channel-block axis (``(1, G·C/BLOCK_IN, ...)``, the same
        bytes as the grouped layout when the batch is one block): the form of a grouped
        convolution's activations in a graph.

    Returns
    -------
    Program
        With segments ``inp``, ``wgt``, ``bias`` (if any), ``out`` (the output) and
        ``zeros`` (if needed).
    """
    ep = epilogue or Epilogue()
    ep.check_config(plan.cfg)
    records = ep.record_entries(plan.cfg, plan.workload.out_channels, plan.workload.groups)
    if plan.records != records:
        raise CompileError(f"the schedule reserves {plan.records} weight entries for "
                           f"REQUANT records, the epilogue needs {records}")
    acc_records = ep.acc_record_entries(plan.cfg, plan.workload.out_channels,
                                        plan.workload.groups)
    if plan.acc_records != acc_records:
        raise CompileError(f"the schedule reserves {plan.acc_records} accumulator entries "
                           f"for STORE records, the epilogue needs {acc_records}")
    if ep.residual is not None and plan.cfg.block_in != plan.cfg.block_out:
        raise CompileError(f"config {plan.cfg.name!r}: a residual epilogue needs block_in == "
                           "block_out")
    if (ep.residual is not None) != plan.residual:
        raise CompileError(f"the epilogue {'has' if ep.residual else 'has no'} residual, the "
                           f"schedule {'reserves' if plan.residual else 'has no'} room for one")
    if ep.channel_tiles != plan.bias:
        raise CompileError(f"the epilogue needs {ep.channel_tiles} per-channel tile(s) (bias "
                         f"{ep.bias}, vectors {ep.vector_tiles()}) but the schedule was made "
                         f"with {int(plan.bias)}")
    cfg, wl = plan.cfg, plan.workload
    ext = plan.extents
    g = wl.groups
    shapes = {
        "inp": ("int8", (g * ext["b"], ext["ic"], wl.height, wl.width, cfg.batch,
                         cfg.block_in)),
        "wgt": ("int8", (g * ext["oc"], ext["ic"], wl.kernel[0], wl.kernel[1],
                         cfg.block_out, cfg.block_in)),
        "bias": ("int32", (g * ext["oc"], cfg.batch, cfg.block_out)),
    }
    data = {"inp": inp, "wgt": wgt, "bias": bias}
    low = _Lowering(plan, ep)
    steps = low.steps()
    bld = ProgramBuilder(cfg)
    for name in ("inp", "wgt", "bias"):
        if name == "bias" and not ep.bias:
            if bias is not None:
                raise CompileError("bias data given without a bias epilogue")
            continue
        if name == "bias" and ep.one_pass:
            continue  # the records hold it
        dtype, shape = shapes[name]
        if name == "inp" and image_shapes:
            shape = _one_image(shape, g)
        arr = data[name]
        if arr is not None:
            arr = np.asarray(arr)
            if arr.shape != shape:
                raise CompileError(f"{name} has shape {arr.shape}, the layout needs {shape}")
        bld.add_segment(Segment(name, dtype, shape, arr))
    if ep.one_pass:
        assert ep.multiplier is not None
        if len(ep.multiplier) not in (wl.out_channels, g * wl.out_channels):
            raise _channel_count_error("multiplier", len(ep.multiplier), wl.out_channels)
        b = None if bias is None else np.asarray(bias).reshape(
            g, ext["oc"], cfg.batch, cfg.block_out)[:, :, 0, :].reshape(g, -1)
        identity = np.eye(cfg.block_out, cfg.block_in, dtype=np.int8)[None]
        if ep.store_requant:
            acc_recs = [_group_epilogue(ep, i, wl.out_channels, g).acc_records(
                cfg, None if b is None else b[i, :wl.out_channels]) for i in range(g)]
            bld.add_segment(Segment("records", "int32", (plan.acc_records, cfg.batch,
                                                         cfg.block_out),
                                    np.concatenate(acc_recs)))
            if ep.residual is not None:  # the identity entry of the residual's GEMM
                bld.add_segment(Segment("identity", "int8", identity.shape, identity))
        else:
            recs = [_group_epilogue(ep, i, wl.out_channels, g).records(
                        cfg, None if b is None else b[i, :wl.out_channels]) for i in range(g)]
            if ep.residual is not None:  # the identity entry of the residual's GEMM
                recs.append(identity)
            bld.add_segment(Segment("records", "int8", (plan.records, cfg.block_out,
                                                        cfg.block_in), np.concatenate(recs)))
    vectors = ep.channel_vectors()
    for name, vec in vectors.items():
        n = wl.out_channels
        if vec.shape == (g * n,) and g > 1:  # each group's own (a grouped convolution)
            packed = np.concatenate([pack_bias_for(cfg, vec[i * n:(i + 1) * n])
                                     for i in range(g)])
        elif vec.shape == (n,):
            packed = np.concatenate([pack_bias_for(cfg, vec)] * g)
        else:
            raise _channel_count_error(name, vec.size, n)
        bld.add_segment(Segment(name, "int32", shapes["bias"][1], packed))
    out_shape = (g * ext["b"], ext["oc"], wl.out_height, wl.out_width, cfg.batch,
                 cfg.block_out)
    bld.add_segment(Segment("out", "int8", _one_image(out_shape, g) if image_shapes
                            else out_shape, output=True))
    if ep.residual is not None:  # the output's layout
        bld.add_segment(Segment("res", "int8", _one_image(out_shape, g) if image_shapes
                                else out_shape, residual))
    if low.needs_zeros:
        rows, cols = plan.window
        bld.add_segment(Segment("zeros", "int8", (rows * cols, cfg.batch, cfg.block_in)))
    bld.add_uops(low.kernels.uops)
    bld.emit(*low.uop_loads(steps))
    for insn, seg in dispatch_order(insert_tokens(steps, lookahead(cfg)), cfg):
        bld.emit(insn, segment=seg)
    return bld.build()


__all__ = ["lower", "plan_instructions"]

"""The GEMM core: one int8 tile product (``inp @ wgt.T``) accumulated per cycle."""

from __future__ import annotations

from amaranth.hdl import Module, Signal, Value, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import HwConfig

__all__ = ["GemmCore"]


class GemmCore(wiring.Component):
    """``acc_out = acc_in + inp @ wgt.T`` (int8 × int8 → int32, wrapping mod 2^32).

    Fully pipelined: accepts one tile every cycle and delivers its result
    :attr:`latency` cycles later, with no back-pressure. The stages are: inputs
    registered; the ``batch × block_out × block_in`` products registered; an
    adder tree per output element with a register after every
    ``levels_per_stage`` levels (and after its last level); the sum added to the
    delayed accumulator and registered.

    Parameters
    ----------
    cfg : HwConfig
        Gives ``batch``, ``block_in``, ``block_out`` and the element widths.
    levels_per_stage : int
        Adder-tree levels between pipeline registers.

    Attributes
    ----------
    inp : In(ArrayLayout(ArrayLayout(signed(8), block_in), batch))
        Input tile, row-major: element ``[b][k]`` at bit ``8 (b block_in + k)``.
    wgt : In(ArrayLayout(ArrayLayout(signed(8), block_in), block_out))
        Weight tile, one row per output channel: ``[o][k]`` at bit ``8 (o block_in + k)``.
    acc_in : In(ArrayLayout(ArrayLayout(signed(32), block_out), batch))
        Accumulators to add to: ``[b][o]`` at bit ``32 (b block_out + o)``.
    in_valid : In(1)
        The inputs hold a tile this cycle.
    acc_out : Out(same layout as acc_in)
        ``acc_in + inp @ wgt.T`` modulo 2^32, :attr:`latency` cycles later.
    result : Out(ArrayLayout(signed(32), batch * block_out))
        ``inp @ wgt.T`` alone (flattened row-major, same bit positions as
        ``acc_out``), at the same cycle as ``acc_out``: for a client that reads
        its accumulators late, to add them at write-back (leave ``acc_in`` at 0;
        synthesis then drops the unused adders).
    out_valid : Out(1)
        ``in_valid`` delayed by :attr:`latency` cycles.
    latency : int
        Cycles from an accepted tile to its result: ``3 + ceil(log2(block_in) /
        levels_per_stage)`` (4 for tiny, 5 for default); also ``LATENCY``.
    """

    def __init__(self, cfg: HwConfig, levels_per_stage: int = 2) -> None:
        if levels_per_stage < 1:
            raise ValueError("levels_per_stage must be at least 1")
        self.cfg = cfg
        self.levels_per_stage = levels_per_stage
        self.tree_depth = (cfg.block_in - 1).bit_length()
        self.tree_stages = -(-self.tree_depth // levels_per_stage)
        self.latency = self.pipeline_latency(cfg, levels_per_stage)
        inp = data.ArrayLayout(data.ArrayLayout(signed(cfg.inp_width), cfg.block_in), cfg.batch)
        wgt = data.ArrayLayout(data.ArrayLayout(signed(cfg.wgt_width), cfg.block_in),
                               cfg.block_out)
        acc = data.ArrayLayout(data.ArrayLayout(signed(cfg.acc_width), cfg.block_out),
                               cfg.batch)
        super().__init__({
            "inp": In(inp),
            "wgt": In(wgt),
            "acc_in": In(acc),
            "in_valid": In(1),
            "acc_out": Out(acc),
            "result": Out(data.ArrayLayout(signed(cfg.acc_width), cfg.batch * cfg.block_out)),
            "out_valid": Out(1),
        })

    @property
    def LATENCY(self) -> int:
        """Alias of :attr:`latency` (the name :class:`VectorAlu` uses)."""
        return self.latency

    @staticmethod
    def pipeline_latency(cfg: HwConfig, levels_per_stage: int = 2) -> int:
        """The :attr:`latency` of a core built with these arguments."""
        tree_depth = (cfg.block_in - 1).bit_length()
        return 3 + -(-tree_depth // levels_per_stage)

    def _tree(self, m: Module, terms: list[Value], name: str) -> Value:
        level = 0
        while len(terms) > 1:
            pairs = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
            if len(terms) % 2:
                pairs.append(terms[-1])
            level += 1
            if level % self.levels_per_stage == 0 or level == self.tree_depth:
                regs = []
                for j, value in enumerate(pairs):
                    reg = Signal(value.shape(), name=f"{name}_l{level}_{j}", reset_less=True)
                    m.d.sync += reg.eq(value)
                    regs.append(reg)
                pairs = regs
            terms = pairs
        return terms[0]

    def elaborate(self, platform: object) -> Module:
        """Build the pipeline."""
        m = Module()
        cfg = self.cfg
        # Datapath registers need no reset (only the valid chain does); leaving it out
        # also spares Verilator a reset multiplexer per register and cycle.
        inp_r = Signal(self.inp.shape(), reset_less=True)
        wgt_r = Signal(self.wgt.shape(), reset_less=True)
        m.d.sync += [inp_r.eq(self.inp), wgt_r.eq(self.wgt)]

        # accumulator and valid travel alongside the products and the tree
        acc_delay = [self.acc_in]
        valid_delay = [self.in_valid]
        for stage in range(self.latency - 1):
            acc_d = Signal(self.acc_in.shape(), name=f"acc_d{stage}", reset_less=True)
            valid_d = Signal(name=f"valid_d{stage}")
            m.d.sync += [acc_d.eq(acc_delay[-1]), valid_d.eq(valid_delay[-1])]
            acc_delay.append(acc_d)
            valid_delay.append(valid_d)
        acc = acc_delay[-1]

        for b in range(cfg.batch):
            for o in range(cfg.block_out):
                products = []
                for k in range(cfg.block_in):
                    prod = Signal(signed(cfg.inp_width + cfg.wgt_width), name=f"p{b}_{o}_{k}",
                                  reset_less=True)
                    m.d.sync += prod.eq(inp_r[b][k] * wgt_r[o][k])
                    products.append(prod)
                total = self._tree(m, products, f"s{b}_{o}")
                m.d.sync += [
                    self.acc_out[b][o].eq((acc[b][o] + total)[:cfg.acc_width]),
                    self.result[b * cfg.block_out + o].eq(total),
                ]
        m.d.sync += self.out_valid.eq(valid_delay[-1])
        return m

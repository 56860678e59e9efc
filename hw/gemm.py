"""The GEMM core: one int8 tile product (``inp @ wgt.T``) accumulated per cycle."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import HwConfig

from .dsp import RegisteredMultiplier, per_product_multipliers
from .signatures import WGT_OFFSET, wgt_entry_order

__all__ = ["GemmCore"]


#: Bias that turns a signed int8 into an unsigned byte (``x ^ 0x80 == x + 128``); the
#: weight buffer stores weights so biased already.
OFFSET = WGT_OFFSET
#: Masks of the packed words: bytes into 16-bit lanes, 16-bit lanes into 32-bit lanes.
BYTE_LANES = 0x00FF_00FF_00FF_00FF
HALF_LANES = 0x0000_FFFF_0000_FFFF


def sign_extended(value: Value, width: int) -> Value:
    """``value`` (signed) sign-extended to ``width`` bits as a multiplexer of two words
    (its top bit chooses ones or zeros above it), which Verilator evaluates as one
    choice per word; an implicit extension it evaluates bit by bit."""
    if not value.shape().signed:
        raise TypeError(f"sign_extended: {value!r} is unsigned")
    extra = width - len(value)
    if extra <= 0:
        return value[:width]
    return Mux(value[-1], Cat(value, Const((1 << extra) - 1, extra)), value.as_unsigned())


class GemmCore(wiring.Component):
    """``acc_out = acc_in + inp @ wgt.T`` (int8 × int8 → int32, wrapping mod 2^32).

    Fully pipelined: accepts one tile every cycle and delivers its result
    :attr:`latency` cycles later, with no back-pressure. The stages are: inputs
    registered; the products registered; an adder tree over ``block_in`` with a
    register after every ``levels_per_stage`` levels (and after its last level);
    the sum, corrected and added to the delayed accumulator, registered.

    Datapath
    --------
    The weight tile arrives in the weight buffer's format
    (:func:`tensorfab.hw.signatures.wgt_entry_order`): column-major and offset to
    unsigned bytes (``w' = w + 128``, an inverted sign bit). Activations are
    offset the same way (``a' = a + 128``) as they are registered. Each 64-bit half
    of a weight column is split into its even and its odd bytes, each byte in a
    16-bit lane, and one multiplier forms four products that share an activation:
    ``a'_k`` times such a word (the operand packing FPGA vendors use to fit several
    int8 products into one DSP block). A product is below 2^16, so it stays in its
    lane. The products are then regrouped into 32-bit lanes, two to a 64-bit word,
    where their sums over ``block_in`` (below 2^32) never carry into the next
    lane, so one adder sums two channels. With ``S = Σ a'w'``, ``A = Σ a'`` and
    ``W = Σ w'`` over ``k``::

        Σ a·w = S − 128 (A + W) + 16384 · block_in

    The trees for ``A`` (per batch row) and ``W`` (per channel, summed in the
    16-bit lanes of the weight words) run one stage ahead of the product tree and
    are delayed to meet it (per product, ``A + W`` of each channel is registered
    instead, so that the last stage adds no third carry chain). Verilator evaluates
    about five machine operations per product this way, against about twenty for
    separate sign-extended products.
    Synthesis needs as many DSP blocks as before and more carry logic
    (docs/architecture.md, "RTL executor", "Speed").

    Parameters
    ----------
    cfg : HwConfig
        Gives ``batch``, ``block_in``, ``block_out`` and the element widths.
    levels_per_stage : int
        Adder-tree levels between pipeline registers.
    per_product : bool, optional
        One :class:`~.dsp.RegisteredMultiplier` per int8 product, from the stage-1
        operand registers, its product in the multiplier's register, and an adder tree
        per channel as wide as its sums, instead of the packed products and words above
        (same latency, same results). None (the default): per
        product on an ECP5 build that may use DSP blocks, where the block's own output
        register keeps the path out of the block off the fabric; packed elsewhere, for
        Verilator's speed.

    Attributes
    ----------
    inp : In(ArrayLayout(ArrayLayout(signed(8), block_in), batch))
        Input tile, row-major: element ``[b][k]`` at bit ``8 (b block_in + k)``.
    wgt : In(ArrayLayout(ArrayLayout(unsigned(8), block_out), block_in))
        Weight tile, column-major and offset: ``w[o][k] + 128`` at bit
        ``8 (k block_out + o)``.
    acc_in : In(ArrayLayout(ArrayLayout(signed(32), block_out), batch))
        Accumulators to add to: ``[b][o]`` at bit ``32 (b block_out + o)``.
    in_valid : In(1)
        The inputs hold a tile this cycle.
    in_clear : In(1)
        With ``in_valid``: the tile's product is zero, whatever its operands (a
        resetting GEMM micro-op, which reads none): its :attr:`result` is 0 and its
        :attr:`acc_out` ``acc_in``. The result register's synchronous reset, so that a
        client adding :attr:`result` needs no multiplexer of its own after it.
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

    def __init__(self, cfg: HwConfig, levels_per_stage: int = 2,
                 per_product: bool | None = None) -> None:
        if levels_per_stage < 1:
            raise ValueError("levels_per_stage must be at least 1")
        if not (cfg.inp_width == cfg.wgt_width == 8 and cfg.acc_width == 32):
            raise ValueError(f"cfg: GemmCore takes inp_width = wgt_width = 8 and acc_width = "
                             f"32, not {cfg.inp_width}, {cfg.wgt_width} and {cfg.acc_width}")
        self.cfg = cfg
        self.levels_per_stage = levels_per_stage
        self.per_product = per_product
        self.tree_depth = (cfg.block_in - 1).bit_length()
        self.tree_stages = -(-self.tree_depth // levels_per_stage)
        self.latency = self.pipeline_latency(cfg, levels_per_stage)
        inp = data.ArrayLayout(data.ArrayLayout(signed(cfg.inp_width), cfg.block_in), cfg.batch)
        wgt = data.ArrayLayout(data.ArrayLayout(unsigned(cfg.wgt_width), cfg.block_out),
                               cfg.block_in)
        acc = data.ArrayLayout(data.ArrayLayout(signed(cfg.acc_width), cfg.block_out),
                               cfg.batch)
        super().__init__({
            "inp": In(inp),
            "wgt": In(wgt),
            "acc_in": In(acc),
            "in_valid": In(1),
            "in_clear": In(1),
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

    def _tree(self, m: Module, terms: list[Value], name: str, wrap: int | None = None) -> Value:
        """Sum ``terms`` pairwise, with registers as the class docstring says; modulo
        ``2**wrap`` if given (for terms whose lanes never carry that far: a sum as
        wide as its 64-bit terms is one machine addition in Verilator, a sum one bit
        wider a wide one or a masked one)."""
        level = 0
        while len(terms) > 1:
            pairs = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
            if wrap is not None:
                pairs = [value[:wrap] for value in pairs]
            if len(terms) % 2:
                pairs.append(terms[-1])
            level += 1
            if level % self.levels_per_stage == 0 or level == self.tree_depth:
                pairs = [self._delayed(m, value, f"{name}_l{level}_{j}")
                         for j, value in enumerate(pairs)]
            terms = pairs
        return terms[0]

    @staticmethod
    def _delayed(m: Module, value: Value, name: str, init: int | None = None) -> Signal:
        """``value`` one cycle later, in a datapath register (no reset; ``init`` its
        value at configuration only)."""
        reg = Signal(value.shape(), name=name, reset_less=True, init=init)
        m.d.sync += reg.eq(value)
        return reg

    @staticmethod
    def _mask(m: Module, value: int, width: int, name: str) -> Signal:
        """``value`` as a register that never changes (synthesis makes it a constant).

        Amaranth splits an AND with a constant into single bits, which Verilator
        then reassembles every cycle; an AND with a signal stays one operation.
        """
        reg = Signal(width, init=value & ((1 << width) - 1), name=name, reset_less=True)
        m.d.sync += reg.eq(reg)
        return reg

    @staticmethod
    def _products(m: Module, act: Value, spread: Value, sel: list[int], name: str
                  ) -> list[Value]:
        """The products of activation ``act`` with the weight bytes of ``spread`` (a
        stage-1 word, a byte in each 16-bit lane) that ``sel`` picks, each from its own
        :class:`~.dsp.RegisteredMultiplier` (registered, as the packed products are):
        element ``t`` is byte ``sel[t]``'s, 16 bits."""
        lanes = []
        for t, lane in enumerate(sel):
            mul = RegisteredMultiplier(8, 8)
            m.submodules[f"{name}_{t}"] = mul
            m.d.comb += [mul.a.eq(act), mul.b.eq(spread[16 * (lane // 2):][:8])]
            lanes.append(mul.p[:16])
        return lanes

    def elaborate(self, platform: object) -> Module:
        """Build the pipeline."""
        m = Module()
        cfg = self.cfg
        n_in, n_out = cfg.block_in, cfg.block_out
        masks: dict[tuple[int, int], Signal] = {}

        def mask(value: int, width: int) -> Signal:
            if (value, width) not in masks:
                masks[value, width] = self._mask(m, value, width, f"mask{len(masks)}")
            return masks[value, width]

        # stage 1: offset activations, and weight bytes spread into 16-bit lanes (even
        # bytes of each 64-bit half of a column, then odd bytes), registered. The
        # datapath registers need no reset (only the valid chain does), which also
        # spares Verilator a reset multiplexer per register and cycle.
        inp_bits = self.inp.as_value()
        offset_act = [[(inp_bits[8 * (b * n_in + k):][:8] + OFFSET)[:8] for k in range(n_in)]
                      for b in range(cfg.batch)]
        act = [[self._delayed(m, offset_act[b][k], f"a{b}_{k}") for k in range(n_in)]
               for b in range(cfg.batch)]
        wgt_bits = self.wgt.as_value()
        order = wgt_entry_order(cfg)  # entry byte of w[o][k]: order[o·block_in + k]
        halves = [min(8, n_out - 8 * h) for h in range(-(-n_out // 8))]  # bytes per half
        # groups: (half, parity) -> the bytes j of the half in its 16-bit lanes
        groups = [(h, par, list(range(par, n, 2))) for h, n in enumerate(halves)
                  for par in range(min(2, n))]
        spread: list[list[Signal]] = []  # [k][group]
        for k in range(n_in):
            row = []
            for h, par, js in groups:
                first = order[8 * h * n_in + k]  # w[8h][k]; w[8h + j][k] follows it
                half = wgt_bits[8 * first:][:8 * halves[h]] >> (8 * par)
                width = 16 * (len(js) - 1) + 8
                row.append(self._delayed(m, (half & mask(BYTE_LANES, len(half)))[:width],
                                         f"w{k}_{h}_{par}"))
            spread.append(row)

        # stage 2: products, four to a multiplier (below 2^16, they fit their 16-bit
        # lanes), then split into two words of 32-bit lanes for the sums
        split: list[tuple[int, int, int, list[int]]] = []  # (group, sub, width, bytes)
        for g, (_h, _par, js) in enumerate(groups):
            for sub in range(min(2, len(js))):
                sel = js[sub::2]
                split.append((g, sub, 32 * (len(sel) - 1) + 16, sel))
        per_product = per_product_multipliers(self.per_product, platform)
        # per product, the later half of the multipliers of an activation take it from
        # a copy of its register: one register drove block_out DSP blocks, which the
        # placer spreads over the die (an FPGA critical path). The copy's value at
        # configuration differs in every bit, or synthesis merges it back (its value
        # before the first tile is never read)
        act_far = act
        if per_product and len(split) > 1:
            act_far = [[self._delayed(m, offset_act[b][k], f"a{b}_{k}_far", init=0xFF)
                        for k in range(n_in)] for b in range(cfg.batch)]
        prods = []  # [b][split][k]: a packed word, or (per product) its lanes' products
        packed: dict[tuple[int, int, int], Signal] = {}  # (b, group, k) -> product word
        for b in range(cfg.batch):
            per_b = []
            for n, (g, sub, width, sel) in enumerate(split):
                terms = []
                for k in range(n_in):
                    if per_product:
                        near = n < (len(split) + 1) // 2
                        terms.append(self._products(m, (act if near else act_far)[b][k],
                                                    spread[k][g], sel, f"p{b}_{n}_{k}"))
                        continue
                    # the packed product is registered, then split into the two words
                    # of 32-bit lanes (one register where two split words would take
                    # a store and a load each in Verilator); the split words are whole
                    # 64-bit words (top lanes zero), which Verilator neither masks nor
                    # truncates
                    if (b, g, k) not in packed:
                        packed[b, g, k] = self._delayed(m, act[b][k] * spread[k][g],
                                                        f"p{b}_{g}_{k}")
                    p = packed[b, g, k]
                    terms.append((p >> (16 * sub)) & mask(HALF_LANES, max(64, width)))
                per_b.append(terms)
            prods.append(per_b)
        # A and W trees start one stage early and wait a cycle for the product trees
        # (packed, as machine words: terms zero-extended, sums taken modulo the word)
        def side_sum(terms: list[Value], name: str) -> Value:
            if per_product:
                return self._tree(m, terms, name)
            word = 32 if len(terms[0]) <= 32 else 64
            total = self._tree(m, [Cat(t, Const(0, word - len(t))) for t in terms], name,
                               wrap=word)
            return total[:len(terms[0]) + self.tree_depth]

        a_tree = [side_sum(act[b], f"asum{b}") for b in range(cfg.batch)]
        w_tree = [side_sum([spread[k][g] for k in range(n_in)], f"wsum{g}")
                  for g in range(len(groups))]

        def correction(b: int, g: int, j: int) -> Value:
            """A + W of channel ``j`` of group ``g`` for batch row ``b``, as the stage
            of the product tree's last level has it."""
            w = w_tree[g][16 * groups[g][2].index(j):][:16]
            return self._delayed(m, a_tree[b] + w, f"corr{b}_{g}_{j}")
        if not per_product:
            a_sum = [self._delayed(m, a_tree[b], f"asum{b}_d") for b in range(cfg.batch)]
            w_sum = [self._delayed(m, w_tree[g], f"wsum{g}_d") for g in range(len(groups))]

        # accumulator and valid travel alongside the products and the tree
        acc_delay = [self.acc_in]
        valid_delay = [self.in_valid]
        clear_delay: list[Value] = [self.in_clear]
        for stage in range(self.latency - 1):
            valid_d = Signal(name=f"valid_d{stage}")  # the valid chain keeps its reset
            m.d.sync += valid_d.eq(valid_delay[-1])
            acc_delay.append(self._delayed(m, acc_delay[-1], f"acc_d{stage}"))
            clear_delay.append(self._delayed(m, clear_delay[-1], f"clear_d{stage}"))
            valid_delay.append(valid_d)
        acc = acc_delay[-1]
        clear = clear_delay[-1]

        bias = (OFFSET * OFFSET * n_in) % (1 << cfg.acc_width)
        # the output registers without a reset (out_valid says what they hold): the
        # engine's start, which resets the core, would otherwise reach every bit of
        # them beside the clear (an FPGA critical path)
        acc_out = Signal(self.acc_out.shape(), reset_less=True)
        result = Signal(self.result.shape(), reset_less=True)
        m.d.comb += [self.acc_out.eq(acc_out), self.result.eq(result)]
        for b in range(cfg.batch):
            for n, (g, _sub, width, sel) in enumerate(split):
                h, par, js = groups[g]
                if per_product:
                    # a tree per channel, as wide as its sums (19 bits for 8 terms):
                    # the packed word's lanes, summed as one, made the carry chains
                    # as long as the word (an FPGA critical path)
                    sums = [self._tree(m, [terms[t] for terms in prods[b][n]],
                                       f"s{b}_{n}_{t}") for t in range(len(sel))]
                else:
                    total = self._tree(m, prods[b][n], f"s{b}_{n}", wrap=max(64, width))
                    sums = [total[32 * t:][:32] for t in range(len(sel))]
                for t, j in enumerate(sel):
                    o = 8 * h + j
                    s = sums[t]  # Σ a'w' of channel o
                    # exact signed value, wrapped or extended to 32 bits. Packed, the
                    # bias first: a sum of unsigned values then needs no sign
                    # extension, and Verilator computes its wrapped value in 32-bit
                    # words (synthesis for the DSP blocks needs more carry logic so)
                    dot = Signal(cfg.acc_width, name=f"dot{b}_{o}")
                    if per_product:
                        # A + W summed a stage early: one carry chain fewer in this
                        # stage's three (an FPGA critical path)
                        exact = s - (correction(b, g, j) << 7) + bias
                    else:
                        w = w_sum[g][16 * js.index(j):][:16]  # Σ w' of channel o
                        exact = (s + bias) - ((a_sum[b] + w) << 7)
                    m.d.comb += dot.eq(sign_extended(exact, cfg.acc_width))
                    with m.If(clear):
                        m.d.sync += [acc_out[b][o].eq(acc[b][o]),
                                     result[b * n_out + o].eq(0)]
                    with m.Else():
                        m.d.sync += [
                            acc_out[b][o].eq((acc[b][o] + dot)[:cfg.acc_width]),
                            result[b * n_out + o].eq(dot),
                        ]
        m.d.sync += self.out_valid.eq(valid_delay[-1])
        return m

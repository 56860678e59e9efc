"""The vector ALU: one element-wise int32 operation over an accumulator vector per cycle."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import AluOp, HwConfig, Opcode, insn_formats
from tensorfab.isa.formats import (
    MAX_SHIFT,
    REQUANT_MAX_SHIFT,
    REQUANT_MULTIPLIER_BITS,
    REQUANT_RECORD,
    SHIFT_OPS,
    alu_requant_supported,
)

from .alu_sequential import sequential_products
from .dsp import RegisteredMultiplier, per_product_multipliers
from .signatures import WGT_OFFSET, wgt_entry_order

__all__ = ["FIRST_CYCLE_OPS", "AluSignature", "VectorAlu", "dsp_products", "finish_clip",
           "finish_lane", "first_cycle", "first_cycle_kind", "partial_operands",
           "partial_products", "registered_low_words", "registered_partial_products",
           "requant_finish", "requant_first", "sum_high_word", "sum_low_word"]


#: Bits of the low half of each 32-bit multiplication operand: the halves' products
#: fit the FPGA's 18×18 multipliers, and :class:`VectorAlu` sums them over the next
#: two cycles.
HALF = 16


def partial_products(x: Value, y: Value) -> list[Value]:
    """``x · y`` as four products of 16-bit halves, for :func:`sum_low_word` and
    :func:`sum_high_word` to add.

    ``x = x_hi·2^16 + x_lo`` with ``x_lo`` unsigned (likewise ``y``), so
    ``x·y = x_lo·y_lo + (x_lo·y_hi + x_hi·y_lo)·2^16 + x_hi·y_hi·2^32``. Each product
    fits an 18×18 signed multiplier; registering them before their sum splits the
    multiplication over two clock periods. (Register them directly, under the
    operation's enable: Verilator then computes them only when it loads the
    registers, not on every cycle.)

    Parameters
    ----------
    x, y : Value
        Operands of at most 33 bits; signed or unsigned as their shapes say.

    Returns
    -------
    list[Value]
        ``[lo·lo, lo·hi, hi·lo, hi·hi]``.
    """
    return [x_half * y_half for x_half, y_half in partial_operands(x, y)]


def partial_operands(x: Value, y: Value) -> list[tuple[Value, Value]]:
    """The operand pairs of :func:`partial_products`' four products: the 16-bit halves
    of ``x`` and ``y``, the low ones unsigned, the high ones signed if their value is."""
    def halves(v: Value) -> tuple[Value, Value]:
        hi = v[HALF:]
        return v[:HALF], hi.as_signed() if v.shape().signed else hi

    x_lo, x_hi = halves(x)
    y_lo, y_hi = halves(y)
    return [(x_lo, y_lo), (x_lo, y_hi), (x_hi, y_lo), (x_hi, y_hi)]


def sum_low_word(parts: list[Value]) -> tuple[Value, Value, Value]:
    """The first half of the sum of :func:`partial_products`' four parts: the low word
    of the 64-bit product with its carry into the high word (34 bits: the carry is 0
    to 2), and the high word's other two terms (the middle products' high parts
    summed, and ``hi·hi``), for :func:`sum_high_word` a cycle later.

    The low word's upper half is one sum of three terms (``lo·lo``'s upper half and
    the middle products' low halves), which synthesis makes a carry-save layer and one
    carry chain, and the middle products' high parts are summed beside it: no chain
    waits for another's carry (the middle products' sum, then the low word's, in a row
    was an FPGA critical path). No intermediate is wider than 35 bits (a 65-bit sum
    would make Verilator use multi-word arithmetic, which it computes on every cycle
    whether the ALU is busy or not).
    """
    ll, lh, hl, hh = parts
    upper = ll[HALF:2 * HALF] + lh[:HALF] + hl[:HALF]  # 18 bits
    mid_hi = (lh >> HALF) + (hl >> HALF)  # the 2^32 part of the middle products
    return Cat(ll[:HALF], upper), mid_hi, hh


def sum_high_word(lo: Value, mid_hi: Value, hh: Value, carry: Value | None = None) -> Value:
    """The signed 64-bit product from :func:`sum_low_word`'s three values; with
    ``carry`` (:func:`registered_low_words`' carries into the high word, the low
    word's own ``lo[32:34]`` by default) the high word adds that instead."""
    hi = hh + mid_hi + (lo[2 * HALF:] if carry is None else carry)
    return Cat(lo[:2 * HALF], hi[:2 * HALF]).as_signed()


#: The operations :func:`first_cycle` computes, in the order of its one-hot ``kind``'s
#: bits.
FIRST_CYCLE_OPS = (AluOp.ADD, AluOp.MIN, AluOp.CLIP, AluOp.MAX, AluOp.SHR, AluOp.SHR_RND,
                   AluOp.SHL, AluOp.MOV)


def first_cycle_kind(op: Value) -> Value:
    """The one-hot ``kind`` of :func:`first_cycle` for the AluOp code ``op`` (bit ``k``:
    ``op`` is ``FIRST_CYCLE_OPS[k]``; none for the others)."""
    return Cat(*(op == code for code in FIRST_CYCLE_OPS))


def first_cycle(m: Module, en: Value, kind: Value, a: list[Value], b: list[Value],
                width: int) -> tuple[list[Value], list[Value], list[Value], list[Value]]:
    """First-cycle logic of every lane, registered when ``en``: ``OP(a, b)`` (docs/isa.md)
    for every operation but MUL and MULHI, which :func:`finish_lane` completes from
    :func:`partial_products` in the third cycle (they give 0 here), and SHR_RND, whose
    rounding increment :func:`finish_lane` adds.

    Each operation's arithmetic sits in its own case of a switch on the operation's
    one-hot ``kind`` inside the enable, so Verilator computes it only for that
    operation: logic between registers that is not under their load condition runs on
    every cycle (docs/architecture.md, "Where Verilator's time goes"). On an FPGA
    each register's input is then an AND-OR of the flags' bits (from a register,
    :class:`VectorAlu`'s ``op_held``), not a decode of the code.

    Parameters
    ----------
    m : Module
        Module the registers are added to.
    en : Value
        Load the registers (an operation enters the ALU).
    kind : Value
        :func:`first_cycle_kind` of the operation; no bit set (MUL, MULHI, REQUANT,
        codes outside :class:`~tensorfab.isa.AluOp`) gives 0.
    a, b : list of Value
        Each lane's signed operands of ``width`` bits.
    width : int
        Element width (32).

    Returns
    -------
    tuple of lists
        Per lane, registered: the arithmetic operations' result (ADD, shifts, MOV; 0
        for the others) and the comparing operations' (MIN, MAX; for CLIP
        ``min(a, b)``; 0 for the others), whose OR is the result (SHR_RND: ``a >> s``);
        CLIP's ``a > -b - 1`` for :func:`finish_clip`; SHR_RND's rounding increment (1
        bit, defined for SHR_RND only). For a shift operation only the low five bits
        of ``b`` count here; :class:`VectorAlu` flags other amounts.
    """
    lanes = len(a)
    shift_bits = (width - 1).bit_length()
    arith = Signal(width * lanes, name="arith", reset_less=True)
    ordered = Signal(width * lanes, name="ordered", reset_less=True)
    above_lo = Signal(lanes, name="above_lo", reset_less=True)
    round_up = Signal(lanes, name="round_up", reset_less=True)

    def lane(reg: Signal, i: int) -> Value:
        return reg[width * i:][:width]

    def put(reg: Signal, values: list[Value]) -> list:
        return [lane(reg, i).eq(v) for i, v in enumerate(values)]

    zero = [Const(0, width)] * lanes
    s = [bi.as_unsigned()[:shift_bits] for bi in b]
    ab = list(zip(a, b, strict=True))
    as_ = list(zip(a, s, strict=True))
    # CLIP = min(max(a, lo), b), lo = ~b = -b - 1: min(a, b) when a > lo, else lo when
    # lo < b (i.e. b >= 0), else b; this cycle gives min(a, b) and whether a > lo,
    # :func:`finish_clip` the choice in the next. a > -b - 1 is a + b >= 0: the sign
    # of ADD's sum (one carry chain for both, nothing but its last cell before the
    # register)
    sums = [ai + bi for ai, bi in ab]  # width + 1 bits, signed
    # MIN, MAX and CLIP's min(a, b) choose by one comparison, a < b (MAX takes b where
    # it holds; where a = b either operand is the result): one carry chain, then a LUT
    below = list(zip((ai < bi for ai, bi in ab), a, b, strict=True))

    def case(code: AluOp) -> str:  # the kind's pattern (most significant bit first)
        return "".join("1" if c == code else "-" for c in reversed(FIRST_CYCLE_OPS))
    with m.If(en), m.Switch(kind):
        with m.Case(case(AluOp.ADD)):
            m.d.sync += put(arith, [si[:width] for si in sums])
            m.d.sync += put(ordered, zero)
        with m.Case(case(AluOp.MIN)):
            m.d.sync += put(arith, zero)
            m.d.sync += put(ordered, [Mux(lt, ai, bi) for lt, ai, bi in below])
        with m.Case(case(AluOp.CLIP)):
            m.d.sync += put(arith, zero)
            m.d.sync += put(ordered, [Mux(lt, ai, bi) for lt, ai, bi in below])
            m.d.sync += above_lo.eq(Cat(*(~si[width] for si in sums)))
        with m.Case(case(AluOp.MAX)):
            m.d.sync += put(arith, zero)
            m.d.sync += put(ordered, [Mux(lt, bi, ai) for lt, ai, bi in below])
        with m.Case(case(AluOp.SHR)):
            m.d.sync += put(arith, [ai >> si for ai, si in as_])
            m.d.sync += put(ordered, zero)
        with m.Case(case(AluOp.SHR_RND)):
            m.d.sync += put(arith, [ai >> si for ai, si in as_])
            m.d.sync += put(ordered, zero)
            m.d.sync += round_up.eq(Cat(*(_round_up(ai, si, width)
                                          for ai, si in as_)))
        with m.Case(case(AluOp.SHL)):
            m.d.sync += put(arith, [(ai << si)[:width] for ai, si in as_])
            m.d.sync += put(ordered, zero)
        with m.Case(case(AluOp.MOV)):
            m.d.sync += put(arith, b)
            m.d.sync += put(ordered, zero)
        with m.Default():
            m.d.sync += [arith.eq(0), ordered.eq(0)]
    return ([lane(arith, i).as_signed() for i in range(lanes)],
            [lane(ordered, i).as_signed() for i in range(lanes)],
            [above_lo[i] for i in range(lanes)], [round_up[i] for i in range(lanes)])


def _round_up(a: Value, s: Value, width: int) -> Value:
    """SHR_RND's rounding increment of ``a >> s``: rounding half away from zero, rem =
    a mod 2^s exceeds (2^s - 1) >> 1 plus the sign, i.e. bit s-1 of a is set and, for
    a < 0, some bit below it too (no carry chain: this and the shift run side by side,
    the +1 comes two cycles later)."""
    below = Cat(*(s > k + 1 for k in range(width - 2)))  # bits below bit s-1
    at = Cat(*(s == k + 1 for k in range(width - 1)))  # bit s-1 (none for s = 0)
    au = a.as_unsigned()
    return (au[:width - 1] & at).any() & (~a[width - 1] | (au[:width - 2] & below).any())


def finish_clip(ordered: Value, above_lo: Value, b: Value) -> Value:
    """CLIP's result from :func:`first_cycle`'s ``ordered`` (``min(a, b)``) and
    ``above_lo`` (``a > -b - 1``), registered, and the operand ``b``."""
    return Mux(above_lo, ordered, Mux(b[-1], b, ~b))


def finish_lane(m: Module, kind: dict[str, Value], prod: Value, saturate: Value,
                other: Value, round_up: Value, width: int) -> Value:
    """Third-cycle logic of one lane: MUL and MULHI from ``prod``, the 64-bit sum of
    the partial products (one 32×32 → 64-bit product serves both: the low
    half for MUL, the rounded high half for MULHI), SHR_RND's rounding increment added
    to its shift, any other operation's registered ``other`` result.

    ``kind`` holds the registered one-hot flags ``"mul"``, ``"mulhi"`` and
    ``"shr_rnd"`` of the operation. For MULHI ``prod``'s high word already carries
    gemmlowp's nudge 2^30 (:func:`registered_low_words`' ``nudge``): the result is
    the nudged product's bits 31 to 61, whose lowest is ``prod[31] ^ prod[30]``.
    ``saturate`` is MULHI's one overflow, ``a = b = -2^31``, flagged in the first cycle.
    """
    high = Cat(prod[width - 1] ^ prod[width - 2], prod[width:][:width - 1])
    out = Signal(signed(width))
    with m.If(kind["mul"]):
        m.d.comb += out.eq(prod[:width])
    with m.Elif(kind["mulhi"]):
        m.d.comb += out.eq(Mux(saturate, (1 << (width - 1)) - 1, high))
    with m.Elif(kind["shr_rnd"]):
        m.d.comb += out.eq(other + round_up)
    with m.Else():
        m.d.comb += out.eq(other)
    return out


def requant_first(m: Module, go: Value, a: Value, record: dict[str, Value]
                  ) -> dict[str, Value]:
    """First cycle of REQUANT on one lane (docs/isa.md): the operands of
    ``(a + bias) · multiplier``, and the clamp bounds relative to the zero point.

    Parameters
    ----------
    m : Module
        Module the lane's logic is added to.
    go : Value
        The operation is REQUANT (the values are only defined with ``go``; each is
        ``Mux(go, value, <another signal>)``: a conditional whose other arm is a signal
        stays a branch in Verilator's C++, so the arithmetic runs only for REQUANT,
        where an arm of 0 would become a mask and always run).
    a : Value
        The signed 32-bit accumulator.
    record : dict[str, Value]
        The channel's record fields (signed or unsigned as :data:`REQUANT_RECORD`
        declares them).

    Returns
    -------
    dict[str, Value]
        The multiplication's operands ``x`` and ``y`` (for the lane's
        :func:`partial_products`, which MUL and MULHI share), and what
        :func:`requant_finish` needs besides, to be registered between the two:
        ``shift``, ``lo`` and ``hi`` (less the zero point) and ``zero_point``.
    """
    t = Signal(signed(32))
    m.d.comb += t.eq(Mux(go, a + record["bias"], a))

    # clamp(r + Z, lo, hi) = clamp(r, lo - Z, hi - Z) + Z: the wide value compared
    zp = record["zero_point"]
    lo = Signal(signed(9))
    hi = Signal(signed(9))
    m.d.comb += [lo.eq(Mux(go, record["lo"] - zp, zp)), hi.eq(Mux(go, record["hi"] - zp, zp))]
    return {"x": t, "y": record["multiplier"][:REQUANT_MULTIPLIER_BITS],
            "shift": record["shift"][:6], "lo": lo, "hi": hi,
            "zero_point": zp}


def requant_finish(m: Module, go: Value, first: dict[str, Value]) -> Value:
    """Last cycle of REQUANT on one lane: ``clamp(RDBPOT(p, shift) + zero_point, lo,
    hi)`` with ``p = (a + bias) · multiplier``.

    Parameters
    ----------
    m : Module
        Module the lane's logic is added to.
    go : Value
        The registered operation is REQUANT (as in :func:`requant_first`).
    first : dict[str, Value]
        :func:`requant_first`'s values, registered, with ``product``: the sum of the
        partial products of its ``x · y``.

    Returns
    -------
    Value
        A signed 32-bit signal (the clamped result, with ``go``). Shifts past
        REQUANT_MAX_SHIFT give an unspecified result; :class:`VectorAlu` flags them.
    """
    # Intermediates are at most 64 bits wide (Verilator handles wider ones word by
    # word). p is the product itself: Verilator would sign-extend another arm of a
    # multiplexer here (a 9-bit bound to 63 bits) on every cycle
    p = Signal(signed(63))  # |t · M| < 2^62 with the 31-bit multiplier
    m.d.comb += p.eq(first["product"])
    n = first["shift"]
    sh = Signal(7)  # 64 - n: masks made by right shifts keep 64 bits
    m.d.comb += sh.eq(Mux(go, 64 - n, n))
    # RoundingDivideByPOT as (p + nudge) >> n: nudge 2^(n-1), less one for p < 0
    nudge = Mux(p[62], Const((1 << 63) - 1, 64) >> sh, Const(1 << 63, 64) >> sh)[:62]
    r = Signal(signed(64))
    m.d.comb += r.eq(Mux(go, (p + nudge) >> n, p))
    lo, hi, zp = first["lo"], first["hi"], first["zero_point"]
    r_lo = Signal(signed(64))
    m.d.comb += r_lo.eq(Mux(go, Mux(r > lo, r, lo), r))
    out = Signal(signed(32))  # within [lo, hi] or hi: 10 bits hold the clamped value
    m.d.comb += out.eq(Mux(go, Mux(r_lo < hi, r_lo, hi)[:10].as_signed() + zp, r_lo[:32]))
    return out


def registered(m: Module, en: Value, value: Value, name: str) -> Signal:
    """``value`` in a register loaded when ``en`` (Verilator computes ``value`` only
    then). Reset-less: the valid bits say what a register holds, and a reset would add
    two more conditions to every register's next value in Verilator's C++ (and a
    reset net on the FPGA)."""
    reg = Signal(value.shape(), name=name, reset_less=True)
    with m.If(en):
        m.d.sync += reg.eq(value)
    return reg


def registered_lanes(m: Module, en: Value, values: list[Value], name: str) -> list[Value]:
    """Every lane's ``value`` in one :func:`registered` register, each lane's part
    (sliced back out, with its shape's signedness) starting on a 32-bit word unless
    all are single bits.

    Verilator makes each register's next value on every cycle, busy or not: one wide
    register per stage and kind costs a copy of its words, where a register per lane
    cost a branch and a copy each (the three-cycle ALU's registers made the whole
    simulation of a GEMM 18 % slower).
    """
    widths = [len(v) for v in values]
    pitch = 1 if max(widths) == 1 else -(-max(widths) // 32) * 32
    reg = registered(m, en, Cat(*(Cat(v, Const(0, pitch - w)) if pitch > w else v
                                  for v, w in zip(values, widths, strict=True))), name)
    out = []
    for k, (v, w) in enumerate(zip(values, widths, strict=True)):
        part = reg[k * pitch:][:w]
        out.append(part.as_signed() if v.shape().signed else part)
    return out


def dsp_products(m: Module, en: Value, x: Value, y: Value, products: list[Value],
                 name: str) -> list[Value]:
    """:func:`partial_products` of ``x · y``, registered when ``en``, each in its own
    :class:`~.dsp.RegisteredMultiplier` (on ECP5, the DSP block's output register:
    the product no longer crosses into the fabric before its register, an FPGA
    critical path). ``products`` are the combinational products, whose shapes the
    registered ones keep."""
    out = []
    for k, ((xh, yh), prod) in enumerate(zip(partial_operands(x, y), products, strict=True)):
        # every half as a signed operand: an unsigned one gains a zero sign bit
        xs, ys = (h if h.shape().signed else Cat(h, Const(0, 1)).as_signed() for h in (xh, yh))
        mul = RegisteredMultiplier(len(xs), len(ys), signed=True)
        m.submodules[f"{name}_{k}"] = mul
        m.d.comb += [mul.a.eq(xs), mul.b.eq(ys), mul.en.eq(en)]
        part = mul.p[:len(prod)]
        out.append(part.as_signed() if prod.shape().signed else part)
    return out


def registered_partial_products(m: Module, en: Value, x: list[Value], y: list[Value],
                                per_product: bool) -> list[list[Value]]:
    """Each lane's :func:`partial_products` of ``x[i] · y[i]``, registered when ``en``:
    each in its own :class:`~.dsp.RegisteredMultiplier` with ``per_product``
    (:func:`dsp_products`), else one :func:`registered_lanes` register per product kind
    for all lanes (Verilator's speed)."""
    lanes = range(len(x))
    products = [partial_products(x[i], y[i]) for i in lanes]
    if per_product:
        return [dsp_products(m, en, x[i], y[i], products[i], f"part{i}") for i in lanes]
    return [list(p) for p in zip(*(registered_lanes(m, en, [p[k] for p in products],
                                                    f"part{k}") for k in range(4)),
                                 strict=True)]


def registered_low_words(m: Module, en: Value, parts: list[list[Value]],
                         nudge: Value | None = None
                         ) -> tuple[list[Value], list[Value], list[Value], list[Value]]:
    """Each lane's :func:`sum_low_word` of its four ``parts``, registered when ``en``:
    per lane the low word with its carry, the middle products' high part and ``hi·hi``,
    and the carry into the high word, for :func:`sum_high_word` a cycle later.

    With ``nudge`` high the carry is that of the product plus 2^30 (MULHI's rounding:
    the sum's carry, plus one when bits 30 and 31 of the low word are both set), so
    that the rounded high word takes one addition, not two in a row."""
    sums = [sum_low_word(list(p)) for p in parts]
    lo, mid_hi, hh = (registered_lanes(m, en, [s[k] for s in sums], name)
                      for k, name in enumerate(("sum_lo", "sum_mid_hi", "sum_hh")))
    if nudge is None:
        return lo, mid_hi, hh, [v[2 * HALF:] for v in lo]
    carry = registered_lanes(m, en, [
        s[0][2 * HALF:] + (nudge & s[0][2 * HALF - 1] & s[0][2 * HALF - 2]) for s in sums],
        "sum_carry")
    return lo, mid_hi, hh, carry


def AluSignature(cfg: HwConfig, in_load: bool = False) -> wiring.Signature:
    """The vector ALU's ports, as :class:`VectorAlu` sees them.

    ``op``, ``a``, ``b``, ``rec`` and ``in_valid`` in, and ``in_load`` if asked for
    (:class:`VectorAlu`'s ``load_enable``); ``result``, ``out_valid`` and
    ``shift_error`` out. Vectors are
    ``ArrayLayout(signed(acc_width), batch·block_out)``; ``rec`` is a weight-buffer
    entry (REQUANT's records, as the buffer stores them).
    """
    vec = data.ArrayLayout(signed(cfg.acc_width), cfg.batch * cfg.block_out)
    op_width = insn_formats(cfg)[Opcode.ALU].field("op").width
    return wiring.Signature({
        "op": In(op_width),
        "a": In(vec),
        "b": In(vec),
        "rec": In(cfg.block_out * cfg.block_in * cfg.wgt_width),
        "in_valid": In(1),
        **({"in_load": In(1)} if in_load else {}),
        "result": Out(vec),
        "out_valid": Out(1),
        "shift_error": Out(1),
    })


class VectorAlu(wiring.Component):
    """Element-wise ALU over ``batch × block_out`` int32 lanes; the compute engine's ALU.

    Three cycles per operation, one operation per cycle (:attr:`LATENCY` = 2): the
    first computes every operation but MUL, MULHI and REQUANT, and those operations'
    multiplications as partial products of 16-bit halves (:func:`partial_products`,
    each one 18×18 multiplier on an FPGA), all registered; the second sums the
    products' low word (:func:`sum_low_word`); the third their high word and
    finishes MUL (low half of the 64-bit product), MULHI (rounded high half; the two
    share the product), REQUANT (rounding shift and clamp) and SHR_RND (its rounding
    increment, found in the first cycle, is added). So no clock period holds a
    32-bit multiplication and its sum, nor the sum and MULHI's rounding (FPGA
    critical paths when they did). Operations follow the ALU table of docs/isa.md bit
    for bit; an op code outside :class:`~tensorfab.isa.AluOp` (which the decoder
    rejects as ``BAD_FIELD``) yields zeros. REQUANT (where
    :func:`~tensorfab.isa.formats.alu_requant_supported`) takes each lane's channel record
    from :attr:`rec` instead of ``b``.

    Parameters
    ----------
    cfg : HwConfig
        Gives the lane count (``batch * block_out``), the element width
        (``acc_width``) and the op field width.
    per_product : bool, optional
        Each partial product in its own :class:`~.dsp.RegisteredMultiplier`
        (:func:`dsp_products`) instead of one register per product kind for all lanes
        (same latency, same results). None (the default): per product on an ECP5 build
        that may use DSP blocks, whose own output registers then hold the products;
        the shared registers elsewhere, for Verilator's speed.
    op_held : bool, optional
        ``op`` holds its value from the cycle before each ``in_valid`` on (the compute
        engine's ALU pipeline loads it as an instruction starts, cycles before its
        first operation): the first cycle's decode of it is then a register, loaded
        on every cycle, so the operation's choice of each lane's first-cycle result
        starts at flip-flops. False (the default): decoded in the cycle of
        ``in_valid``.
    load_enable : bool, optional
        The first cycle's registers load on a port of their own, ``in_load``, which
        holds in every cycle of ``in_valid`` and may hold in others (the compute
        engine's: a micro-op at S3, before its error drops it). Their values matter
        only in the cycle after ``in_valid``, so the results are the same; the
        registers' clock enable then need not wait for what drops an operation (an
        FPGA critical path when it did). False (the default): they load on
        ``in_valid``.

    Attributes
    ----------
    op : In(unsigned)
        AluOp code, as wide as the ALU instruction's ``op`` field.
    a, b : In(ArrayLayout(signed(acc_width), lanes))
        Operand vectors; lane ``i`` occupies bits ``[32 i, 32 i + 32)``.
    rec : In(block_out · block_in · wgt_width)
        The weight entry holding REQUANT's records (column-major, offset binary, as
        :func:`~tensorfab.hw.signatures.wgt_entry_order` stores weights).
    in_valid : In(1)
        The inputs hold an operation this cycle.
    in_load : In(1)
        With ``load_enable`` only: load the first cycle's registers (at least with
        ``in_valid``).
    result : Out(ArrayLayout(signed(acc_width), lanes))
        ``OP(a, b)`` per lane (for a shift, by the low five bits of ``b``), of the
        operation accepted :attr:`LATENCY` cycles before.
    out_valid : Out(1)
        ``in_valid``, :attr:`LATENCY` cycles later.
    shift_error : Out(1)
        With ``out_valid``: the operation is a shift and some lane's ``b`` is outside
        ``0..MAX_SHIFT``, or REQUANT and some record's shift is past
        ``REQUANT_MAX_SHIFT`` (the engine's ``SHIFT_RANGE``; the result must not be
        written).
    """

    #: Cycles from an accepted input to its result.
    LATENCY = 2

    def __init__(self, cfg: HwConfig, per_product: bool | None = None,
                 op_held: bool = False, load_enable: bool = False) -> None:
        self.cfg = cfg
        self.per_product = per_product
        self.op_held = op_held
        self.load_enable = load_enable
        self.lanes = cfg.batch * cfg.block_out
        self.width = cfg.acc_width
        super().__init__(AluSignature(cfg, in_load=load_enable))

    def elaborate(self, platform: object) -> Module:
        """Build the lanes and the registers between the three cycles."""
        m = Module()
        cfg = self.cfg
        en = self.in_valid
        en2 = Signal()  # the second cycle holds an operation
        load = self.in_load if self.load_enable else en  # the first cycle's registers'
        records = self._records() if alu_requant_supported(cfg) else None
        op2 = registered(m, load, self.op, "op2")

        def kinds(op: Value, stage: str, held: bool = False
                  ) -> tuple[Signal, Signal, Signal]:
            """Whether the operation of a cycle is REQUANT, MUL or MULHI, CLIP (with
            ``held``, decoded from the cycle before)."""
            requant, mul, clip = (Signal(name=f"is_{k}{stage}")
                                  for k in ("requant", "mul", "clip"))
            decoded = [requant.eq(op == AluOp.REQUANT),
                       mul.eq((op == AluOp.MUL) | (op == AluOp.MULHI)),
                       clip.eq(op == AluOp.CLIP)]
            if held:
                m.d.sync += decoded
            else:
                m.d.comb += decoded
            return requant, mul, clip
        is_requant, is_mul, is_clip = kinds(self.op, "", self.op_held)
        kind1 = Signal(len(FIRST_CYCLE_OPS), name="kind1")
        if self.op_held:
            m.d.sync += kind1.eq(first_cycle_kind(self.op))
        else:
            m.d.comb += kind1.eq(first_cycle_kind(self.op))
        is_requant2, is_mul2, is_clip2 = kinds(op2, "2")
        # the third cycle's operation as registered one-hot flags: its choice of the
        # result starts at flip-flops, not at a decode of the code
        kind3 = {name: registered(m, en2, op2 == op, f"is_{name}3")
                 for name, op in (("mul", AluOp.MUL), ("mulhi", AluOp.MULHI),
                                  ("shr_rnd", AluOp.SHR_RND))}
        is_requant3 = registered(m, en2, is_requant2, "is_requant3")
        most_negative = Const(-(1 << (self.width - 1)), signed(self.width))
        lanes = range(self.lanes)
        a = [self.a[i].as_signed() for i in lanes]
        b = [self.b[i].as_signed() for i in lanes]

        # ---- first cycle: each lane's logic, registered per stage and kind
        arith, ordered, above_lo, round_up = first_cycle(m, load, kind1, a, b, self.width)
        clip_b = registered_lanes(m, load & is_clip, b, "clip_b")
        saturate = registered_lanes(m, load, [(a[i] == most_negative) & (b[i] == most_negative)
                                            for i in lanes], "saturate")
        # one multiplier per lane: MUL and MULHI multiply a·b, REQUANT (a + bias)·M
        x, y = a, b
        uses_product, uses_product2 = is_mul, is_mul2
        rq: list[dict[str, Value]] = []
        if records is not None:
            rq = [requant_first(m, is_requant, a[i], records[i % cfg.block_out])
                  for i in lanes]
            x = [Mux(is_requant, rq[i]["x"], a[i]) for i in lanes]
            y = [Mux(is_requant, rq[i]["y"], b[i]) for i in lanes]
            uses_product = is_mul | is_requant
            uses_product2 = is_mul2 | is_requant2
        uses_product3 = registered(m, en2, uses_product2, "uses_product3")
        per_product = per_product_multipliers(self.per_product, platform)
        last: Value | None = None  # a sequential multiplication's last cycle
        if cfg.sequential_multiplier:
            parts, last = sequential_products(m, en & uses_product, x, y, per_product)
        else:
            # in DSP blocks the products load on every cycle (the second cycle reads
            # them only after an operation that uses them; a clock enable from the
            # engine's error register and the decode into every block was an FPGA
            # critical path); elsewhere only then (Verilator multiplies only then)
            mul_en = Const(1) if per_product else load & uses_product
            parts = registered_partial_products(m, mul_en, x, y, per_product)
        rq_fields = [k for k in (rq[0] if rq else {}) if k not in ("x", "y")]
        rq_q = {k: registered_lanes(m, load & is_requant, [r[k] for r in rq], f"rq_{k}")
                for k in rq_fields}

        # ---- second cycle: the products' low word, CLIP's choice
        # the sum in two cycles, once for MUL, MULHI and REQUANT (registered under
        # their enable, and the other arm of the product's multiplexer a signal, so
        # that Verilator adds only for those)
        lo, mid_hi, hh, carry = registered_low_words(m, en2 & uses_product2, parts,
                                                     nudge=op2 == AluOp.MULHI)
        other3 = registered_lanes(m, en2, [
            arith[i] | Mux(is_clip2, finish_clip(ordered[i], above_lo[i], clip_b[i]), ordered[i])
            for i in lanes], "other3")
        round_up3 = registered_lanes(m, en2, round_up, "round_up3")
        saturate3 = registered_lanes(m, en2, saturate, "saturate3")
        rq3 = {k: registered_lanes(m, en2 & is_requant2, v, f"rq3_{k}") for k, v in rq_q.items()}

        # ---- third cycle: the products' high word, each operation's finish
        bad = []
        for i in lanes:
            product = Signal(signed(2 * self.width), name=f"product{i}")
            m.d.comb += product.eq(Mux(uses_product3,
                                       sum_high_word(lo[i], mid_hi[i], hh[i], carry[i]),
                                       lo[i]))
            lane = finish_lane(m, kind3, product, saturate3[i], other3[i], round_up3[i],
                               self.width)
            if records is not None:
                finish = {k: v[i] for k, v in rq3.items()} | {"product": product}
                lane = Mux(is_requant3, requant_finish(m, is_requant3, finish), lane)
            m.d.comb += self.result[i].eq(lane)
            bad.append(b[i].as_unsigned() > MAX_SHIFT)
        # the checks registered per lane (and REQUANT's records' together) under the
        # enable, not ANDed with it: they then run only for an operation; ORed in the
        # second cycle (every lane's 27-bit test and their OR in one cycle were an FPGA
        # critical path)
        lanes_bad2 = registered(m, load, Cat(*bad), "lanes_bad2")
        is_shift2 = Signal()
        m.d.comb += is_shift2.eq(Cat(*(op2 == op for op in sorted(SHIFT_OPS))).any())
        shift_bad2 = is_shift2 & lanes_bad2.any()
        if records is not None:
            rec_bad = Signal()  # the other arm a signal: checked only for REQUANT
            m.d.comb += rec_bad.eq(Mux(is_requant, Cat(*(r["shift"] > REQUANT_MAX_SHIFT
                                                         for r in records)).any(), is_requant))
            shift_bad2 = shift_bad2 | registered(m, load, rec_bad, "rec_bad2")
        # (a sequential multiplication reaches the second cycle after its last)
        m.d.sync += [en2.eq(en if last is None else (en & ~uses_product) | last),
                     self.out_valid.eq(en2),
                     self.shift_error.eq(en2 & shift_bad2)]
        return m

    def _records(self) -> list[dict[str, Value]]:
        """Each channel's REQUANT record fields, wired out of :attr:`rec`."""
        cfg = self.cfg
        order = wgt_entry_order(cfg)  # buffer byte of row byte w[o][k]
        rec = self.rec
        out = []
        for o in range(cfg.block_out):
            row = [rec[8 * order[o * cfg.block_in + k]:][:8] ^ WGT_OFFSET
                   for k in range(cfg.block_in)]
            fields: dict[str, Value] = {}
            for name, offset, size, is_signed in REQUANT_RECORD:
                raw = Cat(*row[offset:offset + size])
                fields[name] = raw.as_signed() if is_signed else raw
            out.append(fields)
        return out

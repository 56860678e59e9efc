"""The requantizing STORE's datapath: accumulator entries through REQUANT's arithmetic,
narrowed to int8, with the records the store engine read from accumulator entries."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import HwConfig
from tensorfab.isa.formats import (
    REQUANT_MAX_SHIFT,
    REQUANT_RECORD,
    REQUANT_RECORD_WORDS,
    requant_supported,
)

from .alu import (
    registered,
    registered_lanes,
    registered_low_words,
    registered_partial_products,
    requant_finish,
    requant_first,
    sum_high_word,
)
from .dsp import per_product_multipliers
from .signatures import acc_entry_bits

__all__ = ["StoreRequant"]

#: Cycles from an entry in :attr:`StoreRequant.acc` to its narrowed bytes.
STORE_REQUANT_LATENCY = 4


class StoreRequant(wiring.Component):
    """REQUANT of whole accumulator entries for a requantizing STORE (docs/isa.md).

    The three record words are loaded from :attr:`acc` (``rec_load``'s bit ``k``: word
    ``k``, lanes ``0..block_out-1``, batch row 0). Then each entry given with
    ``in_valid`` comes out of :attr:`out` :data:`STORE_REQUANT_LATENCY` cycles later,
    every lane ``clamp(RDBPOT((a + bias) · M, shift) + zero_point, lo, hi)`` with its
    channel's record, as the vector ALU's REQUANT computes it (:func:`.alu.requant_first`,
    the partial products, :func:`.alu.requant_finish`), each lane's low byte.

    Parameters
    ----------
    cfg : HwConfig
        A configuration with REQUANT.
    per_product : bool, optional
        One :class:`~.dsp.RegisteredMultiplier` per partial product (as the vector ALU;
        default: on ECP5 builds).

    Attributes
    ----------
    acc : In(acc entry bits)
        The accumulator read data.
    rec_load : In(REQUANT_RECORD_WORDS)
        Load record word ``k`` from :attr:`acc` (one-hot).
    in_valid : In(1)
        :attr:`acc` holds an entry to requantize.
    flush : In(1)
        Forget the entries in flight.
    out : Out(batch · block_out · 8)
        The requantized lanes' low bytes.
    out_valid : Out(1)
        :attr:`out` holds an entry.
    shift_bad : Out(1)
        Some record's shift is past REQUANT_MAX_SHIFT.
    """

    def __init__(self, cfg: HwConfig, per_product: bool | None = None) -> None:
        if not requant_supported(cfg):
            raise ValueError(f"config {cfg.name!r} has no REQUANT")
        self.cfg = cfg
        self.per_product = per_product
        lanes = cfg.batch * cfg.block_out
        super().__init__({
            "acc": In(acc_entry_bits(cfg)),
            "rec_load": In(REQUANT_RECORD_WORDS),
            "in_valid": In(1),
            "flush": In(1),
            "out": Out(8 * lanes),
            "out_valid": Out(1),
            "shift_bad": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        cfg = self.cfg
        width = cfg.acc_width
        lanes = range(cfg.batch * cfg.block_out)
        words = [registered(m, self.rec_load[k], self.acc[:width * cfg.block_out], f"rec{k}")
                 for k in range(REQUANT_RECORD_WORDS)]
        records = [self._fields(words, o) for o in range(cfg.block_out)]
        m.d.comb += self.shift_bad.eq(Cat(*(r["shift"] > REQUANT_MAX_SHIFT
                                            for r in records)).any())

        # ---- the entry registered: the arithmetic then reads registers of the store
        # engine's own (gated) clock only, so Verilator evaluates it on the store's
        # cycles, not on every cycle the accumulator read port's data may change
        en = Signal()
        m.d.sync += en.eq(self.in_valid & ~self.flush)
        acc = registered(m, self.in_valid, self.acc, "acc_q")

        # ---- first cycle: (a + bias) and the multiplier, into the partial products
        a = [acc[width * i:][:width].as_signed() for i in lanes]
        rq = [requant_first(m, en, a[i], records[i % cfg.block_out]) for i in lanes]
        parts = registered_partial_products(m, en, [r["x"] for r in rq], [r["y"] for r in rq],
                                            per_product_multipliers(self.per_product,
                                                                    platform))
        fields = [k for k in rq[0] if k not in ("x", "y")]
        rq2 = {k: registered_lanes(m, en, [r[k] for r in rq], f"rq_{k}") for k in fields}

        # ---- second cycle: the products' low word
        en2 = Signal()
        m.d.sync += en2.eq(en & ~self.flush)
        lo, mid_hi, hh, _ = registered_low_words(m, en2, parts)
        rq3 = {k: registered_lanes(m, en2, v, f"rq3_{k}") for k, v in rq2.items()}

        # ---- third cycle: the high word, the rounding shift and the clamp
        en3 = Signal()
        m.d.sync += en3.eq(en2 & ~self.flush)
        out = []
        for i in lanes:
            product = Signal(2 * width, name=f"product{i}")
            m.d.comb += product.eq(sum_high_word(lo[i], mid_hi[i], hh[i]))
            finish = {k: v[i] for k, v in rq3.items()} | {"product": product.as_signed()}
            out.append(requant_finish(m, en3, finish)[:8])
        # ---- the bytes registered too: the FIFO's write data chooses between them and
        # the port's data, so the arithmetic feeds registers of this clock only
        en4 = Signal()
        m.d.sync += en4.eq(en3 & ~self.flush)
        m.d.comb += [self.out.eq(registered(m, en3, Cat(*out), "out_q")),
                     self.out_valid.eq(en4)]
        return m

    def _fields(self, words: list[Value], o: int) -> dict[str, Value]:
        """Channel ``o``'s record fields out of the three record words."""
        width = self.cfg.acc_width
        fields: dict[str, Value] = {}
        for name, offset, size, is_signed in REQUANT_RECORD:
            raw = words[offset // 4][width * o + 8 * (offset % 4):][:8 * size]
            fields[name] = raw.as_signed() if is_signed else raw
        return fields

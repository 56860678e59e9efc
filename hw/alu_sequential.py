"""The vector ALU's sequential multiplier: each lane's 32×32 product from one 16×16
multiplier over :data:`~tensorfab.isa.formats.SEQUENTIAL_MULTIPLY_CYCLES` cycles (a
config with ``sequential_multiplier``)."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, Value

from tensorfab.isa.formats import SEQUENTIAL_MULTIPLY_CYCLES

from .dsp import RegisteredMultiplier

__all__ = ["sequential_products"]

#: Bits of an operand half.
_HALF = 16


def sequential_products(m: Module, start: Value, x: list[Value], y: list[Value],
                        per_product: bool) -> tuple[list[list[Value]], Signal]:
    """Each lane's ``x · y`` as the four partial products of
    :func:`~tensorfab.hw.alu.partial_products`' order (``lo·lo, lo·hi, hi·lo, hi·hi``),
    one a cycle from ``start`` on, for :func:`~tensorfab.hw.alu.sum_low_word` and
    :func:`~tensorfab.hw.alu.sum_high_word` to add once ``last`` is past.

    The halves are unsigned (one multiplier serves all four, and a 16×16 product fits
    an iCE40's ``SB_MAC16`` as an ECP5's ``MULT18X18D``); the two's-complement
    correction, ``-(x<0 ? y : 0) - (y<0 ? x : 0)`` times 2^32 modulo 2^64, is folded
    into the ``hi·hi`` part, so that the sums give the signed product.

    Parameters
    ----------
    m : Module
        Module the multipliers and registers are added to.
    start : Value
        A multiplication enters (its operands must hold for the following
        ``SEQUENTIAL_MULTIPLY_CYCLES - 1`` cycles, and none other enter meanwhile).
    x, y : list of Value
        Each lane's operands: their low 32 bits are the 32-bit two's-complement values
        multiplied.
    per_product : bool
        Each lane's multiplier a :class:`~.dsp.RegisteredMultiplier` (the ECP5's
        DSP block with its output register), else a register after ``*``.

    Returns
    -------
    tuple
        Per lane the four parts (unsigned, 32 bits; valid in the cycle after
        ``last``), and ``last``: the cycle of the last partial product.
    """
    assert SEQUENTIAL_MULTIPLY_CYCLES == 4  # a product per pair of halves
    phase_reg = Signal(2)  # the phase of the next cycle of a multiplication
    # a multiplication is in its phases 1 to 3 (the RTL executor's clock gate of the
    # ALU ticks on it: tensorfab.sim.rtl.clock_gates)
    running = Signal(name="seq_running")
    phase = Signal(2)
    m.d.comb += phase.eq(Mux(running, phase_reg, 0))
    with m.If(start):
        m.d.sync += [running.eq(1), phase_reg.eq(1)]
    with m.Elif(running):
        m.d.sync += [phase_reg.eq(phase_reg + 1), running.eq(phase_reg != 3)]
    last = Signal()
    m.d.comb += last.eq(running & (phase_reg == 3))
    go = start | running
    out = []
    for i, (xi, yi) in enumerate(zip(x, y, strict=True)):
        xu, yu = xi.as_unsigned()[:2 * _HALF], yi.as_unsigned()[:2 * _HALF]
        a = Mux(phase[1], xu[_HALF:], xu[:_HALF])
        b = Mux(phase[0], yu[_HALF:], yu[:_HALF])
        if per_product:
            mul = RegisteredMultiplier(_HALF, _HALF)
            m.submodules[f"seq_mul{i}"] = mul
            m.d.comb += [mul.a.eq(a), mul.b.eq(b), mul.en.eq(go)]
            product: Value = mul.p
        else:
            product = Signal(2 * _HALF, name=f"seq_product{i}", reset_less=True)
            with m.If(go):
                m.d.sync += product.eq(a * b)
        # the earlier products, moved out of the multiplier's register as it takes the next
        held = [Signal(2 * _HALF, name=f"seq_part{i}_{k}", reset_less=True) for k in range(3)]
        for k, reg in enumerate(held):
            with m.If(running & (phase_reg == k + 1)):
                m.d.sync += reg.eq(product)
        correction = Signal(2 * _HALF, name=f"seq_correction{i}", reset_less=True)
        with m.If(start):
            m.d.sync += correction.eq(Mux(xu[-1], yu, 0) + Mux(yu[-1], xu, 0))
        out.append([*held, (product - correction)[:2 * _HALF]])
    return out, last

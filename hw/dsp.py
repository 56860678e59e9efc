"""A multiplier whose product is registered: on ECP5, in the DSP block's own register."""

from __future__ import annotations

from amaranth.hdl import ClockSignal, Const, Instance, Module, Signal, Value, unsigned
from amaranth.hdl import signed as _signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["NO_DSP", "RegisteredMultiplier", "ecp5_dsp", "per_product_multipliers",
           "registered_product"]

#: Attribute a build sets on its platform object (True) when multipliers must stay out
#: of DSP blocks (``tensorfab fpga build --no-dsp``, Yosys' ``-nodsp``).
NO_DSP = "tensorfab_no_dsp"

#: Operand width of the ECP5's ``MULT18X18D``.
_DSP_WIDTH = 18


def ecp5_dsp(platform: object) -> bool:
    """Whether ``platform`` is an ECP5 build that may use DSP blocks."""
    return (platform is not None and getattr(platform, "family", None) == "ecp5"
            and not getattr(platform, NO_DSP, False))


def per_product_multipliers(choice: bool | None, platform: object) -> bool:
    """A datapath's ``per_product`` option (:class:`~.gemm.GemmCore`,
    :class:`~.alu.VectorAlu`): ``choice`` if given, else whether ``platform`` is an ECP5
    build that may use DSP blocks (:func:`ecp5_dsp`), where a
    :class:`RegisteredMultiplier` per product keeps each product in its block's output
    register; elsewhere the datapaths' shared registers serve Verilator's speed."""
    return choice if choice is not None else ecp5_dsp(platform)


class RegisteredMultiplier(wiring.Component):
    """``p = a × b``, one cycle later: the product is registered (loaded when ``en``).

    On an ECP5 build (:func:`ecp5_dsp`) this is one ``MULT18X18D`` with its output
    register enabled, so that no path runs from the block out into the fabric (Yosys
    never moves a fabric flip-flop into a DSP block, and a fabric register's path
    through the block and back was an FPGA critical path; nextpnr times the block's
    inputs against its output register). Its ports are connected as Yosys' own
    ``dsp_map_18x18.v`` connects them, with the register on clock 0, enabled by
    ``en`` (``CE0``), never reset. (Registering the operands in the block too put the
    buffers' block RAM outputs straight into it, a longer path.) Elsewhere (the
    Amaranth simulator, Verilator, iCE40) it is a register after ``*``, loaded only
    when ``en`` (Verilator then multiplies only then).

    Parameters
    ----------
    a_width, b_width : int
        Operand widths, at most 18.
    signed : bool
        Both operands and the product are two's complement (else all unsigned).

    Attributes
    ----------
    a : In(a_width)
    b : In(b_width)
    en : In(1, init=1)
        Load the product register this cycle.
    p : Out(a_width + b_width)
    """

    def __init__(self, a_width: int, b_width: int, *, signed: bool = False) -> None:
        for name, width in (("a_width", a_width), ("b_width", b_width)):
            if not 1 <= width <= _DSP_WIDTH:
                raise ValueError(f"RegisteredMultiplier: {name} = {width}; 1 to {_DSP_WIDTH}")
        self.signed = signed
        shape = _signed if signed else unsigned
        super().__init__({"a": In(shape(a_width)), "b": In(shape(b_width)),
                          "en": In(1, init=1), "p": Out(shape(a_width + b_width))})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        if not ecp5_dsp(platform):
            with m.If(self.en):
                m.d.sync += self.p.eq(self.a * self.b)
            return m
        product = Signal(2 * _DSP_WIDTH)

        def pins(prefix: str, value: Value) -> dict[str, Value]:
            # a signed operand is sign-extended to the block's width
            return {f"i_{prefix}{n}": (value[n] if n < len(value)
                                        else value[-1] if self.signed else Const(0))
                    for n in range(_DSP_WIDTH)}
        registers = {f"p_REG_OUTPUT_{what}": sig
                     for what, sig in (("CLK", "CLK0"), ("CE", "CE0"), ("RST", "RST0"))}
        sign = Const(int(self.signed))
        m.submodules.dsp = Instance(
            "MULT18X18D",
            **registers,
            p_GSR="DISABLED",
            **pins("A", self.a), **pins("B", self.b), **pins("C", Const(0, 1)),
            i_SIGNEDA=sign, i_SIGNEDB=sign, i_SOURCEA=Const(0), i_SOURCEB=Const(0),
            i_CLK0=ClockSignal("sync"), i_CLK1=Const(0), i_CLK2=Const(0), i_CLK3=Const(0),
            i_CE0=self.en, i_CE1=Const(0), i_CE2=Const(0), i_CE3=Const(0),
            i_RST0=Const(0), i_RST1=Const(0), i_RST2=Const(0), i_RST3=Const(0),
            **{f"o_P{n}": product[n] for n in range(2 * _DSP_WIDTH)},
        )
        m.d.comb += self.p.eq(product[:len(self.p)])
        return m


def registered_product(m: Module, name: str, a: Value, b: Value) -> Value:
    """``a × b`` (unsigned, each at most 18 bits) registered on every cycle, by a
    :class:`RegisteredMultiplier` added to ``m`` as submodule ``name``: on an ECP5 the
    product is the DSP block's output register, so no path runs from the block through
    the fabric into a register of its own (such paths from the engines' range checks
    were FPGA critical paths)."""
    m.submodules[name] = mul = RegisteredMultiplier(len(a), len(b))
    m.d.comb += [mul.a.eq(a), mul.b.eq(b)]
    return mul.p

"""iCE40UP5K single-port RAM (``SB_SPRAM256KA``, 16K × 16 bits) as an Amaranth component."""

from __future__ import annotations

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["SPRAM_DEPTH", "SPRAM_WIDTH", "WRITE_GARBAGE", "Ice40Spram"]

#: Words and bits of one SB_SPRAM256KA block.
SPRAM_DEPTH = 16384
SPRAM_WIDTH = 16

#: What the simulation model puts on ``rdata`` after a write (the primitive's data
#: output is undefined then), so that a design relying on it fails in simulation.
WRITE_GARBAGE = 0xDEAD


class Ice40Spram(wiring.Component):
    """``width // 16`` SPRAM blocks side by side: one port, one cycle of read latency.

    On a platform (a build) this is the ``SB_SPRAM256KA`` primitive; without one (the
    Amaranth simulator, Verilator) a model of the primitive's behaviour as Yosys'
    ``cells_sim.v`` describes it: a read (``en`` and not ``we``) puts the word at
    ``addr`` on ``rdata`` the next cycle; without ``en`` ``rdata`` holds; a write
    makes ``rdata`` undefined (:data:`WRITE_GARBAGE` in the model).

    Parameters
    ----------
    width : int
        Data width, a multiple of 16 up to 64 (at most the UP5K's four blocks).
    depth : int
        Words, a power of two up to 16384.

    Attributes
    ----------
    addr : In(range(depth))
    wdata : In(width)
    en : In(1)
        Chip select: read or write this cycle.
    we : In(1)
        Write ``wdata`` at ``addr`` (with ``en``).
    rdata : Out(width)
    """

    def __init__(self, width: int, depth: int) -> None:
        self.check_shape(width, depth)
        self.width = width
        self.depth = depth
        super().__init__({"addr": In(range(depth)), "wdata": In(width), "en": In(1),
                          "we": In(1), "rdata": Out(width)})

    @staticmethod
    def check_shape(width: int, depth: int) -> None:
        """Raise ValueError unless ``width`` × ``depth`` is a shape of this component."""
        if width % SPRAM_WIDTH or not 0 < width <= 4 * SPRAM_WIDTH:
            raise ValueError(f"SPRAM width {width}: must be 16, 32, 48 or 64 bits")
        if depth & (depth - 1) or not 0 < depth <= SPRAM_DEPTH:
            raise ValueError(f"SPRAM depth {depth}: must be a power of two up to "
                             f"{SPRAM_DEPTH} words")

    def elaborate(self, platform: object) -> Module:
        m = Module()
        if platform is None:
            return self._model(m)
        pad = 14 - len(self.addr)
        address = Cat(self.addr, Const(0, pad)) if pad else self.addr
        for i in range(self.width // SPRAM_WIDTH):
            bits = slice(i * SPRAM_WIDTH, (i + 1) * SPRAM_WIDTH)
            m.submodules[f"spram{i}"] = Instance(
                "SB_SPRAM256KA",
                i_ADDRESS=address,
                i_DATAIN=self.wdata[bits], i_MASKWREN=Const(0b1111, 4), i_WREN=self.we,
                i_CHIPSELECT=self.en, i_CLOCK=ClockSignal("sync"), i_STANDBY=Const(0),
                i_SLEEP=Const(0), i_POWEROFF=Const(1), o_DATAOUT=self.rdata[bits])
        return m

    def _model(self, m: Module) -> Module:
        m.submodules.mem = mem = Memory(shape=self.width, depth=self.depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=())
        garbage = Signal()
        m.d.comb += [wp.addr.eq(self.addr), wp.data.eq(self.wdata), wp.en.eq(self.en & self.we),
                     rp.addr.eq(self.addr), rp.en.eq(self.en & ~self.we)]
        m.d.sync += garbage.eq(self.en & self.we | garbage & ~self.en)
        m.d.comb += self.rdata.eq(rp.data)
        with m.If(garbage):
            m.d.comb += self.rdata.eq(Const(WRITE_GARBAGE, 16).replicate(self.width // 16))
        return m

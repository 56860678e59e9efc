"""Gated clocks of the RTL executor's build: units whose registers Verilator clocks
only on the cycles they have work.

Verilator evaluates a clock domain's sequential logic, and every combinational node
that reads only that domain's registers, under a test of that domain's trigger
(``__VnbaTriggered`` in the generated ``_eval_nba``). With one clock, all of the core
runs on every cycle; an idle vector ALU costs as much as a busy one. In the simulation
build, a unit of :data:`CLOCK_GATES` gets a clock of its own: :func:`gate_verilog`
clocks the unit's module by the wrapper's input ``clk_NAME``
(:data:`~tensorfab.sim.rtl.build.TOP`), the wrapper drives the output ``en_NAME`` with
the OR of the unit's :attr:`ClockGate.enable` signals (:func:`wrapper_ports`), and the
harness raises ``clk_NAME`` with ``clk`` on the cycles ``en_NAME`` is high
(``TF_CLOCK_GATES`` in ``sim/harness/harness.cpp``).

The gated clock is exactly an Amaranth ``EnableInserter(en)`` on the unit's ``sync``
domain, and that inserter changes nothing: with every signal of
:attr:`ClockGate.enable` low, each register of the unit would load the value it holds
(the declaration of each gate says why; ``tests/sim/test_clock_gates.py`` checks it in
Amaranth's simulator). So the design, and every FPGA build, has one clock; only the
Verilated model skips the unit. The enable reads registers only (the build checks that
Verilator does not compute it from an input), so the harness knows it before the edge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tensorfab.isa import TensorfabError

__all__ = ["CLOCK_GATES", "ClockGate", "ClockGateError", "enable_signals", "gate_verilog",
           "wrapper_ports"]


class ClockGateError(TensorfabError):
    """The core's Verilog does not have what a clock gate names."""


@dataclass(frozen=True)
class ClockGate:
    """A unit clocked only when it has work (simulation build only).

    Attributes
    ----------
    name : str
        Short name: the wrapper's ports are ``clk_NAME`` and ``en_NAME``.
    module : str
        The unit's module in the core's Verilog, below ``tensorfab_core`` (Amaranth
        names a submodule by its path: ``compute.alu``).
    instance : str
        Its instance path from the wrapper (``core.compute.alu``).
    enable : tuple of str
        Signals of the unit (registers, or ports driven by registers): while all are
        low, the unit has nothing to do (see :data:`CLOCK_GATES`). A name ending in
        ``*`` stands for every signal of the module that starts with the rest
        (``valid_d*``: the valid chain, as long as the configuration makes it).
    """

    name: str
    module: str
    instance: str
    enable: tuple[str, ...]

    @property
    def clock(self) -> str:
        """The wrapper's input clocking the unit."""
        return f"clk_{self.name}"

    @property
    def enable_port(self) -> str:
        """The wrapper's output saying the unit ticks at the coming edge."""
        return f"en_{self.name}"


#: The gated units.
#:
#: VectorAlu (``hw/alu.py``): every datapath register loads under ``in_valid`` (first
#: cycle) or ``en2`` (second cycle); ``en2``, ``out_valid`` and ``shift_error`` load
#: ``in_valid``, ``en2`` and ``en2 & ...``, all low when ``in_valid``, ``en2`` and
#: ``out_valid`` are (``shift_error`` is high only with ``out_valid``), and a reset or a
#: start sets them to that same zero. Gated, every register holds exactly what it would.
#:
#: GemmCore (``hw/gemm.py``): a pipeline whose datapath registers load on every cycle
#: and whose valid chain (``valid_d*``, ``out_valid``) says which stages hold a
#: micro-op. Gated, a stage that holds none keeps its old data instead of the idle
#: inputs' products; the compute engine reads ``result`` only with the micro-op's
#: write-back (its own delay line, as long as the core's), when the gate has ticked on
#: every cycle since the micro-op entered. The valid chain and the constant masks hold.
CLOCK_GATES: tuple[ClockGate, ...] = (
    ClockGate("alu", "compute.alu", "core.compute.alu", ("in_valid", "en2", "out_valid")),
    ClockGate("gemm", "compute.gemm", "core.compute.gemm", ("in_valid", "valid_d*",
                                                             "out_valid")),
)

_CLOCKED = re.compile(r"always @\(posedge clk\)")


def _module_span(verilog: str, core: str, gate: ClockGate) -> tuple[int, int]:
    head = f"module \\{core}.{gate.module} ("
    start = verilog.find(head)
    if start < 0:
        raise ClockGateError(f"clock gate {gate.name!r}: no module {core}.{gate.module} in "
                             "the core's Verilog")
    return start, verilog.index("endmodule", start)


def _declared(body: str, signal: str) -> list[str]:
    """The signals of a module ``body`` named ``signal`` (a pattern if it ends in ``*``)."""
    name = re.escape(signal[:-1]) + r"\w*" if signal.endswith("*") else re.escape(signal)
    found = re.findall(rf"^\s*(?:reg|wire|input|output)\b[^;=]*?\s({name})\b", body, re.M)
    return sorted(set(found))


def enable_signals(verilog: str, core: str, gate: ClockGate) -> list[str]:
    """The signals of ``gate``'s module whose OR is its enable (patterns expanded).

    Raises
    ------
    ClockGateError
        The module, or a signal of :attr:`ClockGate.enable`, is not in ``verilog``.
    """
    start, end = _module_span(verilog, core, gate)
    out: list[str] = []
    for signal in gate.enable:
        found = _declared(verilog[start:end], signal)
        if not found:
            raise ClockGateError(f"clock gate {gate.name!r}: module {core}.{gate.module} "
                                 f"has no signal {signal!r} (its enable)")
        out += found
    return out


def gate_verilog(verilog: str, core: str, top: str, gates: tuple[ClockGate, ...]) -> str:
    """The core's Verilog with each gate's module clocked by ``top.clk_NAME``.

    Parameters
    ----------
    verilog : str
        The core's Verilog (top module ``core``).
    core : str
        Its top module.
    top : str
        The wrapper module whose inputs the gated clocks are.
    gates : tuple of ClockGate

    Returns
    -------
    str

    Raises
    ------
    ClockGateError
        A gate's module, or one of its enable signals, is not in ``verilog``, or the
        module has no register clocked by ``clk``.
    """
    for gate in gates:
        enable_signals(verilog, core, gate)
        start, end = _module_span(verilog, core, gate)
        body = verilog[start:end]
        gated, count = _CLOCKED.subn(f"always @(posedge {top}.{gate.clock})", body)
        if not count:
            raise ClockGateError(f"clock gate {gate.name!r}: module {core}.{gate.module} "
                                 "has no register clocked by clk")
        verilog = verilog[:start] + gated + verilog[end:]
    return verilog


def wrapper_ports(verilog: str, core: str, gates: tuple[ClockGate, ...]
                  ) -> tuple[list[str], list[str]]:
    """The wrapper's port names and declaration lines (with the enables' assignments)
    for ``gates`` of the core's Verilog ``verilog`` (top module ``core``)."""
    names: list[str] = []
    lines: list[str] = []
    for gate in gates:
        names += [gate.clock, gate.enable_port]
        enable = " | ".join(f"{gate.instance}.{s}"
                            for s in enable_signals(verilog, core, gate))
        lines += [f"  input {gate.clock};", f"  output {gate.enable_port};",
                  f"  assign {gate.enable_port} = {enable};"]
    return names, lines

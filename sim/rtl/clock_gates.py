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
(the declaration of each gate says why; ``tests/sim/test_clock_gates.py`` checks the
ALU's and the GEMM core's in Amaranth's simulator, and all of them on the built model:
the same results, cycles, counters and timelines with the gates and without, and a run
that goes wrong when a term of an enable is left out). So the design, and every FPGA
build, has one clock; only the Verilated model skips the unit. The enable reads
registers only (the build checks that Verilator does not compute it from an input), so
the harness knows it before the edge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tensorfab.isa import HwConfig, TensorfabError

__all__ = ["CLOCK_GATES", "ClockGate", "ClockGateError", "config_gates",
           "enable_expression", "enable_signals", "enable_terms", "gate_verilog",
           "gates_within", "wrapper_ports"]


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
        names a submodule by its path: ``compute.alu.vector``). Its submodules
        (``store.seq``, ``store.bursts``) are on the same clock.
    instance : str
        Its instance path from the wrapper (``core.compute.alu.vector``).
    enable : tuple of str
        Terms whose OR is the enable: while every term is low, the unit has nothing
        to do (see :data:`CLOCK_GATES`). A term is one signal or an AND of signals
        (``"busy & ~stall"``; ``~`` negates), each named in the unit's module
        (``in_valid``), in one of its submodules by its path (``seq.busy``), or in
        the core's top module after a ``/`` (``/start``); a signal wider than a bit
        counts as high when it is not zero. Each signal is a register or is computed
        from registers. A name ending in ``*`` stands for every signal of the module
        that starts with the rest (``valid_d*``: the valid chain, as long as the
        configuration makes it). A term starting with ``?`` is left out where its
        signals are not in the Verilog (a configuration without that hardware).
    ungated : tuple of str
        Registers of the unit's module that stay on ``clk``: they load on every cycle
        from what the gate does not cover (the store engine's copies of the CSRs).
    joined : tuple of str
        Registers of other modules on the unit's clock, by module path and name
        (``compute.alu.a3_a``: the ALU's operand registers in the ALU pipeline); the
        enable must cover every cycle they load on.
    unit_flag : str
        A :class:`~tensorfab.isa.HwConfig` field that says whether the core has the
        unit (``vector_alu``); empty: every core has it (:func:`config_gates`).
    """

    name: str
    module: str
    instance: str
    enable: tuple[str, ...]
    ungated: tuple[str, ...] = ()
    joined: tuple[str, ...] = ()
    unit_flag: str = ""

    @property
    def core_instance(self) -> str:
        """The core's instance path from the wrapper (:attr:`instance` less
        :attr:`module`): what a name after ``/`` in :attr:`enable` is found in."""
        return self.instance.removesuffix(self.module).removesuffix(".")

    @property
    def clock(self) -> str:
        """The wrapper's input clocking the unit."""
        return f"clk_{self.name}"

    @property
    def enable_port(self) -> str:
        """The wrapper's output saying the unit ticks at the coming edge."""
        return f"en_{self.name}"


#: Terms of a DMA engine's enable (the store engine's; the load engine's would be the
#: same): its registers change only
#: at a start (the core's ``start`` resets the engines) or reset, when its sequencer
#: takes an instruction (``insn`` valid and ready) or is in a state it leaves or
#: acts in this cycle (busy and not stalled: POP with its tokens there, EXEC, PUSH
#: with room, or a halt), while a transfer runs (``transfer_state`` not WAIT: CHECK,
#: RUN, DRAIN, which covers the sequencer's DROP), while the burst issuer holds a
#: command offered (``stuck``) or is owed beats (``owing``; the memory's beats and
#: ready come from the core's inputs, but only for commands issued).
_DMA_ENABLE = ("/rst", "/start", "seq.insn__valid & seq.insn__ready", "seq.busy & ~seq.stall",
               "transfer_state", "bursts.stuck", "bursts.owing")

#: The gated units.
#:
#: VectorAlu (``hw/alu.py``): every datapath register loads under ``in_valid`` (first
#: cycle) or ``en2`` (second cycle); ``en2``, ``out_valid`` and ``shift_error`` load
#: ``in_valid``, ``en2`` and ``en2 & ...``, all low when ``in_valid``, ``en2`` and
#: ``out_valid`` are (``shift_error`` is high only with ``out_valid``), and a reset or a
#: start sets them to that same zero. Gated, every register holds exactly what it would,
#: and a tick with all three low changes nothing. So the gate also ticks when an ALU
#: micro-op is at the :class:`~tensorfab.hw.alu_pipeline.AluPipeline`'s S3
#: (``s3_valid``), the only cycles on which its operand registers around the ALU
#: (``a3_a``, ``a3_b`` and the record ``a3_rec``, without reset) load, and when the
#: compute engine takes an instruction (``seq.exec__start``) or resets (``/rst``,
#: ``/start``), the only cycles on which the pipeline's operation register
#: (``alu_op``, the ALU's ``op`` input) loads: they join the ALU's clock, and the ALU's
#: first-cycle logic reads registers of its own clock. So do the result registers the
#: ALU's third cycle feeds (``a6_data``, ``a6_addr``, loaded with ``out_valid``): the
#: third cycle's logic (each lane's MUL, MULHI, SHR_RND and REQUANT finish) is then
#: evaluated on the ALU's ticks only, not on every cycle after the last ALU operation
#: left ``op3`` set. With ``sequential_multiplier`` the multiplier's phases after the
#: first (``seq_running``, :mod:`tensorfab.hw.alu_sequential`) tick it too: its product
#: and partial registers load then.
#:
#: GemmCore (``hw/gemm.py``): a pipeline whose datapath registers load on every cycle
#: and whose valid chain (``valid_d*``, ``out_valid``) says which stages hold a
#: micro-op. Gated, a stage that holds none keeps its old data instead of the idle
#: inputs' products; the compute engine reads ``result`` only with the micro-op's
#: write-back (its own delay line, as long as the core's), when the gate has ticked on
#: every cycle since the micro-op entered. The valid chain and the constant masks hold.
#:
#: StoreEngine (``hw/store.py``): :data:`_DMA_ENABLE`, and the accumulator read in
#: flight (``rd_pending``, the FIFO's write). With the enable low, its sequencer waits
#: in IDLE with no instruction, or stalls in POP or PUSH, and the transfer is in WAIT:
#: every register holds, except the range checks' products (``n_entries``, ``span``,
#: ``slack``, ``base_slack``), which load from the instruction's registers on every
#: cycle and are read in CHECK, after the start's tick has loaded them. The copies of
#: DRAM_SIZE and the stream's bounds that load from the CSRs on every cycle stay on
#: ``clk`` (``ungated``). (The load engine is not gated: it moves data on most cycles
#: of a GEMM, and its buffer writes and their zero flags mix with the core's logic:
#: gated as the store engine, plus its registered writes, it cost about 50
#: instructions per cycle more on the 512³ GEMM.)
#:
#: Fetch (``hw/fetch.py``): ticks at a start or reset, in DRAIN and in RUN but for the
#: cycles it waits for a full command queue with nothing else to do (``dispatching``
#: and not ``ready``, a word staged behind the head, no command to offer or held, no
#: read beat owed or counted: ``mem__cmd__valid``, ``cmd_stuck``, ``outstanding``,
#: ``fired_beats``, ``got``), when every register holds. In IDLE it offers no command
#: and dispatches nothing, and DRAIN left only once every beat it asked for had come;
#: its other registers then load the flush's empty buffer (``free``, ``staged``,
#: ``head_valid``, the FIFO), which the start's own edge, in IDLE, loads again before
#: RUN reads them. The rest of the core reads ``idle``, ``busy`` and ``finished``,
#: which hold.
CLOCK_GATES: tuple[ClockGate, ...] = (
    ClockGate("alu", "compute.alu.vector", "core.compute.alu.vector",
              ("in_valid", "en2", "out_valid", "?seq_running",
               "/compute.alu.s3_valid",
               "/compute.seq.exec__start", "/rst", "/start"),
              joined=("compute.alu.a3_a", "compute.alu.a3_b", "compute.alu.a3_rec",
                      "compute.alu.alu_op", "compute.alu.a6_data",
                      "compute.alu.a6_addr"),
              unit_flag="vector_alu"),
    ClockGate("gemm", "compute.gemm", "core.compute.gemm", ("in_valid", "valid_d*",
                                                             "out_valid")),
    ClockGate("store", "store", "core.store", (*_DMA_ENABLE, "rd_pending"),
              ungated=("lim_entries", "insn_end", "base_entries", "protect")),
    ClockGate("fetch", "fetch", "core.fetch",
              ("/rst", "start", "busy & ~dispatching", "dispatching & ready", "busy & ~staged",
               "mem__cmd__valid", "cmd_stuck", "outstanding", "fired_beats", "got")),
)


def config_gates(cfg: HwConfig, gates: tuple[ClockGate, ...] = CLOCK_GATES
                 ) -> tuple[ClockGate, ...]:
    """The gates of ``gates`` whose units ``cfg``'s core has (:attr:`ClockGate.unit_flag`)."""
    return tuple(g for g in gates if not g.unit_flag or getattr(cfg, g.unit_flag))


def gates_within(gates: tuple[ClockGate, ...], core_instance: str,
                 resets: tuple[str, ...] = ()) -> tuple[ClockGate, ...]:
    """``gates`` (of a core wrapped as :data:`~tensorfab.sim.rtl.build.TOP` wraps it)
    for a core that a larger design instantiates: at ``core_instance`` from that
    design's wrapper, and reset by ``resets`` as well as by ``rst``.

    A gate that ticks at the core's reset (a ``/rst`` term) must tick at each of its
    resets: a ``ResetInserter`` around the core (the SoC's ``core_reset``, which the
    host link's RESET pulses) resets its registers as ``rst`` does. The gates without
    a reset term stay as they are: their units' registers reset to what they hold
    while the enable is low.

    Parameters
    ----------
    gates : tuple of ClockGate
        Gates of the core (:data:`CLOCK_GATES`).
    core_instance : str
        The core's instance path from the design's wrapper (``soc.core``).
    resets : tuple of str
        The core's reset inputs besides ``rst`` (signals of its top module).

    Returns
    -------
    tuple of ClockGate
    """
    out = []
    for gate in gates:
        enable = gate.enable
        if "/rst" in enable:
            enable = (*enable, *(f"/{r}" for r in resets))
        out.append(replace(gate, instance=f"{core_instance}.{gate.module}", enable=enable))
    return tuple(out)


_CLOCKED = re.compile(r"always @\(posedge clk\)(\s*)(\\?[\w$]+)?")


def _module_name(core: str, path: str) -> str:
    """The Verilog module of the core's submodule ``path`` (``""``: the core)."""
    return f"{core}.{path}" if path else core


def _module_span(verilog: str, module: str, gate: ClockGate) -> tuple[int, int]:
    head = f"module \\{module} (" if "." in module else f"module {module}("
    start = verilog.find(head)
    if start < 0:
        raise ClockGateError(f"clock gate {gate.name!r}: no module {module} in "
                             "the core's Verilog")
    return start, verilog.index("endmodule", start)


def _declared(body: str, signal: str) -> list[str]:
    """The signals of a module ``body`` named ``signal`` (a pattern if it ends in ``*``)."""
    name = re.escape(signal[:-1]) + r"\w*" if signal.endswith("*") else re.escape(signal)
    found = re.findall(rf"^\s*(?:reg|wire|input|output)\b[^;=]*?\s({name})\b", body, re.M)
    return sorted(set(found))


def _resolve(verilog: str, core: str, gate: ClockGate, factor: str) -> list[str]:
    """The hierarchical names (from the wrapper) of the signals ``factor`` names."""
    if factor.startswith("/"):
        path, _, name = factor[1:].rpartition(".")
        instance = ".".join(p for p in (gate.core_instance, path) if p)
    else:
        sub, _, name = factor.rpartition(".")
        path = ".".join(p for p in (gate.module, sub) if p)
        instance = ".".join(p for p in (gate.instance, sub) if p)
    module = _module_name(core, path)
    start, end = _module_span(verilog, module, gate)
    found = _declared(verilog[start:end], name)
    if not found:
        raise ClockGateError(f"clock gate {gate.name!r}: module {module} has no signal "
                             f"{name!r} (its enable)")
    return [f"{instance}.{s}" for s in found]


def _clock_registers(body: str, clock: str, ungated: tuple[str, ...]
                     ) -> tuple[str, int, set[str]]:
    """A module ``body`` with its registers clocked by ``clock``, but ``ungated``:
    the new body, how many were moved, which of ``ungated`` were found."""
    kept: set[str] = set()
    count = 0

    def clock_of(match: re.Match[str]) -> str:
        nonlocal count
        if match.group(2) in ungated:
            kept.add(match.group(2))
            return match.group(0)
        count += 1
        return f"always @(posedge {clock}){match.group(1)}{match.group(2) or ''}"
    return _CLOCKED.sub(clock_of, body), count, kept


def _join_register(verilog: str, core: str, top: str, gate: ClockGate, reg: str) -> str:
    """``verilog`` with register ``reg`` (``module.path.name``) clocked by ``gate``."""
    path, _, name = reg.rpartition(".")
    start, end = _module_span(verilog, _module_name(core, path), gate)
    body, count = re.subn(rf"always @\(posedge clk\)(\s*){re.escape(name)} <=",
                          rf"always @(posedge {top}.{gate.clock})\g<1>{name} <=",
                          verilog[start:end])
    if count != 1:
        raise ClockGateError(f"clock gate {gate.name!r}: module {_module_name(core, path)} "
                             f"has no register {name!r} clocked by clk (to join the gate)")
    return verilog[:start] + body + verilog[end:]


def enable_terms(verilog: str, core: str, gate: ClockGate) -> list[list[tuple[bool, str]]]:
    """``gate``'s enable resolved: for each term, its signals as ``(negated, name)``
    with ``name`` a hierarchical name from the wrapper (patterns expanded, one term
    per signal a pattern names).

    Raises
    ------
    ClockGateError
        A module, or a signal of :attr:`ClockGate.enable`, is not in ``verilog``.
    """
    out: list[list[tuple[bool, str]]] = []
    for term in gate.enable:
        optional = term.startswith("?")
        factors = [f.strip() for f in term.removeprefix("?").split("&")]
        try:
            resolved = [(f.startswith("~"), _resolve(verilog, core, gate, f.lstrip("~")))
                        for f in factors]
        except ClockGateError:
            if optional:
                continue
            raise
        if len(resolved) == 1 and not resolved[0][0]:
            out += [[(False, name)] for name in resolved[0][1]]
            continue
        if any(len(names) != 1 for _neg, names in resolved):
            raise ClockGateError(f"clock gate {gate.name!r}: term {term!r}: a pattern "
                                 "stands alone in a term")
        out.append([(neg, names[0]) for neg, names in resolved])
    return out


def enable_signals(verilog: str, core: str, gate: ClockGate) -> list[str]:
    """The signals (hierarchical names from the wrapper) that ``gate``'s enable reads.

    Raises
    ------
    ClockGateError
        A module, or a signal of :attr:`ClockGate.enable`, is not in ``verilog``.
    """
    return [name for term in enable_terms(verilog, core, gate) for _neg, name in term]


def enable_expression(verilog: str, core: str, gate: ClockGate) -> str:
    """The Verilog expression of ``gate``'s enable in the wrapper."""
    terms = [" & ".join(f"{'!' if neg else ''}(|{name})" for neg, name in term)
             for term in enable_terms(verilog, core, gate)]
    return " | ".join(f"({t})" for t in terms)


def gate_verilog(verilog: str, core: str, top: str, gates: tuple[ClockGate, ...]) -> str:
    """The core's Verilog with each gate's module (and its submodules) clocked by
    ``top.clk_NAME``, but for the registers the gate leaves ungated.

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
        A gate's module, or one of its enable signals, is not in ``verilog``, the
        module has no register clocked by ``clk``, or a register of
        :attr:`ClockGate.ungated` is not one of its registers clocked by ``clk``.
    """
    for gate in gates:
        enable_terms(verilog, core, gate)
        module = _module_name(core, gate.module)
        _module_span(verilog, module, gate)
        kept: set[str] = set()
        count = 0
        heads = [m.start() for m in re.finditer(rf"^module \\{re.escape(module)}[ .]",
                                                verilog, re.M)]
        for start in reversed(heads):  # from the end: edits move what follows
            end = verilog.index("endmodule", start)
            gated, n, names = _clock_registers(verilog[start:end], f"{top}.{gate.clock}",
                                               gate.ungated)
            count += n
            kept |= names
            verilog = verilog[:start] + gated + verilog[end:]
        if not count:
            raise ClockGateError(f"clock gate {gate.name!r}: module {module} "
                                 "has no register clocked by clk")
        for reg in gate.joined:
            verilog = _join_register(verilog, core, top, gate, reg)
        missing = sorted(set(gate.ungated) - kept)
        if missing:
            raise ClockGateError(f"clock gate {gate.name!r}: module {module} has no "
                                 f"register {', '.join(map(repr, missing))} clocked by clk "
                                 "(to leave ungated)")
    return verilog


def wrapper_ports(verilog: str, core: str, gates: tuple[ClockGate, ...]
                  ) -> tuple[list[str], list[str]]:
    """The wrapper's port names and declaration lines (with the enables' assignments)
    for ``gates`` of the core's Verilog ``verilog`` (top module ``core``)."""
    names: list[str] = []
    lines: list[str] = []
    for gate in gates:
        names += [gate.clock, gate.enable_port]
        enable = enable_expression(verilog, core, gate)
        lines += [f"  input {gate.clock};", f"  output {gate.enable_port};",
                  f"  assign {gate.enable_port} = {enable};"]
    return names, lines

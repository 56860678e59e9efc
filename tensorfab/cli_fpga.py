"""``tensorfab fpga build|program|breakdown|paths``: bitstreams from open tools, loading
them, where their logic goes, and which paths miss the clock."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from tensorfab.cli_output import CliError, HelpFormatter, examples, print_result
from tensorfab.fpga_builds.board_configs import board_config

if TYPE_CHECKING:
    from tensorfab.fpga_builds.boards import Board

__all__ = ["add_fpga_parser"]


def _build_dir(path: str) -> Path:
    """``-o``: a folder the build writes into (created), not an existing file.

    Raises
    ------
    CliError
        If ``path`` is an existing file.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CliError(f"-o {out}: a file exists there; name a folder for the build's "
                       "files")
    return out


def _mhz(value: float | None, option: str) -> float | None:
    """A clock option's value, None or positive.

    Raises
    ------
    CliError
        For zero or a negative value (names the option).
    """
    if value is not None and not value > 0:
        raise CliError(f"{option} {value:g}: a clock in MHz must be positive")
    return value


def _top(value: int | None) -> int | None:
    """``--top``'s value, None or 1 or more.

    Raises
    ------
    CliError
        For zero or a negative count (a negative one would drop rows from the end).
    """
    if value is not None and value < 1:
        raise CliError(f"--top {value}: give 1 or more (how many rows to show)")
    return value


def _sdram(args: argparse.Namespace) -> bool | None:
    """``--memory``: SDRAM (True), on-chip (False) or the board's default (None)."""
    return None if args.memory is None else args.memory == "sdram"


def cmd_fpga(args: argparse.Namespace) -> int:
    if args.action == "build":
        return _build(args)
    return _program(args)


def _no_config_fits(board: Board) -> str:
    """What a board where no config fits is (the start of a sentence)."""
    cfg = board_config(board.config)
    return (f"no config fits {board.name} ({board.device}) yet: its smallest "
            f"build, {cfg.name} ({cfg.batch}×{cfg.block_in}×{cfg.block_out})")


def _sdram_timing_note(args: argparse.Namespace, board: Board, console: Console) -> None:
    """After a missed clock: where the device memory was the board's SDRAM by default,
    that the on-chip build drops the SDRAM controller."""
    if args.memory is None and board.default_memory == "sdram":
        console.print("note: the device memory is the board's SDRAM (its default); "
                      "--memory on-chip builds the SoC without the SDRAM controller, "
                      "in block RAM (docs/fpga.md: the 25F's 100 MHz builds)",
                      highlight=False)


def _build(args: argparse.Namespace) -> int:
    from tensorfab.fpga_builds.boards import get_board
    from tensorfab.fpga_builds.errors import DoesNotFit, TimingFailure
    from tensorfab.fpga_builds.flow import build_bitstream

    board = get_board(args.board)
    config = args.config or board.config
    out = _build_dir(args.output or f"build/fpga/{board.name}-{Path(config).stem}")
    clock_mhz = _mhz(args.clock_mhz, "--clock-mhz")
    smallest = not board.fits and board_config(config) == board_config(board.config)
    if not board.fits:
        Console(stderr=True, soft_wrap=True).print(
            f"note: {_no_config_fits(board)}, does not fit "
            "(docs/fpga.md); building " + ("it to show what it needs" if smallest
                                           else config), highlight=False)
    if args.seeds is not None:
        return _build_seeds(args, board, config, out, clock_mhz)
    try:
        report = build_bitstream(board.name, config, out, dsp=not args.no_dsp,
                                 allow_timing_failure=args.allow_timing_failure,
                                 seed=args.seed, router=args.router, clock_mhz=clock_mhz,
                                 sdram=_sdram(args), timing_closure=args.timing_closure)
    except TimingFailure as exc:
        console = Console(stderr=True, soft_wrap=True)
        console.print(f"report: {out / 'report.json'}", highlight=False)
        _sdram_timing_note(args, board, console)
        raise exc
    except DoesNotFit as exc:
        if not smallest:
            raise
        # the board, not the one config: no build fits, and what the smallest needs
        raise DoesNotFit(str(exc).replace("design", _no_config_fits(board) + ",", 1),
                         exc.resource, exc.used, exc.available) from None
    def human() -> None:
        console = Console()
        console.print(resource_table(report))
        console.print(timing_line(report), highlight=False)
        console.print(f"bitstream: {report['bitstream']}", highlight=False)

    print_result(report, args.json, human)
    return 0


def _build_seeds(args: argparse.Namespace, board: Board, config: str, out: Path,
                 clock_mhz: float | None) -> int:
    """``fpga build --seeds``: one build per seed, a line each, the summary as JSON.

    Raises
    ------
    CliError
        For a bad ``--seeds`` value.
    FpgaBuildError
        When a seed misses timing (after all are built; unless
        ``--allow-timing-failure``), naming the seeds that missed.
    """
    from tensorfab.fpga_builds.errors import FpgaBuildError
    from tensorfab.fpga_builds.flow import build_bitstream
    from tensorfab.fpga_builds.seeds import build_seeds, parse_seeds

    try:
        seeds = parse_seeds(args.seeds)
    except FpgaBuildError as exc:
        raise CliError(str(exc)) from None
    summary = build_seeds(build_bitstream, seeds, out, board_name=board.name, config=config,
                          dsp=not args.no_dsp, router=args.router, clock_mhz=clock_mhz,
                          sdram=_sdram(args), timing_closure=args.timing_closure)

    def human() -> None:
        for row in summary["seeds"]:
            print(f"seed {row['seed']}: {row['fmax_mhz']:g} MHz / {summary['target_mhz']:g} "
                  f"MHz, slack {row['slack_ns']:+.3f} ns, "
                  + ("met" if row["timing_met"] else "missed"))
        print(f"timing met at {summary['met']} of {summary['of']} seeds "
              f"(summary: {out / 'seeds.json'})")

    print_result(summary, args.json, human)
    missed = [row["seed"] for row in summary["seeds"] if not row["timing_met"]]
    if missed:
        _sdram_timing_note(args, board, Console(stderr=True, soft_wrap=True))
    if missed and not args.allow_timing_failure:
        raise FpgaBuildError(f"{board.name} {config}: timing missed at seed(s) "
                             f"{', '.join(map(str, missed))} of {args.seeds} "
                             f"({summary['target_mhz']:g} MHz); see {out / 'seeds.json'}")
    return 0


def resource_table(report: dict) -> Table:
    """``fpga build``'s table of a report: used, available and % of each resource the
    design uses, most used first."""
    table = Table(title=f"{report['board']} {report['config']} ({report['seconds']:.0f} s)")
    for col, justify in (("resource", "left"), ("used", "right"), ("available", "right"),
                         ("%", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    used = [(name, r) for name, r in report["resources"].items() if r["used"]]
    for name, r in sorted(used, key=lambda item: -item[1]["used"] / item[1]["available"]):
        table.add_row(name, f"{r['used']:,}", f"{r['available']:,}",
                      f"{100 * r['used'] / r['available']:.0f}")
    return table


def timing_line(report: dict) -> str:
    """``timing met at N MHz (target M)``, or how far it missed (the slowest clock)."""
    fmax, target = report["fmax_mhz"], report["target_mhz"]
    if report["timing_met"]:
        return f"timing met at {fmax:g} MHz (target {target:g})"
    return (f"timing missed: {fmax:g} MHz, target {target:g} (rebuild with --clock-mhz "
            f"{int(fmax)} or less; `tensorfab fpga paths` lists the slow paths)")


def _breakdown(args: argparse.Namespace) -> int:
    from tensorfab.fpga_builds.boards import get_board
    from tensorfab.fpga_builds.breakdown import breakdown_table, module_breakdown

    _top(args.top)
    board = get_board(args.board)
    config = args.config or board.config
    out = _build_dir(args.output or f"build/fpga/{board.name}-{Path(config).stem}-breakdown")
    result = module_breakdown(board.name, config, out, dsp=not args.no_dsp,
                              flat=not args.no_flat, sdram=_sdram(args))
    console = Console(stderr=args.json)
    if not console.is_terminal:  # a file or a pipe: room for the whole table
        console.width = max(console.width, 110)
    console.print(breakdown_table(result, top=args.top))
    console.print(f"log: {result['log']}", highlight=False)
    if args.json:
        print(json.dumps(result))
    return 0


def _short(signal: str) -> str:
    """A signal's name from its last named level on (``storage.0.6``, not ``6``)."""
    parts = signal.split(".")
    named = [k for k, p in enumerate(parts) if not p.isdigit()]
    return ".".join(parts[named[-1] if named else 0:])


def _paths(args: argparse.Namespace) -> int:
    from tensorfab.fpga_builds.timing_paths import load_netlist, load_timing_report, timing_paths

    build = Path(args.build_dir)
    if not build.is_dir():
        raise CliError(f"{build}: no such build folder (give the -o folder of "
                       "`tensorfab fpga build`)")
    target = _mhz(args.target_mhz, "--target-mhz")
    _top(args.top)
    if target is None:
        report = build / "report.json"
        if not report.exists():
            raise CliError(f"{report} not found; give --target-mhz")
        try:
            target = float(json.loads(report.read_text())["target_mhz"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise CliError(f"{report}: no target_mhz in it; give --target-mhz") from None
    raw = load_timing_report(build)
    netlist = load_netlist(build) if (build / "top.json").exists() else None
    result = timing_paths(raw, target, netlist, top=args.top)
    console = Console(stderr=args.json)
    if not console.is_terminal:
        console.width = max(console.width, 140)
    console.print(f"{result['failing']} of {result['endpoints']} register inputs arrive after "
                  f"{result['period_ns']} ns ({target} MHz); worst "
                  f"{result['worst_arrival_ns']} ns; {result['group_count']} start/end pairs",
                  highlight=False)
    table = Table(title="failing paths by launching and capturing register, worst first")
    for col, justify in (("slack ns", "right"), ("pins", "right"), ("from", "left"),
                         ("to", "left"), ("through (modelled)", "left")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for grp in result["groups"]:
        through = " → ".join(_short(s["signal"]) for s in grp["through"][1:-1])
        table.add_row(f"{grp['slack_ns']:.2f}", str(grp["endpoints"]), grp["from"] or "?",
                      grp["to"], through)
    console.print(table)
    mods = Table(title="failing register inputs per module")
    mods.add_column("module")
    mods.add_column("failing", justify="right")
    mods.add_column("worst slack ns", justify="right")
    for m in result["modules"]:
        mods.add_row(m["module"] or "(top)", str(m["failing"]), f"{m['slack_ns']:.2f}")
    console.print(mods)
    if args.json:
        print(json.dumps(result))
    return 0


def _program(args: argparse.Namespace) -> int:
    from tensorfab.fpga_builds.program import program_board

    cmd = program_board(args.board, args.bitstream, flash=args.flash, dry_run=args.dry_run)
    if args.dry_run:
        print(shlex.join(cmd))  # a command to paste into a shell: paths quoted
    return 0


def _board_list() -> str:
    """The boards, their parts, default configs and clocks (for ``--help``)."""
    from tensorfab.fpga_builds.boards import BOARDS

    width = max(map(len, BOARDS))
    rows = [f"  {b.name:{width}s}  {b.device}-{b.platform().package}, config {b.config}"
            + (f", {b.clock_mhz or b.target_mhz:g} MHz" if b.fits else " (does not fit)")
            + (", memory in SDRAM" if b.default_memory == "sdram" else "")
            for b in BOARDS.values()]
    return "boards (--board):\n" + "\n".join(rows)


def add_fpga_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``fpga`` subcommand to the ``tensorfab`` parser."""
    from tensorfab.fpga_builds.boards import BOARDS, MEMORIES
    from tensorfab.fpga_builds.flow import ROUTERS

    boards = _board_list()

    def command(parent: argparse._SubParsersAction, name: str, help: str, description: str,
                *lines: str) -> argparse.ArgumentParser:
        return parent.add_parser(name, help=help, description=description,
                                 epilog=examples(*lines), formatter_class=HelpFormatter)

    def memory_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--memory", choices=MEMORIES,
                       help="where the device memory is: the board's SDR SDRAM (ULX3S: 32 "
                       "MB) or the FPGA's block RAM (default: the board's, SDRAM where it "
                       "has one)")

    def board_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--board", required=True, choices=list(BOARDS), metavar="BOARD",
                       help="the board (listed above)")

    f = command(sub, "fpga", "build a bitstream (Yosys/nextpnr) or program a board",
                "Build a bitstream of the SoC for a board with the open tools (YoWASP's "
                "Yosys and nextpnr,\nno install needed), see where its logic goes and "
                "which paths miss the clock, and\nload it with openFPGALoader. "
                "docs/fpga.md has the results per board.\n\n" + boards,
                "tensorfab fpga build --board ulx3s-25f",
                "tensorfab fpga program --board ulx3s-25f build/fpga/ulx3s-25f-ecp5-25f/top.bit",
                "tensorfab fpga breakdown --board ulx3s-25f --top 15",
                "tensorfab fpga paths build/fpga/ulx3s-25f-ecp5-25f --target-mhz 100")
    fs = f.add_subparsers(dest="action", required=True, metavar="ACTION")
    b = command(fs, "build", "bitstream and JSON report for a board and config",
                "Build the bitstream of a board's SoC with a config (default: the board's) "
                "into a folder:\nthe bitstream, build.log (all tool output), report.json "
                "(resources, clocks). Prints\nthe resources used and whether timing is "
                "met. Takes minutes.\n\n" + boards,
                "tensorfab fpga build --board ulx3s-25f",
                "tensorfab fpga build --board ulx3s-85f --config tiny -o build/u85",
                "tensorfab fpga build --board ulx3s-25f --clock-mhz 60 --json",
                "tensorfab fpga build --board ulx3s-25f --memory on-chip --clock-mhz 100 "
                "--seeds 1,2,3")
    board_option(b)
    b.add_argument("--config", help="preset, board config or JSON file (default: the "
                   "board's largest fitting config)")
    b.add_argument("-o", "--output", help="build directory (default build/fpga/BOARD-CONFIG)")
    b.add_argument("--allow-timing-failure", action="store_true",
                   help="write the bitstream and exit 0 even if a clock misses its target")
    b.add_argument("--no-dsp", action="store_true", help="LUT multipliers instead of DSP blocks")
    memory_option(b)
    b.add_argument("--clock-mhz", type=float, metavar="MHZ",
                   help="SoC clock and timing target (default: the board's default clock, "
                   "one its default config meets: docs/fpga.md; the ECP5 PLL makes it, the "
                   "iCEBreaker runs at its 12 MHz oscillator)")
    seed = b.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=int, default=1, help="nextpnr placement seed")
    seed.add_argument("--seeds", metavar="N,N,...",
                      help="build once per placement seed (into -o/seed-N) and report each "
                      "seed's fmax and whether it met timing (-o/seeds.json)")
    b.add_argument("--router", choices=ROUTERS,
                   help="nextpnr's router (default: router2 for the congested builds "
                   "that need it, ecp5-85f and small with on-chip memory on an 85F; "
                   "nextpnr's router1 otherwise)")
    b.add_argument("--timing-closure", action=argparse.BooleanOptionalAction, default=None,
                   help="nextpnr's timing-closure options: timing-driven ripup in the "
                   "router, placer timing weight 20 (default: on for ulx3s-25f builds at "
                   "100 MHz or more, measured there: docs/fpga.md; off otherwise)")
    b.add_argument("--json", action="store_true",
                   help="print the report (report.json) as one JSON object")
    b.set_defaults(func=cmd_fpga)
    bd = command(fs, "breakdown", "logic, flip-flops, DSP and block RAM of each module "
                 "(Yosys with the hierarchy kept)",
                 "Synthesize the SoC with its hierarchy kept and show what each module "
                 "takes (logic,\nflip-flops, carry, DSP, block RAM), beside what the "
                 "board has. Takes a minute or two.\n\n" + boards,
                 "tensorfab fpga breakdown --board ulx3s-25f --top 15",
                 "tensorfab fpga breakdown --board icebreaker --json > up5k.json")
    board_option(bd)
    bd.add_argument("--config", help="preset, board config (fpga_builds/configs) or JSON "
                    "file (default: the board's)")
    bd.add_argument("-o", "--output",
                    help="work directory (default build/fpga/BOARD-CONFIG-breakdown)")
    bd.add_argument("--no-dsp", action="store_true", help="LUT multipliers instead of DSP "
                    "blocks")
    memory_option(bd)
    bd.add_argument("--no-flat", action="store_true", help="skip the flattened synthesis "
                    "that gives the build's own totals for comparison")
    bd.add_argument("--top", type=int, metavar="N", help="show the N largest modules only")
    bd.add_argument("--json", action="store_true", help="the table on stderr, the result "
                    "as one JSON object on stdout")
    bd.set_defaults(func=_breakdown)
    tp = command(fs, "paths", "every path that misses the clock, grouped by the "
                 "registers it starts and ends at (from a build's nextpnr report)",
                 "List the register-to-register paths of a build that miss a clock (the "
                 "build's target,\nor --target-mhz), grouped by the registers they start "
                 "and end at, worst first,\nwith the modules they end in. Reads the "
                 "build folder; builds nothing.",
                 "tensorfab fpga paths build/fpga/ulx3s-25f-ecp5-25f",
                 "tensorfab fpga paths build/fpga/ulx3s-25f-ecp5-25f --target-mhz 100 "
                 "--top 40 --json")
    tp.add_argument("build_dir", help="a `tensorfab fpga build` output directory")
    tp.add_argument("--target-mhz", type=float, metavar="MHZ",
                    help="check against this clock (default: the build's target)")
    tp.add_argument("--top", type=int, default=25, metavar="N",
                    help="show the N worst start/end pairs (default 25)")
    tp.add_argument("--json", action="store_true", help="the tables on stderr, the result "
                    "as one JSON object on stdout")
    tp.set_defaults(func=_paths)
    p = command(fs, "program", "load a bitstream with openFPGALoader",
                "Load a bitstream onto a board (SRAM, or --flash) with openFPGALoader, "
                "after checking\nthat it is a bitstream of the board's device. The "
                "OrangeCrab takes it through its\nDFU bootloader.\n\n" + boards,
                "tensorfab fpga program --board ulx3s-25f build/fpga/ulx3s-25f-ecp5-25f/top.bit",
                "tensorfab fpga program --board ulx3s-25f top.bit --flash",
                "tensorfab fpga program --board icebreaker top.bin --dry-run")
    board_option(p)
    p.add_argument("bitstream", help="the top.bit (ECP5) or top.bin (iCE40) of "
                   "`tensorfab fpga build`")
    p.add_argument("--flash", action="store_true", help="write the SPI flash, not SRAM")
    p.add_argument("--dry-run", action="store_true",
                   help="check the bitstream and print the command only")
    p.set_defaults(func=cmd_fpga)

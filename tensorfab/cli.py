"""The ``tensorfab`` command: config, asm, disasm, sim, bench, hw, demo."""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tensorfab.isa import PRESETS, BinaryFormatError, Program, TensorfabError, get_config
from tensorfab.isa.config import ConfigError, HwConfig
from tensorfab.isa.formats import insn_formats, insn_width, uop_format
from tensorfab.isa.program import MAGIC

err_console = Console(stderr=True, soft_wrap=True)


class CliError(TensorfabError):
    """A usage error of the command line (bad path, refusing to overwrite...)."""


# --------------------------------------------------------------------------- helpers
def load_program(path: str | Path, config: str | None = None, *,
                 binary_only: bool = False) -> Program:
    """Read a program from assembly (``.s``/``.asm``) or a binary (``.bin``).

    With ``binary_only``, anything but a program binary is a :class:`BinaryFormatError`.
    """
    from tensorfab.isa.asm import assemble_file

    path = Path(path)
    if not path.is_file():
        raise CliError(f"{path}: no such file")
    with path.open("rb") as f:
        head = f.read(len(MAGIC))
    if head != MAGIC and binary_only:
        raise BinaryFormatError(f"{path}: not a tensorfab program (no {MAGIC.decode()} "
                                "header; assemble .s files with tensorfab asm)")
    if head == MAGIC:
        prog = Program.from_bytes(path.read_bytes(), source=str(path))
        if config is not None and get_config(config) != prog.config:
            raise CliError(f"{path} was assembled for config {prog.config.name!r}, "
                           f"not {config!r}")
        return prog
    return assemble_file(path, config)


def _check_writable(out: Path, force: bool, ours: Callable[[Path], bool],
                    what: str = "output") -> None:
    """Check, before any work, that ``out`` can be written.

    The one overwrite policy of every command: an existing file is replaced only if
    tensorfab recognises it as its own output of that kind (``ours``), or with --force.
    """
    if out.is_dir():
        raise CliError(f"{what} {out} is a folder; give a file name")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise CliError(f"{what} {out}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise CliError(f"{what} {out}: not writable")
    if out.exists() and not force and not ours(out):
        raise CliError(f"{out} exists and was not written by tensorfab; "
                       "pass --force to overwrite it")


def _head(path: Path, n: int = 64) -> bytes:
    with path.open("rb") as f:
        return f.read(n)


def _is_trace(path: Path) -> bool:
    return _head(path, 16).startswith(b'{"traceEvents"')


def _is_plot(path: Path) -> bool:
    return b"Matplotlib" in _head(path, 256)


PLOT_SUFFIXES = (".png", ".pdf", ".svg")
"""Figure formats of --plot."""


def _check_plot(out: Path, force: bool) -> None:
    if out.suffix.lower() not in PLOT_SUFFIXES:
        raise CliError(f"--plot {out}: the figure format is taken from the suffix, one of "
                       f"{', '.join(PLOT_SUFFIXES)}")
    _check_writable(out, force, _is_plot, "--plot")


def _is_program_binary(path: Path) -> bool:
    return _head(path, len(MAGIC)) == MAGIC


def config_summary(cfg: HwConfig) -> dict:
    """A config with derived values: peak MACs/cycle, buffer sizes, field widths."""
    formats = insn_formats(cfg)
    return {
        "config": cfg.to_dict(),
        "derived": {
            "peak_macs_per_cycle": cfg.peak_macs_per_cycle,
            "buffer_bytes": cfg.buffer_bytes(),
            "entry_bytes": {"inp": cfg.inp_entry_bytes, "wgt": cfg.wgt_entry_bytes,
                            "acc": cfg.acc_entry_bytes, "out": cfg.out_entry_bytes,
                            "uop": uop_format(cfg).bytes},
            "insn_width": insn_width(cfg),
            "uop_width": uop_format(cfg).width,
            "field_widths": {op.name.lower(): {f.name: f.width for f in fmt.fields}
                             for op, fmt in formats.items()}
            | {"uop": {f.name: f.width for f in uop_format(cfg).fields}},
        },
    }


# -------------------------------------------------------------------------- commands
def cmd_config(args: argparse.Namespace) -> int:
    if args.action == "list":
        for name, cfg in PRESETS.items():
            print(f"{name:8s} {cfg.batch}x{cfg.block_in}x{cfg.block_out} "
                  f"{cfg.peak_macs_per_cycle} MACs/cycle")
        return 0
    if not args.name:
        raise CliError("config show needs a preset name or a JSON file")
    print(json.dumps(config_summary(get_config(args.name)), indent=2))
    return 0


def cmd_asm(args: argparse.Namespace) -> int:
    out = Path(args.output) if args.output else Path(args.file).with_suffix(".bin")
    _check_writable(out, args.force, _is_program_binary)
    prog = load_program(args.file, args.config)
    out.write_bytes(prog.to_bytes())
    counts = prog.count_by_opcode()
    print(f"{out}: {len(prog.insns)} instructions ({', '.join(f'{v} {k}' for k, v in counts.items() if v)}), "  # noqa: E501
          f"{len(prog.uops)} micro-ops, {len(prog.segments)} segments, "
          f"config {prog.config.name}")
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:
    from tensorfab.isa.disasm import disassemble

    if args.output:  # a folder that does not exist fails before the work
        _check_writable(Path(args.output), True, lambda p: True)
    prog = load_program(args.file, binary_only=True)
    text = disassemble(prog)
    if args.output:
        out = Path(args.output)
        _check_writable(out, args.force, lambda p: p.read_text(errors="replace") == text)
        out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    from tensorfab.sim import get_device

    if args.trace:
        _check_writable(Path(args.trace), args.force, _is_trace, "--trace")
    if args.plot:
        _check_plot(Path(args.plot), args.force)
    if args.outputs:
        if Path(args.outputs).suffix != ".npz":
            raise CliError(f"--outputs {args.outputs}: the outputs are saved as a .npz "
                           "archive; name the file *.npz")
        _check_writable(Path(args.outputs), args.force, lambda p: _head(p, 2) == b"PK",
                        "--outputs")
    prog = load_program(args.file, args.config)
    device = get_device(args.target)
    if args.trace or args.plot:
        if not hasattr(device, "trace"):
            raise CliError(f"--trace and --plot need an executor that records timelines "
                           f"(--target rtl), not {args.target}")
        device.trace = True
    result = device.run(prog)
    intervals = getattr(result, "intervals", None) or []
    if args.trace:
        from tensorfab.sim.trace import write_chrome_trace

        write_chrome_trace(intervals, args.trace)
        print(f"wrote {args.trace} ({len(intervals)} intervals)", file=sys.stderr)
    if args.plot:
        from tensorfab.sim.trace import plot_timeline

        plot_timeline(intervals, args.plot, cycles=result.cycles,
                      title=f"{Path(args.file).name} on {device.name} ({prog.config.name})")
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.outputs:
        import numpy as np

        np.savez(Path(args.outputs), **result.outputs)
    if args.json:
        print(json.dumps(result.to_json()))
        return 0
    console = Console()
    table = Table(title=escape(f"{args.file} on {device.name} ({prog.config.name})"))
    table.add_column("counter")
    table.add_column("value", justify="right")
    for k, v in result.counters.to_dict().items():
        table.add_row(k, f"{v:,}")
    if result.cycles is not None:
        table.add_row("cycles", f"{result.cycles:,}")
    console.print(table)
    for name, arr in result.outputs.items():
        console.print(f"[bold]{escape(name)}[/] {arr.dtype} {arr.shape}")
        console.print(arr if arr.size <= 256 else f"{arr.ravel()[:16]} ...")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from tensorfab.benches import BENCHES

    if args.name not in BENCHES:
        raise CliError(f"unknown benchmark {args.name!r} (known: {', '.join(BENCHES)})")
    fn = BENCHES[args.name]
    params = inspect.signature(fn).parameters
    kwargs = {}
    if args.plot:
        _check_plot(Path(args.plot), args.force)
    for opt in ("target", "plot"):
        value = getattr(args, opt)
        if value is not None:
            if opt not in params:
                raise CliError(f"benchmark {args.name!r} has no --{opt} option")
            kwargs[opt] = value
    result = fn(**kwargs)
    if not args.json:
        for k, v in result.items():
            print(f"{k:24s} {v}")
    print(json.dumps(result))
    return 0


def cmd_hw(args: argparse.Namespace) -> int:
    from tensorfab.hw.verilog import CORE_LINT_WAIVERS, CORE_TOP, core_verilog, lint

    cfg = get_config(args.config)
    out = Path(args.output or f"{CORE_TOP}_{cfg.name}.v")
    if args.action == "verilog":
        _check_writable(out, args.force,
                        lambda p: _head(p, len(CORE_TOP) + 4) == f"// {CORE_TOP}:".encode())
    text = core_verilog(cfg)
    if args.action == "lint":
        problems = lint(text, CORE_TOP, CORE_LINT_WAIVERS)
        for line in problems:
            print(line)
        print(f"{CORE_TOP} ({cfg.name}): "
              + ("lint clean" if not problems else f"{len(problems)} lint problem(s)"))
        return 0 if not problems else 1
    out.write_text(text)
    print(f"{out}: {CORE_TOP} for config {cfg.name}, {len(text.splitlines())} lines")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tensorfab.demo import run_demo

    return run_demo(Console())


# ---------------------------------------------------------------------------- parser
EXAMPLES = """examples:
  tensorfab config list
  tensorfab config show tiny > tiny.json     # the output is accepted as a config file
  tensorfab asm prog.s -o prog.bin --config tiny
  tensorfab disasm prog.bin
  tensorfab sim prog.s --target rtl --trace t.json --plot t.png
  tensorfab bench fsim-gemm --json
  tensorfab hw verilog --config tiny -o core.v
"""


def _bench_list() -> str:
    from tensorfab.benches import BENCHES

    lines = ["benchmarks:"]
    for name, fn in BENCHES.items():
        doc = (fn.__doc__ or "").strip().splitlines()
        lines.append(f"  {name:16s} {doc[0] if doc else ''}")
    return "\n".join(lines) + "\n\nexample: tensorfab bench conv2d --target fsim --json\n"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tensorfab")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``tensorfab``."""
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="tensorfab", description=__doc__, epilog=EXAMPLES,
                                formatter_class=raw)
    p.add_argument("--version", action="version", version=f"tensorfab {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, epilog: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, epilog=epilog,
                              formatter_class=raw)

    c = command("config", "list presets or show one with derived values",
                "examples:\n  tensorfab config list\n  tensorfab config show default\n"
                "  tensorfab config show my_config.json\n")
    c.add_argument("action", choices=["show", "list"], help="list the presets or show one")
    c.add_argument("name", nargs="?", help="preset name or JSON file (show)")
    c.set_defaults(func=cmd_config)

    a = command("asm", "assemble FILE.s into a program binary",
                "example:\n  tensorfab asm prog.s -o prog.bin --config tiny\n")
    a.add_argument("file", help="assembly source (.s)")
    a.add_argument("-o", "--output", help="output .bin (default: FILE with .bin)")
    a.add_argument("--config", help="preset name or JSON file (must match .config)")
    a.add_argument("--force", action="store_true", help="overwrite any existing output")
    a.set_defaults(func=cmd_asm)

    d = command("disasm", "print the canonical assembly of a program binary",
                "example:\n  tensorfab disasm prog.bin -o prog.s\n")
    d.add_argument("file", help="program binary (.bin, written by tensorfab asm)")
    d.add_argument("-o", "--output", help="write to a file instead of stdout")
    d.add_argument("--force", action="store_true", help="overwrite any existing output")
    d.set_defaults(func=cmd_disasm)

    s = command("sim", "run a program (.s or .bin) on an executor",
                "examples:\n  tensorfab sim prog.s\n"
                "  tensorfab sim prog.bin --target rtl --json --outputs out.npz\n"
                "  tensorfab sim prog.s --target rtl --trace t.json --plot t.png\n")
    s.add_argument("file", help="assembly (.s) or program binary (.bin)")
    s.add_argument("--target", default="fsim",
                   help="executor: fsim (functional) or rtl (Verilator) (default: fsim)")
    s.add_argument("--config", help="preset name or JSON file")
    s.add_argument("--json", action="store_true", help="print the result summary as JSON")
    s.add_argument("--outputs", metavar="OUT.npz", help="save output segments to this .npz")
    s.add_argument("--force", action="store_true", help="overwrite any existing output")
    s.add_argument("--trace", metavar="OUT.json",
                   help="write engine timelines as Perfetto/Chrome trace JSON (rtl)")
    s.add_argument("--plot", metavar="OUT.png",
                   help="draw engine timelines (.png, .pdf or .svg) (rtl)")
    s.set_defaults(func=cmd_sim)

    b = command("bench", "run a benchmark; the last line is its JSON", _bench_list())
    b.add_argument("name", help="benchmark name (listed below)")
    b.add_argument("--json", action="store_true", help="print only the JSON line")
    b.add_argument("--target", help="executor of benchmarks that take one (conv2d: rtl, fsim)")
    b.add_argument("--plot", metavar="OUT.png",
                   help="PNG of benchmarks that draw one ('' for none)")
    b.add_argument("--force", action="store_true", help="overwrite an existing --plot file")
    b.set_defaults(func=cmd_bench)

    h = command("hw", "generate or lint the core's Verilog",
                "examples:\n  tensorfab hw verilog --config tiny -o core.v\n"
                "  tensorfab hw lint --config small\n")
    h.add_argument("action", choices=["verilog", "lint"], help="write Verilog or lint it")
    h.add_argument("--config", default="default",
                   help="preset name or JSON file (default: default)")
    h.add_argument("-o", "--output", help="Verilog file (default tensorfab_core_NAME.v)")
    h.add_argument("--force", action="store_true", help="overwrite any existing output")
    h.set_defaults(func=cmd_hw)

    m = command("demo", "assemble and run the example GEMM+ALU program",
                "example:\n  tensorfab demo\n")
    m.set_defaults(func=cmd_demo)
    return p


@functools.cache
def _parser() -> argparse.ArgumentParser:
    return build_parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensorfab`` console command."""
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (TensorfabError, ConfigError) as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False,
                          emoji=False)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The ``tensorfab`` command: config, asm, disasm, sim, bench, demo."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tensorfab.isa import PRESETS, Program, TensorfabError, get_config
from tensorfab.isa.config import ConfigError, HwConfig
from tensorfab.isa.formats import insn_formats, insn_width, uop_format
from tensorfab.isa.program import MAGIC

err_console = Console(stderr=True, soft_wrap=True)


class CliError(TensorfabError):
    """A usage error of the command line (bad path, refusing to overwrite...)."""


# --------------------------------------------------------------------------- helpers
def load_program(path: str | Path, config: str | None = None) -> Program:
    """Read a program from assembly (``.s``/``.asm``) or a binary (``.bin``)."""
    from tensorfab.isa.asm import assemble_file

    path = Path(path)
    if not path.is_file():
        raise CliError(f"{path}: no such file")
    head = path.open("rb").read(len(MAGIC))
    if head == MAGIC:
        prog = Program.from_bytes(path.read_bytes(), source=str(path))
        if config is not None and get_config(config) != prog.config:
            raise CliError(f"{path} was assembled for config {prog.config.name!r}, "
                           f"not {config!r}")
        return prog
    return assemble_file(path, config)


def _check_writable(out: Path, force: bool, ours: Callable[[Path], bool]) -> None:
    """Refuse to overwrite a file tensorfab did not write, unless --force."""
    if out.exists() and not force and not ours(out):
        raise CliError(f"{out} exists and was not written by tensorfab; "
                       "pass --force to overwrite it")


def _is_program_binary(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(len(MAGIC)) == MAGIC


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
    prog = load_program(args.file, args.config)
    out = Path(args.output) if args.output else Path(args.file).with_suffix(".bin")
    _check_writable(out, args.force, _is_program_binary)
    out.write_bytes(prog.to_bytes())
    counts = prog.count_by_opcode()
    print(f"{out}: {len(prog.insns)} instructions ({', '.join(f'{v} {k}' for k, v in counts.items() if v)}), "  # noqa: E501
          f"{len(prog.uops)} micro-ops, {len(prog.segments)} segments, "
          f"config {prog.config.name}")
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:
    from tensorfab.isa.disasm import disassemble

    prog = load_program(args.file)
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

        out = Path(args.outputs)
        _check_writable(out, args.force, lambda p: p.suffix == ".npz")
        np.savez(out, **result.outputs)
    if args.json:
        print(json.dumps(result.to_json()))
        return 0
    console = Console()
    table = Table(title=f"{args.file} on {device.name} ({prog.config.name})")
    table.add_column("counter")
    table.add_column("value", justify="right")
    for k, v in result.counters.to_dict().items():
        table.add_row(k, f"{v:,}")
    if result.cycles is not None:
        table.add_row("cycles", f"{result.cycles:,}")
    console.print(table)
    for name, arr in result.outputs.items():
        console.print(f"[bold]{name}[/] {arr.dtype} {arr.shape}")
        console.print(arr if arr.size <= 256 else f"{arr.ravel()[:16]} ...")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from tensorfab.sim.benches import BENCHES

    if args.name not in BENCHES:
        raise CliError(f"unknown benchmark {args.name!r} (known: {', '.join(BENCHES)})")
    fn = BENCHES[args.name]
    params = inspect.signature(fn).parameters
    kwargs = {}
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
    text = core_verilog(cfg)
    if args.action == "lint":
        problems = lint(text, CORE_TOP, CORE_LINT_WAIVERS)
        for line in problems:
            print(line)
        print(f"{CORE_TOP} ({cfg.name}): "
              + ("lint clean" if not problems else f"{len(problems)} lint problem(s)"))
        return 0 if not problems else 1
    out = Path(args.output or f"{CORE_TOP}_{cfg.name}.v")
    _check_writable(out, args.force,
                    lambda p: p.read_text(errors="replace").startswith(f"// {CORE_TOP}:"))
    out.write_text(text)
    print(f"{out}: {CORE_TOP} for config {cfg.name}, {len(text.splitlines())} lines")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tensorfab.demo import run_demo

    return run_demo(Console())


# ---------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``tensorfab``."""
    p = argparse.ArgumentParser(prog="tensorfab", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("config", help="list presets or show one with derived values")
    c.add_argument("action", choices=["show", "list"])
    c.add_argument("name", nargs="?", help="preset name or JSON file")
    c.set_defaults(func=cmd_config)

    a = sub.add_parser("asm", help="assemble FILE.s into a program binary")
    a.add_argument("file")
    a.add_argument("-o", "--output", help="output .bin (default: FILE with .bin)")
    a.add_argument("--config", help="preset name or JSON file (must match .config)")
    a.add_argument("--force", action="store_true", help="overwrite any existing output")
    a.set_defaults(func=cmd_asm)

    d = sub.add_parser("disasm", help="print the canonical assembly of a program binary")
    d.add_argument("file")
    d.add_argument("-o", "--output", help="write to a file instead of stdout")
    d.add_argument("--force", action="store_true", help="overwrite any existing output")
    d.set_defaults(func=cmd_disasm)

    s = sub.add_parser("sim", help="run a program (.s or .bin) on an executor")
    s.add_argument("file")
    s.add_argument("--target", default="fsim", help="executor (fsim, rtl)")
    s.add_argument("--config", help="preset name or JSON file")
    s.add_argument("--json", action="store_true", help="print the result summary as JSON")
    s.add_argument("--outputs", help="save output segments to this .npz")
    s.add_argument("--force", action="store_true", help="overwrite any existing output")
    s.add_argument("--trace", metavar="OUT.json",
                   help="write engine timelines as Perfetto/Chrome trace JSON (rtl)")
    s.add_argument("--plot", metavar="OUT.png", help="draw engine timelines as a PNG (rtl)")
    s.set_defaults(func=cmd_sim)

    b = sub.add_parser("bench", help="run a benchmark; the last line is its JSON")
    b.add_argument("name")
    b.add_argument("--json", action="store_true", help="print only the JSON line")
    b.add_argument("--target", help="executor of benchmarks that take one (conv2d: rtl, fsim)")
    b.add_argument("--plot", metavar="OUT.png",
                   help="PNG of benchmarks that draw one ('' for none)")
    b.set_defaults(func=cmd_bench)

    h = sub.add_parser("hw", help="generate or lint the core's Verilog")
    h.add_argument("action", choices=["verilog", "lint"])
    h.add_argument("--config", default="default", help="preset name or JSON file")
    h.add_argument("-o", "--output", help="Verilog file (default tensorfab_core_NAME.v)")
    h.add_argument("--force", action="store_true", help="overwrite any existing output")
    h.set_defaults(func=cmd_hw)

    m = sub.add_parser("demo", help="assemble and run the example GEMM+ALU program")
    m.set_defaults(func=cmd_demo)

    from tensorfab.cli_fpga import add_fpga_parser

    add_fpga_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensorfab`` console command."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (TensorfabError, ConfigError) as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

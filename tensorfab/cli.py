"""The ``tensorfab`` command: config, asm, disasm, sim, bench, hw, demo (model, fpga,
serve and tracker in modules of their own)."""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import sys
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tensorfab.cli_output import (
    CliError,
    HelpFormatter,
    check_writable,
    examples,
    print_result,
    working,
)
from tensorfab.fpga_builds.board_configs import board_config, board_config_names
from tensorfab.isa import PRESETS, BinaryFormatError, Opcode, Program, TensorfabError
from tensorfab.isa.config import HwConfig
from tensorfab.isa.formats import buffer_bytes, insn_formats, insn_width, uop_format
from tensorfab.isa.program import MAGIC

err_console = Console(stderr=True, soft_wrap=True)



# --------------------------------------------------------------------------- helpers
def load_program(path: str | Path, config: str | None = None, *,
                 binary_only: bool = False) -> Program:
    """Read a program from assembly (``.s``/``.asm``) or a binary (``.bin``); ``config``
    (a ``--config`` value, :func:`board_config`) must be the program's.

    With ``binary_only``, or for a ``.bin`` file, anything but a program binary is a
    :class:`BinaryFormatError`.
    """
    from tensorfab.isa.asm import assemble_file

    path = Path(path)
    if path.is_dir():
        raise CliError(f"{path} is a folder; give a program file (.s or .bin)")
    if not path.is_file():
        raise CliError(f"{path}: no such file")
    with path.open("rb") as f:
        head = f.read(len(MAGIC))
    if head != MAGIC and (binary_only or path.suffix.lower() == ".bin"):
        raise BinaryFormatError(f"{path}: not a tensorfab program (no {MAGIC.decode()} "
                                "header; assemble .s files with tensorfab asm)")
    cfg = board_config(config) if config is not None else None
    if head == MAGIC:
        prog = Program.from_bytes(path.read_bytes(), source=str(path))
        if cfg is not None and cfg != prog.config:
            same = (f" (also named {cfg.name!r}: {prog.config.differences(cfg)})"
                    if cfg.name == prog.config.name else "")
            raise CliError(f"{path} was assembled for config {prog.config.name!r}, "
                           f"not {config!r}{same}")
        return prog
    return assemble_file(path, cfg, lookup=board_config)


def _is_outputs_archive(names: Sequence[str]) -> Callable[[Path], bool]:
    """Whether a file is an ``.npz`` of exactly these output segments (what ``sim
    --outputs`` writes for the program)."""
    expected = sorted(f"{n}.npy" for n in names)

    def ours(path: Path) -> bool:
        if not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as z:
            return sorted(z.namelist()) == expected

    return ours


def _working(text: str, quiet: bool = False) -> Any:
    """:func:`tensorfab.cli_output.working` on this module's stderr console."""
    return working(text, quiet, console=err_console)


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
            "buffer_bytes": buffer_bytes(cfg),
            "entry_bytes": {"inp": cfg.inp_entry_bytes, "wgt": cfg.wgt_entry_bytes,
                            "acc": cfg.acc_entry_bytes, "out": cfg.out_entry_bytes,
                            "uop": uop_format(cfg).bytes},
            "insn_width": insn_width(cfg),
            "uop_width": uop_format(cfg).width,
            # (an ALU word is no instruction of a config without the vector ALU)
            "field_widths": {op.name.lower(): {f.name: f.width for f in fmt.fields}
                             for op, fmt in formats.items()
                             if op is not Opcode.ALU or cfg.vector_alu}
            | {"uop": {f.name: f.width for f in uop_format(cfg).fields}},
        },
    }


# -------------------------------------------------------------------------- commands
def cmd_config(args: argparse.Namespace) -> int:
    if args.action == "list":
        if args.name:
            raise CliError(f"config list takes no name (given {args.name!r}); to see one "
                           f"config: tensorfab config show {args.name}")
        rows = [{"name": name, "board_config": name not in PRESETS,
                 "shape": [cfg.batch, cfg.block_in, cfg.block_out],
                 "macs_per_cycle": cfg.peak_macs_per_cycle}
                for name in [*PRESETS, *board_config_names()]
                for cfg in [board_config(name)]]

        def human() -> None:
            for r in rows:
                print(f"{r['name']:8s} {'x'.join(map(str, r['shape']))} "
                      f"{r['macs_per_cycle']} MACs/cycle"
                      f"{'  (board config)' if r['board_config'] else ''}")
        print_result({"configs": rows}, args.json, human)
        return 0
    if not args.name:
        raise CliError("config show needs a preset name, a board config name or a JSON "
                       "file")
    summary = config_summary(board_config(args.name))
    # indented: the JSON is a config file (what --config reads)
    print_result(summary, args.json, lambda: _print_config(summary), indent=2)
    return 0


def _print_config(summary: dict) -> None:
    """``config show``'s summary: the fields, then the derived values (``--json`` has
    the instruction fields' widths too)."""
    cfg, derived = summary["config"], summary["derived"]
    width = max(map(len, cfg))
    for key, value in cfg.items():
        print(f"{key:{width}s}  {value}")
    print(f"peak: {derived['peak_macs_per_cycle']} MACs/cycle; instructions "
          f"{derived['insn_width']} bits, micro-ops {derived['uop_width']} bits")
    print("buffers: " + ", ".join(f"{name} {size:,} B" for name, size
                                  in derived["buffer_bytes"].items()))
    print("entries: " + ", ".join(f"{name} {size} B" for name, size
                                  in derived["entry_bytes"].items()))
    print("instruction fields (bits):")
    for op, fields in derived["field_widths"].items():
        print(f"  {op:8s} " + ", ".join(f"{f} {w}" for f, w in fields.items()))


def cmd_asm(args: argparse.Namespace) -> int:
    out = Path(args.output) if args.output else Path(args.file).with_suffix(".bin")
    check_writable(out, args.force, _is_program_binary, inputs=[Path(args.file)])
    prog = load_program(args.file, args.config)
    out.write_bytes(prog.to_bytes())
    counts = {k: v for k, v in prog.count_by_opcode().items() if v}
    result = {"output": str(out), "instructions": len(prog.insns), "by_opcode": counts,
              "micro_ops": len(prog.uops), "segments": len(prog.segments),
              "config": prog.config.name}
    print_result(result, args.json, lambda: print(
        f"{out}: {len(prog.insns)} instructions ("
        + ", ".join(f"{v} {k}" for k, v in counts.items()) + f"), {len(prog.uops)} "
        f"micro-ops, {len(prog.segments)} segments, config {prog.config.name}"))
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:
    from tensorfab.isa.disasm import disassemble

    if args.output:  # the folder before reading; ownership once the text is known
        check_writable(Path(args.output), args.force, lambda p: True,
                       inputs=[Path(args.file)])
    prog = load_program(args.file, binary_only=True)
    text = disassemble(prog)
    if args.output:
        out = Path(args.output)
        check_writable(out, args.force, lambda p: p.read_text(errors="replace") == text)
        out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    from tensorfab.sim.png_figure import is_tensorfab_png
    from tensorfab.sim.race import ENGINE_NAMES
    from tensorfab.sim.trace import is_tensorfab_trace

    from .model_cli import open_target

    prog = load_program(args.file, args.config)
    device = open_target(args.target, trace=False, token=args.token)
    if args.trace or args.plot:
        if not hasattr(device, "trace"):
            raise CliError(f"--trace and --plot need an executor that records timelines "
                           f"(--target rtl), not {args.target}")
        device.trace = True
    # every output is checked before the run, which may take minutes
    if args.trace:
        check_writable(Path(args.trace), args.force, is_tensorfab_trace, suffixes=(".json",))
    if args.plot:
        check_writable(Path(args.plot), args.force, is_tensorfab_png, suffixes=(".png",))
    if args.outputs:
        check_writable(Path(args.outputs), args.force,
                        _is_outputs_archive([s.name for s in prog.segments if s.output]),
                        suffixes=(".npz",))
    title = f"{Path(args.file).name} on {device.name} ({prog.config.name})"
    try:
        with _working(f"running {title}", quiet=args.json) as say:
            if hasattr(device, "progress"):
                n = {e: sum(ENGINE_NAMES[i.engine] == e for i in prog.insns)
                     for e in ENGINE_NAMES}
                device.progress = lambda cycles, done: say(
                    f"running {title}: cycle {cycles:,}, retired "
                    + ", ".join(f"{e} {done[e]}/{n[e]}" for e in ENGINE_NAMES))
            result = device.run(prog)
    except (TensorfabError, KeyboardInterrupt) as exc:
        # a failed run's timeline is the one most worth looking at
        failed = getattr(exc, "intervals", None)
        if failed is not None:
            _write_timelines(args, failed, None, f"{title}: failed", prog.config.clock_mhz)
        raise
    _write_timelines(args, getattr(result, "intervals", None) or [], result.cycles, title,
                     prog.config.clock_mhz)
    if args.outputs:
        import numpy as np

        with Path(args.outputs).open("wb") as f:  # a file object: no ".npz" appended
            np.savez(f, **result.outputs)
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


def _write_timelines(args: argparse.Namespace, intervals: list, cycles: int | None,
                     title: str, clock_mhz: float) -> None:
    """Write ``sim --trace`` (in hardware time: microseconds at ``clock_mhz``, the
    config's clock) and ``--plot`` (in cycles), after a run or a failed one."""
    if args.trace:
        from tensorfab.sim.trace import write_chrome_trace

        write_chrome_trace(intervals, args.trace, clock_mhz=clock_mhz)
        print(f"wrote {args.trace} ({len(intervals)} intervals)", file=sys.stderr)
    if args.plot:
        from tensorfab.sim.trace import plot_timeline

        plot_timeline(intervals, args.plot, cycles=cycles, title=title)
        print(f"wrote {args.plot}", file=sys.stderr)


#: The options of ``bench`` passed to a benchmark whose function takes them (by name).
BENCH_OPTIONS = ("target", "plot", "board", "config", "profile", "requant_stage",
                 "image_size", "separate_adds", "agreement")


def _requant_stage(value: str) -> str:
    """``bench --requant-stage``'s value, one of the compiler's ``REQUANT_STAGES``
    (imported only when the option is given: the compiler is slow to import)."""
    from tensorfab.compiler.tensor.epilogue import REQUANT_STAGES

    if value not in REQUANT_STAGES:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {value!r} (choose from {', '.join(map(repr, REQUANT_STAGES))})")
    return value


def cmd_bench(args: argparse.Namespace) -> int:
    from tensorfab.benches import BENCHES

    if args.name not in BENCHES:
        raise CliError(f"unknown benchmark {args.name!r} (known: {', '.join(BENCHES)})")
    fn = BENCHES[args.name]
    if args.plot:  # checked before the benchmark runs, so its JSON is never lost
        from tensorfab.sim.png_figure import is_tensorfab_png

        check_writable(Path(args.plot), args.force, is_tensorfab_png, suffixes=(".png",))
    params = inspect.signature(fn).parameters
    kwargs = {}
    for opt in BENCH_OPTIONS:
        value = getattr(args, opt)
        if value is not None:
            if opt not in params:
                raise CliError(f"benchmark {args.name!r} has no "
                               f"--{opt.replace('_', '-')} option")
            kwargs[opt] = value
    with _working(f"bench {args.name}: running", quiet=args.json):
        result = fn(**kwargs)

    def human() -> None:
        width = max(map(len, result), default=0)
        for k, v in result.items():
            print(f"{k:{width}s}  {v}")

    print_result(result, args.json, human)
    return 0


def cmd_hw(args: argparse.Namespace) -> int:
    from tensorfab.hw.verilog import CORE_LINT_WAIVERS, CORE_TOP, core_verilog, lint

    cfg = board_config(args.config)
    out = Path(args.output or f"{CORE_TOP}_{cfg.name}.v")
    if args.action == "verilog":  # before the generation, which takes minutes for large
        check_writable(out, args.force,
                        lambda p: p.read_text(errors="replace").startswith(f"// {CORE_TOP}:"))
    with _working(f"generating the Verilog of the {cfg.name} core (Amaranth)") as say:
        text = core_verilog(cfg)
        if args.action == "lint":
            say(f"linting the {cfg.name} core (verilator --lint-only -Wall)")
            problems = lint(text, CORE_TOP, CORE_LINT_WAIVERS)
    if args.action == "lint":

        def human() -> None:
            for line in problems:
                print(line)
            print(f"{CORE_TOP} ({cfg.name}): "
                  + ("lint clean" if not problems else f"{len(problems)} lint problem(s)"))

        print_result({"top": CORE_TOP, "config": cfg.name, "problems": problems},
                     args.json, human)
        return 0 if not problems else 1
    out.write_text(text)
    lines = len(text.splitlines())
    print_result({"output": str(out), "top": CORE_TOP, "config": cfg.name, "lines": lines},
                 args.json,
                 lambda: print(f"{out}: {CORE_TOP} for config {cfg.name}, {lines} lines"))
    return 0


def cmd_samples(args: argparse.Namespace) -> int:
    from tensorfab.models.digits_cnn import sample_files

    folder = Path(args.folder)
    files = sample_files()
    for name, data in files.items():  # all checked before any is written
        check_writable(folder / name, args.force,
                       lambda p, data=data: p.read_bytes() == data)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    print(f"wrote {', '.join(files)} in {folder}: the digits CNN (input image, "
          "N×1×8×8 float32), 256 calibration images, 16 test images")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tensorfab.demo import run_demo

    return run_demo(Console())


# ---------------------------------------------------------------------------- parser
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tensorfab")
    except PackageNotFoundError:  # run from a source tree without installing
        from tensorfab import __version__

        return __version__


def _bench_list() -> str:
    from tensorfab.benches import BENCHES

    width = max(map(len, BENCHES))
    rows = [f"  {name:{width}s}  {(fn.__doc__ or '').strip().splitlines()[0]}"
            if fn.__doc__ else f"  {name}" for name, fn in BENCHES.items()]
    return "benchmarks:\n" + "\n".join(rows)


DESCRIPTION = """\
tensorfab: design tensor accelerators and run programs on them.

Errors are reported in one line (exit status 2). Run `tensorfab COMMAND --help`
for a command's options and examples."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``tensorfab``."""
    p = argparse.ArgumentParser(
        prog="tensorfab", description=DESCRIPTION, formatter_class=HelpFormatter,
        epilog=examples("tensorfab config list", "tensorfab demo",
                         "tensorfab sim prog.s --target rtl --trace t.json --plot t.png",
                         "tensorfab bench conv2d --target rtl --json"))
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, *lines: str, description: str | None = None
                ) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=description or help,
                              epilog=examples(*lines) if lines else None,
                              formatter_class=HelpFormatter)

    c = command("config", "list the hardware presets and board configs or show one with "
                "derived values",
                "tensorfab config list", "tensorfab config show default",
                "tensorfab config show my_config.json")
    c.add_argument("action", choices=["show", "list"],
                   help="show one config or list the presets and board configs")
    c.add_argument("name", nargs="?",
                   help="preset, board config (ecp5-25f, ...) or JSON file (for show)")
    c.add_argument("--json", action="store_true",
                   help="show: the config and its derived values as one JSON object (a "
                        "config file --config reads); list: the configs' names, shapes and "
                        "MACs per cycle")
    c.set_defaults(func=cmd_config)

    a = command("asm", "assemble FILE.s into a program binary",
                "tensorfab asm prog.s", "tensorfab asm prog.s -o prog.bin --config default")
    a.add_argument("file", help="assembly source (.s)")
    a.add_argument("-o", "--output", help="output .bin (default: FILE with .bin; never "
                   "the input itself: a .bin input needs -o)")
    a.add_argument("--config", help="preset, board config or JSON file (must match .config)")
    a.add_argument("--force", action="store_true",
                   help="overwrite an existing output that is not a program binary")
    a.add_argument("--json", action="store_true",
                   help="print what was written as one JSON object")
    a.set_defaults(func=cmd_asm)

    d = command("disasm", "print the canonical assembly of a program binary",
                "tensorfab disasm prog.bin", "tensorfab disasm prog.bin -o prog.s")
    d.add_argument("file", help="program binary (.bin)")
    d.add_argument("-o", "--output", help="write to a file instead of stdout")
    d.add_argument("--force", action="store_true", help="overwrite any existing output")
    d.set_defaults(func=cmd_disasm)

    s = command("sim", "run a program (.s or .bin) on an executor",
                "tensorfab sim prog.s", "tensorfab sim prog.bin --json --outputs out.npz",
                "tensorfab sim prog.s --target rtl --trace t.json --plot t.png",
                description="Run a program (.s or .bin) on an executor and print its "
                "counters and outputs. The first RTL run of a config builds its Verilator "
                "model (tens of seconds, cached under build/).")
    s.add_argument("file", help="program: assembly (.s) or binary (.bin)")
    s.add_argument("--target", default="fsim",
                   help="executor: fsim (functional simulator), rtl (Verilator), "
                        "timing (the timing model's cycles, fsim's outputs), "
                        "virtual (the SoC in Verilator), a board (serial:///dev/ttyUSB0, "
                        "socket://HOST:PORT) or a served device (tcp://HOST:PORT); "
                        "docs/hil.md (default: %(default)s)")
    from .model_cli import add_token_argument
    add_token_argument(s)
    s.add_argument("--config",
                   help="preset, board config or JSON file (must match the program's)")
    s.add_argument("--json", action="store_true", help="print the result summary as JSON")
    s.add_argument("--outputs", metavar="OUT.npz", help="save output segments to this .npz")
    s.add_argument("--force", action="store_true",
                   help="overwrite existing outputs tensorfab did not write")
    s.add_argument("--trace", metavar="OUT.json",
                   help="write engine timelines as Perfetto/Chrome trace JSON (rtl)")
    s.add_argument("--plot", metavar="OUT.png", help="draw engine timelines as a PNG (rtl)")
    s.set_defaults(func=cmd_sim)

    b = command("bench", "run a benchmark and print its results",
                "tensorfab bench fsim-gemm --json",
                "tensorfab bench conv2d --target fsim --plot conv2d.png",
                description="Run a benchmark and print its results (--json: as one "
                "JSON object).\n\n" + _bench_list())
    b.add_argument("name", metavar="NAME", help="benchmark (listed above)")
    b.add_argument("--json", action="store_true",
                   help="print the results as one JSON object")
    b.add_argument("--target", help="executor of benchmarks that take one (conv2d: rtl, fsim)")
    b.add_argument("--plot", metavar="OUT.png",
                   help="PNG of benchmarks that draw one ('' for none; default under build/)")
    b.add_argument("--force", action="store_true", help="overwrite any existing --plot file")
    b.add_argument("--board", help="only this board's builds (fpga)")
    b.add_argument("--config", help="only this config's builds (fpga; with --board, any "
                   "config), or the hardware config to compile for (resnet18, "
                   "sdram-resnet18, topologies, zoo)")
    b.add_argument("--profile", action="store_true", default=None,
                   help="machine instructions per simulated cycle per block of the design, "
                   "under Valgrind (rtl-speed)")
    b.add_argument("--requant-stage", type=_requant_stage, metavar="STAGE",
                   help="where the convolutions' REQUANT runs: store, requantizing STOREs "
                   "(the default), or alu, an ALU pass before them (resnet18)")
    b.add_argument("--image-size", type=int, metavar="N",
                   help="input images of N x N pixels (resnet18; default 224)")
    b.add_argument("--separate-adds", action="store_true", default=None,
                   help="keep the residual adds as separate int8 adds, not fused into the "
                   "convolutions before them (resnet18)")
    b.add_argument("--agreement", type=int, metavar="N",
                   help="only measure the int8 graph against the float model on N seeded "
                   "images: top-1 agreement, cosine of the logits (resnet18)")
    b.set_defaults(func=cmd_bench)

    h = command("hw", "generate or lint the core's Verilog",
                "tensorfab hw verilog --config default -o core.v",
                "tensorfab hw lint --config tiny")
    h.add_argument("action", choices=["verilog", "lint"],
                   help="verilog: write the Verilog; lint: verilator --lint-only -Wall")
    h.add_argument("--config", default="default",
                   help="preset, board config or JSON file (default: %(default)s)")
    h.add_argument("-o", "--output", help="Verilog file (default: tensorfab_core_NAME.v)")
    h.add_argument("--force", action="store_true",
                   help="overwrite an existing output tensorfab did not write")
    h.add_argument("--json", action="store_true",
                   help="print the result (the file written, or lint's problems) as one "
                        "JSON object")
    h.set_defaults(func=cmd_hw)

    m = command("demo", "assemble and run the example GEMM+requantization program",
                "tensorfab demo")
    m.set_defaults(func=cmd_demo)

    sm = command("samples", "write a small ONNX model and inputs to try the model "
                 "commands on", "tensorfab samples", "tensorfab samples try/",
                 description="Write the files the documentation's model commands use: "
                 "digits.onnx (a small CNN,\ninput image, N×1×8×8 float32), calib.npy "
                 "and calib.npz (256 calibration images),\nimages.npy (16 test images).")
    sm.add_argument("folder", nargs="?", default=".",
                    help="where to write them (an existing folder; default: here)")
    sm.add_argument("--force", action="store_true",
                    help="overwrite existing files of these names")
    sm.set_defaults(func=cmd_samples)

    from .model_cli import add_model_commands
    add_model_commands(sub)

    from .serve_cli import add_serve_commands
    add_serve_commands(command)

    from .board_cli import add_board_commands
    add_board_commands(command)

    from .embed_cli import add_embed_command
    add_embed_command(command)

    from .dse_cli import add_advise_command, add_dse_command
    add_dse_command(command)
    add_advise_command(command)

    from .verify_cli import add_verify_command
    add_verify_command(command)

    from .tune_cli import add_tune_command
    add_tune_command(command)

    from tensorfab.cli_fpga import add_fpga_parser

    add_fpga_parser(sub)
    return p


@functools.cache
def _cached_parser(_benches: tuple) -> argparse.ArgumentParser:
    return build_parser()


def _parser() -> argparse.ArgumentParser:
    """The parser, built once per set of registered benchmarks (their list is part of
    ``bench --help``)."""
    from tensorfab.benches import BENCHES

    return _cached_parser(tuple(BENCHES.items()))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensorfab`` console command."""
    try:
        args = _parser().parse_args(argv)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except BrokenPipeError:  # `tensorfab ... | head`: the reader has what it wanted
        # Python's advice (signal module docs): the rest of stdout goes nowhere, so
        # that the flush at exit raises nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except TensorfabError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False,
                          emoji=False)
        return 2
    except KeyboardInterrupt as exc:  # an RTL run says where it stopped
        err_console.print(escape(str(exc)) or "interrupted", highlight=False)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""``tensorfab compile``, ``run`` and ``inspect``: ONNX models to ``.tfm`` files and back.

* ``compile MODEL.onnx -o OUT.tfm [--config CONFIG] [--board BOARD] [--calib
  CALIB.npz|.npy] [--quantizer tensorfab|ort] [--calib-method minmax|percentile]
  [--shape NAME=D,D]``: import, optionally quantize to int8 on the calibration samples
  (per-channel symmetric weights, per-tensor activations, int32 biases), lower to
  integer operators with the accelerator's exact requantization, with ``--config`` (or
  the default config of ``--board``) put the convolution chains on that accelerator,
  with ``--board`` check that the model's device memory fits the board's, and save the
  runtime's ``.tfm`` file;
* ``run MODEL.tfm|MODEL.onnx --input [NAME=]FILE.npy ... [--target TARGET] [--token
  TOKEN] [--trace T.json] [-o OUT.npy]``: run it (an ``.onnx`` is compiled in memory
  first) resident on the target (``fsim``, ``rtl``, ``virtual``, ``serial://``,
  ``socket://``, ``tcp://``), print the outputs' summary and a per-layer table (device,
  op, shapes, cycles from the device's counters, hardware time at its clock,
  utilization, wall time; the model's one-time load apart); ``--trace`` writes one
  Perfetto timeline of the whole network in hardware time (of the run up to where it
  stopped, for a failed or interrupted one);
* ``inspect FILE``: the IR text form of an ONNX model (its weights' dtypes and shapes;
  ``--values`` for their values); for a ``.tfm``, its planned program (one line per
  node, with its device), device-memory map and a summary.

Each prints a summary for people, or with ``--json`` only the result as one JSON object
(:func:`~tensorfab.cli_output.print_result`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.format import MAGIC_PREFIX

from tensorfab.cli_output import check_writable, print_result, working
from tensorfab.hil.errors import TOKEN_SCHEMES
from tensorfab.isa import TensorfabError

if TYPE_CHECKING:
    from tensorfab.fpga_builds.boards import Board
    from tensorfab.isa import HwConfig
    from tensorfab.runtime.interpreter import GraphProgram

#: ``--calib-method`` choices (the observers of tensorfab.compiler.graph.calibration).
CALIB_METHODS = ("minmax", "percentile")
#: ``--quantizer`` choices (tensorfab.compiler.model_compile.QUANTIZERS).
QUANTIZERS = ("tensorfab", "ort")


class ModelCliError(TensorfabError):
    """A usage error of the model commands."""


def _shapes(items: list[str] | None) -> dict[str, tuple[int | str, ...]]:
    """``--shape NAME=D,D,...`` values by input name: each dim a size or a symbol name.

    Raises
    ------
    ModelCliError
        A value not of that form, a dim that is neither (empty, ``4.5``), or an input
        given twice.
    """
    out: dict[str, tuple[int | str, ...]] = {}
    for item in items or []:
        name, _, dims = item.partition("=")
        if not name or not dims:
            raise ModelCliError(f"--shape {item!r}: expected NAME=D,D,... (e.g. x=1,3,224,224)")
        if name in out:
            raise ModelCliError(f"--shape {item}: input {name!r} is given twice")
        shape: list[int | str] = []
        for k, d in enumerate(dims.split(",")):
            d = d.strip()
            if d.lstrip("-").isdigit():
                shape.append(int(d))
            elif d.isidentifier():
                shape.append(d)
            else:
                raise ModelCliError(f"--shape {item}: dim {k} is {d!r}, neither a size nor "
                                    "a symbol name (e.g. N)")
        out[name] = tuple(shape)
    return out


def _load_array(path: str, what: str) -> Any:
    """A ``.npy`` array or ``.npz`` archive; errors name the file and the option."""
    p = Path(path)
    if p.is_dir():
        raise ModelCliError(f"{what} {path}: a folder; give a .npy file")
    if not p.is_file():
        raise ModelCliError(f"{what} {path}: no such file")
    with p.open("rb") as f:
        head = f.read(len(MAGIC_PREFIX))
    if head != MAGIC_PREFIX and not head.startswith(b"PK"):
        # np.load would call it pickled data and suggest allow_pickle=
        raise ModelCliError(f"{what} {path}: not a NumPy .npy or .npz file (no .npy "
                            "header, not a zip archive)")
    try:
        data = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise ModelCliError(f"{what} {path}: not a NumPy .npy or .npz file ({e})") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            return {k: data[k] for k in data.files}
    return data


def _calibration(path: str | None) -> Any:
    """``--calib``: a ``.npz`` keyed by input name, or a ``.npy`` for a single input."""
    return None if path is None else _load_array(path, "--calib")


def _config(name: str | None) -> Any:
    """The HwConfig of a ``--config`` value (a preset, a board config or a JSON file;
    :func:`~tensorfab.fpga_builds.board_configs.board_config`), None for None."""
    from tensorfab.fpga_builds.board_configs import board_config

    return None if name is None else board_config(name)


def board_memory(board: Board, memory: str | None) -> str:
    """``memory`` (``sdram``, ``on-chip``, None: the board's default) on ``board``.

    Raises
    ------
    ModelCliError
        ``sdram`` on a board without SDRAM (naming the boards that have one).
    """
    from tensorfab.fpga_builds.errors import FpgaBuildError

    try:
        return "sdram" if board.uses_sdram(memory) else "on-chip"
    except FpgaBuildError as e:
        raise ModelCliError(f"--memory: {e}") from None


def check_fits_board(program: GraphProgram, board: Board, what: str, config: HwConfig,
                     memory: str | None = None) -> int:
    """The device memory ``program`` needs (static area + activation area of its
    :func:`~tensorfab.runtime.memory_plan.plan_memory`; 0 without accelerator programs).

    ``memory``: the board's SDRAM or its on-chip memory (``sdram``, ``on-chip``; None:
    the board's default, :meth:`~tensorfab.fpga_builds.boards.Board.uses_sdram`), whose
    size for ``config`` (the SDRAM within its address range) is the limit. A model that
    does not fit on-chip on a board with SDRAM is told the SDRAM's size.

    Raises
    ------
    ModelCliError
        If that is more than the board's memory; the one-line message names ``what``
        (the model), its bytes, the board's bytes and the excess.
    """
    if board_memory(board, memory) == "sdram":
        return check_fits(program, board.memory_bytes(config, "sdram"), what,
                          f"board {board.name}'s SDRAM")
    hint = ("" if board.sdram_bytes is None else
            f"; its SDRAM gives a model {board.memory_bytes(config, 'sdram')} bytes "
            "(--memory sdram)")
    return check_fits(program, board.mem_bytes, what, f"board {board.name}", hint)


def check_fits(program: GraphProgram, mem_bytes: int, what: str, where: str,
               hint: str = "") -> int:
    """The device memory ``program`` needs (see :func:`check_fits_board`); ``hint``
    ends the message of a model that does not fit.

    Raises
    ------
    ModelCliError
        If that is more than ``mem_bytes``; the one-line message names ``what`` (the
        model), its bytes, ``where`` (the board or target) and its bytes, and the excess.
    """
    from tensorfab.runtime.memory_plan import OutOfDeviceMemory, plan_memory

    try:
        plan = plan_memory(program)
    except OutOfDeviceMemory as e:
        needed, split = e.needed, ""
    else:
        needed = plan.size if plan is not None else 0
        split = "" if plan is None else (f" ({plan.static_bytes} static + "
                                         f"{plan.activation_bytes} activations)")
    if needed > mem_bytes:
        raise ModelCliError(f"{what} does not fit {where}: it needs {needed} "
                            f"bytes of device memory{split}, the board has "
                            f"{mem_bytes} ({mem_bytes // 1024} KiB), "
                            f"{needed - mem_bytes} bytes too many{hint}")
    return needed


def _compile(model: Any, args: argparse.Namespace, config: Any,
             calibration: Any, shapes: dict | None, say: Any) -> Any:
    from tensorfab.compiler.model_compile import compile_onnx

    schedules = None
    if getattr(args, "tuning_log", None):
        from tensorfab.dse.tuner import TuningLog

        schedules = TuningLog(Path(args.tuning_log))
    return compile_onnx(model, config=config, calibration=calibration,
                        quantizer=args.quantizer, method=args.calib_method,
                        percentile=args.percentile, input_shapes=shapes, progress=say,
                        schedules=schedules)


def cmd_compile(args: argparse.Namespace) -> int:
    from tensorfab.runtime.accel_contract import ACCEL_PROGRAM
    from tensorfab.runtime.artifact import is_model_file, save_model

    # before the import and compilation (the command line's one output policy)
    check_writable(Path(args.output), args.force, is_model_file, suffixes=(".tfm",))
    board = None
    if args.board is not None:
        from tensorfab.fpga_builds.boards import get_board

        board = get_board(args.board)
    cfg = _config(args.config or (board.config if board is not None else None))
    if args.memory is not None and board is None:
        raise ModelCliError(f"--memory {args.memory} checks the fit in a board's memory: "
                            "give --board")
    memory = None if board is None else board_memory(board, args.memory)  # before compiling
    calibration = _calibration(args.calib)
    with working(f"compiling {Path(args.model).name}") as say:
        compiled = _compile(args.model, args, cfg, calibration, _shapes(args.shape), say)
    program = compiled.program
    fit = {}
    if board is not None:  # before writing the .tfm
        fit = {"board": board.name,
               "board_memory_bytes": board.memory_bytes(cfg, memory),
               "board_memory": memory,
               "device_memory_bytes": check_fits_board(
                   program, board, Path(args.model).name, cfg, memory)}
    save_model(program, args.output, compiled.graph_text)
    ops = Counter(n.op for n in program.nodes)
    result = {"output": str(args.output), "nodes": len(program.nodes),
              "accel_programs": ops.get(ACCEL_PROGRAM, 0),
              "config": compiled.config.name if compiled.config else None,
              "int8": compiled.quantized, "ops": dict(sorted(ops.items())),
              "cpu_convolutions": list(compiled.cpu_convolutions),
              "cpu_operators": list(compiled.cpu_operators), **fit}

    def human() -> None:
        where = (f"{result['accel_programs']} on the accelerator ({result['config']})"
                 if result["accel_programs"] else "all on the CPU")
        print(f"wrote {args.output}: {result['nodes']} nodes, {where}, "
              + ("int8" if compiled.quantized else "float"))
        print("ops: " + ", ".join(f"{op} {n}" for op, n in result["ops"].items()))
        for line in result["cpu_convolutions"]:
            print(f"on the CPU: {line}")
        for line in result["cpu_operators"]:
            print(f"CPU operator: {line}")
        if fit:
            print(f"device memory: {fit['device_memory_bytes']:,} bytes of board "
                  f"{fit['board']}'s {fit['board_memory_bytes']:,}")

    print_result(result, args.json, human)
    return 0


def _feeds(items: list[str] | None, names: list[str]) -> dict[str, np.ndarray]:
    """``--input`` values: ``NAME=FILE.npy``, or a bare ``FILE.npy`` for a model with one
    input."""
    feeds: dict[str, np.ndarray] = {}
    for item in items or []:
        name, sep, path = item.partition("=")
        if sep and name not in names and not Path(item).exists():
            raise ModelCliError(f"--input {item}: the model has no input {name!r}; its "
                                f"inputs: {', '.join(names)}")
        if not sep or name not in names:  # a bare file (which may contain '=')
            if len(names) != 1:
                raise ModelCliError(f"--input {item}: the model takes {len(names)} inputs "
                                    f"{names}; name each with --input NAME=FILE.npy")
            name, path = names[0], item
        if name in feeds:
            raise ModelCliError(f"--input {item}: input {name!r} is given twice")
        value = _load_array(path, f"--input {name}:")
        if isinstance(value, dict):
            raise ModelCliError(f"--input {name}: {path} is an .npz archive; give one "
                                ".npy array per input")
        feeds[name] = value
    missing = [n for n in names if n not in feeds]
    if missing:
        hint = ("--input FILE.npy" if len(names) == 1
                else " ".join(f"--input {n}=FILE.npy" for n in missing))
        raise ModelCliError(f"inputs missing: {missing}; the model takes {names}: pass {hint}")
    return feeds


def _input_paths(items: list[str] | None) -> list[Path]:
    """The files of ``--input`` values (``NAME=FILE.npy`` or a bare ``FILE.npy``, which
    may contain ``=``), for the output checks."""
    return [Path(item) if Path(item).exists() else Path(item.partition("=")[2] or item)
            for item in items or []]


def _onnx_inputs(prepared: Any) -> dict[str, np.dtype]:
    """The ONNX model's inputs (initializers left out) with their dtypes."""
    from onnx.helper import tensor_dtype_to_np_dtype

    proto = prepared.proto
    inits = {i.name for i in proto.graph.initializer}
    return {v.name: np.dtype(tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
            for v in proto.graph.input if v.name not in inits}


def _program_configs(program: Any) -> set:
    """The HwConfigs of a runtime program's accelerator programs."""
    from tensorfab.runtime.accel_contract import accel_nodes, decode_program

    return {decode_program(program.constants[n.inputs[1]]).config
            for _, n in accel_nodes(program) if n.inputs[1] in program.constants}


def add_token_argument(parser: argparse.ArgumentParser) -> None:
    """``--token`` of a command with a ``--target`` (``run``, ``sim``, ``embed``), passed
    to :func:`open_target`."""
    parser.add_argument("--token", metavar="TOKEN",
                        help="token of a tcp://, tracker:// or socket:// target (default: "
                             "$TENSORFAB_TOKEN)")


def open_target(target: str, trace: bool, token: str | None = None) -> Any:
    """The device of ``--target``: engine intervals recorded with ``trace`` where the
    device records them (rtl), ``token`` passed to a networked one (a missing or
    refused token names ``--token``, not the Python API's ``token=``)."""
    from tensorfab.hil.errors import TokenError
    from tensorfab.isa.device import device_schemes, open_device, target_scheme

    scheme = target_scheme(target)
    if scheme not in device_schemes():
        raise ModelCliError(f"--target {target!r}: unknown executor (known: "
                            f"{', '.join(device_schemes())})")
    if token is not None and scheme not in TOKEN_SCHEMES:
        raise ModelCliError(f"--token applies to {', '.join(s + '://' for s in TOKEN_SCHEMES)}"
                            f" targets, not {target!r}")
    try:
        device = open_device(target, **({} if token is None else {"token": token}))
    except TokenError as exc:
        raise exc.given_with("--token") from None
    if trace and hasattr(device, "trace"):
        device.trace = True
    return device


def _check_fits_device(program: Any, device: Any, what: str, target: str) -> None:
    """Refuse a model for another config than a board's, or larger than its memory,
    before the board is built or written (devices with ``check_config(config)`` and
    ``memory_bytes(config)``: boards, virtual boards)."""
    limit = getattr(device, "memory_bytes", None)
    configs = _program_configs(program)
    if limit is None or len(configs) != 1:
        return
    config = next(iter(configs))
    device.check_config(config)
    check_fits(program, limit(config), what, target)


def cmd_run(args: argparse.Namespace) -> int:
    from tensorfab.runtime.accel_contract import accel_nodes
    from tensorfab.runtime.artifact import load_model
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.sim.trace import is_tensorfab_trace

    # every output is checked before the (possibly long) compilation and run
    if args.output:  # any existing file only with --force (a .npy tells not who wrote
        # it: it may be the user's data), never an input
        inputs = [Path(args.model), *_input_paths(args.input),
                  *([Path(args.calib)] if args.calib else [])]
        check_writable(Path(args.output), args.force, lambda p: False, suffixes=(".npy",),
                       inputs=inputs)
    if args.trace:
        check_writable(Path(args.trace), args.force, is_tensorfab_trace, suffixes=(".json",))
    model = Path(args.model)
    want = _config(args.config)
    quiet = args.json
    if model.suffix.lower() == ".onnx":
        from tensorfab.compiler.frontend import load_onnx
        from tensorfab.compiler.model_compile import is_quantized

        prepared = load_onnx(args.model)  # loaded and checked once, compiled below
        types = _onnx_inputs(prepared)
        names = list(types)
        feeds = _feeds(args.input, names)
        for name, v in feeds.items():  # before calibrating on them
            if v.dtype != types[name]:
                raise ModelCliError(f"input {name!r}: dtype {v.dtype}, expected "
                                    f"{types[name]} (the model's input type)")
        calibration = _calibration(args.calib)
        if calibration is None and not is_quantized(prepared):
            calibration = feeds if len(names) > 1 else feeds[names[0]]
            if not quiet:
                print("note: calibrating the int8 quantization on the input itself; pass "
                      "--calib CALIB.npz for a calibration set", file=sys.stderr)
        shapes = {n: tuple(v.shape) for n, v in feeds.items()}
        with working(f"compiling {model.name}", quiet=quiet) as say:
            compiled = _compile(prepared, args, want or _config("default"), calibration,
                                shapes, say)
        program = compiled.program
        cpu_convs = list(compiled.cpu_convolutions)
    else:
        if args.calib:
            raise ModelCliError(f"--calib applies to an .onnx model; {model} is compiled "
                                "already")
        program = load_model(model)
        cpu_convs = _cpu_convolutions_of(model)
        feeds = _feeds(args.input, [i.name for i in program.inputs])
        configs = _program_configs(program)
        if want is not None and configs and configs != {want}:
            have = ", ".join(sorted(repr(c.name) for c in configs))
            raise ModelCliError(f"{model} was compiled for HwConfig {have}, but the device "
                                f"is {want.name!r}: recompile it with --config "
                                f"{args.config}")
    device = open_target(args.target, bool(args.trace), args.token)
    _check_fits_device(program, device, model.name, args.target)
    n_accel = sum(1 for _ in accel_nodes(program))
    title = f"{model.name} on {args.target}"
    try:
        with working(f"running {title}", quiet=quiet) as say:
            now = [""]

            def layer(index: int, count: int, op: str) -> None:
                now[0] = f"running {title}: node {index + 1}/{count} ({op})"
                say(now[0])

            if hasattr(device, "progress"):
                device.progress = lambda cycles, _done: say(f"{now[0]}, cycle {cycles:,}")
            if hasattr(device, "transfer_progress"):  # a board's memory over its link

                def moved(kind: str, done: int, total: int) -> None:
                    say(f"{now[0] or f'running {title}'}: {kind} {done:,} of {total:,} "
                        f"bytes ({100 * done // total}%) over the link")

                device.transfer_progress = moved
            profile = profile_program(program, feeds, device, progress=layer)
    except (TensorfabError, KeyboardInterrupt) as exc:
        # a failed run's timeline is the one most worth looking at
        stopped = getattr(exc, "profile", None)
        if args.trace and stopped is not None:
            _write_trace(stopped, args.trace, f"{title}: stopped")
        raise
    if args.trace:
        _write_trace(profile, args.trace, title, quiet)
    out = profile.output
    outs = list(out) if isinstance(out, tuple) else [out]
    if args.output:
        np.save(args.output, outs[0])
    summary = [{"shape": list(o.shape), "dtype": str(o.dtype),
                "argmax": o.reshape(o.shape[0], -1).argmax(axis=1).tolist()[:16]
                if o.ndim >= 1 and o.size else None} for o in outs]
    clock = profile.clock_hz
    print_result({"outputs": summary, "target": args.target, "layers": len(profile.layers),
                      "accel_layers": n_accel, "total_cycles": profile.total_cycles,
                      "cycles_estimated": profile.estimated,
                      "clock_mhz": None if clock is None else clock / 1e6,
                      "hardware_seconds": profile.hardware_seconds,
                      "accel_macs": profile.accel_macs,
                      "utilization": None if profile.utilization is None
                      else round(profile.utilization, 4),
                      "host_bytes": None if profile.host_traffic is None
                      else profile.host_traffic.total,
                      "device_memory_bytes": None if profile.memory_plan is None
                      else profile.memory_plan.size,
                      "seconds": round(profile.seconds, 4),
                      "load_seconds": None if profile.load_seconds is None
                      else round(profile.load_seconds, 4),
                      "accel_timing": [
                          {"index": r.index, "cycles": r.cycles,
                           "estimated": r.estimated, "clock_hz": r.clock_hz,
                           "hardware_seconds": r.hardware_seconds,
                           "seconds": round(r.seconds, 6)}
                          for r in profile.layers if r.device == "accel"]}, quiet,
                 lambda: _print_report(profile, outs, title, cpu_convs))
    return 0


def _write_trace(profile: Any, path: str, title: str, quiet: bool = False) -> None:
    """Write ``run --trace``: the network's timeline (of a run, or of one that
    stopped)."""
    from tensorfab.runtime.network_trace import write_network_trace

    write_network_trace(profile, path, title=title)
    if not quiet:
        print(f"wrote {path} ({len(profile.layers)} layers)", file=sys.stderr)


def _fmt_shape(shape: Any) -> str:
    if shape is None:
        return "—"
    return "×".join(str(d) for d in shape) if shape else "()"


def _cpu_convolutions_of(path: Path) -> list[str]:
    """The convolutions a ``.tfm`` leaves on the CPU, with why (its graph text's leading
    comments; none for a file without the text)."""
    from tensorfab.runtime.artifact import CPU_CONVOLUTION_COMMENT, load_graph_text

    text = load_graph_text(path) or ""
    return [line[len(CPU_CONVOLUTION_COMMENT):] for line in text.splitlines()
            if line.startswith(CPU_CONVOLUTION_COMMENT)]


def _duration(seconds: float) -> str:
    """``127.4 µs``, ``12.3 ms`` or ``76.1 s``."""
    if seconds >= 1:
        return f"{seconds:.1f} s"
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


def _footer(profile: Any) -> str:
    """The table's caption: the accelerator's cycles and hardware time, then the wall
    time of the run and of the model's one-time load."""
    total, hardware, clock = profile.total_cycles, profile.hardware_seconds, profile.clock_hz
    parts = []
    if total is not None:
        util = ("" if profile.utilization is None
                else f", utilization {profile.utilization:.2f}")
        if hardware is not None:
            at = "" if clock is None else f" at {clock / 1e6:g} MHz"
            parts.append(f"hardware: accelerator {_duration(hardware)}{at} "
                         f"({total:,} cycles{util})")
        else:
            parts.append(f"hardware: accelerator — ({profile.executor} is untimed; "
                         f"~{total:,} cycles estimated{util})")
    cpu = sum(r.seconds for r in profile.layers if r.device == "cpu")
    acc = sum(r.seconds for r in profile.layers if r.device == "accel")
    parts.append(f"wall: cpu {_duration(cpu)}, accelerator {_duration(acc)}, total "
                 f"{_duration(profile.seconds)}")
    if profile.load_seconds is not None:
        parts.append(f"model load {_duration(profile.load_seconds)} (once)")
    return "; ".join(parts)


def _print_report(profile: Any, outs: list[np.ndarray], title: str,
                  cpu_convolutions: list[str] | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # a pipe or a file: rows on one line each
        console.width = max(console.width, 200)
    table = Table(title=escape(f"{title}: per layer"))
    for col, justify in (("#", "right"), ("node", "left"), ("device", "left"), ("op", "left"),
                         ("inputs", "left"), ("output", "left"), ("cycles", "right"),
                         ("hw µs", "right"), ("MACs", "right"), ("util.", "right"),
                         ("GEMM busy", "right"), ("wall ms", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    def ratio(v: float | None, estimated: bool) -> str:
        return "—" if v is None else f"{'~' * estimated}{v:.2f}"

    for rec in profile.layers:
        hw = rec.hardware_seconds
        table.add_row(str(rec.index), escape(rec.name), rec.device, escape(rec.op),
                      ", ".join(_fmt_shape(s) for s in rec.in_shapes),
                      _fmt_shape(rec.out_shape),
                      "—" if rec.cycles is None else f"{'~' * rec.estimated}{rec.cycles:,}",
                      "—" if hw is None else f"{hw * 1e6:,.2f}",
                      "—" if rec.macs is None else f"{rec.macs:,}",
                      ratio(rec.utilization, rec.estimated),
                      ratio(rec.gemm_busy, rec.estimated),
                      f"{rec.seconds * 1e3:.2f}")
    table.caption = _footer(profile)
    console.print(table)
    if cpu_convolutions:  # the table's CPU convolution rows, in the same order
        rows = [r.index for r in profile.layers
                if r.op in ("qnn.conv2d_integer", "nn.conv2d")]
        console.print("[bold]convolutions on the CPU[/] (why not on the accelerator):")
        for k, why in enumerate(cpu_convolutions):
            at = f"#{rows[k]} " if len(rows) == len(cpu_convolutions) else ""
            console.print(f"  {at}{escape(why)}")
    for k, o in enumerate(outs):
        stats = (f"min {o.min():.4g} max {o.max():.4g} mean {o.mean():.4g}"
                 if o.size and np.issubdtype(o.dtype, np.number) else "")
        console.print(f"[bold]output {k}[/] {o.dtype} {o.shape} {stats}")
        if o.ndim >= 1 and o.size:
            console.print(f"  argmax per item: {o.reshape(o.shape[0], -1).argmax(axis=1)[:16]}")


def _onnx_text(fn: Any, values: bool) -> str:
    """An imported model's text form; without ``values`` its large constants (the
    weights) are ``meta[wK]``, listed first with their dtypes and shapes."""
    from tensorfab.compiler.graph import astext
    from tensorfab.compiler.graph.printer import INLINE_CONSTANT_LIMIT

    if values:
        return astext(fn)
    names: dict[int, tuple[str, Any]] = {}

    def ref(const: Any) -> str | None:
        if const.data.size <= INLINE_CONSTANT_LIMIT:
            return None
        if id(const) not in names:
            names[id(const)] = (f"w{len(names)}", const)
        return names[id(const)][0]

    text = astext(fn, ref)
    listed = "".join(f"// meta[{name}]: {c.data.dtype} {_fmt_shape(c.data.shape)}\n"
                     for name, c in names.values())
    return listed + text


def _onnx_summary(fn: Any) -> dict[str, Any]:
    """``inspect MODEL.onnx --json``: the inputs and the weights (dtypes, shapes)."""
    from tensorfab.compiler.graph.ir import Constant
    from tensorfab.compiler.graph.printer import INLINE_CONSTANT_LIMIT

    weights: dict[int, Any] = {}
    stack, seen = [fn.body], set()
    while stack:  # every constant of the graph, once
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Constant):
            if node.data.size > INLINE_CONSTANT_LIMIT:
                weights[id(node)] = node.data
            continue
        for name in ("args", "fields", "tuple_value", "value", "body"):
            child = getattr(node, name, None)
            stack.extend(child if isinstance(child, tuple | list) else
                         [child] if child is not None else [])
    return {"inputs": [{"name": p.name, "shape": list(p.type_annotation.shape),
                        "dtype": p.type_annotation.dtype} for p in fn.params],
            "weights": [{"dtype": str(w.dtype), "shape": list(w.shape)}
                        for w in weights.values()],
            "weight_bytes": int(sum(w.nbytes for w in weights.values()))}


def cmd_inspect(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if path.suffix == ".onnx":
        from tensorfab.compiler.frontend import from_onnx

        fn = from_onnx(path)
        if args.json:
            print(json.dumps(_onnx_summary(fn)))
        else:
            print(_onnx_text(fn, args.values), end="")
        return 0
    from tensorfab.runtime.artifact import load_graph_text, load_model
    from tensorfab.runtime.memory_plan import plan_memory
    from tensorfab.runtime.program_text import program_text

    program = load_model(path)
    text = None if args.program else load_graph_text(path)
    plan = plan_memory(program)
    info = {"inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype}
                       for i in program.inputs],
            "nodes": len(program.nodes),
            "ops": dict(sorted(Counter(n.op for n in program.nodes).items())),
            "configs": sorted(c.name for c in _program_configs(program)),
            "constant_bytes": int(sum(np.asarray(c).nbytes
                                      for c in program.constants.values())),
            "device_memory_bytes": plan.size if plan is not None else None,
            "listing": "graph" if text is not None else "program"}

    def human() -> None:
        print(text if text is not None else program_text(program), end="")
        if plan is not None:
            print(plan.text(), end="")
        print("inputs: " + ", ".join(f"{i['name']} {_fmt_shape(i['shape'])} {i['dtype']}"
                                     for i in info["inputs"]))
        print(f"nodes: {info['nodes']} (" + ", ".join(f"{op} {n}" for op, n
                                                     in info["ops"].items()) + ")")
        print(f"constants: {info['constant_bytes']:,} bytes; accelerator: "
              + (", ".join(info["configs"]) or "none")
              + ("" if plan is None else f", {plan.size:,} bytes of device memory"))

    print_result(info, args.json, human)
    return 0


def _quantization_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calib", metavar="CALIB.npz",
                   help="quantize to int8, calibrating on these samples: an .npz keyed by "
                        "input name, or an .npy for a model with one input")
    p.add_argument("--quantizer", choices=QUANTIZERS, default="tensorfab",
                   help="post-training quantizer: tensorfab's own or onnxruntime's "
                        "(default: %(default)s)")
    p.add_argument("--calib-method", choices=CALIB_METHODS, default="minmax",
                   help="activation range observer (default: %(default)s)")
    p.add_argument("--percentile", type=float, default=99.99,
                   help="percentile of |x| for --calib-method percentile "
                        "(default: %(default)s)")


def add_model_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``compile``, ``run`` and ``inspect`` on the ``tensorfab`` parser."""
    fmt = argparse.RawDescriptionHelpFormatter
    c = sub.add_parser(
        "compile", help="compile an ONNX model into a .tfm file", formatter_class=fmt,
        description="Compile an ONNX model into a .tfm file: int8 layers on the "
        "accelerator of\n--config, the rest on the CPU. See docs/quantization.md for "
        "--calib.",
        epilog="examples:\n  tensorfab compile digits.onnx --config default --calib "
        "calib.npy --shape image=16,1,8,8 -o digits.tfm\n  tensorfab compile digits.onnx "
        "--board ulx3s-25f --calib calib.npy --shape image=1,1,8,8 -o digits.tfm\n"
        "  tensorfab compile model.onnx -o model.tfm                  # float, all on the CPU")
    c.add_argument("model", help="MODEL.onnx")
    c.add_argument("-o", "--output", required=True, help="OUT.tfm")
    c.add_argument("--config", metavar="CONFIG",
                   help="run int8 convolutions on the accelerator of this HwConfig (a "
                        "preset, a board config such as ecp5-25f, or a JSON config file); "
                        "without it (and --board) all runs on the CPU")
    c.add_argument("--board", metavar="BOARD",
                   help="check that the model fits this FPGA board's device memory "
                        "(ulx3s-85f, ...); without --config, compile for its default config")
    c.add_argument("--memory", choices=("sdram", "on-chip"),
                   help="with --board: check the fit in the board's SDRAM or its on-chip "
                        "memory (default: the board's device memory, SDRAM where it has "
                        "one: what `fpga build` and `virtual://BOARD` use)")
    c.add_argument("--accel", dest="config", help=argparse.SUPPRESS)
    _quantization_options(c)
    c.add_argument("--tuning-log", metavar="LOG.jsonl",
                   help="take each accelerator convolution's schedule from this tuning "
                        "log (tensorfab tune) where it has one")
    c.add_argument("--int8", dest="calib", help=argparse.SUPPRESS)
    c.add_argument("--shape", action="append", metavar="NAME=D,D,...",
                   help="fix an input's shape (needed for symbolic dims with --config)")
    c.add_argument("--force", action="store_true",
                   help="overwrite an existing output that is not a .tfm file")
    c.add_argument("--json", action="store_true",
                   help="print the result as one JSON object (what was written, nodes, "
                        "ops, config, CPU convolutions, board fit)")
    c.set_defaults(func=cmd_compile)
    r = sub.add_parser(
        "run", help="run a .tfm or .onnx model on inputs from .npy files",
        formatter_class=fmt,
        description="Run a model resident on --target and print its outputs and a "
        "per-layer table\n(device, op, shapes, cycles from the device's counters, "
        "hardware time at its\nclock, utilization, wall time; the one-time model load "
        "apart). An .onnx model is\ncompiled in memory first (int8, calibrated on --calib "
        "or on the input itself).",
        epilog="examples:\n  tensorfab run digits.tfm --input images.npy\n"
        "  tensorfab run digits.onnx --input images.npy --target rtl --trace t.json\n"
        "  tensorfab run digits.tfm --input images.npy --target virtual --trace t.json\n"
        "  tensorfab run digits.tfm --input images.npy --target tcp://127.0.0.1:9000 "
        "--token TOKEN")
    r.add_argument("model", help="MODEL.tfm or MODEL.onnx")
    r.add_argument("--input", action="append", metavar="[NAME=]FILE.npy",
                   help="an input (NAME= may be left out for a model with one input)")
    r.add_argument("--target", default="fsim",
                   help="executor of the accelerator layers: fsim (functional simulator), "
                        "rtl (Verilator, cycle-accurate), virtual or virtual://BOARD (a "
                        "virtual board), serial://PORT or socket://HOST:PORT (a board), "
                        "tcp://HOST:PORT (a device server) (default: %(default)s)")
    add_token_argument(r)
    r.add_argument("--config", metavar="CONFIG",
                   help="the device's HwConfig (a preset, a board config or a JSON file): "
                        "a .tfm must be compiled for it; an .onnx is compiled for it "
                        "(default: default)")
    r.add_argument("--trace", metavar="OUT.json",
                   help="write one Perfetto/Chrome timeline of the whole network")
    r.add_argument("-o", "--output", help="save the (first) output as .npy (an existing "
                   "file only with --force)")
    r.add_argument("--json", action="store_true",
                   help="print the result as one JSON object instead of the tables")
    _quantization_options(r)
    r.add_argument("--force", action="store_true",
                   help="overwrite an existing -o file, or a --trace file tensorfab did not "
                   "write (never an input)")
    r.set_defaults(func=cmd_run)
    i = sub.add_parser("inspect", help="show an ONNX model's IR or a .tfm file's planned "
                       "graph, device-memory map and summary")
    i.add_argument("file", help="MODEL.onnx or MODEL.tfm")
    i.add_argument("--values", action="store_true",
                   help="for an .onnx: print the weights' values too (the text form "
                        "complete), not only their dtypes and shapes")
    i.add_argument("--program", action="store_true",
                   help="for a .tfm: list the runtime program node by node instead of the "
                        "planned graph")
    i.add_argument("--json", action="store_true",
                   help="print a summary as one JSON object (inputs, ops, configs, bytes; "
                        "for an .onnx: inputs and weights) instead of the listing")
    i.set_defaults(func=cmd_inspect)


__all__ = ["ModelCliError", "add_model_commands", "check_fits_board"]

"""``tensorfab tune``: the schedule tuner on a network's layers (ResNet-18's or an ONNX
model's), the log kept for reruns and for ``compile --tuning-log``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .cli_output import CliError, print_result

__all__ = ["add_tune_command"]

#: Where ``tune`` keeps its log unless told.
DEFAULT_LOG = Path("build/tuning/log.jsonl")


def _model_tasks(args: argparse.Namespace, cfg: object) -> list[tuple]:
    """The tuning tasks of an ONNX model: (name, workload, epilogue) of every operator
    the compiler schedules, recorded while compiling it once."""
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.dse.tuner import TaskRecorder

    from .cli_output import working
    from .model_cli import _calibration, _shapes

    model = Path(args.model)
    if not model.is_file():
        raise CliError(f"tune {args.model}: no such file (give resnet18 or an ONNX model)")
    recorder = TaskRecorder()
    with working(f"compiling {model.name} to find its operators", quiet=args.json):
        compile_onnx(str(model), config=cfg, calibration=_calibration(args.calib),
                     input_shapes=_shapes(args.shape) or None, schedules=recorder)
    if not recorder.tasks:
        raise CliError(f"tune {args.model}: no operator of the model runs on the "
                       "accelerator, nothing to tune")
    return [(wl.name or _workload_label(i, wl), wl, ep)
            for i, (wl, _cfg, ep) in enumerate(recorder.tasks.values())]


def _workload_label(index: int, wl: object) -> str:
    """A name for an unnamed operator: its place and shape (``2:conv 16x8x8->32 3x3``,
    ``3:dense 64->10``)."""
    kh, kw = wl.kernel  # type: ignore[attr-defined]
    cin, cout = wl.in_channels, wl.out_channels  # type: ignore[attr-defined]
    if (kh, kw, wl.height, wl.width) == (1, 1, 1, 1):  # type: ignore[attr-defined]
        return f"{index}:dense {cin}->{cout}"
    return (f"{index}:conv {cin}x{wl.height}x{wl.width}->{cout} "  # type: ignore[attr-defined]
            f"{kh}x{kw}")


def cmd_tune(args: argparse.Namespace) -> int:
    from tensorfab.compiler.tensor import DENSE_LAYERS, RESNET18_CONV
    from tensorfab.dse.tuner import TuningLog, tune_workload
    from tensorfab.fpga_builds.board_configs import board_config

    cfg = board_config(args.config)
    if args.trials < 1:
        raise CliError(f"--trials {args.trials}: give at least 1 measurement per layer")
    log = Path(args.log)
    if log.is_dir():
        raise CliError(f"--log {log} is a folder; name the JSON-lines log file")
    if log.exists():  # appended to: refuse a file that is not a log before any work
        TuningLog(log)
    if args.model == "resnet18":
        tasks = [(name, wl, None) for name, wl in {**RESNET18_CONV, **DENSE_LAYERS}.items()]
    else:
        tasks = _model_tasks(args, cfg)
    log.parent.mkdir(parents=True, exist_ok=True)
    results = [tune_workload(name, wl, cfg, ep, trials=args.trials, log=log,
                             verify_rtl=args.rtl)
               for name, wl, ep in tasks]
    result = {"config": cfg.name, "log": str(log), "layers": [r.to_json() for r in results]}

    def human() -> None:
        table = Table(title=f"tuned schedules ({cfg.name}, log {log})")
        for col in ("layer", "model before", "model after", "floor", "RTL before",
                    "RTL after", "measured", "s"):
            table.add_column(col, justify="left" if col == "layer" else "right",
                             no_wrap=col == "layer")
        for r in results:
            table.add_row(r.name, str(r.baseline_cycles), str(r.best_cycles),
                          str(r.floor), str(r.rtl_baseline or "-"),
                          str(r.rtl_best or "-"), str(r.measured), f"{r.seconds:.1f}")
        Console().print(table)

    print_result(result, args.json, human)
    return 0


def add_tune_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``tune`` with the parser's ``command`` helper."""
    t = command("tune", "tune the schedules of a network's layers (GA + learned cost "
                "model on the timing model)",
                "tensorfab tune resnet18 --config default --trials 64",
                "tensorfab tune resnet18 --rtl --log tuning.jsonl",
                "tensorfab tune digits.onnx --config tiny --calib calib.npy "
                "--shape image=1,1,8,8 --log digits.jsonl")
    t.add_argument("model", help="resnet18 (the built-in ResNet-18 layers) or an ONNX "
                   "model (its operators on the accelerator; compile it with "
                   "--tuning-log LOG)")
    t.add_argument("--config", default="default",
                   help="preset, board config or JSON config file (default: %(default)s)")
    t.add_argument("--calib", help="ONNX model: calibration inputs (.npy or .npz) for int8")
    t.add_argument("--shape", action="append",
                   help="ONNX model: fixed input shape NAME=D,D,... (repeatable)")
    t.add_argument("--trials", type=int, default=64,
                   help="timing-model measurements per layer (default: %(default)s)")
    t.add_argument("--log", default=str(DEFAULT_LOG),
                   help="JSON-lines tuning log, reused across runs (default: %(default)s)")
    t.add_argument("--rtl", action="store_true",
                   help="run the tile search's and the tuned schedule on the RTL")
    t.add_argument("--json", action="store_true", help="print the result as JSON")
    t.set_defaults(func=cmd_tune)

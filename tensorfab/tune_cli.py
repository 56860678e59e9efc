"""``tensorfab tune``: the schedule tuner on a network's layers, the log kept for reruns."""

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


def cmd_tune(args: argparse.Namespace) -> int:
    from tensorfab.compiler.tensor import DENSE_LAYERS, RESNET18_CONV
    from tensorfab.dse.tuner import tune_workload
    from tensorfab.isa import get_config

    if args.model != "resnet18":
        raise CliError(f"tune {args.model}: only the built-in resnet18 (its convolutions "
                       "C2-C11 and the dense layers) can be tuned yet")
    cfg = get_config(args.config)
    log = Path(args.log)
    log.parent.mkdir(parents=True, exist_ok=True)
    results = [tune_workload(name, wl, cfg, trials=args.trials, log=log,
                             verify_rtl=args.rtl)
               for name, wl in {**RESNET18_CONV, **DENSE_LAYERS}.items()]
    result = {"config": cfg.name, "log": str(log), "layers": [r.to_json() for r in results]}

    def human() -> None:
        table = Table(title=f"tuned schedules ({cfg.name}, log {log})")
        for col in ("layer", "model before", "model after", "MAC bound", "RTL before",
                    "RTL after", "measured", "s"):
            table.add_column(col, justify="left" if col == "layer" else "right")
        for r in results:
            table.add_row(r.name, str(r.baseline_cycles), str(r.best_cycles),
                          str(r.mac_bound), str(r.rtl_baseline or "-"),
                          str(r.rtl_best or "-"), str(r.measured), f"{r.seconds:.1f}")
        Console().print(table)

    print_result(result, args.json, human)
    return 0


def add_tune_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``tune`` with the parser's ``command`` helper."""
    t = command("tune", "tune the schedules of a network's layers (GA + learned cost "
                "model on the timing model)",
                "tensorfab tune resnet18 --config default --trials 64",
                "tensorfab tune resnet18 --rtl --log tuning.jsonl")
    t.add_argument("model", help="resnet18 (the built-in ResNet-18 layers)")
    t.add_argument("--config", default="default",
                   help="preset or JSON config file (default: %(default)s)")
    t.add_argument("--trials", type=int, default=64,
                   help="timing-model measurements per layer (default: %(default)s)")
    t.add_argument("--log", default=str(DEFAULT_LOG),
                   help="JSON-lines tuning log, reused across runs (default: %(default)s)")
    t.add_argument("--rtl", action="store_true",
                   help="run the tile search's and the tuned schedule on the RTL")
    t.add_argument("--json", action="store_true", help="print the result as JSON")
    t.set_defaults(func=cmd_tune)

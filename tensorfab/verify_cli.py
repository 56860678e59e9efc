"""``tensorfab verify``: random programs on fsim and the RTL as a Dask job, or one saved
failure replayed."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .cli_output import print_result

__all__ = ["add_verify_command"]


def cmd_verify(args: argparse.Namespace) -> int:
    from tensorfab.dse.verify import replay_case, replay_command, run_verify

    if args.replay:
        case = replay_case(Path(args.replay))
        result = {"config": case.config, "seed": case.seed, "passed": case.passed,
                  "problems": case.problems, "memory": case.memory}

        def human_replay() -> None:
            head = f"{case.config} seed {case.seed}"
            print(f"{head}: matches the functional simulator" if case.passed else
                  f"{head}: " + "; ".join(case.problems))

        print_result(result, args.json, human_replay)
        return 0 if case.passed else 1
    configs = [c for c in args.configs.split(",") if c]
    inject = [int(s) for s in args.inject_mismatch.split(",") if s] \
        if args.inject_mismatch else []
    err = Console(stderr=True)
    if args.json or not err.is_terminal:
        summary = run_verify(configs, args.programs, seed=args.seed, scheduler=args.scheduler,
                             workers=args.workers, out=Path(args.out), inject=inject)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress("verifying", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err) as bar:
            task = bar.add_task("verify", total=args.programs * len(configs))
            summary = run_verify(configs, args.programs, seed=args.seed,
                                 scheduler=args.scheduler, workers=args.workers,
                                 out=Path(args.out), inject=inject,
                                 progress=lambda done, _total: bar.update(task, completed=done))
    result = summary.to_json()

    def human() -> None:
        table = Table(title=f"random programs, fsim vs RTL ({result['programs_per_second']} "
                      "programs/s)")
        for col in ("config", "programs", "passed", "failed"):
            table.add_column(col, justify="left" if col == "config" else "right")
        for name, c in summary.per_config.items():
            table.add_row(name, str(c["programs"]), str(c["passed"]), str(c["failed"]))
        Console().print(table)
        for f in summary.failures:
            print(f"{f.config} seed {f.seed}: {'; '.join(f.problems)}\n"
                  f"  replay: {replay_command(f.saved)}")

    print_result(result, args.json, human)
    return 1 if summary.failures else 0


def add_verify_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``verify`` with the parser's ``command`` helper."""
    v = command("verify", "random programs on the functional simulator and the RTL "
                "(random memory timing) on a Dask cluster",
                "tensorfab verify --programs 1000 --configs tiny,small,default",
                "tensorfab verify --programs 1000000 --scheduler tcp://host:8786",
                "tensorfab verify --replay verify/tiny-17.json")
    v.add_argument("--programs", type=int, default=100, help="programs per config "
                   "(default: %(default)s)")
    v.add_argument("--configs", default="tiny,small,default",
                   help="comma-separated presets, board configs or JSON files "
                        "(default: %(default)s)")
    v.add_argument("--scheduler", help="address of a dask scheduler (default: a "
                   "LocalCluster here)")
    v.add_argument("--workers", type=int, default=2,
                   help="LocalCluster workers (default: %(default)s)")
    v.add_argument("--seed", type=int, default=0, help="first seed (default: %(default)s)")
    v.add_argument("--out", default="verify",
                   help="folder for failures (default: %(default)s)")
    v.add_argument("--replay", metavar="FAILURE.json", help="run one saved failure again")
    v.add_argument("--inject-mismatch", metavar="SEEDS", help=argparse.SUPPRESS)
    v.add_argument("--json", action="store_true", help="print the summary as JSON")
    v.set_defaults(func=cmd_verify)

"""``tensorfab dse``: sweep HwConfig fields over workloads on the timing model, on a
dask cluster, results cached on disk and written as Parquet."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorfab.isa import UsageError

from .cli_output import CliError, check_writable, print_result

__all__ = ["add_advise_command", "add_dse_command"]


def cmd_fit_resources(args: argparse.Namespace) -> int:
    """``tensorfab dse fit-resources``: synthesize the training configs, fit, write."""
    from rich.console import Console

    from tensorfab.dse.resource_builds import TRAINING_CONFIGS, synthesize_configs
    from tensorfab.dse.resource_model import (
        MIN_BUILDS,
        MODEL_PATH,
        RESOURCES,
        fit_resource_model,
    )

    console = Console(stderr=True)
    configs = TRAINING_CONFIGS
    if args.configs:
        names = args.configs.split(",")
        unknown = [n for n in names if n not in {c.name for c in TRAINING_CONFIGS}]
        if unknown:
            raise UsageError(f"--configs: unknown training config {unknown[0]!r} (known: "
                             f"{', '.join(c.name for c in TRAINING_CONFIGS)})")
        configs = tuple(c for c in TRAINING_CONFIGS if c.name in names)
        if len(configs) < MIN_BUILDS:
            raise UsageError(f"--configs {args.configs}: {len(configs)} training "
                             f"config(s), but the fit needs at least {MIN_BUILDS} builds "
                             f"(leave --configs out for all {len(TRAINING_CONFIGS)})")
    out = Path(args.output) if args.output else MODEL_PATH
    if args.output:
        check_writable(out, args.force, _is_json_with("resources", "builds", "source_hash"),
                       suffixes=(".json",))

    def done(r: dict) -> None:
        if not args.json:
            how = "reused" if r["reused"] else f"{r['seconds']:.0f} s"
            console.print(f"{r['name']:12} LUT {r['LUT']:>6} FF {r['FF']:>6} DSP "
                          f"{r['DSP']:>4} BRAM {r['BRAM']:>4} ({how})", highlight=False)

    board = args.board or "ulx3s-85f"
    records = synthesize_configs(configs, board, args.work, console=console, done=done)
    model = fit_resource_model(records)
    out.write_text(json.dumps(model, indent=1) + "\n")
    report = {"model": str(out), "builds": len(records), "board": board,
              "source_hash": model["source_hash"], "yosys": model["yosys"],
              "held_out_error": {r: {"mean": model["resources"][r]["loo"]
                                     ["mean_relative_error"],
                                     "max": model["resources"][r]["loo"]
                                     ["max_relative_error"]} for r in RESOURCES}}

    def human() -> None:
        print(f"{len(records)} builds on {board} ({model['yosys'].split(' (')[0]}, "
              f"design {model['source_hash']}) -> {out}")
        print("leave-one-out relative error: " + ", ".join(
            f"{r} mean {e['mean']:.1%} max {e['max']:.1%}"
            for r, e in report["held_out_error"].items()))

    print_result(report, args.json, human)
    return 0


def _is_json_with(*keys: str) -> Callable[[Path], bool]:
    def ours(path: Path) -> bool:
        try:
            doc = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            return False
        return isinstance(doc, dict) and all(k in doc for k in keys)
    return ours


def _is_sweep_parquet(path: Path) -> bool:
    import pyarrow.parquet as pq

    try:
        return "workload" in pq.read_schema(path).names
    except Exception:  # pyarrow raises several kinds for a file that is not Parquet
        return False


def check_out_folder(out: Path, force: bool) -> None:
    """Check, before the sweep, that ``--out`` is a folder (or can be made) whose files
    of a sweep's names were written by one, unless ``force``: a :class:`CliError`."""
    from tensorfab.sim.png_figure import is_tensorfab_png

    if out.exists() and not out.is_dir():
        raise CliError(f"--out {out} is a file; name a folder (the sweep writes "
                       "points.parquet, summary.json, pareto.png, best_config.json and "
                       "cache/ in it)")
    if not out.is_dir():
        return
    if (out / "cache").exists() and not (out / "cache").is_dir():
        raise CliError(f"--out {out}: {out / 'cache'} is a file; the sweep keeps its "
                       "cache in that folder")
    outputs: dict[str, Callable[[Path], bool]] = {
        "points.parquet": _is_sweep_parquet,
        "summary.json": _is_json_with("points", "workloads", "cycles_source"),
        "pareto.png": is_tensorfab_png,
        "best_config.json": _is_json_with("name", "block_in", "block_out"),
    }
    for name, ours in outputs.items():
        check_writable(out / name, force, ours)


def cmd_dse(args: argparse.Namespace) -> int:
    import sys

    if args.action == "fit-resources":
        return cmd_fit_resources(args)
    if args.space is None:
        raise UsageError("dse: --space is required for a sweep")

    from rich.progress import Progress

    from tensorfab.dse.cluster import dask_client
    from tensorfab.dse.resource_model import ResourceModel, ecp5_board
    from tensorfab.dse.results import (
        add_resources,
        plot_pareto,
        point_summary,
        write_best_config,
        write_parquet,
    )
    from tensorfab.dse.space import load_space, space_points
    from tensorfab.dse.sweep import check_on_rtl, run_sweep, workload_by_name, workload_name

    from .model_cli import _calibration, _shapes

    if args.check_rtl is not None and args.check_rtl < 1:
        raise UsageError(f"--check-rtl {args.check_rtl}: give at least one point")
    space = load_space(args.space)
    workloads = workload_by_name([w for w in args.workloads.split(",") if w],
                                 _calibration(args.calib), _shapes(args.shape) or None)
    if (args.calib or args.shape) and all(isinstance(w, str) for w in workloads):
        raise UsageError("--calib and --shape are for ONNX workloads (--workloads "
                         "model.onnx); the tensor workloads have their own shapes")
    board_info = ecp5_board(args.board or "ulx3s-85f")
    board = board_info.name
    model = ResourceModel.load()
    points = space_points(space)
    out = Path(args.out)
    check_out_folder(out, args.force)
    with dask_client(args.scheduler, args.workers) as client:
        print(f"dashboard: {client.dashboard_link}", file=sys.stderr)
        with Progress(transient=True, disable=args.json) as bar:
            task = bar.add_task("sweep", total=None)
            result = run_sweep(points, workloads, client, out / "cache",
                               lambda d, t: bar.update(task, completed=d, total=t))
        rtl_check = None
        if args.check_rtl:
            with Progress(transient=True, disable=args.json) as bar:
                bar.add_task(f"{args.check_rtl} points on the RTL (Verilator builds "
                             "take minutes per config)", total=None)
                rtl_check = check_on_rtl(result.rows, args.check_rtl, client,
                                         workloads=workloads)
    summary = point_summary(result.rows)
    add_resources(summary, model, board)
    by_config = {s["config"]: s for s in summary}
    resource_keys = ("lut_est", "ff_est", "dsp_est", "bram_est", "board", "fits")
    for row in result.rows:
        if row.get("config") in by_config:
            row.update({k: by_config[row["config"]][k] for k in resource_keys})
    parquet = write_parquet(result.rows, out / "points.parquet")
    shown = [s for s in summary if s["fits"]] if args.board else summary
    fronts = plot_pareto(shown, out / "pareto.png", board_info)
    best = write_best_config(summary, out / "best_config.json")
    fmax = model.reported_fmax(board)
    invalid = [{"values": p.values, "reason": p.invalid_reason}
               for p in points if p.config is None]
    report = {"points": len(points), "valid_points": len(points) - len(invalid),
              "workloads": [workload_name(w) for w in workloads],
              "computed": result.computed, "errors": result.errors(),
              "cached": result.cached, "cache_hit_ratio": result.cache_hit_ratio,
              "seconds": round(result.seconds, 3), "parquet": str(parquet),
              "invalid": invalid, "board": board, "board_filter": args.board is not None,
              "fitting_points": sum(s["fits"] for s in summary),
              "pareto_png": str(out / "pareto.png"),
              "pareto_front_size": len(fronts["LUT"]), "pareto_fronts": fronts,
              "best_config": best,
              "best_config_json": str(out / "best_config.json") if best else None,
              "summary": [{k: v for k, v in s.items() if k != "config"} for s in shown],
              "cycles_source": "timing model (estimated)",
              "resources_source": "resource model fitted to Yosys builds (estimated)",
              "resource_model_error": model.held_out_error(),
              "resource_model_source_hash": model.data["source_hash"],
              "fmax_reported": fmax, "rtl_check": rtl_check}

    def human() -> None:
        print(f"{report['points']} points ({report['valid_points']} valid) x "
              f"{len(workloads)} workloads: {result.computed} computed, "
              f"{result.cached} from the cache, {result.seconds:.1f} s")
        for inv in invalid:
            print(f"  invalid {inv['values']}: {inv['reason']}")
        for wl, errors in report["errors"].items():
            for error, count in errors.items():
                print(f"  {wl} does not compile for {count} of {report['valid_points']} "
                      f"points: {error}")
        print(f"resources on {board} (estimated; the model's held-out error: "
              f"{model.held_out_text()})"
              + (f"; only the {len(shown)} points that fit" if args.board else ""))
        width = max([44, *(len(s["name"]) for s in shown)])
        print(f"{'config':{width}} {'MAC/cyc':>7} {'MHz':>5} {'cycles (est.)':>13} "
              f"{'GOPS':>7} {'LUT':>7} {'FF':>6} {'DSP':>4} {'BRAM':>4} {'fits':>4}")
        for s in sorted(shown, key=lambda s: -(s["gops"] or 0)):
            cyc = "-" if s["cycles"] is None else str(s["cycles"])
            gops = "-" if s["gops"] is None else f"{s['gops']:.3f}"
            print(f"{s['name']:{width}} {s['macs_per_cycle']:>7} {s['clock_mhz']:>5g} "
                  f"{cyc:>13} {gops:>7} {s['lut_est']:>7} {s['ff_est']:>6} "
                  f"{s['dsp_est']:>4} {s['bram_est']:>4} {'yes' if s['fits'] else 'NO':>4}")
        print(f"all points: {parquet}; Pareto fronts (GOPS vs LUT: {len(fronts['LUT'])}, "
              f"vs DSP: {len(fronts['DSP'])} points): {out / 'pareto.png'}")
        if fmax:
            print(f"fmax reported by a real build on {board}: {fmax['fmax_mhz']} MHz "
                  f"({fmax['config']}, docs/fpga.md); not modelled per point")
        if rtl_check is not None:
            for c in rtl_check["checked"]:
                print(f"  RTL check {c['config']} {c['workload']}: model "
                      f"{c['model_cycles']}, RTL {c['rtl_cycles']} ({c['error']:+.2%})")
            if rtl_check["max_abs_error"] is not None:
                print(f"timing model against the RTL on {len(rtl_check['checked'])} "
                      f"points: max {rtl_check['max_abs_error']:.2%}, mean "
                      f"{rtl_check['mean_abs_error']:.2%}")
        if best:
            print(f"highest GOPS that fits {board} (estimated): {best} -> "
                  f"{out / 'best_config.json'}")
        else:
            print(f"no point fits {board}: no best_config.json")

    print_result(report, args.json, human)
    (out / "summary.json").write_text(json.dumps(report, indent=1))
    return 0


def add_dse_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``dse`` with the parser's ``command`` helper."""
    d = command(
        "dse", "design-space sweep: HwConfig fields over workloads on the timing model, "
        "on a dask cluster, cached on disk",
        "tensorfab dse --space space.yaml --workloads dense64,fc1000 --workers 2",
        "tensorfab dse --space space.yaml --workloads resnet18,digits --board ulx3s-85f",
        "tensorfab dse --space space.yaml --workloads model.onnx --calib calib.npy",
        "tensorfab dse --space space.yaml --board ulx3s-25f",
        "tensorfab dse fit-resources")
    d.add_argument("action", nargs="?", choices=["sweep", "fit-resources"], default="sweep",
                   help="sweep (default) or fit-resources: synthesize the resource "
                        "model's training configs with Yosys (ECP5, one at a time, "
                        "minutes) and write the fitted model")
    d.add_argument("--space", help="YAML file: HwConfig field -> list of values (sweep)")
    d.add_argument("--board", default=None,
                   help="sweep: keep only points that fit this ECP5 board (resources "
                        "estimated against ulx3s-85f without it); fit-resources: the "
                        "board to synthesize for (default ulx3s-85f)")
    d.add_argument("--work", default="build/resmodel",
                   help="fit-resources: work folder of the syntheses (reused when the "
                        "design's sources did not change)")
    d.add_argument("--configs", help="fit-resources: only these training configs")
    d.add_argument("-o", "--output", help="fit-resources: model file (default: the "
                   "package's dse/resource_model.json)")
    d.add_argument("--workloads", default="dense64",
                   help="comma-separated: resnet18, C2..C11, fc1000, proj, dense64 "
                        "(tensor operators), digits (the samples' CNN) or an ONNX file "
                        "(a whole model: its accelerator programs)")
    d.add_argument("--calib", help="sweep: calibration inputs (.npy or .npz) of the "
                   "ONNX workloads, for int8")
    d.add_argument("--shape", action="append",
                   help="sweep: fixed input shape NAME=D,D,... of the ONNX workloads "
                        "(repeatable; a symbolic batch is taken as 1)")
    d.add_argument("--scheduler", default=None,
                   help="existing dask scheduler (tcp://host:8786); default: a "
                        "LocalCluster here")
    d.add_argument("--workers", type=int, default=2, help="LocalCluster workers")
    d.add_argument("--out", default="dse-out",
                   help="output folder (points.parquet, summary.json, pareto.png, "
                        "best_config.json, cache/)")
    d.add_argument("--force", action="store_true",
                   help="sweep: replace files of those names in --out that a sweep did "
                        "not write; fit-resources: replace an -o file that is not a "
                        "resource model")
    d.add_argument("--check-rtl", type=int, metavar="N",
                   help="sweep: run N sampled (point, workload) pairs on the RTL "
                        "(Verilator, a model built per config) and report the timing "
                        "model's error on them")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.set_defaults(func=cmd_dse)


def cmd_advise(args: argparse.Namespace) -> int:
    from tensorfab.dse.advice import advise

    from .cli_output import working
    from .model_cli import _calibration, _shapes

    configs = None
    if args.configs is not None:  # (an empty name between commas is left out, as in dse)
        configs = [c for c in args.configs.split(",") if c]
        if not configs:
            raise UsageError(f"--configs {args.configs!r} names no config; give presets, "
                             "board configs or JSON files, comma-separated (or leave it out "
                             "for every preset and board config)")
    with working(f"compiling {Path(args.model).name} per configuration", quiet=args.json):
        result = advise(args.model, args.board, _calibration(args.calib),
                        _shapes(args.shape) or None, configs, args.memory)

    def fmax(r: dict[str, Any]) -> str:  # a real build's fmax, "!" below the board's clock
        if r["fmax_mhz"] is None:
            return "-"
        return f"{r['fmax_mhz']:.1f}" + ("" if r["meets_clock"] else "!")

    def human() -> None:
        reach = {r["board_memory_bytes"] for r in result["configs"]} - {None}
        within = ("" if reach <= {result["board_memory_bytes"]} else
                  "; a config's addresses reach "
                  + " or ".join(f"{b // 1024:,}" for b in sorted(reach)) + " KiB of it")
        where = "SDRAM" if result["board_memory"] == "sdram" else "on-chip"
        print(f"board {result['board']}: {result['board_memory_bytes']:,} bytes of "
              f"device memory ({where}{within}), {result['clock_mhz']:g} MHz")
        for name in result["batch_one"]:
            print(f"input {name!r}: its symbolic batch taken as 1, one inference "
                  f"(--shape {name}=N,... for another)")
        print(f"{'config':12} {'memory (B)':>11} {'fits':>5} {'resources':>9} "
              f"{'LUT':>7} {'DSP':>4} {'BRAM':>4} {'fits board':>10} {'fmax':>6} "
              f"{'cycles (est.)':>14} {'ms (est.)':>10} {'host B/inf':>10}")
        for r in result["configs"]:
            def num(v: int | None, estimated: bool = False) -> str:
                return "-" if v is None else ("~" if estimated else "") + str(v)

            est = r["resource_counts"] == "estimated"
            fits_board = {True: "yes", False: "NO", None: "unknown"}[r["fits_board"]]
            head = (f"{r['config']:12} {num(r['device_memory_bytes']):>11} "
                    f"{'yes' if r['fits_memory'] else 'NO':>5} {r['resources']:>9} "
                    f"{num(r['lut'], est):>7} {num(r['dsp'], est):>4} "
                    f"{num(r['bram'], est):>4} "
                    f"{fits_board:>10} {fmax(r):>6}")
            if r["error"]:
                print(f"{head} does not compile: {r['error']}")
                continue
            print(f"{head} {r['estimated_cycles']:>14,} {r['estimated_latency_ms']:>10.3f} "
                  f"{num(r['host_bytes']):>10}")
        print("host B/inf: bytes over the host link per inference, resident "
              "(activations in and out; weights written once at load)")
        print(f"resources: {result['resources_source']} ('~': the model's estimate)")
        for r in result["configs"]:
            if r["built_memory"] not in (None, result["board_memory"]):
                print(f"  {r['config']}: its real build had {r['built_memory']} memory: "
                      "its fmax and fit are that build's, its counts estimated")
        print("fmax: MHz a real build on the board reached ('!': below the board's clock)")
        for r in result["configs"]:
            for reason in r["over"]:
                print(f"  {r['config']}: {reason}")
        build = result["build"]
        line = build or "no configuration fits the memory and the board"
        if build and result["build_config"] != build:
            line += f" ({result['build_config']})"
        if result["build_resources"] == "estimated":
            line += (f"; its fit is the resource model's estimate: `tensorfab fpga build "
                     f"--board {result['board']} --config {result['build_config']} "
                     f"--memory {result['board_memory']}` confirms it")
        if result["fastest_fitting_memory"] not in (None, build):
            line += (f" (fastest within memory, whatever its resources: "
                     f"{result['fastest_fitting_memory']})")
        print(f"build: {line}")

    print_result(result, args.json, human)
    return 0


def add_advise_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``advise`` with the parser's ``command`` helper."""
    a = command(
        "advise", "which accelerator configuration to build for a model on a board: "
        "device memory, estimated resources, cycles and latency per configuration",
        "tensorfab advise digits.onnx --board ulx3s-85f --calib calib.npy "
        "--shape image=1,1,8,8")
    a.add_argument("model", help="ONNX model")
    a.add_argument("--board", required=True, help="board name (tensorfab board list)")
    a.add_argument("--calib", help="calibration inputs (.npy or .npz) for int8")
    a.add_argument("--shape", action="append",
                   help="fixed input shape NAME=D,D,... (repeatable)")
    a.add_argument("--configs", help="comma-separated configs (default: presets and "
                   "board configs)")
    a.add_argument("--memory", choices=("sdram", "on-chip"),
                   help="the board's device memory (default: the board's, SDRAM on a "
                   "ULX3S)")
    a.add_argument("--json", action="store_true", help="print the result as JSON")
    a.set_defaults(func=cmd_advise)

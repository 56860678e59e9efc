"""A design-space sweep: every valid point of a space times every workload, evaluated on
the timing model on a dask cluster, each result cached on disk.

A workload is a tensor operator by name (ResNet-18's convolutions, the dense layers) or
a whole ONNX model (:mod:`.model_workload`: ``digits`` or a file, its accelerator
programs). The cycles come from the timing model (:mod:`tensorfab.sim.timing`, within
3 % of the RTL on the programs of ``tensorfab bench timing-model``); every cycle figure
here is that model's estimate.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorfab.isa import HwConfig, UsageError

from .model_workload import (
    DIGITS,
    ModelWorkload,
    digits_workload,
    evaluate_model,
    model_workload,
    rtl_cycles_of_model,
)
from .space import SpacePoint

__all__ = ["SweepResult", "Workload", "check_on_rtl", "code_version", "evaluate",
           "known_workloads", "rtl_cycles_of", "run_sweep", "workload_by_name",
           "workload_name"]

#: A sweep's workload: a tensor workload's name, or a whole model.
Workload = str | ModelWorkload

#: Source folders whose code decides a point's result (the code version hashes them).
_SOURCE_DIRS = ("isa", "compiler", "sim", "dse")


def known_workloads() -> dict[str, Any]:
    """Workload name to :class:`~tensorfab.compiler.tensor.Workload`: ResNet-18's
    convolutions C2-C11, the dense layers, and ``dense64`` (a 16×64×64 dense layer, the
    small workload of tests and quick sweeps)."""
    from tensorfab.compiler.tensor import DENSE_LAYERS, RESNET18_CONV, Workload

    return {**RESNET18_CONV, **DENSE_LAYERS,
            "dense64": Workload.dense(16, 64, 64, name="dense64")}


def workload_by_name(names: Sequence[str], calibration: Any = None,
                     input_shapes: dict[str, tuple[int | str, ...]] | None = None
                     ) -> list[Workload]:
    """The workloads of ``--workloads``: ``resnet18`` expands to its convolutions
    C2-C11, ``digits`` is the digits CNN, a path ending in ``.onnx`` a whole model
    (quantized with ``calibration``, at ``input_shapes``, a symbolic batch taken as 1).

    Raises
    ------
    UsageError
        No name at all, a name that is not a known workload (the known ones listed), an
        ONNX file that does not exist, or two workloads of one name.
    ModelCompileError
        An ONNX file that cannot be read or keeps a symbolic dim other than its batch.
    """
    from tensorfab.compiler.tensor import RESNET18_CONV

    known = known_workloads()
    if not names:
        raise UsageError(f"--workloads names no workload; give one or more of resnet18, "
                         f"{', '.join(known)}, {DIGITS} or an ONNX file, comma-separated")
    out: list[Workload] = []
    for n in names:
        if n == "resnet18":
            out.extend(RESNET18_CONV)
        elif n in known:
            out.append(n)
        elif n == DIGITS:
            out.append(digits_workload())
        elif n.lower().endswith(".onnx"):
            out.append(model_workload(n, calibration, input_shapes))
        else:
            raise UsageError(f"--workloads: unknown workload {n!r} (known: resnet18, "
                             f"{', '.join(known)}, {DIGITS}, or an ONNX file)")
    seen = [workload_name(w) for w in out]
    twice = next((n for n in seen if seen.count(n) > 1), None)
    if twice is not None:
        raise UsageError(f"--workloads: {twice!r} is given twice (two ONNX files of one "
                         "name: rename one)")
    return out


def workload_name(workload: Workload) -> str:
    """The name a workload's rows carry."""
    return workload if isinstance(workload, str) else workload.name


def code_version() -> str:
    """Hash of the package sources a result depends on (isa, compiler, sim, dse)."""
    import tensorfab.isa

    root = Path(tensorfab.isa.__file__).resolve().parents[1]
    h = hashlib.sha256()
    for d in _SOURCE_DIRS:
        for f in sorted((root / d).rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _cache_key(config: HwConfig, workload: Workload, version: str) -> str:
    cfg = config.to_dict()
    cfg.pop("name")
    what = workload if isinstance(workload, str) else f"model {workload.digest}"
    blob = json.dumps({"config": cfg, "workload": what, "code": version},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def evaluate(config_json: str, workload: Workload) -> dict[str, Any]:
    """Compile ``workload`` for the config and time it on the timing model (a model:
    :func:`~.model_workload.evaluate_model`, which adds its own keys).

    Returns
    -------
    dict
        ``cycles`` (timing-model estimate), ``macs``, ``utilization`` (MACs over
        cycles × GEMM core MACs per cycle), ``gops`` at the config's clock,
        ``load``/``compute``/``store`` busy cycles and ``error`` (the compile error's
        message when the workload does not fit the config, else ``None``).
    """
    from tensorfab.compiler.tensor.operators import compile_workload
    from tensorfab.isa import TensorfabError
    from tensorfab.sim.timing.model import program_timing

    if isinstance(workload, ModelWorkload):
        return evaluate_model(config_json, workload)
    cfg = HwConfig.from_json(config_json)
    wl = known_workloads()[workload]
    try:
        program = compile_workload(wl, cfg).program
    except TensorfabError as e:
        return {"cycles": None, "macs": wl.macs, "utilization": None, "gops": None,
                "error": f"{type(e).__name__}: {e}"}
    t = program_timing(program)
    cycles = round(t.cycles)
    peak = cfg.batch * cfg.block_in * cfg.block_out
    return {"cycles": cycles, "macs": wl.macs,
            "utilization": wl.macs / (cycles * peak),
            "gops": 2 * wl.macs * cfg.clock_mhz / cycles / 1e3,
            "error": None}


@dataclass
class SweepResult:
    """Rows of a sweep and how they were obtained.

    Attributes
    ----------
    rows : list[dict]
        One row per (point, workload): the swept values, ``config`` (HwConfig JSON),
        ``workload``, the :func:`evaluate` figures, ``valid``/``invalid_reason``.
    computed, cached : int
        Rows evaluated on the cluster, rows read from the cache.
    seconds : float
        Wall time of the sweep.
    """

    rows: list[dict[str, Any]]
    computed: int
    cached: int
    seconds: float

    def errors(self) -> dict[str, dict[str, int]]:
        """Per workload, each error its valid points gave (the workload did not compile
        for them) and how many points gave it."""
        out: dict[str, dict[str, int]] = {}
        for r in self.rows:
            if r.get("valid") and r.get("error"):
                per = out.setdefault(r["workload"], {})
                per[r["error"]] = per.get(r["error"], 0) + 1
        return out

    @property
    def cache_hit_ratio(self) -> float:
        """Fraction of the evaluated rows that came from the cache."""
        total = self.computed + self.cached
        return self.cached / total if total else 0.0


def run_sweep(points: Sequence[SpacePoint], workloads: Sequence[Workload], client: Any,
              cache_dir: str | Path,
              progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Evaluate every valid point on every workload on ``client`` (dask).

    Each result is written to ``cache_dir`` under its (config, workload, code version)
    key as soon as it arrives, so an interrupted sweep resumes where it stopped and a
    repeated one computes nothing. Invalid points become rows with their reason.
    ``progress(done, total)`` is called as results arrive. A model workload is sent to
    the cluster once (``scatter``), not with every task.
    """
    from distributed import as_completed

    t0 = time.perf_counter()
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    version = code_version()
    rows: list[dict[str, Any]] = []
    pending: dict[Any, tuple[Path, dict[str, Any]]] = {}
    cached = 0
    todo: list[tuple[Path, dict[str, Any], str, Workload]] = []
    for pt in points:
        for wl in workloads:
            row: dict[str, Any] = {**pt.values, "workload": workload_name(wl),
                                   "valid": pt.config is not None,
                                   "invalid_reason": pt.invalid_reason}
            rows.append(row)
            if pt.config is None:
                continue
            row["config"] = pt.config.to_json()
            path = cache / f"{_cache_key(pt.config, wl, version)}.json"
            if path.exists():
                row.update(json.loads(path.read_text()))
                cached += 1
            else:
                todo.append((path, row, row["config"], wl))
    total = len(todo) + cached
    if progress:
        progress(cached, total)
    sent: dict[str, Any] = {}
    for path, row, cfg_json, wl in todo:
        if isinstance(wl, ModelWorkload) and wl.name not in sent:
            sent[wl.name] = client.scatter(wl)
        task = sent.get(workload_name(wl), wl)
        pending[client.submit(evaluate, cfg_json, task, pure=False)] = (path, row)
    done = cached
    for fut in as_completed(list(pending)):
        path, row = pending[fut]
        result = fut.result()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(path)
        row.update(result)
        done += 1
        if progress:
            progress(done, total)
    return SweepResult(rows, len(todo), cached, time.perf_counter() - t0)


def rtl_cycles_of(config_json: str, workload: Workload) -> dict[str, Any]:
    """Cycles of ``workload``'s program for the config on the RTL executor (Verilator;
    a config's model is built once and cached) and on the timing model (a model:
    :func:`~.model_workload.rtl_cycles_of_model`, its accelerator programs summed).

    Returns
    -------
    dict
        ``rtl_cycles``, ``model_cycles``, ``error`` (``(model - rtl) / rtl``),
        ``rtl_seconds``.
    """
    from tensorfab.compiler.tensor.operators import compile_workload
    from tensorfab.sim.rtl import RtlSimulator
    from tensorfab.sim.timing.model import program_timing

    if isinstance(workload, ModelWorkload):
        return rtl_cycles_of_model(config_json, workload)
    cfg = HwConfig.from_json(config_json)
    program = compile_workload(known_workloads()[workload], cfg).program
    model = round(program_timing(program).cycles)
    t0 = time.perf_counter()
    rtl = RtlSimulator().run(program).cycles
    return {"rtl_cycles": rtl, "model_cycles": model, "error": (model - rtl) / rtl,
            "rtl_seconds": round(time.perf_counter() - t0, 3)}


def check_on_rtl(rows: Sequence[dict[str, Any]], n: int, client: Any, seed: int = 0,
                 workloads: Sequence[Workload] = ()) -> dict[str, Any]:
    """Run ``n`` sampled (point, workload) rows with cycles on the RTL on ``client``
    and compare with the timing model's cycles; ``workloads`` gives the model
    workloads the rows name (a tensor workload is found by its name).

    Returns
    -------
    dict
        ``checked`` (per row: ``config`` name, ``workload``, :func:`rtl_cycles_of`'s
        figures), ``max_abs_error``, ``mean_abs_error`` (``None`` when no row has
        cycles).

    Raises
    ------
    UsageError
        ``n`` is below 1.
    """
    import random

    if n < 1:
        raise UsageError(f"--check-rtl {n}: give at least one point")
    done = [r for r in rows if r.get("cycles")]
    picked = random.Random(seed).sample(done, min(n, len(done)))
    models = {w.name: w for w in workloads if isinstance(w, ModelWorkload)}
    futs = [client.submit(rtl_cycles_of, r["config"], models.get(r["workload"], r["workload"]),
                          pure=False)
            for r in picked]
    checked = []
    for r, fut in zip(picked, futs, strict=True):
        checked.append({"config": HwConfig.from_json(r["config"]).name,
                        "workload": r["workload"], **fut.result()})
    errors = [abs(c["error"]) for c in checked]
    return {"checked": checked,
            "max_abs_error": max(errors) if errors else None,
            "mean_abs_error": sum(errors) / len(errors) if errors else None}

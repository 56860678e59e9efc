"""Schedule tuner: a genetic search over the compiler's schedule space guided by a
learned cost model, as AutoTVM's GA tuner with an XGBoost model.

A schedule is a genome of five tile-size indices (balanced sizes of
:func:`~tensorfab.compiler.tensor.tile_search.tile_candidates` along ``b``, ``oc``,
``oh``, ``ow``, ``ic``), a loop order (any permutation of the output tile loops),
virtual threads (1 .. ``dep_queue_depth``) and the operand placement (regions
``depth // vthreads`` apart, or packed). Measurements are the timing model's cycles of
the lowered program (:func:`~tensorfab.sim.timing.model.program_timing`); a
scikit-learn ``HistGradientBoostingRegressor`` trained on the measurements so far ranks
each generation's children and only the most promising are measured. The tile search's
own pick seeds the population, so the result is never slower on the timing model.
Every measurement is appended to a JSON-lines tuning log keyed by config, workload
and epilogue; a rerun with the same log measures nothing already there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.compiler.tensor import Workload
from tensorfab.compiler.tensor.epilogue import Epilogue
from tensorfab.compiler.tensor.schedule import Schedule
from tensorfab.compiler.tensor.tile_plan import AXES, OUTER_AXES, TilePlan
from tensorfab.compiler.tensor.tile_search import schedule_for, tile_candidates
from tensorfab.isa import HwConfig, Program, TensorfabError, UsageError

__all__ = ["Genome", "TaskRecorder", "TuneResult", "TuningLog", "cycle_floor", "mac_bound",
           "task_key", "tune_workload"]

#: Loop orders of the output tile loops (outermost first).
ORDERS: tuple[tuple[str, ...], ...] = tuple(permutations(OUTER_AXES))
#: Genome: tile index per axis, order index, vthreads, packed placement.
Genome = tuple[int, ...]


def task_key(workload: Workload, cfg: HwConfig, epilogue: Epilogue) -> str:
    """The tuning log's key of one tuning task (config, workload shape, epilogue)."""
    text = json.dumps([cfg.to_dict(), repr(dataclasses.replace(workload, name="")),
                       repr(epilogue)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass
class TuneResult:
    """A tuned workload: cycles of the tile search's pick and of the tuned schedule on
    the timing model (and on RTL when verified), measurements made, seconds, and two
    bounds no schedule beats: ``mac_bound`` (:func:`mac_bound`) and the tighter
    ``floor`` (:func:`cycle_floor`)."""

    name: str
    key: str
    baseline_genome: Genome
    best_genome: Genome
    baseline_cycles: int
    best_cycles: int
    measured: int
    reused: int
    seconds: float
    mac_bound: int
    floor: int
    rtl_baseline: int | None = None
    rtl_best: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


class _Space:
    def __init__(self, workload: Workload, cfg: HwConfig, epilogue: Epilogue) -> None:
        self.workload, self.cfg, self.epilogue = workload, cfg, epilogue
        ext = workload.extents(cfg)
        self.cands = [tile_candidates(ext[a]) for a in AXES]
        self.sizes = [len(c) for c in self.cands] + [len(ORDERS), cfg.dep_queue_depth, 2]
        self.records = epilogue.record_entries(cfg, workload.out_channels, workload.groups)
        self.acc_records = epilogue.acc_record_entries(cfg, workload.out_channels,
                                                       workload.groups)

    def plan(self, g: Genome) -> TilePlan:
        cfg, v = self.cfg, g[6] + 1
        tiles = tuple((a, self.cands[i][g[i]]) for i, a in enumerate(AXES))
        inp_cap = cfg.inp_depth
        pitches = (("inp", inp_cap // v), ("wgt", (cfg.wgt_depth - self.records) // v),
                   ("acc", (cfg.acc_depth - self.acc_records) // v))
        plan = TilePlan(self.workload, cfg, tiles, ORDERS[g[5]], v, pitches,
                        self.epilogue.channel_tiles, self.records,
                        self.epilogue.residual is not None, self.acc_records)
        if g[7]:
            packed = (("inp", plan.inp_entries()), ("wgt", plan.wgt_entries()), pitches[2])
            plan = TilePlan(self.workload, cfg, tiles, plan.order, v, packed, plan.bias,
                            self.records, plan.residual, self.acc_records)
        return plan

    def genome_of(self, plan: TilePlan) -> Genome:
        tiles = [self.cands[i].index(plan.tile(a)) for i, a in enumerate(AXES)]
        packed = int(plan.pitch("inp") != self.cfg.inp_depth // plan.vthreads)
        return (*tiles, ORDERS.index(plan.order), plan.vthreads - 1, packed)

    def features(self, g: Genome) -> list[float]:
        tiles = [math.log2(self.cands[i][g[i]]) for i in range(len(AXES))]
        order = ORDERS[g[5]]
        return [*tiles, *(order.index(a) for a in OUTER_AXES), g[6], g[7]]

    def random(self, rng: np.random.Generator) -> Genome:
        return tuple(int(rng.integers(0, n)) for n in self.sizes)

    def mutate(self, g: Genome, rng: np.random.Generator) -> Genome:
        out = list(g)
        for i, n in enumerate(self.sizes):
            if rng.random() < 0.3:
                out[i] = int(np.clip(out[i] + rng.integers(-2, 3), 0, n - 1)) \
                    if i < len(AXES) else int(rng.integers(0, n))
        return tuple(out)


def measure(workload: Workload, cfg: HwConfig, epilogue: Epilogue, g: Genome) -> int | None:
    """Timing-model cycles of genome ``g``'s program; ``None`` when it is no legal
    schedule (a tile that does not fit, a kernel over ``uop_depth``)."""
    from tensorfab.compiler.tensor.operators import compile_workload
    from tensorfab.sim.timing.model import program_timing

    try:
        plan = _Space(workload, cfg, epilogue).plan(g)
        op = compile_workload(workload, cfg, epilogue, schedule=schedule_for(plan))
        return round(program_timing(op.program).cycles)
    except (TensorfabError, ValueError, AssertionError):
        return None


def rtl_cycles(workload: Workload, cfg: HwConfig, epilogue: Epilogue, g: Genome) -> int:
    """Cycles of genome ``g``'s program on the RTL executor."""
    from tensorfab.compiler.tensor.operators import compile_workload
    from tensorfab.sim.rtl import RtlSimulator

    plan = _Space(workload, cfg, epilogue).plan(g)
    op = compile_workload(workload, cfg, epilogue, schedule=schedule_for(plan))
    return RtlSimulator().run(op.program).cycles


def _record(line: str) -> tuple[str, Genome, int | None] | None:
    """``(key, genome, cycles)`` of a tuning-log line, or None if it is no record."""
    try:
        rec = json.loads(line)
        return rec["key"], tuple(rec["genome"]), rec["cycles"]
    except (ValueError, KeyError, TypeError):
        return None


def _log_records(log: Path) -> Iterator[tuple[str, Genome, int | None]]:
    """``(key, genome, cycles)`` of each line of the JSON-lines tuning log ``log``.

    A last line without its newline that is no record is one an interrupted run cut
    off: it is left out (:func:`_end_log_with_a_newline` drops it before appending).

    Raises
    ------
    UsageError
        A line that is not a record :func:`tune_workload` writes (``FILE:LINE``).
    """
    text = log.read_text()
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        record = _record(line)
        if record is None:
            if n == len(lines) and not text.endswith("\n"):
                return
            raise UsageError(f"{log}:{n}: not a tuning-log record")
        yield record


def _end_log_with_a_newline(log: Path | None) -> None:
    """Make the log end with a whole line before records are appended: a complete last
    record without its newline gets one, a record an interrupted run cut off is
    dropped (:func:`_log_records` leaves it out)."""
    if log is None or not log.exists():
        return
    text = log.read_text()
    if not text or text.endswith("\n"):
        return
    whole = text.rfind("\n") + 1
    log.write_text(text + "\n" if _record(text[whole:]) is not None else text[:whole])


def _read_log(log: Path | None, key: str) -> dict[Genome, int | None]:
    if log is None or not log.exists():
        return {}
    return {genome: cycles for k, genome, cycles in _log_records(log) if k == key}


def tune_workload(name: str, workload: Workload, cfg: HwConfig,
                  epilogue: Epilogue | None = None, *, trials: int = 64,
                  log: Path | None = None, seed: int = 0, batch: int = 8,
                  client: Any = None, verify_rtl: bool = False) -> TuneResult:
    """Tune one workload's schedule (see the module docstring).

    Parameters
    ----------
    name, workload, cfg, epilogue
        The task.
    trials
        Measurements on the timing model (those already in ``log`` count).
    log
        JSON-lines tuning log, read and appended to.
    seed
        Seed of the search.
    batch
        Measurements per generation.
    client
        A ``distributed.Client`` measuring each generation in parallel (else here).
    verify_rtl
        Also run the tile search's pick and the tuned schedule on the RTL; the tuned one
        is kept only when it is not slower there.
    """
    from sklearn.ensemble import HistGradientBoostingRegressor

    from tensorfab.compiler.tensor.operators import compile_workload

    ep = epilogue or Epilogue()
    t0 = time.perf_counter()
    space = _Space(workload, cfg, ep)
    key = task_key(workload, cfg, ep)
    seen = _read_log(log, key)
    _end_log_with_a_newline(log)
    reused = len(seen)
    searched = compile_workload(workload, cfg, ep)  # the tile search's pick
    baseline = space.genome_of(searched.plan)
    rng = np.random.default_rng(seed)

    def run(genomes: list[Genome]) -> None:
        genomes = [g for g in dict.fromkeys(genomes) if g not in seen]
        if not genomes:
            return
        if client is not None:
            futs = client.map(measure, [workload] * len(genomes), [cfg] * len(genomes),
                              [ep] * len(genomes), genomes, pure=False)
            cycles = client.gather(futs)
        else:
            cycles = [measure(workload, cfg, ep, g) for g in genomes]
        with (log.open("a") if log is not None else _NullFile()) as f:
            for g, c in zip(genomes, cycles, strict=True):
                seen[g] = c
                f.write(json.dumps({"key": key, "name": name, "config": cfg.name,
                                    "genome": list(g), "cycles": c}) + "\n")

    run([baseline])
    model = HistGradientBoostingRegressor(max_iter=100, random_state=seed)
    stall = 0
    while sum(1 for _ in seen) < trials and stall < 5:
        good = sorted((c, g) for g, c in seen.items() if c is not None)
        parents = [g for _, g in good[:8]] or [baseline]
        children = [space.mutate(parents[int(rng.integers(len(parents)))], rng)
                    for _ in range(16 * batch)]
        for _ in range(4 * batch):  # crossover of two parents
            a, b = (parents[int(rng.integers(len(parents)))] for _ in range(2))
            children.append(tuple(x if rng.random() < 0.5 else y
                                  for x, y in zip(a, b, strict=True)))
        children += [space.random(rng) for _ in range(4 * batch)]
        fresh = [g for g in dict.fromkeys(children) if g not in seen]
        if not fresh:
            stall += 1
            continue
        if len(good) >= 8:
            model.fit([space.features(g) for _, g in good],
                      [math.log(c) for c, _ in good])
            pred = model.predict([space.features(g) for g in fresh])
            fresh = [fresh[i] for i in np.argsort(pred)]
        else:
            rng.shuffle(fresh)  # type: ignore[arg-type]
        n = min(batch, trials - len(seen))
        before = len(seen)
        run(fresh[:n])
        stall = stall + 1 if len(seen) == before else 0
    best_cycles, best = min((c, g) for g, c in seen.items() if c is not None)
    base_cycles = seen[baseline]
    assert base_cycles is not None
    if base_cycles <= best_cycles:
        best, best_cycles = baseline, base_cycles
    result = TuneResult(name, key, baseline, best, base_cycles, best_cycles,
                        len(seen) - reused, reused, 0.0, mac_bound(workload, cfg),
                        cycle_floor(workload, cfg, searched.program))
    if verify_rtl:
        result.rtl_baseline = rtl_cycles(workload, cfg, ep, baseline)
        result.rtl_best = result.rtl_baseline if best == baseline else \
            rtl_cycles(workload, cfg, ep, best)
        if result.rtl_best > result.rtl_baseline:
            result.best_genome, result.best_cycles = baseline, base_cycles
            result.rtl_best = result.rtl_baseline
    result.seconds = round(time.perf_counter() - t0, 3)
    return result


def mac_bound(workload: Workload, cfg: HwConfig) -> int:
    """Cycles the GEMM core needs at one micro-op per cycle for the workload's blocked
    MACs: no schedule is faster."""
    ext = workload.extents(cfg)
    kh, kw = workload.kernel
    return int(workload.groups * math.prod(ext[a] for a in AXES) * kh * kw)


def cycle_floor(workload: Workload, cfg: HwConfig, program: Program) -> int:
    """Cycles no schedule of ``workload`` beats, from ``program`` (one schedule of it
    with the epilogue in question): the larger of the compute engine's micro-ops
    (:func:`~tensorfab.sim.timing.model.compute_micro_ops`: the blocked MACs, the
    epilogue's ALU passes, the fast reset, the same for every schedule but for the
    fast reset's lines) and the memory bus's beats for reading every weight and
    writing every output once (the input is left out: a strided convolution need not
    read all of it)."""
    from tensorfab.sim.timing.model import compute_micro_ops

    ext = workload.extents(cfg)
    kh, kw = workload.kernel
    wgt = workload.groups * ext["oc"] * ext["ic"] * kh * kw * cfg.wgt_entry_bytes
    out = workload.groups * ext["b"] * ext["oc"] * ext["oh"] * ext["ow"] * cfg.out_entry_bytes
    return max(compute_micro_ops(program.insns, cfg), -(-(wgt + out) // cfg.mem_bus_bytes))


class _NullFile:
    def __enter__(self) -> _NullFile:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def write(self, _text: str) -> None:
        return None


def tune_workloads(workloads: Sequence[tuple[str, Workload]], cfg: HwConfig, **kwargs: Any
                   ) -> list[TuneResult]:
    """:func:`tune_workload` of each named workload with the same options."""
    return [tune_workload(name, wl, cfg, **kwargs) for name, wl in workloads]


class TuningLog:
    """A tuning log as the compiler's :class:`~tensorfab.compiler.tensor.schedule_source.
    ScheduleSource`: the fastest legal schedule logged for an operator's key, else
    ``None`` (the tile search picks).

    Parameters
    ----------
    path
        The JSON-lines log :func:`tune_workload` writes.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise UsageError(f"--tuning-log {self.path}: no such file")
        self.best: dict[str, tuple[int, Genome]] = {}
        for key, genome, cycles in _log_records(self.path):
            if cycles is not None and (key not in self.best or cycles < self.best[key][0]):
                self.best[key] = (int(cycles), genome)
        self.used: list[str] = []

    def schedule(self, workload: Workload, cfg: HwConfig, epilogue: Epilogue
                 ) -> Schedule | None:
        """The logged fastest schedule of this operator, or ``None``."""
        found = self.best.get(task_key(workload, cfg, epilogue))
        if found is None:
            return None
        self.used.append(workload.name)
        return schedule_for(_Space(workload, cfg, epilogue).plan(found[1]))


class TaskRecorder:
    """A :class:`~tensorfab.compiler.tensor.schedule_source.ScheduleSource` that gives
    no schedule and records each operator asked about: the tuning tasks of a model."""

    def __init__(self) -> None:
        self.tasks: dict[str, tuple[Workload, HwConfig, Epilogue]] = {}

    def schedule(self, workload: Workload, cfg: HwConfig, epilogue: Epilogue) -> None:
        """Record the task; the tile search picks."""
        self.tasks.setdefault(task_key(workload, cfg, epilogue), (workload, cfg, epilogue))

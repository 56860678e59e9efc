"""Verification at scale: the random-program differential check (functional simulator
against the RTL executor under random memory timing) as a dask.distributed job.

Each task checks one chunk of seeds of one config on a worker: the worker's Verilator
model of that config is built once (cached under ``TENSORFAB_VERILATOR_CACHE``) and
every program of the chunk runs on it. A program that differs is saved as a
replayable case: ``CONFIG-SEED.bin`` (the program, runnable with ``tensorfab sim
--target rtl``) and ``CONFIG-SEED.json`` (config, seed, memory timing, what differed),
which ``tensorfab verify --replay`` runs again.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.fpga_builds.board_configs import board_config
from tensorfab.isa import HwConfig, Program, TensorfabError, UsageError

__all__ = ["CaseResult", "VerifySummary", "check_case", "chunks", "memory_timing_for",
           "replay_case", "run_verify"]

#: Cycle limit of one random program on the RTL executor.
MAX_CYCLES = 200_000


@dataclass
class CaseResult:
    """One random program checked: its config and seed, and what differed (empty when
    the RTL matched the functional simulator)."""

    config: str
    seed: int
    problems: list[str] = field(default_factory=list)
    memory: dict[str, int] = field(default_factory=dict)
    saved: str | None = None

    @property
    def passed(self) -> bool:
        return not self.problems


@dataclass
class VerifySummary:
    """Programs, passed and failed per config, throughput, the failures."""

    per_config: dict[str, dict[str, int]]
    failures: list[CaseResult]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        total = sum(c["programs"] for c in self.per_config.values())
        return {"configs": self.per_config, "programs": total,
                "failed": len(self.failures), "seconds": round(self.seconds, 3),
                "programs_per_second": round(total / self.seconds, 2) if self.seconds else None,
                "failures": [{"config": f.config, "seed": f.seed, "problems": f.problems,
                              "saved": f.saved, "replay": replay_command(f.saved)}
                             for f in self.failures]}


def memory_timing_for(seed: int) -> Any:
    """The random memory timing a seed's program runs under (a function of the seed)."""
    from tensorfab.sim.rtl import MemoryTiming

    rng = np.random.default_rng([seed, 0x6D656D])
    return MemoryTiming(read_latency=int(rng.integers(1, 41)),
                        write_latency=int(rng.integers(1, 9)),
                        bandwidth=int(rng.choice([1, 2, 4, 8, 16])),
                        max_outstanding=int(rng.integers(1, 17)),
                        read_buffer=int(rng.integers(1, 9)))


def replay_command(saved: str | None) -> str | None:
    """The command that runs a saved failure again."""
    return None if saved is None else f"tensorfab verify --replay {saved}"


def check_case(cfg: HwConfig, seed: int, *, inject: bool = False,
               program: Program | None = None) -> CaseResult:
    """Run seed ``seed``'s random program on fsim and on the RTL and compare the final
    DRAM image and the counters; ``inject`` flips one byte of fsim's image (a check that
    the checker reports, saves and replays a mismatch)."""
    from tensorfab.sim.fsim import FunctionalSimulator
    from tensorfab.sim.rtl import RtlSimulator
    from tensorfab.sim.testing.random_program import random_program

    prog = program if program is not None else random_program(cfg, seed)
    memory = memory_timing_for(seed)
    result = CaseResult(cfg.name, seed, memory=dataclasses.asdict(memory))
    ref = FunctionalSimulator().run(prog)
    want = ref.dram.copy()
    if inject:
        out = prog.layout()[next(s.name for s in prog.segments if s.output)]
        want[out.offset] ^= 0x5A
    try:
        got = RtlSimulator(memory, max_cycles=MAX_CYCLES).run(prog)
    except TensorfabError as exc:
        result.problems.append(f"RTL raised {type(exc).__name__}: {exc}")
        return result
    diff = np.flatnonzero(got.dram != want)
    if diff.size:
        result.problems.append(f"{diff.size} DRAM byte(s) differ, first at {int(diff[0]):#x}")
    c, r = ref.counters, got.counters
    for name in ("load_insns", "compute_insns", "store_insns", "gemm_uops", "alu_uops"):
        if getattr(c, name) != getattr(r, name):
            result.problems.append(f"{name}: RTL {getattr(r, name)} != fsim {getattr(c, name)}")
    return result


def _save(case: CaseResult, cfg: HwConfig, inject: bool, out: Path) -> str:
    from tensorfab.sim.testing.random_program import random_program

    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{cfg.name}-{case.seed}"
    stem.with_suffix(".bin").write_bytes(random_program(cfg, case.seed).to_bytes())
    record = {"config": cfg.to_dict(), "seed": case.seed, "memory": case.memory,
              "inject": inject, "problems": case.problems,
              "program": stem.with_suffix(".bin").name}
    stem.with_suffix(".json").write_text(json.dumps(record, indent=1))
    return str(stem.with_suffix(".json"))


def check_chunk(cfg_json: str, seeds: Sequence[int], inject: Sequence[int],
                out: str) -> list[CaseResult]:
    """Check ``seeds`` of one config (a Dask task); failures saved under ``out``."""
    cfg = HwConfig.from_json(cfg_json)
    results = []
    for seed in seeds:
        case = check_case(cfg, seed, inject=seed in inject)
        if not case.passed:
            case.saved = _save(case, cfg, seed in inject, Path(out))
        results.append(case)
    return results


def chunks(seeds: Sequence[int], parts: int) -> list[list[int]]:
    """``seeds`` split into at most ``parts`` contiguous chunks of near-equal size."""
    parts = max(1, min(parts, len(seeds)))
    size = -(-len(seeds) // parts)
    return [list(seeds[i:i + size]) for i in range(0, len(seeds), size)]


def _distinct_configs(configs: Sequence[str]) -> list[HwConfig]:
    """The configs of ``--configs``, refusing two of one name: their rows would be one
    and their failures would be saved under one stem (``NAME-SEED``)."""
    cfgs = [board_config(c) for c in configs]
    given: dict[str, str] = {}
    for spec, cfg in zip(configs, cfgs, strict=True):
        if cfg.name in given:
            first = given[cfg.name]
            both = (f"{first!r} is given twice" if first == spec else
                    f"{first} and {spec} are both named {cfg.name!r}")
            raise UsageError(f"--configs: {both}; their results and saved failures "
                             f"({cfg.name}-SEED.json) would mix: list a config once, "
                             "and give a JSON config another \"name\"")
        given[cfg.name] = spec
    return cfgs


def run_verify(configs: Sequence[str], programs: int, *, seed: int = 0,
               scheduler: str | None = None, workers: int = 2, out: Path = Path("verify"),
               chunks_per_worker: int = 4, inject: Sequence[int] = (),
               progress: Callable[[int, int], None] | None = None) -> VerifySummary:
    """Check ``programs`` random programs (seeds ``seed ..``) per config on a Dask cluster.

    Parameters
    ----------
    configs
        Presets or JSON config files.
    programs, seed
        Programs per config and the first seed.
    scheduler, workers
        :func:`~tensorfab.dse.cluster.dask_client`'s arguments.
    out
        Folder receiving the failures.
    chunks_per_worker
        Tasks per worker and config (a worker loads its model once per task).
    inject
        Seeds whose expected image gets one byte flipped (checks the checker).
    progress
        Called with (programs done, programs in all) as chunks finish.

    Raises
    ------
    UsageError
        No configs, two configs of one name, fewer than one program, a negative seed;
        an ``out`` that is a file; a bad scheduler.
    """
    from .cluster import dask_client

    if not configs:
        raise UsageError("--configs names no config; give presets, board configs or JSON "
                         "config files, comma-separated")
    if programs < 1:
        raise UsageError(f"--programs {programs}: give at least 1 program per config")
    if seed < 0:
        raise UsageError(f"--seed {seed}: seeds are 0 or more")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; name a folder (failures are saved in it "
                         "as CONFIG-SEED.bin and CONFIG-SEED.json)")
    cfgs = _distinct_configs(configs)
    seeds = list(range(seed, seed + programs))
    t0 = time.perf_counter()
    results: list[CaseResult] = []
    with dask_client(scheduler, workers) as client:
        from distributed import as_completed

        n_workers = max(1, len(client.scheduler_info().get("workers", {})))  # type: ignore[attr-defined]
        futures = [client.submit(check_chunk, cfg.to_json(), part, list(inject),  # type: ignore[attr-defined]
                                 str(out.resolve()), pure=False)
                   for cfg in cfgs for part in chunks(seeds, n_workers * chunks_per_worker)]
        total = len(seeds) * len(cfgs)
        for fut in as_completed(futures):
            results += fut.result()
            if progress is not None:
                progress(len(results), total)
    seconds = time.perf_counter() - t0
    per_config = {cfg.name: {"programs": 0, "passed": 0, "failed": 0} for cfg in cfgs}
    for r in results:
        per_config[r.config]["programs"] += 1
        per_config[r.config]["passed" if r.passed else "failed"] += 1
    failures = sorted((r for r in results if not r.passed), key=lambda r: (r.config, r.seed))
    return VerifySummary(per_config, failures, seconds)


def _read_failure(path: Path) -> tuple[HwConfig, int, Path, bool]:
    """The config, seed, program file and injection flag of a saved failure, or a
    :class:`UsageError` naming the file and what is wrong with it."""
    if path.is_dir():
        raise UsageError(f"{path} is a folder; give a saved failure (CONFIG-SEED.json)")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a saved verify failure (not UTF-8 JSON text: "
                         f"byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path}: not a saved verify failure (not JSON: {exc})") from None
    keys = ("config", "seed", "program")
    if not isinstance(record, dict):
        raise UsageError(f"{path}: not a saved verify failure (a JSON object with "
                         f"{', '.join(keys)} expected)")
    missing = [k for k in keys if k not in record]
    if missing:
        raise UsageError(f"{path}: not a saved verify failure (missing key(s) "
                         f"{', '.join(map(repr, missing))})")
    try:
        cfg = HwConfig.from_dict(record["config"])
    except TensorfabError as exc:
        raise UsageError(f"{path}: not a saved verify failure (config: {exc})") from None
    seed, program = record["seed"], record["program"]
    if type(seed) is not int or seed < 0:
        raise UsageError(f"{path}: not a saved verify failure (seed = {seed!r}: an "
                         "integer of 0 or more expected)")
    if not isinstance(program, str) or not program:
        raise UsageError(f"{path}: not a saved verify failure (program = {program!r}: "
                         "the name of its .bin file expected)")
    return cfg, seed, path.parent / program, bool(record.get("inject"))


def replay_case(path: Path) -> CaseResult:
    """Run a saved failure (``CONFIG-SEED.json``) again; its program is checked to be
    the one its seed generates.

    Raises
    ------
    UsageError
        The file is missing or not a saved failure.
    """
    from tensorfab.sim.testing.random_program import random_program

    cfg, seed, bin_path, inject = _read_failure(Path(path))
    try:
        blob = bin_path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: its program {bin_path} cannot be read "
                         f"({exc.strerror})") from None
    program = Program.from_bytes(blob, str(bin_path))
    if random_program(cfg, seed).to_bytes() != blob:
        raise UsageError(f"{path}: the saved program is not what seed {seed} generates "
                         "today (the generator changed)")
    return check_case(cfg, seed, inject=inject, program=program)

"""Run programs on the core in Verilator under cocotb and collect what it did.

:func:`run_on_core` builds (once per config, cached) the core, writes the programs'
binaries and a job file, runs :mod:`tensorfab.sim.testing.tb_core` over all of them in one simulator
process, and returns one :class:`CoreRun` per program for the tests to compare with
the functional simulator.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorfab.hw.core import Core
from tensorfab.isa import ErrorCode, HwConfig, Program
from tensorfab.isa.csr import STATUS_DONE, STATUS_ERROR
from tensorfab.sim.testing.cocotb_runner import Build, build, run

TOP = "tensorfab_core"


@dataclass
class CoreRun:
    """What the core did with one program."""

    program: Program
    dram: np.ndarray
    csrs: dict[str, int]
    timed_out: bool

    @property
    def done(self) -> bool:
        return bool(self.csrs["STATUS"] & STATUS_DONE)

    @property
    def error(self) -> ErrorCode | None:
        if not self.csrs["STATUS"] & STATUS_ERROR:
            return None
        return ErrorCode(self.csrs["ERROR_CODE"])


def build_core(cfg: HwConfig) -> Build:
    """The core's Verilator build for ``cfg`` (cached per config and RTL hash)."""
    return build(Core(cfg), TOP, {"config": cfg.to_dict()})


def run_on_core(programs: Sequence[Program], workdir: Path, *, seed: int = 1,
                latency: tuple[int, int] = (1, 6), p_ready: float = 0.8,
                max_cycles: int = 200_000,
                images: Sequence[np.ndarray | None] | None = None) -> list[CoreRun]:
    """Run ``programs`` (all for one config) on the RTL; one result per program.

    ``images`` optionally replaces a program's DRAM image (e.g. with a patched,
    illegal instruction word).
    """
    cfg = programs[0].config
    assert all(p.config == cfg for p in programs), "one config per run"
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "out"
    out.mkdir(exist_ok=True)
    items = []
    for k, prog in enumerate(programs):
        path = workdir / f"{k}.bin"
        path.write_bytes(prog.to_bytes())
        item = {"binary": str(path), "max_cycles": max_cycles}
        if images is not None and images[k] is not None:
            np.save(workdir / f"{k}.image.npy", images[k])
            item["image"] = str(workdir / f"{k}.image.npy")
        items.append(item)
    job = workdir / "job.json"
    job.write_text(json.dumps({"out": str(out), "programs": items, "seed": seed,
                               "latency": list(latency), "p_ready": p_ready}))
    run(build_core(cfg), "tensorfab.sim.testing.tb_core", test_dir=workdir / "sim",
        extra_env={"TENSORFAB_CORE_JOB": str(job)})
    results = []
    for k, prog in enumerate(programs):
        info = json.loads((out / f"{k}.json").read_text())
        results.append(CoreRun(prog, np.load(out / f"{k}.dram.npy"), info["csrs"],
                               info["timed_out"]))
    return results

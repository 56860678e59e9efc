"""The SoC top (core + on-chip memory + UART host bridge) in Verilator under cocotb.

The directed ISA suite runs through the bridge: the host side of a board
(:class:`~tensorfab.hil.board.BoardDevice` over :class:`~tensorfab.hil.link.HostLink`),
its bytes carried by a bit-level UART model, writes each program's DRAM image, starts
it, polls STATUS and reads the image and the counters back; they must equal the
functional simulator's. This simulation is the virtual board of the
hardware-in-the-loop harness.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from support.isa_programs import directed_programs

from hw.test_core import assert_matches_fsim
from tensorfab.fpga_builds.boards import board_config
from tensorfab.hw.soc.top import SocTop
from tensorfab.isa import PRESETS, HwConfig, Program
from tensorfab.sim.testing.cocotb_runner import build, run
from tensorfab.sim.testing.core_harness import CoreRun

DIVISOR = 4
#: Programs of the CI subset: loads/stores with padding, GEMM with virtual threads,
#: ALU requantization (7 programs took 400 s on a loaded machine; 3 keep CI short).
FAST = ("padded_acc_all", "gemm_vt2", "requant")
#: The same for a config without the vector ALU (up5k): the STOREs requantize.
FAST_NO_ALU = ("padded_acc_all", "gemm_vt2", "store_requant")
#: Wall seconds a program may run in the simulation before the host gives up on it.
RUN_TIMEOUT = 600


def run_on_soc(programs: list[Program], workdir: Path, *,
               spram: bool = False) -> list[CoreRun | str]:
    """Run ``programs`` on the SoC under cocotb; per program, what the core did, or the
    error the host side raised (a :class:`~tensorfab.isa.TensorfabError`'s class and
    message)."""
    cfg = programs[0].config
    biggest = max(p.dram_image().size for p in programs)
    mem_bytes = 1 << (biggest - 1).bit_length()
    soc = SocTop(cfg, mem_bytes=mem_bytes, clk_hz=DIVISOR * 1_000_000, baud=1_000_000,
                 spram=spram)
    params = {"config": cfg.name, "mem_bytes": mem_bytes, "divisor": DIVISOR}
    built = build(soc, "tensorfab_soc", params | ({"spram": True} if spram else {}))
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "out"
    out.mkdir(exist_ok=True)
    items = []
    for k, prog in enumerate(programs):
        path = workdir / f"{k}.bin"
        path.write_bytes(prog.to_bytes())
        items.append({"binary": str(path)})
    job = workdir / "job.json"
    job.write_text(json.dumps({"out": str(out), "programs": items,
                               "run_timeout": RUN_TIMEOUT}))
    run(built, "hw.tb_soc", test_dir=workdir / "sim",
        extra_env={"TENSORFAB_SOC_JOB": str(job)})
    runs: list[CoreRun | str] = []
    for k, prog in enumerate(programs):
        info = json.loads((out / f"{k}.json").read_text())
        if "error" in info:
            runs.append(info["error"])
            continue
        runs.append(CoreRun(prog, np.load(out / f"{k}.dram.npy"), info["csrs"], False))
    return runs


def _check(names: list[str], tmp_path: Path, cfg: HwConfig = PRESETS["tiny"], *,
           spram: bool = False) -> None:
    progs = directed_programs(cfg)
    t0 = time.monotonic()
    runs = run_on_soc([progs[n] for n in names], tmp_path, spram=spram)
    print(f"{len(names)} programs through the UART bridge in {time.monotonic() - t0:.1f} s")
    failures = []
    for name, r in zip(names, runs, strict=True):
        if isinstance(r, str):
            failures.append(f"{name}: {r}")
            continue
        try:
            assert_matches_fsim(name, r)
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, "\n".join(failures)


def test_directed_subset_through_uart(tmp_path: Path) -> None:
    progs = directed_programs(PRESETS["tiny"])
    missing = [n for n in FAST if n not in progs]
    assert not missing, f"directed programs renamed: {missing}"
    _check(list(FAST), tmp_path)


@pytest.mark.slow
def test_directed_suite_through_uart(tmp_path: Path) -> None:
    _check(list(directed_programs(PRESETS["tiny"])), tmp_path)


def test_up5k_subset_through_uart_on_spram(tmp_path: Path) -> None:
    """The iCEBreaker's configuration (fpga_builds/configs/up5k.json, 1x2x2, no vector
    ALU) with its memory in the SPRAM model, as the board build has it."""
    _check(list(FAST_NO_ALU), tmp_path, board_config("up5k"), spram=True)


@pytest.mark.slow
def test_up5k_suite_through_uart_on_spram(tmp_path: Path) -> None:
    cfg = board_config("up5k")
    _check(list(directed_programs(cfg)), tmp_path, cfg, spram=True)

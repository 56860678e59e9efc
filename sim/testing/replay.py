"""Replay one random program on the core with waveforms and compare it with fsim.

Usage (from the repository root)::

    TENSORFAB_WAVES=1 .venv/bin/python -m tensorfab.sim.testing.replay PRESET SEED

``TENSORFAB_WAVES=1`` records a VCD; ``TENSORFAB_WAVES=fst`` an FST (needs the lz4
headers: ``apt-get install liblz4-dev``). The waves and the program's assembly are
written under ``build/replay/PRESET-SEED/``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from tensorfab.isa import PRESETS
from tensorfab.isa.disasm import disassemble
from tensorfab.sim.fsim import FunctionalSimulator

from .cocotb_runner import REPO
from .core_harness import CoreRun, run_on_core
from .random_program import describe, random_program


def replay_command(preset: str, seed: int) -> str:
    """The command that replays one random program with waves."""
    return (f"TENSORFAB_WAVES=fst .venv/bin/python -m tensorfab.sim.testing.replay "
            f"{preset} {seed}")


def compare(preset: str, seeds: range, runs: Sequence[CoreRun]) -> list[str]:
    """Compare core runs of random programs with the functional simulator; one
    message per program that differs (what differs, the program, how to replay it)."""
    failures = []
    for seed, run in zip(seeds, runs, strict=True):
        ref = FunctionalSimulator().run(run.program)
        c = ref.counters
        problems = []
        if run.timed_out:
            problems.append("no done/error within the cycle limit")
        elif run.error is not None:
            problems.append(f"core error {run.error.name} at instruction "
                            f"{run.csrs['ERROR_INDEX']}")
        else:
            mism = np.flatnonzero(run.dram != ref.dram)
            if mism.size:
                problems.append(f"{mism.size} DRAM bytes differ, first at {mism[0]:#x}")
            got = (run.csrs["LOAD_INSNS"], run.csrs["COMPUTE_INSNS"],
                   run.csrs["STORE_INSNS"])
            if got != (c.load_insns, c.compute_insns, c.store_insns):
                problems.append(f"instruction counters {got} != fsim "
                                f"{(c.load_insns, c.compute_insns, c.store_insns)}")
            if run.csrs["GEMM_BUSY"] != c.gemm_uops or run.csrs["ALU_BUSY"] != c.alu_uops:
                problems.append(f"GEMM/ALU micro-ops {run.csrs['GEMM_BUSY']}/"
                                f"{run.csrs['ALU_BUSY']} != fsim {c.gemm_uops}/{c.alu_uops}")
        if problems:
            failures.append(f"{preset} seed {seed}: {'; '.join(problems)}\n"
                            f"  {describe(run.program, listing=False)}\n"
                            f"  replay: {replay_command(preset, seed)}")
    return failures




def main(argv: list[str]) -> int:
    """Replay ``PRESET SEED`` (see the module docstring); 0 when it matches fsim."""
    if len(argv) != 2:
        print(__doc__)
        return 2
    preset, seed = argv[0], int(argv[1])
    out = REPO / "build" / "replay" / f"{preset}-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    program = random_program(PRESETS[preset], seed)
    (out / "program.s").write_text(disassemble(program))
    runs = run_on_core([program], out, seed=seed, max_cycles=100_000)
    failures = compare(preset, range(seed, seed + 1), runs)
    waves = sorted(out.glob("sim/*.vcd")) + sorted(out.glob("sim/*.fst"))
    print(f"program: {out / 'program.s'}")
    print("waves: " + (", ".join(map(str, waves)) or "none (set TENSORFAB_WAVES=1)"))
    print("\n".join(failures) if failures else "matches the functional simulator")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

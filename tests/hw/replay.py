"""Replay one random program on the core with waveforms and compare it with fsim.

Usage (from the repository root)::

    TENSORFAB_WAVES=1 .venv/bin/python tests/hw/replay.py PRESET SEED

``TENSORFAB_WAVES=1`` records a VCD; ``TENSORFAB_WAVES=fst`` an FST (needs the lz4
headers: ``apt-get install liblz4-dev``). The waves and the program's assembly are
written under ``build/replay/PRESET-SEED/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from hw.test_random_core import compare  # noqa: E402
from tensorfab.isa import PRESETS  # noqa: E402
from tensorfab.isa.disasm import disassemble  # noqa: E402
from tensorfab.sim.testing.core_harness import run_on_core  # noqa: E402
from tensorfab.sim.testing.random_program import random_program  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    preset, seed = argv[0], int(argv[1])
    out = ROOT / "build" / "replay" / f"{preset}-{seed}"
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

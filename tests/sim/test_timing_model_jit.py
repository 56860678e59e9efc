"""The timing model's compiled code (numba) against the same code interpreted
(``NUMBA_DISABLE_JIT=1``, in a fresh interpreter): identical cycles, per-engine
activity and start and end times on random programs of every preset; and the model
where numba finds no place for its cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tensorfab.isa import PRESETS
from tensorfab.sim.testing.random_program import random_program
from tensorfab.sim.timing import model, program_timing

#: Seeds per preset (each a program of ~35 instructions with UOP loads and ALU ops).
SEEDS = range(4)

_SCRIPT = """
import json, sys
from tensorfab.isa import PRESETS
from tensorfab.sim.testing.random_program import random_program
from tensorfab.sim.timing import model, program_timing
out = {"compiled": hasattr(model._simulate, "signatures")}
for preset in ("tiny", "small", "default"):
    for seed in map(int, sys.argv[1:]):
        p = random_program(PRESETS[preset], seed)
        t = program_timing(p)  # from the instruction objects
        out[f"{preset}/{seed}"] = [t.cycles, t.busy, t.stall, t.start, t.end]
        p.encoded()
        t = program_timing(p)  # from the encoded words
        out[f"{preset}/{seed}/words"] = [t.cycles, t.busy, t.stall, t.start, t.end]
print(json.dumps(out))
"""


def test_compiled_model_equals_the_interpreted_one() -> None:
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    run = subprocess.run([sys.executable, "-c", _SCRIPT, *map(str, SEEDS)], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    interpreted = json.loads(run.stdout.splitlines()[-1])
    assert interpreted["compiled"] is False
    assert hasattr(model._simulate, "signatures")  # a numba dispatcher here
    for preset in ("tiny", "small", "default"):
        for seed in SEEDS:
            p = random_program(PRESETS[preset], seed)
            p.encoded()
            t = program_timing(p)
            compiled = json.loads(json.dumps([t.cycles, t.busy, t.stall, t.start, t.end]))
            assert compiled == interpreted[f"{preset}/{seed}"], (preset, seed)
            assert compiled == interpreted[f"{preset}/{seed}/words"], (preset, seed)


def test_model_compiles_where_numba_has_no_cache_location() -> None:
    # only the IPython locator, which serves no file: numba finds no cache location
    env = dict(os.environ, NUMBA_CACHE_LOCATOR_CLASSES="IPythonCacheLocator")
    run = subprocess.run([sys.executable, "-c", _SCRIPT, "0"], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    uncached = json.loads(run.stdout.splitlines()[-1])
    assert uncached["compiled"] is True
    t = program_timing(random_program(PRESETS["small"], 0))
    assert uncached["small/0"][0] == t.cycles

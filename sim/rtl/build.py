"""Build the RTL executor's harness: ``Core(cfg)`` in Verilator plus the C++ memory
model, as one shared library per configuration, cached.

:func:`build_harness`

1. converts ``Core(cfg)`` to Verilog (:func:`tensorfab.hw.verilog.core_verilog`) and
   wraps it in :data:`TOP`, which registers the host's CSR bus, the reset and the
   memory port's inputs (:func:`harness_wrapper`: the core's next-state logic then
   depends on registers only, which Verilator evaluates once per cycle instead of
   before and after each edge),
   and clocks the units of :data:`~.clock_gates.CLOCK_GATES` by clocks of their own
   that the harness raises only when they have work (:mod:`.clock_gates`);
2. writes ``tf_config.h``: the field offsets of
   :func:`~tensorfab.hw.mem_port.MemCmdLayout`, the CSR offsets of
   :data:`~tensorfab.isa.CSRS`, the activity bits of :data:`~tensorfab.hw.core.ACTIVITY`
   and the Verilated port names, all computed here (:func:`config_header`);
3. verilates (``--cc -O3 --x-assign fast --x-initial fast --noassert -fno-table
   --output-split 0``, the simulation waivers of :mod:`.verilator_tools`) and writes
   ``tf_model.h``: one evaluation per clock cycle when no output the harness samples
   before an edge depends on an input (checked in the generated code), else two;
4. compiles the model's hot code, the harness (``sim/harness/*.cpp``) and Verilator's
   runtime with ``-O3 -march=native -fno-semantic-interposition -fPIC`` (the model's
   one-time code with ``-O0``), by default profile-guided: an instrumented library runs
   :func:`training_program` in a child process, then the hot code is compiled again
   with the profile;
5. links ``libtfharness.so``, which :mod:`tensorfab.sim.rtl` loads with :mod:`ctypes`.

Cache
-----
A build lives in ``<cache>/<key>/`` (:func:`~tensorfab.sim.verilator_tools.cached_build`,
the one cache of every Verilator build) where the key hashes what Verilator and the
compiler are given: the elaborated Verilog (with the harness wrapper and
``tf_config.h``), the harness sources and this module, the Verilator version, the C++
compiler, the host CPU (the code is built with ``-march=native``) and every flag; a
finished build holds ``build.ok``. A design whose Verilog did not change (an edit of a
docstring in ``hw/``) reuses its build; any change of the Verilog gets a new one.
Elaborating takes seconds to minutes, so :func:`elaborated` keeps each Verilog text in
``<cache>/_verilog/`` under a key of what it is elaborated from: the parameters, the
Amaranth version and every Python source of :func:`rtl_sources` (the packages
:mod:`tensorfab.hw` and :mod:`tensorfab.isa`, subpackages included). The cache folder
is ``$TENSORFAB_VERILATOR_CACHE`` if set, else ``build/verilator/`` of the source
checkout the package runs from, else
``~/.cache/tensorfab/verilator``. A file lock per key makes concurrent processes
(pytest-xdist workers) build a key once; Verilator's runtime objects are compiled
once per flags into ``<cache>/_runtime-<hash>/``. ``TENSORFAB_BUILD_JOBS`` caps
parallel compiler jobs (default: the CPU count). :func:`build_steps` lets a caller
follow the steps of a build (the command line shows them on stderr). A failed build
raises :class:`HarnessBuildError` with the failing command's error lines and output tail;
the whole log stays in ``<cache>/<key>/build.log``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tensorfab.isa import CSRS, HwConfig, TensorfabError
from tensorfab.isa.csr import STATUS_BUSY, STATUS_DONE, STATUS_ERROR
from tensorfab.isa.errors import UsageError

from ..verilator_tools import (
    VERILATOR_WAIVERS,
    cached_build,
    design_key_text,
    file_lock,
    relevant_log,
    verilator_cache,
    verilator_env,
    verilator_root,
    verilator_version,
)
from .clock_gates import (
    ClockGate,
    ClockGateError,
    config_gates,
    gate_verilog,
    wrapper_ports,
)

__all__ = [
    "DEFAULT_THREADS",
    "HARNESS_ABI",
    "PARAMS_FILE",
    "SIM_TOP",
    "TOP",
    "HarnessBuild",
    "HarnessBuildError",
    "TopClocking",
    "VerilatedLibrary",
    "build_harness",
    "build_steps",
    "build_verilated",
    "cache_root",
    "config_header",
    "core_source",
    "elaborated",
    "harness_key",
    "registered_wrapper",
    "rtl_sources",
]

#: Module name of the core in the generated Verilog.
CORE = "tensorfab_core"
#: Top-level module of the harness build: the core with its host inputs registered
#: (:func:`harness_wrapper`).
TOP = "tf_harness_top"
#: Core inputs the wrapper registers: the host's CSR bus and the reset (which reach
#: the core a cycle late), and the memory port's inputs (which the harness drives a
#: cycle ahead, so the core sees each on the cycle it always did).
REGISTERED_INPUTS: tuple[str, ...] = ("rst", "csr__addr", "csr__w_en", "csr__w_data",
                                      "mem__cmd__ready", "mem__wdata__ready",
                                      "mem__rdata__valid", "mem__rdata__payload")
#: Prefix of the Verilated classes.
PREFIX = "Vcore"
#: Version of the harness's C API (``tf_abi``); bump on any change of it.
HARNESS_ABI = 3
#: Verilator threads of the default build (``--threads``); 1 measured faster
#: (docs/architecture.md, "RTL executor").
DEFAULT_THREADS = 1
#: Name of the shared library in a build folder.
LIBRARY = "libtfharness.so"

HARNESS_DIR = Path(__file__).resolve().parents[1] / "harness"
#: Outputs the harness samples before each clock edge: with one evaluation per
#: cycle they must depend on registers only (see :func:`_input_dependent_outputs`).
SAMPLED_OUTPUTS: tuple[str, ...] = ("mem__cmd__valid", "mem__cmd__payload",
                                    "mem__wdata__valid", "mem__wdata__payload",
                                    "mem__rdata__ready", "activity")
#: Member of the Verilated root holding the clock's value at the last evaluation.
CLK_PREV = "__Vtrigprevexpr___TOP__clk__0"
#: Harness sources copied into every build (and hashed into its key).
HARNESS_SOURCES = ("harness.cpp", "clocking.h", "mem_model.h", "port_bits.h")
#: The header both harnesses clock their model with (copied into every build).
CLOCKING_HEADER = "clocking.h"
#: Packages whose Python sources the core's RTL is elaborated from (hashed into every
#: build's key): the hardware and what it imports (the layering lets ``hw`` import
#: ``isa`` only, tests/architecture).
RTL_PACKAGES: tuple[str, ...] = ("tensorfab.hw", "tensorfab.isa")

#: Verilator arguments of every harness build, before the waivers. ``-fno-table``:
#: Verilator's lookup tables for combinational logic cost more to index on every
#: cycle than the logic they replace (8 976 -> 8 367 instructions per cycle on the
#: default preset's 512³ GEMM, docs/architecture.md). ``--output-split 0``: the
#: model's hot code in one C++ file, so that the compiler can inline the evaluation's
#: functions into each other (with ``-fno-semantic-interposition`` below).
VERILATOR_ARGS: tuple[str, ...] = ("-O3", "--x-assign", "fast", "--x-initial", "fast",
                                   "--noassert", "-fno-table", "--output-split", "0")
#: C++ flags of the model's hot code, the harness and Verilator's runtime.
#: ``-fno-semantic-interposition``: ``-fPIC`` code may otherwise not inline a function
#: with external linkage (another library could replace it), and every function of
#: the Verilated model has one.
CXX_FAST: tuple[str, ...] = ("-O3", "-march=native", "-fno-semantic-interposition")
#: C++ flags of the model's code that runs once (construction, initial settle).
CXX_SLOW: tuple[str, ...] = ("-O0",)
CXX_COMMON: tuple[str, ...] = ("-std=gnu++17", "-fPIC", "-w")
#: Extra flags of the instrumented and of the final compile with profile guidance.
PGO_GENERATE: tuple[str, ...] = ("-fprofile-generate", "-fprofile-update=single")
PGO_USE: tuple[str, ...] = ("-fprofile-use", "-fprofile-correction")


class HarnessBuildError(TensorfabError):
    """Verilator or the C++ compiler failed; the message holds the relevant log lines."""


@dataclass(frozen=True)
class HarnessBuild:
    """A built harness library.

    Attributes
    ----------
    config : HwConfig
        Configuration of the core inside.
    key : str
        Cache key (folder name).
    directory : Path
        Build folder (``core.v``, ``tf_config.h``, ``obj/``, ``build.log``).
    library : Path
        The shared library.
    threads : int
        Verilator ``--threads`` of the model.
    build_seconds : float
        Time the build took; 0 when it came from the cache.
    clocking : str
        How the harness clocks the model (one or two evaluations per cycle, and why).
    """

    config: HwConfig
    key: str
    directory: Path
    library: Path
    threads: int
    build_seconds: float
    clocking: str


def cache_root() -> Path:
    """Folder holding the builds: :func:`~tensorfab.sim.verilator_tools.verilator_cache`,
    shared with the virtual board and the cocotb testbenches."""
    return verilator_cache()


# --------------------------------------------------------------------- the header
def _port(name: str) -> str:
    """C++ member name Verilator gives the port ``name`` (``__`` is escaped)."""
    return name.replace("__", "___05F")


#: Harness macro -> Verilog port of ``Core``.
PORTS: dict[str, str] = {
    "TF_PORT_CSR_ADDR": "csr__addr",
    "TF_PORT_CSR_W_EN": "csr__w_en",
    "TF_PORT_CSR_W_DATA": "csr__w_data",
    "TF_PORT_CSR_R_DATA": "csr__r_data",
    "TF_PORT_CMD_VALID": "mem__cmd__valid",
    "TF_PORT_CMD_READY": "mem__cmd__ready",
    "TF_PORT_CMD_PAYLOAD": "mem__cmd__payload",
    "TF_PORT_WDATA_VALID": "mem__wdata__valid",
    "TF_PORT_WDATA_READY": "mem__wdata__ready",
    "TF_PORT_WDATA_PAYLOAD": "mem__wdata__payload",
    "TF_PORT_RDATA_VALID": "mem__rdata__valid",
    "TF_PORT_RDATA_READY": "mem__rdata__ready",
    "TF_PORT_RDATA_PAYLOAD": "mem__rdata__payload",
}


def config_header(cfg: HwConfig) -> str:
    """``tf_config.h`` for ``cfg``: everything the C++ harness knows about the core.

    Parameters
    ----------
    cfg : HwConfig
        Configuration.

    Returns
    -------
    str
        C++ header text.
    """
    from tensorfab.hw.core import ACTIVITY
    from tensorfab.hw.mem_port import MemCmdLayout, MemDataLayout

    cmd = MemCmdLayout(cfg)
    if cmd.size > 64:
        raise HarnessBuildError(f"memory command payload of {cmd.size} bits: the harness "
                                "reads at most 64")
    data_bits = MemDataLayout(cfg)["data"].shape.width
    lines = [
        "// Generated by tensorfab.sim.rtl.build for one HwConfig; do not edit.",
        "#ifndef TENSORFAB_TF_CONFIG_H_",
        "#define TENSORFAB_TF_CONFIG_H_",
        f"#define TF_ABI {HARNESS_ABI}",
        f'#define TF_TOP_HEADER "{PREFIX}.h"',
        f"#define TF_TOP_CLASS {PREFIX}",
        f"#define TF_CONFIG_JSON {json.dumps(json.dumps(cfg.to_dict(), sort_keys=True))}",
        f"#define TF_BUS_BYTES {data_bits // 8}",
        "// memory command payload fields (hw.mem_port.MemCmdLayout)",
    ]
    for name in ("addr", "write", "len"):
        lines.append(f"#define TF_CMD_{name.upper()}_OFFSET {cmd[name].offset}")
        lines.append(f"#define TF_CMD_{name.upper()}_WIDTH {cmd[name].shape.width}")
    lines.append("// CSR byte offsets (tensorfab.isa.CSRS)")
    lines += [f"#define TF_CSR_{c.name} {c.offset:#x}" for c in CSRS]
    lines += [f"#define TF_STATUS_BUSY {STATUS_BUSY:#x}", f"#define TF_STATUS_DONE "
              f"{STATUS_DONE:#x}", f"#define TF_STATUS_ERROR {STATUS_ERROR:#x}"]
    lines.append("// activity bits (hw.core.ACTIVITY)")
    lines += [f"#define TF_ACT_{name.upper()} {k}" for k, name in enumerate(ACTIVITY)]
    lines.append(f"#define TF_ACTIVITY_BITS {len(ACTIVITY)}")
    lines.append("// Verilated port members")
    lines += [f"#define {macro} {_port(port)}" for macro, port in PORTS.items()]
    lines += ["#endif", ""]
    return "\n".join(lines)


def harness_wrapper(core_verilog: str, gates: tuple[ClockGate, ...] = ()) -> str:
    """Verilog of :data:`TOP` (:func:`registered_wrapper` of the core): the core with
    every input of :data:`REGISTERED_INPUTS` registered once, every output passed
    through, and the clock and enable ports of ``gates``
    (:func:`~.clock_gates.wrapper_ports`).

    Amaranth computes every register's next value combinationally, including the
    synchronous reset and the start pulse that a CSR write raises; driven straight
    from top-level inputs, that whole next-state logic would be input-dependent and
    Verilator would evaluate it in its input-combinational region on every
    evaluation, and again after the edge from the new register values. Registered,
    it depends on state only and is evaluated once per cycle. A CSR write or a reset
    then reaches the core one cycle later. The memory port's inputs (ready, read
    valid and data) are registered too, and the harness drives them a cycle ahead:
    the memory model's outputs for the next cycle depend only on the handshakes of
    this one, which the harness samples from registers before the edge
    (``sim/harness/harness.cpp``), so the core sees the same memory on every cycle
    and its timing is exactly the same.

    Parameters
    ----------
    core_verilog : str
        The core's Verilog (:func:`tensorfab.hw.verilog.core_verilog`).
    gates : tuple of ClockGate
        Units on clocks of their own (:func:`~.clock_gates.gate_verilog`).

    Returns
    -------
    str
    """
    return registered_wrapper(core_verilog, CORE, TOP, "core", REGISTERED_INPUTS, CORE, gates)


def registered_wrapper(verilog: str, module: str, top: str, instance: str,
                       registered: Sequence[str], core: str,
                       gates: tuple[ClockGate, ...] = ()) -> str:
    """Verilog of a module ``top`` that instantiates ``module`` of ``verilog`` as
    ``instance`` with the inputs ``registered`` registered once (on ``clk``) and every
    other port passed through, plus the clock and enable ports of ``gates`` of the
    core ``core`` inside (:func:`~.clock_gates.wrapper_ports`).

    Parameters
    ----------
    verilog : str
        The design's Verilog.
    module : str
        The module wrapped (its ports are plain names: a top module).
    top : str
        The wrapper's module name.
    instance : str
        ``module``'s instance name in the wrapper.
    registered : sequence of str
        Inputs of ``module`` that reach it a cycle late.
    core : str
        The core's module in ``verilog`` (``module`` itself, or inside it).
    gates : tuple of ClockGate
        Units of the core on clocks of their own, instance paths from ``top``.

    Returns
    -------
    str

    Raises
    ------
    HarnessBuildError
        ``module`` lacks ``clk`` or an input of ``registered``, or a gate names what
        the Verilog lacks.
    """
    body = verilog[verilog.index(f"module {module}("):]
    body = body[: body.index("endmodule")]
    ports = re.findall(r"^\s*(input|output)\s+(\[\d+:0\]\s+)?([\w$]+)\s*;", body, re.M)
    names = [p[2] for p in ports]
    missing = [n for n in ("clk", *registered) if n not in names]
    if missing:
        raise HarnessBuildError(f"module {module} has no port(s) {', '.join(missing)}")
    try:
        gate_names, gate_lines = wrapper_ports(verilog, core, gates)
    except ClockGateError as exc:
        raise HarnessBuildError(str(exc)) from None
    what = ", ".join(registered) or "no input"
    lines = [f"// Generated by tensorfab.sim.rtl.build: {module} with {what} registered.",
             f"module {top}({', '.join(names + gate_names)});"]
    regs, conns = [], []
    for direction, width, name in ports:
        width = (width or "").strip()
        lines.append(f"  {direction} {width + ' ' if width else ''}{name};")
        if name in registered:
            regs.append(f"  reg {width + ' ' if width else ''}{name}_q = 0;")
            conns.append(f"    .{name}({name}_q)")
        else:
            conns.append(f"    .{name}({name})")
    lines += gate_lines + regs
    lines.append("  always @(posedge clk) begin")
    lines += [f"    {n}_q <= {n};" for n in registered]
    lines.append("  end")
    lines.append(f"  {module} {instance} (")
    lines.append(",\n".join(conns))
    lines += ["  );", "endmodule", ""]
    return "\n".join(lines)


def _gates(clock_gates: bool, cfg: HwConfig) -> tuple[ClockGate, ...]:
    return config_gates(cfg) if clock_gates else ()


def _gated(verilog: str, gates: tuple[ClockGate, ...], core: str = CORE,
           top: str = TOP) -> str:
    """The design's Verilog with ``gates`` of its core ``core`` clocked by the inputs
    of the wrapper ``top`` (:func:`~.clock_gates.gate_verilog`)."""
    if not gates:
        return verilog
    try:
        return gate_verilog(verilog, core, top, gates)
    except ClockGateError as exc:
        raise HarnessBuildError(str(exc)) from None


# ------------------------------------------------------------------------ the key
def _hash_design(h: hashlib._Hash, verilog: str) -> None:
    """Add the Verilog as elaborated and the code that gates and wraps it for Verilator
    (``clock_gates.py``; ``build.py`` is hashed with the build steps): the gated text
    and its wrapper are functions of these and of the gates (in the key's JSON), so a
    key needs no gating, which parses the whole Verilog.

    The Verilog is hashed as :func:`~tensorfab.sim.verilator_tools.design_key_text`
    gives it (without source locations)."""
    h.update(hashlib.sha256(design_key_text(verilog).encode()).digest())
    _hash_tree(h, Path(__file__).parent, "clock_gates.py")


def _hash_tree(h: hashlib._Hash, folder: Path, pattern: str) -> None:
    for path in sorted(folder.glob(pattern)):
        h.update(path.name.encode())
        h.update(path.read_bytes())


def rtl_sources() -> list[Path]:
    """Every Python source the core's RTL is elaborated from: the modules of
    :data:`RTL_PACKAGES` and of their subpackages (``hw/soc/``, ...), in a fixed order.

    The instruction layouts the decoders use, the buffer shapes and the token-queue
    topology come from ``isa/``, so an edit there changes the Verilog as surely as one
    in ``hw/``; a key over ``hw/*.py`` alone once named a stale build.
    """
    out: list[Path] = []
    for package in RTL_PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.origin is not None, package
        root = Path(spec.origin).parent
        out += sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    return out


def _hash_sources(h: hashlib._Hash) -> None:
    """Hash :func:`rtl_sources` by path within their package and content."""
    for path in rtl_sources():
        package = next(parent for parent in path.parents
                       if not (parent / "__init__.py").exists())
        h.update(path.relative_to(package).as_posix().encode() + b"\0")
        h.update(path.read_bytes())


def _slug(name: str, length: int) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:length]


def elaborated(name: str, params: dict[str, object], design: Callable[[], str]) -> str:
    """The Verilog ``design()`` makes, elaborated once per sources and parameters.

    The text is kept in ``<cache>/_verilog/`` under a key of ``params``, the Amaranth
    version and every source of :func:`rtl_sources`; ``design`` runs only when that
    key is new. The builds themselves are keyed on the text (:func:`harness_key`).

    Parameters
    ----------
    name : str
        Readable prefix of the file name.
    params : dict
        JSON-ready parameters the design is made from.
    design : callable
        Makes the Verilog.

    Returns
    -------
    str
    """
    import amaranth

    h = hashlib.sha256()
    h.update(json.dumps({"params": params, "amaranth": amaranth.__version__},
                        sort_keys=True, default=str).encode())
    _hash_sources(h)
    path = verilator_cache() / "_verilog" / f"{_slug(name, 40)}-{h.hexdigest()[:16]}.v"
    if not path.exists():
        text = design()
        if _sources_changed_since_start():
            return text  # this process may have elaborated the sources before the edit
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(text)
        partial.replace(path)
        return text
    return path.read_text()


def _sources_changed_since_start() -> bool:
    """A source of :func:`rtl_sources` was written after this process started (its
    modules, imported then, may not be what the files hold now)."""
    started = Path(f"/proc/{os.getpid()}")
    if not started.exists():
        return False
    return any(p.stat().st_mtime > started.stat().st_ctime for p in rtl_sources())


def core_source(cfg: HwConfig) -> str:
    """The core's Verilog for ``cfg`` (:func:`elaborated`)."""
    from tensorfab.hw.verilog import core_verilog

    def design() -> str:
        _step("generating the core's Verilog (Amaranth)")
        return core_verilog(cfg)

    return elaborated(f"core-{cfg.name}", {"config": cfg.to_dict()}, design)


def _cxx() -> str:
    return os.environ.get("CXX", "c++")


@cache
def _host_cpu() -> str:
    """The host CPU (model and a hash of its feature flags): ``-march=native`` code is
    only valid on such a CPU, so it is part of every key."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    digest = hashlib.sha256((flags.group(1) if flags else "").encode()).hexdigest()[:12]
    return f"{platform.machine()} {model.group(1) if model else ''} {digest}"


@cache
def _cxx_version() -> str:
    proc = subprocess.run([_cxx(), "--version"], capture_output=True, text=True, check=False)
    return proc.stdout.splitlines()[0] if proc.stdout else proc.stderr.strip()


def harness_key(cfg: HwConfig, verilog: str, threads: int = DEFAULT_THREADS,
                verilator_args: Sequence[str] = (), cxxflags: Sequence[str] = (),
                two_evals: bool = False, pgo: bool = True, clock_gates: bool = True) -> str:
    """Cache key of a harness build (readable prefix and a hash of every input): the
    core's Verilog as elaborated, the wrapper and ``tf_config.h`` made from it, the
    harness sources, the build steps, the tools and the flags.

    Parameters
    ----------
    cfg : HwConfig
        Configuration.
    verilog : str
        The core's Verilog (:func:`core_source`).
    threads : int
        Verilator threads.
    verilator_args, cxxflags : sequence of str
        Extra Verilator arguments and C++ flags.
    two_evals : bool
        Forced two evaluations per cycle.
    pgo : bool
        Profile-guided build.
    clock_gates : bool
        The units of :data:`~.clock_gates.CLOCK_GATES` on gated clocks.

    Returns
    -------
    str
    """
    gates = _gates(clock_gates, cfg)
    h = hashlib.sha256()
    h.update(json.dumps({"threads": threads, "abi": HARNESS_ABI, "two_evals": two_evals,
                         "verilator_args": [*VERILATOR_ARGS, *VERILATOR_WAIVERS,
                                            *verilator_args],
                         "cxx": [*CXX_COMMON, *CXX_FAST, *CXX_SLOW, *cxxflags],
                         "verilator": verilator_version(), "compiler": _cxx_version(),
                         "cpu": _host_cpu(), "pgo": pgo,
                         "clock_gates": [repr(g) for g in gates]}, sort_keys=True).encode())
    _hash_design(h, verilog)
    h.update(hashlib.sha256(config_header(cfg).encode()).digest())
    for name in HARNESS_SOURCES:
        _hash_tree(h, HARNESS_DIR, name)
    _hash_tree(h, Path(__file__).parent, "build.py")  # the build steps
    _hash_tree(h, Path(__file__).parent, "train.py")  # the profile's training run
    slug = _slug(cfg.name, 24)
    tags = (f"t{threads}{'-2e' if two_evals else ''}{'' if pgo else '-nopgo'}"
            f"{'' if clock_gates else '-nogates'}")
    return f"core-{slug}-{tags}-{h.hexdigest()[:16]}"


# ---------------------------------------------------------------------- the build
_LISTENERS: list[Callable[[str], None]] = []


@contextmanager
def build_steps(listener: Callable[[str], None]) -> Iterator[None]:
    """Call ``listener(step)`` with a sentence for each step of every harness build
    started in the block (nothing when the cache has the build).

    Examples
    --------
    >>> with build_steps(print):  # doctest: +SKIP
    ...     build_harness(PRESETS["tiny"])
    """
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


def _step(text: str) -> None:
    for listener in list(_LISTENERS):
        listener(text)


class _Log:
    """The build log: every command with its output, appended as it runs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")

    def run(self, cmd: Sequence[str], cwd: Path, what: str) -> None:
        proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False)
        with self.path.open("a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        if proc.returncode:
            output = f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
            raise HarnessBuildError(
                f"{what} failed (exit {proc.returncode}); full log in {self.path}\n"
                + relevant_log(output))


def _make_vars(mk: Path) -> dict[str, list[str]]:
    """``VAR += a b`` assignments of a Verilator ``*_classes.mk``."""
    out: dict[str, list[str]] = {}
    text = mk.read_text().replace("\\\n", " ")
    for m in re.finditer(r"^(\w+)[ \t]*\+?=[ \t]*([^#\n]*)$", text, re.M):
        out.setdefault(m.group(1), []).extend(m.group(2).split())
    return out


def _cppflags(defines: dict[str, list[str]]) -> list[str]:
    """Preprocessor flags of Verilator's makefiles (include path, ``VM_*`` switches)."""
    root = verilator_root()
    flags = [f"-I{root / 'include'}", f"-I{root / 'include' / 'vltstd'}", "-DVERILATOR=1"]
    for var in ("VM_COVERAGE", "VM_SC", "VM_TIMING", "VM_TRACE", "VM_TRACE_FST",
                "VM_TRACE_VCD", "VM_TRACE_SAIF"):
        flags.append(f"-D{var}={(defines.get(var) or ['0'])[0]}")
    return flags


def _jobs() -> int:
    return max(1, int(os.environ.get("TENSORFAB_BUILD_JOBS", os.cpu_count() or 1)))


def _compile_all(log: _Log, jobs: list[tuple[list[str], Path, str]]) -> None:
    """Run compile jobs in parallel; the first failure cancels the jobs not started."""
    with ThreadPoolExecutor(max_workers=_jobs()) as pool:
        futures = [pool.submit(log.run, cmd, cwd, what) for cmd, cwd, what in jobs]
        for f in as_completed(futures):
            if f.exception() is not None:
                for other in futures:
                    other.cancel()
                raise f.exception()  # type: ignore[misc]


def _functions(text: str) -> Iterator[tuple[str, str]]:
    """``(name, body)`` of the top-level C++ function definitions in ``text``."""
    starts = [m for m in re.finditer(r"^(?:VL_ATTR_COLD )?[\w:<>*& ]+?\b(\w+)\([^;{]*\)\s*\{",
                                     text, re.M)]
    for k, m in enumerate(starts):
        end = starts[k + 1].start() if k + 1 < len(starts) else len(text)
        yield m.group(1), text[m.end():end]


def _input_dependent_outputs(obj: Path, outputs: Sequence[str] = SAMPLED_OUTPUTS,
                             prefix: str = PREFIX) -> list[str]:
    """Those of ``outputs`` that the Verilated model assigns in its input-combinational
    (``ico``) region, i.e. that depend combinationally on an input."""
    found: set[str] = set()
    pats = {p: re.compile(rf"\b{re.escape(_port(p))}\s*(\[[^\]]*\]\s*)?=(?!=)")
            for p in outputs}
    for cpp in sorted(obj.glob(f"{prefix}___024root*.cpp")):
        for name, body in _functions(cpp.read_text()):
            if "ico" not in name.removeprefix(f"{prefix}___024root"):
                continue
            found |= {p for p, pat in pats.items() if pat.search(body)}
    return sorted(found)


def _model_header(obj: Path, two_evals: bool, gates: tuple[ClockGate, ...] = (),
                  prefix: str = PREFIX, sampled: Sequence[str] = SAMPLED_OUTPUTS
                  ) -> tuple[str, str]:
    """``tf_model.h`` (how the harness clocks the model ``prefix``: one or two
    evaluations per cycle, the gated clocks; read by ``sim/harness/clocking.h``) and a
    note for the log. ``sampled``: the outputs the harness reads before an edge."""
    root_header = obj / f"{prefix}___024root.h"
    root_text = root_header.read_text() if root_header.exists() else ""
    enables = [g.enable_port for g in gates]
    mealy = _input_dependent_outputs(obj, (*sampled, *enables), prefix)
    bad = sorted(set(mealy) & set(enables))
    if bad:
        raise HarnessBuildError(f"clock gate enable(s) {', '.join(bad)} depend on an input "
                                "of the core: the harness needs them before the edge")
    prev = {g.name: f"__Vtrigprevexpr___TOP__{g.clock}__0" for g in gates}
    missing = [g.clock for g in gates if prev[g.name] not in root_text]
    if missing:
        raise HarnessBuildError(f"the Verilated model has no edge detector for "
                                f"{', '.join(missing)} (see {root_header})")
    if two_evals:
        one, why = False, "two evaluations per cycle (requested)"
    elif mealy:
        one, why = False, ("two evaluations per cycle: outputs depending on inputs: "
                           + ", ".join(mealy))
    elif CLK_PREV not in root_text:
        one, why = False, f"two evaluations per cycle: no {CLK_PREV} in the model"
    else:
        one, why = True, "one evaluation per cycle"
    lines = ["// Generated by tensorfab.sim.rtl.build after Verilator ran; do not edit.",
             f"// {why}", f"#define TF_ONE_EVAL {int(one)}"]
    if one:
        lines += [f'#define TF_ROOT_HEADER "{root_header.name}"', f"#define TF_CLK_PREV {CLK_PREV}"]
        # the root's evaluation, which the harness calls without Vcore::eval_step's
        # per-call bookkeeping (see clocking.h)
        root_eval = f"{prefix}___024root___eval"
        if any(f"void {root_eval}({prefix}___024root* vlSelf)" in cpp.read_text()
               for cpp in obj.glob(f"{prefix}___024root*.cpp")):
            lines += [f"#define TF_ROOT_CLASS {prefix}___024root",
                      f"#define TF_ROOT_EVAL {root_eval}"]
    # X(clock input, enable output, the clock's edge detector)
    lines.append("#define TF_CLOCK_GATES(X) " + " ".join(
        f"X({_port(g.clock)}, {_port(g.enable_port)}, {prev[g.name]})" for g in gates))
    if gates:
        why += "; gated clocks: " + ", ".join(g.name for g in gates)
    return "\n".join(lines) + "\n", why


def _runtime_objects(cppflags: list[str], cxxflags: Sequence[str], log: _Log) -> list[Path]:
    """Verilator's runtime (``verilated.o``, ``verilated_threads.o``), compiled once per
    flags into the cache."""
    root = verilator_root()
    sources = ("verilated", "verilated_threads")
    flags = [*CXX_COMMON, *CXX_FAST, *cxxflags, *cppflags]
    digest = hashlib.sha256(json.dumps([flags, verilator_version(), _cxx_version(),
                                        _host_cpu()]).encode()).hexdigest()[:16]
    folder = cache_root() / f"_runtime-{digest}"
    objs = [folder / f"{s}.o" for s in sources]
    if (folder / "ok").exists():
        return objs
    with file_lock(cache_root() / f"_runtime-{digest}.lock"):
        if (folder / "ok").exists():
            return objs
        folder.mkdir(parents=True, exist_ok=True)
        _compile_all(log, [([_cxx(), *flags, "-c", str(root / "include" / f"{s}.cpp"), "-o",
                             str(folder / f"{s}.o")], folder, f"compiling Verilator's {s}.cpp")
                           for s in sources])
        (folder / "ok").write_text("")
    return objs


def _build(cfg: HwConfig, text: str, directory: Path, threads: int,
           verilator_args: Sequence[str], cxxflags: Sequence[str], two_evals: bool,
           pgo: bool, gates: tuple[ClockGate, ...]) -> str:
    from tensorfab.hw.verilog import CORE_TOP

    verilator_env()
    # Verilator's scripts call `python3`; make it this interpreter's
    bindir = str(Path(sys.executable).parent)
    os.environ["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])
    log = _Log(directory / "build.log")
    assert CORE_TOP == CORE
    (directory / "core.v").write_text(_gated(text, gates))
    (directory / "top.v").write_text(harness_wrapper(text, gates))
    (directory / "tf_config.h").write_text(config_header(cfg))
    for name in HARNESS_SOURCES:
        shutil.copy2(HARNESS_DIR / name, directory / name)
    obj = directory / "obj"
    vargs = [str(verilator_root() / "bin" / "verilator"), "--cc", "top.v", "core.v", "--top-module",
             TOP, "--prefix", PREFIX, "--Mdir", "obj", *VERILATOR_ARGS]
    if threads > 1:
        vargs += ["--threads", str(threads)]
    vargs += [*VERILATOR_WAIVERS, *verilator_args]
    _step("verilating the core")
    log.run(vargs, directory, "Verilator")
    header = (obj / f"{PREFIX}.h").read_text()
    missing = [p for p in PORTS.values() if _port(p) not in header]
    if missing:
        raise HarnessBuildError(f"the Verilated core has no port(s) {', '.join(missing)} "
                                f"(see {obj / PREFIX}.h)")
    model_header, scheme = _model_header(obj, two_evals, gates)
    (directory / "tf_model.h").write_text(model_header)
    mk = _make_vars(obj / f"{PREFIX}_classes.mk")
    cpp = [f"-I{obj}", *_cppflags(mk)]
    fast = [*mk.get("VM_CLASSES_FAST", []), *mk.get("VM_SUPPORT_FAST", [])]
    slow = [*mk.get("VM_CLASSES_SLOW", []), *mk.get("VM_SUPPORT_SLOW", [])]

    def hot(extra: Sequence[str]) -> list[tuple[list[str], Path, str]]:
        # the harness first: its errors (ours) show up before the model's long compile
        jobs = [([_cxx(), *CXX_COMMON, *CXX_FAST, *cxxflags, *extra, *cpp, f"-I{directory}",
                  "-c", "harness.cpp", "-o", "harness.o"], directory, "compiling the harness")]
        jobs += [([_cxx(), *CXX_COMMON, *CXX_FAST, *cxxflags, *extra, *cpp, "-c", f"{n}.cpp",
                   "-o", f"{n}.o"], obj, f"compiling the Verilated model ({n}.cpp)")
                 for n in fast]
        return jobs

    cold = [([_cxx(), *CXX_COMMON, *CXX_SLOW, *cxxflags, *cpp, "-c", f"{n}.cpp", "-o",
              f"{n}.o"], obj, f"compiling the Verilated model ({n}.cpp)") for n in slow]
    _step(f"compiling the Verilated model ({len(fast) + len(slow) + 1} files)")
    runtime = _runtime_objects(_cppflags(mk), cxxflags, log)
    objects = [directory / "harness.o", *[obj / f"{n}.o" for n in fast + slow], *runtime]

    if pgo:
        (directory / "config.json").write_text(cfg.to_json())
    return scheme + _compile_and_link(log, directory, hot, cold, objects,
                                      "tensorfab.sim.rtl.train" if pgo else "")


def _compile_and_link(log: _Log, directory: Path,
                      hot: Callable[[Sequence[str]], list[tuple[list[str], Path, str]]],
                      cold: list[tuple[list[str], Path, str]], objects: list[Path],
                      train: str) -> str:
    """Compile the hot code (``hot(extra flags)``) and the cold, link :data:`LIBRARY`;
    with a ``train`` module, profile-guided: an instrumented library runs
    ``python -m TRAIN --train DIRECTORY`` in a child process, then the hot code is
    compiled again with the profile. Returns a note for the build's scheme."""
    def link(extra: Sequence[str]) -> None:
        log.run([_cxx(), "-shared", "-o", LIBRARY, *map(str, objects), "-pthread",
                 "-Wl,-Bsymbolic", *extra], directory, "linking the harness")

    if not train:
        _compile_all(log, hot(()) + cold)
        link(())
        return ""
    _compile_all(log, hot(PGO_GENERATE) + cold)
    link(["-fprofile-generate"])
    _step("profile-guided build: a training run of the instrumented model")
    proc = subprocess.run([sys.executable, "-m", train, "--train", str(directory)],
                          capture_output=True, text=True, check=False, cwd=directory)
    with log.path.open("a") as fh:
        fh.write(f"$ (training run)\n{proc.stdout}{proc.stderr}")
    if proc.returncode:
        note = "; profile-guided optimisation skipped (the training run failed, see build.log)"
        _compile_all(log, hot(()))
    else:
        note = f"; profile-guided ({proc.stdout.strip().splitlines()[-1]})"
        _step("compiling the model again with the profile")
        _compile_all(log, hot(PGO_USE))
    link(())
    return note


_BUILT: dict[tuple[object, ...], HarnessBuild] = {}


def build_harness(cfg: HwConfig, *, threads: int = DEFAULT_THREADS,
                  verilator_args: Sequence[str] = (), cxxflags: Sequence[str] = (),
                  two_evals: bool = False, pgo: bool = True,
                  clock_gates: bool = True) -> HarnessBuild:
    """The harness library for ``cfg``, built unless the cache has it.

    Parameters
    ----------
    cfg : HwConfig
        Configuration of the core.
    threads : int
        Verilator ``--threads`` (1: single-threaded model).
    verilator_args : sequence of str
        More Verilator arguments (part of the key).
    cxxflags : sequence of str
        More C++ compiler flags (part of the key), e.g. ``-march=native``.
    two_evals : bool
        Evaluate the model twice per cycle (clock low, then high) even when one
        evaluation is exact (for comparing the two).
    pgo : bool
        Profile-guided: compile the model instrumented, run :func:`training_program`
        on it, compile the hot code again with the profile (about 15 % faster runs,
        a longer build).
    clock_gates : bool
        Clock the units of :data:`~.clock_gates.CLOCK_GATES` only on the cycles they
        have work (the same cycles and results, a faster model).

    Returns
    -------
    HarnessBuild

    Raises
    ------
    HarnessBuildError
        Verilator, the compiler or the linker failed; the message holds the command,
        its error lines and the end of its output (the whole log is in the build
        folder's ``build.log``).
    """
    if threads < 1:
        raise UsageError(f"threads = {threads} must be at least 1")
    memo = (cfg.to_json(), threads, tuple(verilator_args), tuple(cxxflags), two_evals, pgo,
            _gates(clock_gates, cfg))
    if memo in _BUILT:
        return _BUILT[memo]
    text = core_source(cfg)
    key = harness_key(cfg, text, threads, verilator_args, cxxflags, two_evals, pgo,
                      clock_gates)

    def make(directory: Path) -> dict[str, object]:
        _step(f"building the {cfg.name} RTL model once (cached in {directory})")
        start = time.monotonic()
        scheme = _build(cfg, text, directory, threads, verilator_args, cxxflags, two_evals,
                        pgo, _gates(clock_gates, cfg))
        (directory / "config.json").write_text(cfg.to_json())
        _step(f"built the {cfg.name} RTL model in {time.monotonic() - start:.0f} s; later "
              f"runs reuse it from {directory}")
        return {"threads": threads, "clocking": scheme}

    directory, seconds, info = cached_build(key, make)
    built = HarnessBuild(cfg, key, directory, directory / LIBRARY, threads, seconds,
                         info["clocking"])
    _BUILT[memo] = built
    return built


# ------------------------------------------------------- other Verilated tops
#: The wrapper of a :func:`build_verilated` top with a :class:`TopClocking`.
SIM_TOP = "tf_sim_top"
#: The parameters of a :func:`build_verilated` design, in its build folder (JSON).
PARAMS_FILE = "params.json"


@dataclass(frozen=True)
class TopClocking:
    """How the harness of a :func:`build_verilated` top clocks it: the core harness's
    techniques for a design that instantiates the core (the virtual board's SoC).

    The top is wrapped in :data:`SIM_TOP` (:func:`registered_wrapper`), which
    registers ``registered`` (the reset: the next-state logic of every register then
    depends on state only) and clocks the core's units of ``gates`` by clocks of
    their own; the harness evaluates once per cycle when no output of ``sampled``
    (nor a gate's enable) depends combinationally on an input, and calls the root's
    evaluation directly (``sim/harness/clocking.h``).

    Attributes
    ----------
    instance : str
        The top's instance name in the wrapper.
    registered : tuple of str
        Inputs of the top that reach it a cycle late.
    sampled : tuple of str
        Outputs the harness reads before an edge.
    core : str
        The core's module in the design (for ``gates``).
    gates : tuple of ClockGate
        Gated units of the core, instance paths from the wrapper
        (:func:`~.clock_gates.gates_within`).
    two_evals : bool
        Evaluate twice per cycle even when once is exact (for comparing the two).
    train : str
        Profile-guided build: the module whose ``python -m TRAIN --train DIR`` runs
        the instrumented library in ``DIR`` (the design's parameters are in its
        :data:`PARAMS_FILE`); ``""``: none.
    """

    instance: str
    registered: tuple[str, ...] = ("rst",)
    sampled: tuple[str, ...] = ()
    core: str = ""
    gates: tuple[ClockGate, ...] = ()
    two_evals: bool = False
    train: str = ""


@dataclass(frozen=True)
class VerilatedLibrary:
    """A Verilated top and its C++ harness, linked as one shared library
    (:func:`build_verilated`).

    Attributes
    ----------
    key : str
        Cache key (folder name).
    directory : Path
        Build folder (``top.v``, the harness, ``obj/``, ``build.log``).
    library : Path
        The shared library.
    build_seconds : float
        Time the build took; 0 when it came from the cache.
    clocking : str
        How the harness clocks the model (one or two evaluations per cycle, gated
        clocks; ``tf_model.h``).
    """

    key: str
    directory: Path
    library: Path
    build_seconds: float
    clocking: str = ""


def build_verilated(name: str, design: Callable[[], str], params: dict[str, object],
                    top: str, harness: str, defines: dict[str, str | int],
                    clocking: TopClocking | None = None) -> VerilatedLibrary:
    """A shared library of the Verilog ``design()`` makes (top module ``top``) and the
    harness source ``harness`` of :data:`HARNESS_DIR`, built unless the cache has it.

    The same cache, lock and steps as :func:`build_harness` (profile-guided when
    ``clocking`` names a training run),
    keyed the same way: the Verilog (:func:`elaborated`: ``design`` runs only when
    ``params`` or a source of :func:`rtl_sources` is new), the harness source, the
    macros, this module and the tools. The harness includes
    ``soc_config.h``: ``SOC_TOP_CLASS`` and ``SOC_TOP_HEADER``, then ``defines`` as
    ``#define NAME value``; and ``clocking.h`` (:data:`CLOCKING_HEADER`), which
    clocks the model as ``tf_model.h`` says: with ``clocking``, the top wrapped and
    clocked as :class:`TopClocking` says, else two evaluations per cycle of ``top``
    itself.

    Parameters
    ----------
    name : str
        Readable prefix of the cache key.
    design : callable
        Makes the Verilog.
    params : dict
        JSON-ready parameters the design is made from.
    top : str
        Its top module.
    harness : str
        File name in :data:`HARNESS_DIR`.
    defines : dict
        More macros of ``soc_config.h``.
    clocking : TopClocking, optional
        The wrapper, the gated clocks and one evaluation per cycle.

    Raises
    ------
    HarnessBuildError
        Verilator, the compiler or the linker failed, or ``clocking`` names what the
        design lacks.
    """
    text = elaborated(name, {"top": top, **params}, design)
    h = hashlib.sha256()
    h.update(json.dumps({"top": top, "defines": defines, "abi": HARNESS_ABI,
                         "verilator_args": [*VERILATOR_ARGS, *VERILATOR_WAIVERS],
                         "cxx": [*CXX_COMMON, *CXX_FAST, *CXX_SLOW],
                         "verilator": verilator_version(), "compiler": _cxx_version(),
                         "cpu": _host_cpu(), "clocking": repr(clocking)},
                        sort_keys=True, default=str).encode())
    _hash_design(h, text)
    for source in (harness, CLOCKING_HEADER):
        _hash_tree(h, HARNESS_DIR, source)
    _hash_tree(h, Path(__file__).parent, "build.py")
    if clocking is not None and clocking.train:  # the profile's training run
        spec = importlib.util.find_spec(clocking.train)
        if spec is None or spec.origin is None:
            raise HarnessBuildError(f"no training module {clocking.train}")
        h.update(Path(spec.origin).read_bytes())
    key = f"{_slug(name, 40)}-{h.hexdigest()[:16]}"

    def make(directory: Path) -> dict[str, object]:
        _step(f"building {name} in Verilator once (cached in {directory})")
        (directory / PARAMS_FILE).write_text(json.dumps(params, sort_keys=True))
        verilog = text
        if clocking is not None:
            wrapper = registered_wrapper(text, top, SIM_TOP, clocking.instance,
                                         clocking.registered, clocking.core, clocking.gates)
            verilog = _gated(text, clocking.gates, clocking.core, SIM_TOP) + wrapper
        scheme = _build_top(directory, verilog, top, harness, defines, clocking)
        return {"clocking": scheme}

    directory, seconds, info = cached_build(key, make)
    return VerilatedLibrary(key, directory, directory / LIBRARY, seconds,
                            str(info.get("clocking", "")))


def _build_top(directory: Path, verilog: str, top: str, harness: str,
               defines: dict[str, str | int], clocking: TopClocking | None) -> str:
    verilator_env()
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                          os.environ.get("PATH", "")])
    log = _Log(directory / "build.log")
    prefix = "Vtop"
    (directory / "top.v").write_text(verilog)
    for source in (harness, CLOCKING_HEADER):
        shutil.copy2(HARNESS_DIR / source, directory / source)
    lines = ["// Generated by tensorfab.sim.rtl.build.build_verilated; do not edit.",
             f"#define SOC_TOP_CLASS {prefix}", f'#define SOC_TOP_HEADER "{prefix}.h"']
    lines += [f"#define {k} {v}" for k, v in defines.items()]
    (directory / "soc_config.h").write_text("\n".join(lines) + "\n")
    _step("verilating")
    log.run([str(verilator_root() / "bin" / "verilator"), "--cc", "top.v", "--top-module",
             top if clocking is None else SIM_TOP, "--prefix", prefix, "--Mdir", "obj",
             *VERILATOR_ARGS, *VERILATOR_WAIVERS], directory, "Verilator")
    obj = directory / "obj"
    if clocking is None:
        model_header, scheme = _model_header(obj, True, (), prefix, ())
    else:
        model_header, scheme = _model_header(obj, clocking.two_evals, clocking.gates, prefix,
                                             clocking.sampled)
    (directory / "tf_model.h").write_text(model_header)
    mk = _make_vars(obj / f"{prefix}_classes.mk")
    cpp = [f"-I{obj}", *_cppflags(mk)]
    fast = [*mk.get("VM_CLASSES_FAST", []), *mk.get("VM_SUPPORT_FAST", [])]
    slow = [*mk.get("VM_CLASSES_SLOW", []), *mk.get("VM_SUPPORT_SLOW", [])]
    obj_name = Path(harness).with_suffix(".o").name

    def hot(extra: Sequence[str]) -> list[tuple[list[str], Path, str]]:
        jobs = [([_cxx(), *CXX_COMMON, *CXX_FAST, *extra, *cpp, f"-I{directory}", "-c",
                  harness, "-o", obj_name], directory, "compiling the harness")]
        return jobs + [([_cxx(), *CXX_COMMON, *CXX_FAST, *extra, *cpp, "-c", f"{n}.cpp", "-o",
                         f"{n}.o"], obj, f"compiling the Verilated model ({n}.cpp)")
                       for n in fast]

    cold = [([_cxx(), *CXX_COMMON, *CXX_SLOW, *cpp, "-c", f"{n}.cpp", "-o", f"{n}.o"], obj,
             f"compiling the Verilated model ({n}.cpp)") for n in slow]
    _step(f"compiling the Verilated model ({len(fast) + len(slow) + 1} files)")
    runtime = _runtime_objects(_cppflags(mk), (), log)
    objects = [directory / obj_name, *[obj / f"{n}.o" for n in fast + slow], *runtime]
    return scheme + _compile_and_link(log, directory, hot, cold, objects,
                                      clocking.train if clocking else "")

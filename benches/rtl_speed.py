"""RTL simulation speed benchmark (``tensorfab bench rtl-speed``).

One blocked GEMM program on the default preset is simulated three ways, with the
same deterministic memory timing (a fixed read and write latency, no back-pressure,
four commands outstanding):

``harness``
    the RTL executor (:class:`~tensorfab.sim.rtl.RtlSimulator`): Verilator plus the
    C++ memory model, the whole program, the fastest of ``repeat`` runs on each CPU
    (:func:`harness_speed`);
``cocotb``
    the core's cocotb testbench (``tensorfab.sim.testing.core_harness.run_on_core``):
    the same Verilator core clocked from Python with the cocotb memory model, the whole
    program (its cycle count must equal the harness's);
``pysim``
    Amaranth's Python simulator on ``Core(cfg)`` with a small Python memory model,
    for a bounded time (the first ``pysim_seconds`` of the program).

Build times are excluded (every build is cached; the first run builds). Rates are
simulated clock cycles per wall-clock second.

``--profile`` adds ``block_profile``: the machine instructions the Verilated model
executes per simulated cycle, per block of the design, over the first
``--profile-cycles`` cycles of the long GEMM under Valgrind's callgrind
(:func:`tensorfab.sim.rtl.block_profile.profile_blocks`); unlike wall time, the
counts repeat exactly on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.isa import CSR_BY_NAME, PRESETS, HwConfig, Program
from tensorfab.isa.csr import STATUS_DONE, STATUS_ERROR
from tensorfab.sim.png_figure import png_figure
from tensorfab.sim.rtl import MemoryTiming, RtlSimulator

__all__ = ["PROFILE_CYCLES", "TARGET_CYCLES_PER_S", "cocotb_speed", "harness_speed",
           "plot_rtl_speed", "pysim_speed", "run_rtl_speed_bench"]

#: Harness speed the default config should reach on the long GEMM (issue 27).
TARGET_CYCLES_PER_S = 2_000_000
#: Memory timing of the benchmark: what the cocotb model can be set to exactly.
BENCH_LATENCY = 20
#: Cycles of the long GEMM ``--profile`` profiles per block of the design by default.
PROFILE_CYCLES = 70_000


def bench_memory(latency: int = BENCH_LATENCY) -> MemoryTiming:
    """The harness timing equal to the cocotb model with latency ``(latency - 1,
    latency - 1)`` and no back-pressure (see ``sim/harness/mem_model.h``)."""
    return MemoryTiming(read_latency=latency, write_latency=latency, bandwidth=1 << 16,
                        max_outstanding=4, read_buffer=8)


def bench_program(cfg: HwConfig, m: int, n: int, k: int, vthreads: int = 2) -> Program:
    """The benchmark's GEMM program."""
    from tensorfab.sim.testing.blocked_gemm import build_blocked_gemm

    return build_blocked_gemm(cfg, m, n, k, vthreads=vthreads,
                              rng=np.random.default_rng(0))


# ------------------------------------------------------------------------ harness
def _cpu_placements() -> list[int | None]:
    """The CPUs this process may run on, one by one (``[None]``: leave it be)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return [None]
    return list(cpus) if len(cpus) > 1 else [None]


def harness_speed(program: Program, memory: MemoryTiming, repeat: int = 3,
                  sim: RtlSimulator | None = None) -> dict[str, Any]:
    """Run ``program`` ``repeat`` times on the harness; the fastest run counts.

    With more than one CPU available, every repeat runs once pinned to each CPU in
    turn (the model is single-threaded): on a machine shared with other jobs one
    CPU can be slowed for seconds at a time by its neighbour, which is not the
    simulator's speed. The rate on each CPU is reported too.

    Returns
    -------
    dict
        ``cycles``, ``seconds`` (fastest), ``cycles_per_s``, ``cycles_per_s_by_cpu``
        (fastest per CPU, keyed by CPU number as a string, or ``"any"``),
        ``run_seconds``, ``build_seconds`` (0 if cached), ``clocking``, ``result``
        (the last :class:`~tensorfab.sim.rtl.RtlRunResult`).
    """
    sim = sim or RtlSimulator(memory)
    built = sim.build(program.config)
    placements = _cpu_placements()
    allowed = os.sched_getaffinity(0) if placements != [None] else None
    times: list[float] = []
    by_cpu: dict[str, float] = {}
    result = None
    try:
        for _ in range(max(1, repeat)):
            for cpu in placements:
                if cpu is not None:
                    os.sched_setaffinity(0, {cpu})
                t0 = time.perf_counter()
                result = sim.run(program)
                dt = time.perf_counter() - t0
                times.append(dt)
                assert result.cycles is not None
                key = "any" if cpu is None else str(cpu)
                by_cpu[key] = max(by_cpu.get(key, 0.0), result.cycles / dt)
    finally:
        if allowed is not None:
            os.sched_setaffinity(0, allowed)
    assert result is not None and result.cycles is not None
    best = min(times)
    return {"cycles": result.cycles, "seconds": best, "cycles_per_s": result.cycles / best,
            "cycles_per_s_by_cpu": by_cpu, "run_seconds": times,
            "build_seconds": built.build_seconds, "threads": built.threads,
            "clocking": built.clocking, "result": result}


# ------------------------------------------------------------------------- cocotb
def cocotb_speed(program: Program, latency: int, workdir: Path) -> dict[str, Any]:
    """Run ``program`` under the core's cocotb testbench (:mod:`tensorfab.sim.testing`).

    The time counts the simulator process (start-up included), not the build.
    """
    from tensorfab.sim.testing.core_harness import build_core, run_on_core

    build_core(program.config)  # cached build, not timed
    t0 = time.perf_counter()
    (run,) = run_on_core([program], workdir, latency=(latency - 1, latency - 1), p_ready=1.0,
                         max_cycles=1 << 31)
    seconds = time.perf_counter() - t0
    if not run.done:
        raise AssertionError(f"cocotb run did not finish: STATUS={run.csrs['STATUS']:#x}")
    cycles = run.csrs["CYCLES"]
    return {"cycles": cycles, "seconds": seconds, "cycles_per_s": cycles / seconds,
            "dram": run.dram}


# -------------------------------------------------------------------------- pysim
class _PyMem:
    """The harness's memory model in Python (no bandwidth limit): in-order commands,
    a fixed latency, a read buffer."""

    def __init__(self, image: np.ndarray, bus_bytes: int, latency: int,
                 max_outstanding: int = 4, read_buffer: int = 8) -> None:
        self.data = image.copy()
        self.bb = bus_bytes
        self.latency = latency
        self.max_outstanding = max_outstanding
        self.read_buffer = read_buffer
        self.pending: deque[list[int]] = deque()  # [addr, write, beats, start, done]
        self.rbeats: deque[int] = deque()
        self.cycle = 0

    def drive(self) -> tuple[bool, bool, bool, int]:
        self.cycle += 1
        head = self.pending[0] if self.pending else None
        if head and not head[1] and self.cycle >= head[3] and len(self.rbeats) < self.read_buffer:
            a = head[0] + head[4] * self.bb
            self.rbeats.append(int.from_bytes(self.data[a:a + self.bb].tobytes(), "little"))
            head[4] += 1
            if head[4] == head[2]:
                self.pending.popleft()
                head = self.pending[0] if self.pending else None
        cmd_ready = len(self.pending) < self.max_outstanding
        wready = bool(head and head[1] and self.cycle >= head[3])
        rvalid = bool(self.rbeats)
        return cmd_ready, wready, rvalid, self.rbeats[0] if rvalid else 0

    def commit(self, cmd: tuple[int, int, int] | None, wbeat: int | None, rtaken: bool) -> None:
        if cmd is not None:
            addr, write, length = cmd
            self.pending.append([addr, write, length + 1, self.cycle + self.latency, 0])
        if wbeat is not None:
            head = self.pending[0]
            a = head[0] + head[4] * self.bb
            self.data[a:a + self.bb] = np.frombuffer(wbeat.to_bytes(self.bb, "little"),
                                                     dtype=np.uint8)
            head[4] += 1
            if head[4] == head[2]:
                self.pending.popleft()
        if rtaken:
            self.rbeats.popleft()


def pysim_speed(program: Program, latency: int, seconds: float = 15.0) -> dict[str, Any]:
    """Clock ``Core(cfg)`` in Amaranth's Python simulator for about ``seconds``
    (after the CSR writes), with :class:`_PyMem` serving the memory port.

    Returns
    -------
    dict
        ``cycles`` run, ``seconds``, ``cycles_per_s``, ``setup_seconds`` (building the
        simulator), ``finished`` (the program completed within the budget).
    """
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    from amaranth.sim import Simulator

    from tensorfab.hw.core import Core
    from tensorfab.hw.mem_port import MemCmdLayout

    cfg = program.config
    image = program.dram_image()
    t_setup = time.perf_counter()
    dut = Core(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    lay = MemCmdLayout(cfg)
    fields = {f: (lay[f].offset, (1 << lay[f].shape.width) - 1) for f in ("addr", "write", "len")}
    out: dict[str, Any] = {}

    async def bench(ctx: Any) -> None:
        mem = _PyMem(image, cfg.mem_bus_bytes, latency)
        for name, value in (("INSN_BASE", 0), ("INSN_COUNT", len(program.insns)),
                            ("DRAM_SIZE", image.size), ("CTRL", 1)):
            ctx.set(dut.csr.addr, CSR_BY_NAME[name].offset)
            ctx.set(dut.csr.w_data, value)
            ctx.set(dut.csr.w_en, 1)
            await ctx.tick()
        ctx.set(dut.csr.w_en, 0)
        ctx.set(dut.csr.addr, CSR_BY_NAME["STATUS"].offset)
        port = dut.mem
        t0 = time.perf_counter()
        cycles = 0
        finished = False
        while True:
            cmd_ready, wready, rvalid, rdata = mem.drive()
            ctx.set(port.cmd.ready, cmd_ready)
            ctx.set(port.wdata.ready, wready)
            ctx.set(port.rdata.valid, rvalid)
            ctx.set(port.rdata.payload.data, rdata)
            cmd = None
            if cmd_ready and ctx.get(port.cmd.valid):
                word = int(ctx.get(port.cmd.payload.as_value()))
                cmd = tuple((word >> off) & mask for off, mask in fields.values())
            wbeat = (int(ctx.get(port.wdata.payload.as_value()))
                     if wready and ctx.get(port.wdata.valid) else None)
            rtaken = bool(rvalid and ctx.get(port.rdata.ready))
            await ctx.tick()
            mem.commit(cmd, wbeat, rtaken)  # type: ignore[arg-type]
            cycles += 1
            if cycles % 64 == 0:
                if ctx.get(dut.csr.r_data) & (STATUS_DONE | STATUS_ERROR):
                    finished = True
                    break
                if time.perf_counter() - t0 >= seconds:
                    break
        out.update(cycles=cycles, seconds=time.perf_counter() - t0, finished=finished)

    sim.add_testbench(bench)
    setup = time.perf_counter() - t_setup
    sim.run()
    out["setup_seconds"] = setup
    out["cycles_per_s"] = out["cycles"] / out["seconds"]
    return out


# ---------------------------------------------------------------------------- all
def run_rtl_speed_bench(m: int = 64, n: int = 256, k: int = 512, *, repeat: int = 5,
                        pysim_seconds: float = 15.0, latency: int = BENCH_LATENCY,
                        cfg: HwConfig | None = None, with_cocotb: bool = True,
                        with_pysim: bool = True, long_gemm: tuple[int, int, int] | None = (
                            512, 512, 512), workdir: Path | None = None,
                        plot: str | Path | None = "build/bench/rtl-speed-{config}.png",
                        profile_cycles: int = 0) -> dict[str, Any]:
    """Simulate one GEMM program with the harness, cocotb and Amaranth's simulator.

    Parameters
    ----------
    m, n, k : int
        GEMM size (default: about 40 000 cycles, which the cocotb testbench runs
        in roughly 10 to 30 s).
    repeat : int
        Harness runs; the fastest counts.
    pysim_seconds : float
        Wall-clock budget of the Amaranth simulation.
    latency : int
        Memory latency (cycles from a command to its first beat, both directions).
    cfg : HwConfig, optional
        Configuration (default: the ``default`` preset).
    with_cocotb, with_pysim : bool
        Run the slow simulators.
    long_gemm : tuple of int, optional
        ``(m, n, k)`` of a longer GEMM run on the harness alone for its steady-state
        rate (``harness_long_cycles_per_s``; run set-up is negligible there); None
        skips it.
    workdir : Path, optional
        Scratch folder of the cocotb run (default: a fresh temporary folder).
    plot : str or Path, optional
        PNG of the rates (:func:`plot_rtl_speed`; ``{config}`` is filled in); None:
        no plot. Its path is returned as ``plot``.
    profile_cycles : int
        When positive, profile that many cycles of the long GEMM (or of the program,
        without one) per block of the design: ``block_profile``
        (:meth:`~tensorfab.sim.rtl.block_profile.BlockProfile.to_json`).

    Returns
    -------
    dict
        ``harness_cycles_per_s``, ``cocotb_cycles_per_s``, ``pysim_cycles_per_s``,
        ``speedup_vs_cocotb``, ``speedup_vs_pysim``, the cycle counts and seconds of
        each, ``cycles_match`` (harness and cocotb agree on CYCLES and the final DRAM),
        ``harness_long_cycles_per_s``, ``target_cycles_per_s``, ``meets_target`` (the
        long GEMM's rate, or the program's without one, reaches the target) and the
        program's size.
    """
    import tempfile

    cfg = cfg if cfg is not None else PRESETS["default"]
    prog = bench_program(cfg, m, n, k)
    h = harness_speed(prog, bench_memory(latency), repeat)
    out: dict[str, Any] = {
        "config": cfg.name, "m": m, "n": n, "k": k, "insns": len(prog.insns),
        "memory_latency": latency,
        "harness_cycles": h["cycles"], "harness_seconds": h["seconds"],
        "harness_cycles_per_s": h["cycles_per_s"],
        "harness_cycles_per_s_by_cpu": h["cycles_per_s_by_cpu"],
        "harness_threads": h["threads"],
        "harness_clocking": h["clocking"],
    }
    if long_gemm is not None:
        lg = harness_speed(bench_program(cfg, *long_gemm), bench_memory(latency), repeat=2)
        out.update(harness_long_gemm=list(long_gemm), harness_long_cycles=lg["cycles"],
                   harness_long_seconds=lg["seconds"],
                   harness_long_cycles_per_s=lg["cycles_per_s"],
                   harness_long_cycles_per_s_by_cpu=lg["cycles_per_s_by_cpu"])
    c = None
    if with_cocotb:
        with tempfile.TemporaryDirectory(prefix="tf-rtl-bench-") as tmp:
            c = cocotb_speed(prog, latency, Path(workdir or tmp))
    if c is not None:
        out.update(cocotb_cycles=c["cycles"], cocotb_seconds=c["seconds"],
                   cocotb_cycles_per_s=c["cycles_per_s"],
                   cycles_match=bool(c["cycles"] == h["cycles"]
                                     and np.array_equal(c["dram"], h["result"].dram)),
                   speedup_vs_cocotb=h["cycles_per_s"] / c["cycles_per_s"])
    else:
        out.update(cocotb_cycles_per_s=None, speedup_vs_cocotb=None, cycles_match=None)
    if with_pysim:
        p = pysim_speed(prog, latency, pysim_seconds)
        out.update(pysim_cycles=p["cycles"], pysim_seconds=p["seconds"],
                   pysim_setup_seconds=p["setup_seconds"],
                   pysim_cycles_per_s=p["cycles_per_s"],
                   speedup_vs_pysim=h["cycles_per_s"] / p["cycles_per_s"])
    else:
        out.update(pysim_cycles_per_s=None, speedup_vs_pysim=None)
    if profile_cycles > 0:
        from tensorfab.sim.rtl.block_profile import profile_blocks

        profiled = bench_program(cfg, *long_gemm) if long_gemm is not None else prog
        out["block_profile"] = profile_blocks(profiled, cycles=profile_cycles,
                                              memory=bench_memory(latency)).to_json()
    rate = out.get("harness_long_cycles_per_s", h["cycles_per_s"])
    out["target_cycles_per_s"] = TARGET_CYCLES_PER_S
    out["meets_target"] = rate >= TARGET_CYCLES_PER_S
    if plot is not None:
        out["plot"] = str(plot_rtl_speed(out, str(plot).format(config=cfg.name)))
    return out


def plot_rtl_speed(result: dict[str, Any], path: str | Path) -> Path:
    """Bar chart (log scale) of the simulators' rates in ``result`` (the dict
    :func:`run_rtl_speed_bench` returns): the harness on each CPU, cocotb and
    Amaranth's simulator where they ran, and the target as a line; returns ``path``."""
    bars: list[tuple[str, float]] = []
    short_gemm = f"{result['m']}×{result['n']}×{result['k']}"
    long_gemm = "×".join(str(d) for d in result.get("harness_long_gemm") or ())
    for key, label in (("harness_cycles_per_s_by_cpu", f"harness\n{short_gemm}"),
                       ("harness_long_cycles_per_s_by_cpu", f"harness\n{long_gemm}")):
        for cpu, rate in (result.get(key) or {}).items():
            bars.append((f"{label}\nCPU {cpu}", rate))
    for key, label in (("cocotb_cycles_per_s", "cocotb"), ("pysim_cycles_per_s",
                                                            "Amaranth sim")):
        if result.get(key):
            bars.append((label, result[key]))
    with png_figure(path, (max(5.0, 1.3 * len(bars)), 4.0)) as (_fig, ax):
        ax.bar(range(len(bars)), [r for _, r in bars], color="tab:blue")
        for i, (_, rate) in enumerate(bars):
            ax.annotate(f"{rate:,.0f}", (i, rate), ha="center", va="bottom", fontsize=8)
        ax.axhline(result["target_cycles_per_s"], color="gray", lw=0.8, ls="--",
                   label=f"target {result['target_cycles_per_s']:,} cycles/s")
        ax.set_xticks(range(len(bars)), [name for name, _ in bars], fontsize=8)
        ax.set_yscale("log")
        rates = [r for _, r in bars] + [result["target_cycles_per_s"]]
        ax.set_ylim(min(100.0, min(rates) / 3), max(rates) * 3)
        ax.set_ylabel("simulated cycles per second")
        ax.set_title(f"RTL simulation of GEMMs, {result['config']} preset", fontsize=10)
        ax.legend(loc="upper right", fontsize=8)
    return Path(path)


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5, help="harness runs; the fastest counts")
    ap.add_argument("--pysim-seconds", type=float, default=15.0,
                    help="wall-clock budget of the Amaranth simulation")
    ap.add_argument("--no-cocotb", action="store_true", help="skip the cocotb run")
    ap.add_argument("--no-pysim", action="store_true", help="skip the Amaranth simulation")
    ap.add_argument("--profile", action="store_true",
                    help="instructions per cycle per block of the design (needs valgrind)")
    ap.add_argument("--profile-cycles", type=int, default=PROFILE_CYCLES,
                    help="cycles of the long GEMM profiled (with --profile)")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args(argv)
    result = run_rtl_speed_bench(args.m, args.n, args.k, repeat=args.repeat,
                                 pysim_seconds=args.pysim_seconds,
                                 with_cocotb=not args.no_cocotb, with_pysim=not args.no_pysim,
                                 profile_cycles=args.profile_cycles if args.profile else 0)
    if not args.json:
        def rate(key: str) -> str:
            v = result.get(key)
            return "n/a" if v is None else f"{v:,.0f} cycles/s"

        print(f"GEMM {args.m}x{args.n}x{args.k} on {result['config']}: "
              f"{result['harness_cycles']:,} cycles")
        print(f"  harness   {rate('harness_cycles_per_s')} "
              f"(long GEMM: {rate('harness_long_cycles_per_s')})")
        per_cpu = ", ".join(f"CPU {cpu}: {v:,.0f}"
                            for cpu, v in result["harness_cycles_per_s_by_cpu"].items())
        print(f"  harness per CPU (fastest run on each): {per_cpu}")
        print(f"  cocotb    {rate('cocotb_cycles_per_s')}  cycles match: "
              f"{result['cycles_match']}")
        print(f"  pysim     {rate('pysim_cycles_per_s')}")
        if result.get("plot"):
            print(f"  chart: {result['plot']}")
        if result.get("block_profile"):
            bp = result["block_profile"]
            print(f"  machine instructions per cycle, first {bp['cycles']:,} cycles of the "
                  f"long GEMM: {bp['instructions_per_cycle']:,.0f}")
            for block, ipc in bp["blocks"].items():
                print(f"    {ipc:8,.0f}  {block}")
        print(f"  target {result['target_cycles_per_s']:,} cycles/s: "
              f"{'met' if result['meets_target'] else 'NOT met'}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

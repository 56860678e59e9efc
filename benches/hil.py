"""Hardware-in-the-loop benchmark (``tensorfab bench hil``): random programs on the
virtual board under injected link faults, the link's efficiency on bulk transfers, the
virtual board's simulation speed on a long GEMM, the digits CNN resident on the virtual
board against fsim and the RTL executor, and the device server's round trip.

The virtual board is the SoC gateware in Verilator with the fast UART (4 clock cycles a
bit); link efficiency is counted in the board's own clock, so it is what a board at any
bit rate would see with the same bridge. Prints one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from tensorfab.hil.board import BoardDevice
from tensorfab.hil.errors import HilError
from tensorfab.hil.link import HostLink
from tensorfab.hil.targets import VirtualBoardDevice
from tensorfab.hil.virtual import InProcessTransport, LinkFaults, SocSpec, VirtualBoard
from tensorfab.isa import HwConfig, Program, TensorfabError, get_config
from tensorfab.isa.hostlink import HostLinkError
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.random_program import random_program

__all__ = ["SPEED_GEMM", "TARGETS", "link_efficiency", "main", "run_hil_bench",
           "virtual_board_speed"]

#: The issue's targets.
TARGETS = {"programs": 1000, "link_efficiency": 0.80}
#: One bit flip per 10 kB and 1 % dropped bytes, both directions.
FAULTS = LinkFaults(bit_flip=1e-4, drop=0.01, seed=1)
#: The speed run's blocked GEMM (M, N, K): on tiny 266,597 cycles, a 95 KB image.
SPEED_GEMM = (128, 128, 256)
#: On-chip memory of the boards that run the speed GEMM and the digits CNN.
MODEL_MEM_BYTES = 1 << 20


def _progress(total: int, what: str) -> Any:
    from rich.progress import Progress

    p = Progress(transient=True, disable=not sys.stderr.isatty())
    p.start()
    return p, p.add_task(what, total=total)


def fault_programs(config: str, programs: int, faults: LinkFaults) -> dict[str, Any]:
    """Random programs on a virtual board with ``faults``, each against fsim."""
    cfg = get_config(config)
    dev = VirtualBoardDevice(faults=faults, mem_bytes=1 << 16)
    fsim = FunctionalSimulator()
    wrong = errors = 0
    first_wrong: list[int] = []
    progress, task = _progress(programs, "programs under faults")
    t0 = time.monotonic()
    try:
        for seed in range(programs):
            prog = random_program(cfg, seed)
            want = fsim.run(prog)
            try:
                got = dev.run(prog)
            except (HostLinkError, HilError) as exc:  # reported, never a wrong result
                errors += 1
                print(f"seed {seed}: {exc}", file=sys.stderr)
                continue
            if not (np.array_equal(got.dram, want.dram)
                    and got.counters.gemm_uops == want.counters.gemm_uops):
                wrong += 1
                first_wrong.append(seed)
            progress.advance(task)
    finally:
        progress.stop()
    board = dev.device(cfg)
    stats = board.link.stats
    transport = board.link.transport
    assert isinstance(transport, InProcessTransport)
    injected = {k: transport.faults_in.counts()[k] + transport.faults_out.counts()[k]
                for k in ("flipped", "dropped", "delayed")}
    return {"programs": programs, "wrong_results": wrong, "wrong_seeds": first_wrong[:10],
            "runs_reported": errors, "recovered": stats.recovered,
            "reported": stats.reported, "retries": stats.retries,
            "faults_injected": injected, "fault_kinds": stats.faults,
            "seconds": round(time.monotonic() - t0, 1)}


def link_efficiency(config: str = "tiny", nbytes: int = 32768) -> dict[str, float]:
    """Payload bytes per byte time on the wire for a bulk write and a bulk read,
    counted in the virtual board's clock (1.0: every byte time carries payload)."""
    spec = SocSpec.for_board(None, get_config(config), mem_bytes=1 << 16)
    with VirtualBoard(spec) as vb:
        link = HostLink(InProcessTransport(vb), timeout=64 * 10 / spec.baud)
        link.info()
        data = np.random.default_rng(0).integers(0, 256, nbytes, np.uint8).tobytes()
        byte_cycles = 10 * spec.divisor
        c0 = vb.cycle
        link.write_mem(0, data)
        c1 = vb.cycle
        back = link.read_mem(0, nbytes)
        c2 = vb.cycle
    if back != data:
        raise TensorfabError("link_efficiency: the bytes read back differ from those written")
    return {"write": round(nbytes * byte_cycles / (c1 - c0), 4),
            "read": round(nbytes * byte_cycles / (c2 - c1), 4)}


def _board_of(dev: VirtualBoardDevice, cfg: HwConfig) -> VirtualBoard:
    """The simulated board behind ``dev``'s device for ``cfg``."""
    transport = dev.device(cfg).link.transport
    assert isinstance(transport, InProcessTransport)
    return transport.board


def _resident_gemm(board: VirtualBoard, prog: Program, want: np.ndarray
                   ) -> tuple[float, int, bool]:
    """One run of ``prog`` resident on ``board`` (its image already written): board
    cycles per second from START to done, CYCLES, and whether the result is fsim's."""
    device = BoardDevice(HostLink(InProcessTransport(board), timeout=64 * 10 / board.spec.baud))
    mem = device.open_memory(prog.config, board.spec.mem_bytes)
    c0, t0 = board.cycle, time.perf_counter()
    cycles = mem.run(prog).cycles
    rate = (board.cycle - c0) / (time.perf_counter() - t0)
    return rate, cycles, bool(np.array_equal(mem.read(0, want.size), want))


def virtual_board_speed(config: str = "tiny", shape: tuple[int, int, int] = SPEED_GEMM,
                        rounds: int = 3, plain: bool = True,
                        mem_bytes: int = MODEL_MEM_BYTES) -> dict[str, Any]:
    """Simulated board cycles per wall-clock second on a compute-bound program: the
    blocked GEMM of ``tensorfab bench rtl-speed`` (``shape``), resident on the virtual
    board (its image written once), timed from START to done with the STATUS polls
    over the fast UART; the fastest of ``rounds`` runs. Its result must equal fsim's
    and its CYCLES the RTL executor's with the SoC's memory; the RTL executor's rate
    on the same program (its whole run, the memory model in C++; the fastest of
    ``rounds`` runs on each CPU, :func:`.rtl_speed.harness_speed`) is given beside.

    With ``plain``, the same on the plain build of the same SoC (two evaluations per
    cycle, no gated clocks, no profile guidance), the two boards' runs alternated in
    each round, and the
    ratio of the fastest runs (``virtual_board_speedup``); their CYCLES and results
    must be the same. ``mem_bytes``: the boards' on-chip memory."""
    from tensorfab.sim.rtl import ONCHIP_MEMORY

    from .rtl_speed import bench_program, harness_speed

    cfg = get_config(config)
    prog = bench_program(cfg, *shape)
    image = prog.dram_image()
    want = FunctionalSimulator().run(prog).dram
    spec = SocSpec.for_board(None, cfg, mem_bytes=mem_bytes)
    kinds = {"fast": {}, **({"plain": {"clock_gates": False, "two_evals": True}}
                            if plain else {})}
    boards = {k: VirtualBoard(spec, **options) for k, options in kinds.items()}
    rates: dict[str, list[float]] = {k: [] for k in boards}
    cycles: dict[str, set[int]] = {k: set() for k in boards}
    matches = True
    try:
        for board in boards.values():
            link = HostLink(InProcessTransport(board), timeout=64 * 10 / spec.baud)
            link.write_mem(0, image.tobytes())
        for _ in range(rounds):
            for kind, board in boards.items():
                rate, n, ok = _resident_gemm(board, prog, want)
                rates[kind].append(rate)
                cycles[kind].add(n)
                matches = matches and ok
        clocking = boards["fast"].build.clocking
    finally:
        for board in boards.values():
            board.close()
    rtl = harness_speed(prog, ONCHIP_MEMORY, repeat=rounds)
    rtl_cycles, rtl_rate = rtl["cycles"], rtl["cycles_per_s"]
    out: dict[str, Any] = {
        "virtual_board_cycles_per_second": round(max(rates["fast"])),
        "virtual_board_rates": [round(r) for r in rates["fast"]],
        "virtual_board_gemm": list(shape), "virtual_board_gemm_cycles": min(cycles["fast"]),
        "virtual_board_gemm_matches_fsim": matches,
        "virtual_board_gemm_cycles_equal_rtl": cycles["fast"] == {rtl_cycles},
        "rtl_executor_cycles_per_second": round(rtl_rate),
        "virtual_board_clocking": clocking}
    if plain:
        out |= {"virtual_board_plain_cycles_per_second": round(max(rates["plain"])),
                "virtual_board_plain_rates": [round(r) for r in rates["plain"]],
                "virtual_board_speedup": round(max(rates["fast"]) / max(rates["plain"]), 2),
                "virtual_board_plain_cycles_equal": cycles["plain"] == cycles["fast"]}
    return out


def digits_on_board(config: str = "tiny", batch: int = 8) -> dict[str, Any]:
    """The digits CNN resident on the virtual board, against fsim, and each layer's
    board cycles beside the RTL executor's for the same programs (its memory the SoC's
    on-chip memory, :data:`~tensorfab.sim.rtl.ONCHIP_MEMORY`)."""
    from tensorfab.models.digits_cnn import load_digits_split
    from tensorfab.models.digits_int8 import compile_digits_int8
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.sim.rtl import ONCHIP_MEMORY, RtlSimulator

    model = compile_digits_int8(batch=batch, config=config)
    _, _, xte, _ = load_digits_split(0)
    x = xte[:batch]
    runs = {}
    virtual = VirtualBoardDevice(mem_bytes=MODEL_MEM_BYTES)
    vb = _board_of(virtual, get_config(config))
    board_cycles_run = 0
    for name, dev in (("fsim", FunctionalSimulator()), ("virtual", virtual),
                      ("rtl", RtlSimulator(ONCHIP_MEMORY))):
        c0, t0 = vb.cycle, time.monotonic()
        prof = profile_program(model.program, [x], dev)
        runs[name] = (prof, time.monotonic() - t0)
        if name == "virtual":
            board_cycles_run = vb.cycle - c0
    out = {k: np.asarray(p.output) for k, (p, _) in runs.items()}
    board_cycles, rtl_cycles = ([r.cycles for r in runs[k][0].layers if r.device == "accel"]
                                for k in ("virtual", "rtl"))
    return {"digits_matches_fsim": bool(np.array_equal(out["virtual"], out["fsim"])),
            "digits_board_cycles": board_cycles, "digits_rtl_cycles": rtl_cycles,
            "digits_cycles_equal_rtl": board_cycles == rtl_cycles,
            "digits_board_seconds": round(runs["virtual"][1], 2),
            "digits_board_cycles_per_second": round(board_cycles_run / runs["virtual"][1]),
            "digits_rtl_seconds": round(runs["rtl"][1], 2)}


def run_hil_bench(programs: int = TARGETS["programs"], config: str = "tiny",
                  digits: bool = True, server: bool = True, speed: bool = True
                  ) -> dict[str, Any]:
    """Run every part; the dict's keys are the issue's."""
    result: dict[str, Any] = {"config": config}
    eff = link_efficiency(config)
    result["link_efficiency"] = min(eff.values())
    result["link_efficiency_parts"] = eff
    faults = fault_programs(config, programs, FAULTS)
    result |= faults
    if speed:
        result |= virtual_board_speed(config)
    if digits:
        result |= digits_on_board(config)
    if server:
        from .device_server import run_device_server_bench

        srv = run_device_server_bench("rtl", config, repeat=5)
        result["server_round_trip_ms"] = srv.get("server_round_trip_ms")
        result["server"] = srv
    result["targets_met"] = {
        "programs": programs >= TARGETS["programs"] and faults["wrong_results"] == 0,
        "link_efficiency": result["link_efficiency"] >= TARGETS["link_efficiency"],
        "digits_matches_fsim": result.get("digits_matches_fsim", False),
    }
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=TARGETS["programs"],
                    help="random programs under faults (default %(default)s)")
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--no-digits", action="store_true")
    ap.add_argument("--no-server", action="store_true")
    ap.add_argument("--no-speed", action="store_true",
                    help="skip the virtual board's speed run (the long GEMM)")
    ap.add_argument("--json", action="store_true", help="(the JSON line is always printed)")
    args = ap.parse_args(argv)
    result = run_hil_bench(args.programs, args.config, not args.no_digits,
                           not args.no_server, not args.no_speed)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

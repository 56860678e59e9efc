"""Device server overhead benchmark (``tensorfab bench device-server``): the round trip
of a PING and the cost a remote run adds over the same run on the local device."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tensorfab.isa import Program, get_config
from tensorfab.isa.device import RunResult, open_device

__all__ = ["bench_program", "main", "run_device_server_bench"]


def bench_program(config: str = "tiny", seed: int = 0) -> Program:
    """The program timed: a 3x3 convolution of 8 to 16 channels on 8x8 pixels."""
    from tensorfab.compiler.tensor.operators import conv2d

    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 8, (1, 8, 8, 8), dtype=np.int8)
    w = rng.integers(-8, 8, (16, 8, 3, 3), dtype=np.int8)
    return conv2d(get_config(config), x, w, padding=1).program


def _ms(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _same(got: RunResult, want: RunResult) -> None:
    if not (np.array_equal(got.dram, want.dram) and got.counters == want.counters
            and got.cycles == want.cycles):
        raise AssertionError(f"the remote {got.device} run differs from the local one")


def run_device_server_bench(target: str = "fsim", config: str = "tiny", repeat: int = 20,
                            pings: int = 200) -> dict[str, Any]:
    """Serve ``target`` on 127.0.0.1 (a :class:`~tensorfab.hil.server.DeviceServer` in
    this process) and time, each as the median of its repetitions: a PING round trip,
    the program on the local device, and the same program through the server (local
    and remote runs alternate).

    Parameters
    ----------
    target : str
        The device served (``fsim``, ``rtl``...).
    config : str
        Config of the program (:func:`bench_program`).
    repeat : int
        Timed runs, local and remote each.
    pings : int
        Timed PINGs.

    Returns
    -------
    dict
        ``server_round_trip_ms``, ``local_run_ms``, ``remote_run_ms``,
        ``remote_overhead_ms`` (remote minus local), ``remote_over_local`` (their
        ratio), ``program_bytes`` and ``reply_dram_bytes`` (what a RUN carries), and the
        target, config and repetitions.

    Raises
    ------
    AssertionError
        A remote run that differs from the local one.
    """
    from tensorfab.hil.remote import RemoteDevice
    from tensorfab.hil.server import DeviceServer

    program = bench_program(config)
    local = open_device(target)
    want = local.run(program)  # also builds and caches an RTL model
    with DeviceServer(target) as server, \
            RemoteDevice(server.address, token=server.token) as remote:
        _same(remote.run(program), want)
        rtt = statistics.median(_ms(remote.ping) for _ in range(pings))
        # local and remote in alternation, so that a busy machine slows both alike
        pairs = [(_ms(lambda: _same(local.run(program), want)),
                  _ms(lambda: _same(remote.run(program), want))) for _ in range(repeat)]
        local_ms = statistics.median(p[0] for p in pairs)
        remote_ms = statistics.median(p[1] for p in pairs)
    return {
        "target": target,
        "config": config,
        "repeat": repeat,
        "pings": pings,
        "server_round_trip_ms": round(rtt, 4),
        "local_run_ms": round(local_ms, 4),
        "remote_run_ms": round(remote_ms, 4),
        "remote_overhead_ms": round(remote_ms - local_ms, 4),
        "remote_over_local": round(remote_ms / local_ms, 3),
        "program_bytes": len(program.to_bytes()),
        "reply_dram_bytes": int(want.dram.nbytes) if want.dram is not None else 0,
    }


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON line last and return the result dict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="fsim", help="device served (default: fsim)")
    ap.add_argument("--config", default="tiny", help="config of the program (default: tiny)")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs, local and remote")
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args(argv)
    result = run_device_server_bench(args.target, args.config, args.repeat)
    if not args.json:
        print(f"{args.target} served on 127.0.0.1: PING {result['server_round_trip_ms']:.3f} "
              f"ms, run {result['local_run_ms']:.3f} ms local vs "
              f"{result['remote_run_ms']:.3f} ms remote "
              f"(x{result['remote_over_local']:.2f})")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

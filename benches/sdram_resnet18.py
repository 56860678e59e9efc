"""``tensorfab bench sdram-resnet18``: ResNet-18 resident in the SDRAM of a virtual
board, against the RTL executor's ideal memory.

ResNet-18 (:func:`tensorfab.models.resnet18_onnx`, seeded weights) is compiled for
``config`` (default ``ecp5-85f``, the ULX3S-85F's 1×8×8 configuration: 64 MACs a
cycle, 24-bit device addresses) by :func:`~tensorfab.compiler.model_compile.
compile_onnx`, int8, calibrated on seeded normal images. One seeded image then runs
resident (:func:`~tensorfab.runtime.profiling.profile_program`) on three devices:

- ``fsim``: the reference;
- ``ideal``: the RTL executor (the core in Verilator, its memory a C++ model that
  answers every read after a fixed latency);
- ``sdram``: the virtual board with its device memory in SDRAM (``virtual://?sdram=1
  &direct_memory=1``): the SoC gateware with the :class:`~tensorfab.hw.soc.sdram.
  SdramController` the ULX3S bitstreams hold, the chip modelled cycle by cycle with
  its timing rules checked, at 100 MHz. The model's weights, its inputs and outputs
  move by direct access to the chip's contents (:class:`~tensorfab.hil.virtual.
  DirectMemory`); START, STATUS and the counters go over the UART.

Both RTL runs must give fsim's output bit for bit (``matches_fsim``); the SDRAM chip
must see no timing violation. ``seconds`` are wall time of each run (the load apart,
``load_seconds``: a first run also builds the Verilator libraries), and
``simulated_cycles_per_second`` the accelerator cycles over them (the CPU layers and,
on the board, the STATUS polls over the UART included). ``stall_ratio`` is the SDRAM
run's accelerator cycles over the ideal memory's, per program and in all: the cycles
the SDRAM's row activations, refreshes, CAS latency and 16-bit data bus add. Last
line::

    {"config", "image_size", "macs_per_cycle", "device_memory_bytes", "sdram_bytes",
     "accel_programs", "cycles": {"ideal", "sdram"}, "stall_ratio",
     "stall_ratio_per_program": {"min", "max", "worst": {"index", "op"}},
     "utilization": {"ideal", "sdram"}, "matches_fsim": {"ideal", "sdram"},
     "sdram_violations", "sdram_first_violation", "sdram_commands",
     "seconds": {"compile", "fsim", "ideal", "sdram"},
     "simulated_cycles_per_second": {"ideal", "sdram"},
     "load_seconds": {"ideal", "sdram"}, "layers": [...]}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

__all__ = ["run_sdram_resnet18_bench"]

#: The board target: the SoC with SDRAM, model loads by direct access to the chip.
SDRAM_TARGET = "virtual://?sdram=1&direct_memory=1"


def _say(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


def run_sdram_resnet18_bench(config: str = "ecp5-85f", image_size: int = 224,
                             seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """Run the benchmark (see the module docstring).

    Parameters
    ----------
    config : str
        A preset, a board configuration (``fpga_builds/configs``) or a JSON file.
    image_size : int
        The input's height and width.
    seed : int
        Seeds the weights, the calibration images and the input.
    progress : bool
        Print each step to stderr.

    Returns
    -------
    dict
        The JSON object of the module docstring.

    Raises
    ------
    UsageError
        The model does not fit the SDRAM within the config's address range (the
        virtual board refuses its memory).
    """
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.hil.targets import VirtualBoardDevice, open_virtual
    from tensorfab.hw.soc.sdram import sdram_size_bytes
    from tensorfab.models import resnet18_onnx
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.runtime.resident import ResidentModel
    from tensorfab.sim import get_device

    cfg = board_config(config)
    rng = np.random.default_rng(seed)
    shape = (1, 3, image_size, image_size)
    calib = rng.standard_normal((4, *shape[1:])).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    _say(progress, f"compiling ResNet-18 for {cfg.name}")
    t0 = time.perf_counter()
    program = compile_onnx(resnet18_onnx(seed=seed, image_size=image_size), config=cfg,
                           calibration=calib, input_shapes={"input": shape}).program
    seconds = {"compile": time.perf_counter() - t0}
    board = open_virtual(SDRAM_TARGET)
    assert isinstance(board, VirtualBoardDevice)
    sdram_bytes = sdram_size_bytes(cfg)
    devices = {"fsim": get_device("fsim"), "ideal": get_device("rtl"), "sdram": board}
    outputs: dict[str, np.ndarray] = {}
    cycles: dict[str, list[int]] = {}
    load_seconds: dict[str, float] = {}
    ops: list[str] = []
    size = 0
    for name, device in devices.items():
        _say(progress, f"running on {name}")
        t0 = time.perf_counter()
        with ResidentModel(program, device) as model:
            load_seconds[name] = time.perf_counter() - t0
            size = model.plan.size
            t1 = time.perf_counter()
            profile = profile_program(program, [x], device, resident=model)
            seconds[name] = time.perf_counter() - t1
        outputs[name] = np.asarray(profile.output)
        runs = [r for r in profile.layers if r.device == "accel"]
        cycles[name] = [int(r.cycles or 0) for r in runs]
        ops = [r.op for r in runs]
        _say(progress, f"{name}: {sum(cycles[name]):,} cycles in {seconds[name]:.1f} s")
    vb = board.device(cfg).link.transport.board  # type: ignore[attr-defined]
    violations, first = vb.sdram_violations
    ideal, sdram = np.array(cycles["ideal"]), np.array(cycles["sdram"])
    per = sdram / np.maximum(ideal, 1)
    worst = int(per.argmax())
    macs = int(sum(r.macs or 0 for r in profile.layers if r.device == "accel"))
    peak = cfg.peak_macs_per_cycle
    return {
        "config": cfg.name, "image_size": image_size, "macs_per_cycle": peak,
        "device_memory_bytes": int(size), "sdram_bytes": int(sdram_bytes),
        "accel_programs": len(ops),
        "cycles": {"ideal": int(ideal.sum()), "sdram": int(sdram.sum())},
        "stall_ratio": round(float(sdram.sum() / ideal.sum()), 4),
        "stall_ratio_per_program": {"min": round(float(per.min()), 4),
                                    "max": round(float(per.max()), 4),
                                    "worst": {"index": worst, "op": ops[worst]}},
        "utilization": {k: round(macs / (float(v.sum()) * peak), 4)
                        for k, v in (("ideal", ideal), ("sdram", sdram))},
        "matches_fsim": {k: bool(np.array_equal(outputs[k], outputs["fsim"]))
                         for k in ("ideal", "sdram")},
        "sdram_violations": int(violations), "sdram_first_violation": first,
        "sdram_commands": vb.sdram_commands,
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "simulated_cycles_per_second": {k: round(float(v.sum()) / seconds[k])
                                        for k, v in (("ideal", ideal), ("sdram", sdram))},
        "load_seconds": {k: round(load_seconds[k], 2) for k in ("ideal", "sdram")},
        "layers": [{"op": op.split()[0], "ideal": int(i), "sdram": int(s),
                    "ratio": round(float(s / max(i, 1)), 4)}
                   for op, i, s in zip(ops, ideal, sdram, strict=True)],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: ``python -m tensorfab.benches.sdram_resnet18 [--config C]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="ecp5-85f")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--json", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    out = run_sdram_resnet18_bench(args.config, args.image_size, progress=not args.json)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()

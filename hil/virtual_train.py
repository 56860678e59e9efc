"""The training run of the virtual board's profile-guided build (run by
:func:`tensorfab.sim.rtl.build.build_verilated` as ``python -m
tensorfab.hil.virtual_train --train DIR`` on the instrumented library): the RTL
executor's training program (:func:`tensorfab.sim.rtl.train.training_program`: a
blocked GEMM with a shift-and-clip epilogue) written to the board over its UART, run,
and read back, so the profile covers the host bridge, the UART and the core."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tensorfab.isa import HwConfig, TensorfabError
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.rtl.build import LIBRARY, PARAMS_FILE, VerilatedLibrary
from tensorfab.sim.rtl.train import training_main, training_program

from .board import BoardDevice
from .link import HostLink
from .virtual import InProcessTransport, SocSpec, VirtualBoard

__all__ = ["main"]


def _train(directory: Path) -> str:
    """Run the training program on the (instrumented) library in ``directory``."""
    params = json.loads((directory / PARAMS_FILE).read_text())
    cfg = HwConfig.from_dict(params["config"])
    spec = SocSpec(cfg, params["mem_bytes"], params["clock_hz"],
                   params["clock_hz"] // params["baud"], sdram=params["sdram"])
    build = VerilatedLibrary(directory.name, directory, directory / LIBRARY, 0.0, "training")
    prog = training_program(cfg)
    with VirtualBoard(spec, build=build) as board:
        transport = InProcessTransport(board)
        device = BoardDevice(HostLink(transport, timeout=64 * transport.byte_seconds))
        got = device.run(prog)
        cycles = board.cycle
    if not np.array_equal(got.dram, FunctionalSimulator().run(prog).dram):
        raise TensorfabError("the virtual board's training program gave a wrong result")
    return f"trained on {cycles} cycles"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tensorfab.hil.virtual_train --train DIR`` (profile-guided builds)."""
    return training_main("tensorfab.hil.virtual_train", _train, argv)


if __name__ == "__main__":
    sys.exit(main())

"""The training run of a profile-guided harness build (run by :mod:`.build` as
``python -m tensorfab.sim.rtl.train --train DIR`` on the instrumented library)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tensorfab.isa import AluOp, HwConfig, Program
from tensorfab.sim.testing.blocked_gemm import build_blocked_gemm

from .build import LIBRARY, HarnessBuild, HarnessBuildError
from .harness import Harness, RunStatus


def training_program(cfg: HwConfig) -> Program:
    """The program a profile-guided build trains on: a blocked GEMM of
    ``16·max(block_in, block_out)`` per side with two virtual threads and a
    shift-and-clip ALU epilogue (loads, GEMM, ALU, stores, all token queues)."""
    side = 16 * max(cfg.block_in, cfg.block_out)
    m = -(-side // cfg.batch) * cfg.batch
    vthreads = 2 if cfg.dep_queue_depth >= 2 else 1
    return build_blocked_gemm(cfg, m, side, side, vthreads=vthreads,
                              epilogue=[(AluOp.SHR, 4), (AluOp.CLIP, 127)])


def _train(directory: Path) -> str:
    """Run :func:`training_program` on the (instrumented) library in ``directory``."""
    cfg = HwConfig.from_json((directory / "config.json").read_text())
    built = HarnessBuild(cfg, directory.name, directory, directory / LIBRARY, 1, 0.0,
                         "training")
    prog = training_program(cfg)
    image = prog.dram_image()
    with Harness(built) as h:
        h.load_dram(image)
        h.reset()
        h.start(0, len(prog.insns), image.size)
        status = h.run(50_000_000, 10_000)
        if status is not RunStatus.DONE:
            raise HarnessBuildError(f"the training program ended with {status.name}")
        return f"trained on {h.run_cycles} cycles"


def training_main(module: str, train: Callable[[Path], str],
                  argv: Sequence[str] | None = None) -> int:
    """``python -m MODULE --train DIR``: run ``train(DIR)`` and print what it says (the
    command line of a profile-guided build's training run)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "--train":
        print(f"usage: python -m {module} --train BUILD_DIR", file=sys.stderr)
        return 2
    print(train(Path(args[1])))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tensorfab.sim.rtl.train --train DIR`` (used by profile-guided builds)."""
    return training_main("tensorfab.sim.rtl.train", _train, argv)


if __name__ == "__main__":
    sys.exit(main())

"""``tensorfab demo``: assemble the example GEMM + requantization program, run it on the
functional simulator and check it against numpy."""

from __future__ import annotations

import time
from importlib import resources

import numpy as np
from rich.console import Console
from rich.table import Table

EXAMPLE = "gemm_requant.s"
MULT, SHIFT = 3, 11  # the epilogue constants of the example (see its first line)


def example_path() -> str:
    """File system path of the shipped example program."""
    return str(resources.files("tensorfab") / "examples" / EXAMPLE)


def reference(a: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """numpy reference of the example: packed A, packed W, bias -> packed C (int8)."""
    m, kb, blk = a.shape
    nb = w.shape[0]
    a_full = a.reshape(m, kb * blk).astype(np.int64)
    b_full = w.transpose(1, 3, 0, 2).reshape(kb * blk, nb * blk).astype(np.int64)
    acc = a_full @ b_full + bias.reshape(-1)
    acc = acc * MULT
    # round half away from zero, as gemmlowp's RoundingDivideByPOT
    q = np.sign(acc) * ((np.abs(acc) + (1 << (SHIFT - 1))) >> SHIFT)
    q = np.clip(q, -128, 127)
    q = np.maximum(q, 0)
    return q.astype(np.int8).reshape(m, nb, blk)


def run_demo(console: Console) -> int:
    """Run the demo; 0 if the simulator matches numpy."""
    from tensorfab.isa.asm import assemble_file
    from tensorfab.sim import FunctionalSimulator

    path = example_path()
    prog = assemble_file(path)
    console.print(f"[bold]assembled[/] {EXAMPLE}: {len(prog.insns)} instructions, "
                  f"{len(prog.uops)} micro-ops, {prog.dram_size} bytes of DRAM, "
                  f"config {prog.config.name}", soft_wrap=True)
    t0 = time.perf_counter()
    result = FunctionalSimulator().run(prog)
    dt = time.perf_counter() - t0
    got = result.outputs["C"]
    want = reference(prog.segment("A").data, prog.segment("W").data,
                     prog.segment("bias").data)
    ok = np.array_equal(got, want)
    console.print(f"[bold]ran[/] on the functional simulator in {dt * 1e3:.1f} ms",
                  soft_wrap=True)
    table = Table(title="counters")
    table.add_column("counter")
    table.add_column("value", justify="right")
    for k, v in result.counters.to_dict().items():
        table.add_row(k, f"{v:,}")
    console.print(table)
    mism = int(np.count_nonzero(got != want))
    verdict = "[bold green]PASS[/]" if ok else f"[bold red]FAIL[/] ({mism} elements differ)"
    console.print(f"result check against numpy: {verdict} ({got.size} outputs, "
                  f"{np.count_nonzero(got)} non-zero, range {got.min()}..{got.max()})",
                  soft_wrap=True)
    return 0 if ok else 1

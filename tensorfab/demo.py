"""``tensorfab demo``: assemble the example GEMM + requantization program, run it on the
functional simulator and check it against numpy."""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from tensorfab.example import EXAMPLE, example_path, reference


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
    from tensorfab.models.digits_demo import run_digits_demo

    digits_status = run_digits_demo(console)
    return 0 if ok and digits_status == 0 else 1

"""The real synthesis runs a resource model is fitted to: a fixed set of configurations,
each synthesized for an ECP5 board by the build flow's own Yosys command
(:func:`tensorfab.fpga_builds.breakdown.flat_synthesis`), one at a time, each result
kept on disk beside the source hash of the design it was built from.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tensorfab.fpga_builds.board_configs import board_config
from tensorfab.isa import PRESETS, HwConfig

__all__ = ["TRAINING_CONFIGS", "design_source_hash", "synthesize_configs", "yosys_version"]

#: Source folders that decide the synthesized design (the hardware, its configuration
#: and the board top with its build flow).
#: What the synthesized design comes from: the ISA and the hardware, and the board tops,
#: board configurations and Yosys commands of ``fpga_builds`` (not its reports, timing
#: paths or programming tools, which change no netlist).
_DESIGN_SOURCES = ("isa/**/*.py", "hw/**/*.py", "fpga_builds/board_top.py",
                   "fpga_builds/boards.py", "fpga_builds/board_configs.py",
                   "fpga_builds/flow.py", "fpga_builds/breakdown.py",
                   "fpga_builds/configs/*.json")

_BASE = HwConfig()  # the base of `tensorfab dse` points: dram_addr_width 32, queues 8

#: The configurations the resource model is fitted to: the presets that fit an 85F
#: (``tiny``, ``small``) and points around the DSE's base config varying the GEMM shape
#: (batch, block_in, block_out: 16 to 256 MACs, 4 to 16 ALU lanes), the buffer depths
#: (10 to 216 block RAMs by their shapes) and the memory bus width (32 to 128 bits);
#: and the two board configurations (``ecp5-85f``: ``small``'s shape, ``ecp5-25f``:
#: 1x4x2 on a 16-bit bus), the builds without performance counters.
TRAINING_CONFIGS: tuple[HwConfig, ...] = (
    PRESETS["tiny"],
    PRESETS["small"],
    dataclasses.replace(_BASE, name="rm-1x8x8", block_in=8, block_out=8),
    dataclasses.replace(_BASE, name="rm-1x4x8", block_in=4, block_out=8, inp_depth=512,
                        wgt_depth=256, acc_depth=512, uop_depth=1024, mem_bus_width=32),
    dataclasses.replace(_BASE, name="rm-2x8x8", batch=2, block_in=8, block_out=8,
                        inp_depth=1024, wgt_depth=512, acc_depth=1024, uop_depth=2048,
                        mem_bus_width=128),
    dataclasses.replace(_BASE, name="rm-1x16x8", block_in=16, block_out=8),
    dataclasses.replace(_BASE, name="rm-1x8x16", block_in=8, block_out=16,
                        wgt_depth=2048, acc_depth=1024, uop_depth=4096),
    dataclasses.replace(_BASE, name="rm-1x16x16", block_in=16, block_out=16,
                        mem_bus_width=128),
    dataclasses.replace(_BASE, name="rm-1x8x8-b32", block_in=8, block_out=8, inp_depth=512,
                        wgt_depth=256, acc_depth=512, uop_depth=1024, mem_bus_width=32),
    dataclasses.replace(_BASE, name="rm-2x4x8", batch=2, block_in=4, block_out=8),
    board_config("ecp5-85f"),
    board_config("ecp5-25f"),
)


def design_source_hash() -> str:
    """Hash of the sources the synthesized design comes from (:data:`_DESIGN_SOURCES`):
    a resource figure belongs to the design of this hash."""
    import tensorfab.isa

    root = Path(tensorfab.isa.__file__).resolve().parents[1]
    h = hashlib.sha256()
    for pattern in _DESIGN_SOURCES:
        for f in sorted(root.glob(pattern)):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def yosys_version() -> str:
    """The version line of the YoWASP Yosys the builds run (``Yosys 0.x ...``)."""
    import subprocess

    from tensorfab.fpga_builds.flow import yowasp_env

    env = yowasp_env()
    out = subprocess.run([env["YOSYS"], "-V"], capture_output=True, text=True, env=env,
                         check=False)
    return out.stdout.strip() or out.stderr.strip()


def _config_key(cfg: HwConfig) -> str:
    d = cfg.to_dict()
    d.pop("name")
    d.pop("clock_mhz")  # the SoC's clock does not change the synthesized netlist
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def synthesize_configs(configs: Sequence[HwConfig], board: str, out_dir: str | Path, *,
                       console: Any = None,
                       done: Callable[[dict[str, Any]], None] | None = None
                       ) -> list[dict[str, Any]]:
    """Synthesize each config for ``board`` (one after the other), reusing results.

    A result is kept in ``out_dir/NAME/synthesis.json`` with the config, the design's
    source hash and the Yosys version; a later call reuses it when the config and the
    source hash are the same, so an interrupted run resumes and a design change
    rebuilds.

    Parameters
    ----------
    configs : sequence of HwConfig
        What to synthesize (:data:`TRAINING_CONFIGS` for the model).
    board : str
        An ECP5 board of :data:`tensorfab.fpga_builds.boards.BOARDS`.
    out_dir : path
        Work directory: one folder per config.
    console : rich Console, optional
        Where the Yosys progress goes.
    done : callable, optional
        Called with each result as it is ready (built or reused).

    Returns
    -------
    list of dict
        Per config: ``config`` (its dict), ``board``, ``LUT`` (LUT4 slots as
        ``fpga breakdown``'s ``logic``), ``LUT4``, ``FF``, ``DSP``, ``BRAM``,
        ``seconds``, ``source_hash``, ``yosys``, ``reused``.

    Raises
    ------
    UsageError
        ``board`` is unknown or not an ECP5 board (the model counts ECP5 LUT4 slots,
        DP16KD and MULT18X18D blocks), before anything is synthesized.
    """
    from tensorfab.fpga_builds.breakdown import flat_synthesis

    from .resource_model import ecp5_board

    ecp5_board(board)
    source = design_source_hash()
    yosys = yosys_version()
    out = Path(out_dir)
    results = []
    for cfg in configs:
        folder = out / cfg.name
        record_path = folder / "synthesis.json"
        key = _config_key(cfg)
        record = None
        if record_path.exists():
            old = json.loads(record_path.read_text())
            if old.get("config_key") == key and old.get("source_hash") == source:
                record = old | {"reused": True}
        if record is None:
            # on-chip memory: the model adds the board's memory BRAMs per estimate
            flat = flat_synthesis(board, cfg, folder, console=console, sdram=False)
            totals = flat["totals"]
            record = {"name": cfg.name, "config": cfg.to_dict(), "config_key": key,
                      "board": board, "LUT": flat["logic"], "LUT4": totals["LUT"],
                      "CARRY": totals["CARRY"], "LUTRAM": totals["LUTRAM"],
                      "FF": totals["FF"], "DSP": totals["DSP"], "BRAM": totals["BRAM"],
                      "seconds": flat["seconds"], "source_hash": source, "yosys": yosys}
            record_path.write_text(json.dumps(record, indent=2) + "\n")
            record = record | {"reused": False}
        results.append(record)
        if done is not None:
            done(record)
    return results

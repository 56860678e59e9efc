"""Advice for one model on one board: compile it for each candidate configuration and
say which ones fit the board's device memory, how many cycles each takes and which to
build.

Cycles are the compiler's per-program ``estimated_cycles`` (the timing model: within
1.3 % of the RTL on the ResNet-18 and dense workloads, up to ~10 % on random programs),
so the latency is an estimate too. Resources: only the board's own configuration is
known to fit from a real build (docs/fpga.md); the others are marked unknown, as no
resource model is fitted yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ConfigAdvice", "advise", "candidate_configs"]


@dataclass
class ConfigAdvice:
    """One configuration's figures for the model on the board.

    Attributes
    ----------
    config : str
        Preset or board configuration name.
    device_memory_bytes : int
        Device memory the compiled model needs (static + activations).
    fits_memory : bool
        Whether that is within the board's memory.
    resources : str
        ``"built"`` for the board's own configuration (a real build fits), else
        ``"unknown"``.
    estimated_cycles : int
        Sum of the accelerator programs' timing-model cycles, one inference.
    estimated_latency_ms : float
        Those cycles at the board's clock.
    accel_programs : int
        Accelerator programs in the compiled model.
    error : str or None
        Why the model did not compile for this configuration.
    """

    config: str
    device_memory_bytes: int | None
    fits_memory: bool
    resources: str
    estimated_cycles: int | None
    estimated_latency_ms: float | None
    accel_programs: int
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def candidate_configs() -> list[str]:
    """The presets and the board configurations."""
    from tensorfab.fpga_builds.board_configs import board_config_names
    from tensorfab.isa import PRESETS

    return [*PRESETS, *board_config_names()]


def advise(model: Any, board_name: str, calibration: Any = None,
           input_shapes: dict[str, tuple[int | str, ...]] | None = None,
           configs: Sequence[str] | None = None) -> dict[str, Any]:
    """Compile ``model`` for every candidate config and rank them for ``board_name``.

    Returns
    -------
    dict
        ``board``, ``board_memory_bytes``, ``clock_mhz``, ``configs`` (a
        :class:`ConfigAdvice` dict each) and ``build``: the fastest config that fits the
        memory and is known to fit the board's resources (``None`` if none does), and
        ``fastest_fitting_memory``: the fastest that fits the memory, resources unknown.
    """
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.fpga_builds.boards import get_board
    from tensorfab.isa import TensorfabError
    from tensorfab.runtime.accel_contract import ACCEL_PROGRAM
    from tensorfab.runtime.memory_plan import OutOfDeviceMemory, plan_memory

    board = get_board(board_name)
    clock = board.clock_mhz or board.clock_in_mhz
    rows: list[ConfigAdvice] = []
    for name in configs or candidate_configs():
        resources = "built" if name == board.config else "unknown"
        try:
            compiled = compile_onnx(model, config=board_config(name),
                                    calibration=calibration, input_shapes=input_shapes)
        except TensorfabError as e:
            rows.append(ConfigAdvice(name, None, False, resources, None, None, 0, str(e)))
            continue
        accel = [n for n in compiled.program.nodes if n.op == ACCEL_PROGRAM]
        try:
            plan = plan_memory(compiled.program)
            needed = plan.size if plan is not None else 0
        except OutOfDeviceMemory as e:
            needed = e.needed
        cycles = sum(int(n.attrs.get("estimated_cycles", 0)) for n in accel)
        rows.append(ConfigAdvice(name, needed, needed <= board.mem_bytes, resources, cycles,
                                 cycles / (clock * 1e3), len(accel)))
    fitting = sorted((r for r in rows if r.fits_memory and r.estimated_cycles is not None),
                     key=lambda r: r.estimated_cycles or 0)
    build = next((r.config for r in fitting if r.resources == "built"), None)
    return {"board": board.name, "board_memory_bytes": board.mem_bytes,
            "clock_mhz": clock, "configs": [r.to_json() for r in rows],
            "build": build,
            "fastest_fitting_memory": fitting[0].config if fitting else None,
            "cycles_source": "timing model (estimated)"}

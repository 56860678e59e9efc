"""Advice for one model on one board: compile it for each candidate configuration and
say which ones fit the board's device memory, how many cycles each takes and which to
build.

Cycles are the compiler's per-program ``estimated_cycles`` (the timing model: within
1.5 % of the RTL on the ResNet-18 and dense workloads, up to ~6 % on random programs),
so the latency is an estimate too. Host traffic is what one inference of the model
loaded resident moves over the host link, from its device memory plan
(:func:`~tensorfab.runtime.resident.planned_host_traffic`). Resources on an ECP5 board
come from the resource model fitted to Yosys builds (:mod:`.resource_model`, estimated);
the board's own configuration is also known to fit from a real build (docs/fpga.md). On
an iCE40 board (no model) only that build is known. A config with a real build on the
board (:data:`~.resource_model.REPORTED_BUILDS`) reports its fmax, and one whose fmax is
below the board's clock is not the one to build.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ConfigAdvice", "advise", "candidate_configs"]


@dataclass
class ConfigAdvice:
    """One configuration's figures for the model on the board.

    Attributes
    ----------
    config : str
        Preset or board configuration name; for a JSON file, the config's own ``name``
        (its file's stem when it has none).
    device_memory_bytes : int
        Device memory the compiled model needs (static + activations).
    fits_memory : bool
        Whether that is within the board's memory (:attr:`board_memory_bytes`).
    resources : str
        ``"built"`` for a configuration a real build on the board is recorded for
        (the board's own; on the 85F also ``small``, which did not route),
        ``"estimated"`` for the others on an ECP5 board (the resource model), else
        ``"unknown"``.
    lut, ff, dsp, bram : int or None
        What the recorded real build used when it was built with the advised device
        memory, else the resource model's estimates on the board (``None`` without a
        model).
    resource_counts : str or None
        Where ``lut`` .. ``bram`` come from: ``"built"`` or ``"estimated"``.
    built_memory : str or None
        The device memory of the recorded real build (``on-chip``, ``sdram``): its fmax
        and whether it routed are that SoC's.
    fits_board : bool or None
        Whether the config fits the board's device: a recorded real build (it
        routed), else the estimates against its capacity; ``None`` when unknown.
    over : list of str
        The estimated resources beyond the device, a real build that did not route,
        and one whose fmax is below the board's clock.
    fmax_mhz : float or None
        The fmax a real build of the config on the board reached (:data:`~.resource_model.
        REPORTED_BUILDS`), None without one.
    meets_clock : bool or None
        Whether that build's fmax reaches the board's clock; None without a build.
    estimated_cycles : int
        Sum of the accelerator programs' timing-model cycles, one inference.
    estimated_latency_ms : float
        Those cycles at the board's clock.
    accel_programs : int
        Accelerator programs in the compiled model.
    host_bytes_written, host_bytes_read : int or None
        Bytes the host link moves to and from device memory per inference, the model
        loaded resident (:func:`tensorfab.runtime.resident.planned_host_traffic`: what
        a run counts; the weights and programs, written once at load, excluded);
        ``None`` when the model does not fit the memory (no plan).
    host_bytes : int or None
        Their sum.
    error : str or None
        Why the model did not compile for this configuration.
    board_memory_bytes : int or None
        The board's device memory this configuration reaches: on-chip, or the SDRAM
        within its address range (a 24-bit config reaches 16 MB of the ULX3S's 32 MB).
    config_file : str or None
        The JSON file the configuration came from (what ``compile --config`` and
        ``fpga build --config`` take), None for a preset or board configuration.
    """

    config: str
    device_memory_bytes: int | None
    fits_memory: bool
    resources: str
    estimated_cycles: int | None
    estimated_latency_ms: float | None
    accel_programs: int
    error: str | None = None
    host_bytes_written: int | None = None
    host_bytes_read: int | None = None
    host_bytes: int | None = None
    lut: int | None = None
    ff: int | None = None
    dsp: int | None = None
    bram: int | None = None
    fits_board: bool | None = None
    over: list[str] = field(default_factory=list)
    fmax_mhz: float | None = None
    meets_clock: bool | None = None
    board_memory_bytes: int | None = None
    config_file: str | None = None
    resource_counts: str | None = None
    built_memory: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def candidate_configs() -> list[str]:
    """The presets and the board configurations."""
    from tensorfab.fpga_builds.board_configs import board_config_names
    from tensorfab.isa import PRESETS

    return [*PRESETS, *board_config_names()]


def advise(model_path: Any, board_name: str, calibration: Any = None,
           input_shapes: dict[str, tuple[int | str, ...]] | None = None,
           configs: Sequence[str] | None = None, memory: str | None = None
           ) -> dict[str, Any]:
    """Compile the ONNX model at ``model_path`` for every candidate config and rank
    them for ``board_name``, its device memory ``memory`` (``sdram``, ``on-chip``;
    None: the board's, SDRAM on a ULX3S).

    An input whose only symbolic dim is the first (the batch) and that
    ``input_shapes`` does not fix is advised at batch 1, one inference (``batch_one``
    names those inputs).

    Raises
    ------
    UsageError
        ``memory`` ``sdram`` on a board without one.
    ModelCompileError
        The model cannot be read, an input has symbolic dims other than its batch that
        ``input_shapes`` does not fix, it is a float model and no calibration is given,
        or every config fails to compile it the same way: once, not per config.

    Returns
    -------
    dict
        ``board``, ``board_memory`` (``sdram`` or ``on-chip``), ``board_memory_bytes``
        (the board's; each config's reach is its row's), ``clock_mhz``, ``configs`` (a
        :class:`ConfigAdvice` dict each) and ``build``: the fastest config that fits the
        memory and the board's device and is not known to miss its clock (``None`` if
        none does), ``build_config`` what ``fpga build --config`` takes for it (its
        name or JSON file), ``build_resources`` whether its fit is from a real build
        (``built``) or the resource model (``estimated``), and
        ``fastest_fitting_memory``: the fastest that fits the memory whatever its
        resources; ``resources_source`` says where the resources come from;
        ``batch_one``: the inputs whose symbolic batch was taken as 1.
    """
    from tensorfab.compiler.frontend.onnx_import import load_onnx
    from tensorfab.compiler.model_compile import (
        FloatModelError,
        ModelCompileError,
        check_fixed_inputs,
        compile_onnx,
    )
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.fpga_builds.boards import get_board
    from tensorfab.fpga_builds.errors import FpgaBuildError
    from tensorfab.isa import TensorfabError, UsageError
    from tensorfab.runtime.accel_contract import ACCEL_PROGRAM
    from tensorfab.runtime.memory_plan import OutOfDeviceMemory, plan_memory
    from tensorfab.runtime.resident import planned_host_traffic

    from .model_workload import batch_one_shapes
    from .resource_model import ResourceModel

    board = get_board(board_name)
    try:
        in_sdram = board.uses_sdram(memory)
    except FpgaBuildError as e:
        raise UsageError(f"--memory: {e}") from None
    memory = "sdram" if in_sdram else "on-chip"
    prepared = load_onnx(model_path)  # loaded and checked once for every config
    input_shapes, batch_one = batch_one_shapes(prepared, input_shapes)
    check_fixed_inputs(prepared, input_shapes)
    model = ResourceModel.load() if board.family == "ecp5" else None
    clock = board.clock_mhz or board.clock_in_mhz
    rows: list[ConfigAdvice] = []
    failures: list[TensorfabError] = []
    names = [str(n) for n in configs or candidate_configs()]
    labels = {n for n in names if not n.endswith(".json")}
    for name in names:
        cfg = board_config(name)
        config_file, label = None, name
        if label.endswith(".json"):
            config_file = label
            label = cfg.name if cfg.name != "custom" else Path(label).stem
            if label in labels:  # a name taken: told apart by its path
                label = config_file
            labels.add(label)
        name = label
        res: dict[str, Any] = {"resources": "unknown"}
        if model is not None:
            est = model.estimate(cfg, board.name, sdram=in_sdram)
            fits, over = model.fits(est, board.name)
            res = {"resources": "estimated", "lut": est["LUT"], "ff": est["FF"],
                   "dsp": est["DSP"], "bram": est["BRAM"], "fits_board": fits,
                   "over": over, "resource_counts": "estimated"}
        known = (model.reported_build(board.name, cfg, memory) if model is not None
                 else None)
        if known is not None:  # a real build outweighs the estimate
            res |= {"resources": "built", "fits_board": known["routed"],
                    "built_memory": known["memory"]}
            if known["memory"] == memory:  # its counts are this SoC's
                used = known["used"]
                res |= {"lut": used["LUT"], "ff": used["FF"], "dsp": used["DSP"],
                        "bram": used["BRAM"], "resource_counts": "built"}
            if not known["routed"]:
                res["over"] = [*res.get("over", []),
                               f"a real build did not route: {known.get('note', '')}"]
            elif known["fmax_mhz"] is not None:
                res |= {"fmax_mhz": known["fmax_mhz"],
                        "meets_clock": known["fmax_mhz"] >= clock}
                if not res["meets_clock"]:
                    res["over"] = [*res.get("over", []),
                                   f"a real build reached {known['fmax_mhz']:g} MHz "
                                   f"(constraint {known['constraint_mhz']:g} MHz), below "
                                   f"the board's {clock:g} MHz"]
        elif config_file is None and name == board.config:
            res |= {"resources": "built", "fits_board": board.fits}
        try:
            compiled = compile_onnx(prepared, config=cfg, calibration=calibration,
                                    input_shapes=input_shapes)
        except FloatModelError as e:  # the model's, the same for every config
            raise ModelCompileError(
                f"{e.where} is a float model and every config runs int8 layers: pass "
                "calibration inputs (--calib calib.npy) to quantize it") from e
        except TensorfabError as e:
            failures.append(e)
            rows.append(ConfigAdvice(name, None, False, estimated_cycles=None,
                                     estimated_latency_ms=None, accel_programs=0,
                                     error=str(e), config_file=config_file, **res))
            continue
        accel = [n for n in compiled.program.nodes if n.op == ACCEL_PROGRAM]
        traffic: dict[str, int | None] = {}
        try:
            plan = plan_memory(compiled.program)
            needed = plan.size if plan is not None else 0
            if plan is not None:
                moved = planned_host_traffic(compiled.program, plan)
                traffic = {"host_bytes_written": moved.written,
                           "host_bytes_read": moved.read, "host_bytes": moved.total}
        except OutOfDeviceMemory as e:
            needed = e.needed
        cycles = sum(int(n.attrs.get("estimated_cycles", 0)) for n in accel)
        limit = board.memory_bytes(cfg, memory)
        rows.append(ConfigAdvice(name, needed, needed <= limit,
                                 estimated_cycles=cycles,
                                 estimated_latency_ms=cycles / (clock * 1e3),
                                 accel_programs=len(accel), board_memory_bytes=limit,
                                 config_file=config_file, **traffic, **res))
    if failures and len(failures) == len(rows) and len({str(e) for e in failures}) == 1:
        raise failures[0]  # the model's problem, not a config's
    fitting = sorted((r for r in rows if r.fits_memory and r.estimated_cycles is not None),
                     key=lambda r: r.estimated_cycles or 0)
    chosen = next((r for r in fitting if r.fits_board and r.meets_clock is not False), None)
    return {"board": board.name, "board_memory": memory,
            "board_memory_bytes": board.sdram_bytes if in_sdram else board.mem_bytes,
            "clock_mhz": clock, "configs": [r.to_json() for r in rows],
            "build": chosen.config if chosen else None,
            "build_config": (chosen.config_file or chosen.config) if chosen else None,
            "build_resources": chosen.resources if chosen else None,
            "fastest_fitting_memory": fitting[0].config if fitting else None,
            "cycles_source": "timing model (estimated)", "batch_one": batch_one,
            "resources_source": (f"resource model fitted to Yosys builds (estimated; "
                                 f"held-out error {model.held_out_text()}); configs with "
                                 "a real build recorded: its fit and fmax, and its counts "
                                 "where it had this device memory" if model is not None
                                 else "the board's own config from a real build; no "
                                 f"resource model for {board.family}")}

"""Where int8 residual adds (``qnn.add_q31``) run: the CPU kernel against the
accelerator program, measured.

For each ``qnn.add_q31`` of a graph, :func:`measure_residual_adds` times the CPU kernel
(:data:`tensorfab.runtime.kernels.KERNELS`, the one the graph runs) on seeded int8
operands of the call's shape, builds the equivalent accelerator program
(:func:`tensorfab.compiler.tensor.residual_add.residual_add_program`), runs it on a
:class:`~tensorfab.sim.Device` and checks it bit for bit against the kernel. Neither
cost depends on the values (the kernel is vectorized numpy; the accelerator's cycles
depend only on the program).

:func:`residual_add_device` is the placement rule: the accelerator runs an add when its
time at the config's clock is below the CPU kernel's time plus the host-link transfers
the CPU placement implies (both operands to the host, the sum back: 3 bytes per element
when the neighbours run on the accelerator). A link of unbounded speed (simulated device
memory) gives the kernel time alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorfab.compiler.tensor.residual_add import residual_add_program
from tensorfab.compiler.tensor.timing import estimated_program_cycles
from tensorfab.isa import HwConfig
from tensorfab.runtime.kernels import KERNELS
from tensorfab.runtime.layout_transform import transformed_shape

from .infer import infer_types
from .ir import Call, Function, post_order

__all__ = ["CPU_ADD_FIXED_SECONDS", "CPU_ADD_SECONDS_PER_ELEMENT",
           "ResidualAddMeasurement", "estimate_residual_add", "measure_residual_adds",
           "residual_add_calls", "residual_add_device"]


@dataclass(frozen=True)
class ResidualAddMeasurement:
    """One residual add on both devices.

    Attributes
    ----------
    shape : tuple[int, ...]
        Operand shape.
    cpu_seconds : float
        The CPU kernel's time (best of the repeats).
    accel_cycles : int | None
        Cycles of the accelerator program on the device (None: untimed executor).
    accel_estimated_cycles : int
        The tensor compiler's timing model for the program.
    accel_wall_seconds : float
        Wall time of running the program on the device (simulation included).
    exact : bool | None
        Whether the accelerator's result equals the CPU kernel's bit for bit (None: not
        run).
    """

    shape: tuple[int, ...]
    cpu_seconds: float
    accel_cycles: int | None
    accel_estimated_cycles: int
    accel_wall_seconds: float
    exact: bool | None

    @property
    def elements(self) -> int:
        """Elements of one operand."""
        return int(np.prod(self.shape))

    @property
    def host_bytes(self) -> int:
        """Bytes the CPU placement moves over the host link (two operands, one sum)."""
        return 3 * self.elements


def residual_add_calls(fn: Function) -> list[Call]:
    """The ``qnn.add_q31`` calls of ``fn`` in program order."""
    infer_types(fn)
    return [e for e in post_order(fn) if isinstance(e, Call) and e.op == "qnn.add_q31"]


#: The CPU kernel's cost model, fitted to its measured times (``measure_residual_adds``
#: on a quiet machine: ResNet-18's eight adds, 752,640 elements, 12.8 ms; a 1,024-element
#: add about 0.1 ms): a fixed cost per call plus a cost per element.
CPU_ADD_FIXED_SECONDS = 80e-6
CPU_ADD_SECONDS_PER_ELEMENT = 17e-9


def estimate_residual_add(call: Call, cfg: HwConfig) -> ResidualAddMeasurement:
    """The compile-time estimate of one ``qnn.add_q31`` (deterministic): the CPU kernel
    by :data:`CPU_ADD_FIXED_SECONDS` and :data:`CPU_ADD_SECONDS_PER_ELEMENT`, the
    accelerator program by the timing model's cycles (not run: ``accel_cycles`` and
    ``exact`` None). The program is the one for the blocked operands (channels padded
    to the config's blocks), as :mod:`.accel_lowering` compiles it."""
    from .layout_planning import activation_layout

    shape = tuple(call.checked_type.shape)  # type: ignore[union-attr]
    cpu = CPU_ADD_FIXED_SECONDS + CPU_ADD_SECONDS_PER_ELEMENT * int(np.prod(shape))
    blocked = transformed_shape(shape, "NCHW", activation_layout(cfg))
    program = residual_add_program(cfg, blocked, call.attrs)
    return ResidualAddMeasurement(shape, cpu, None, estimated_program_cycles(program),
                                  0.0, None)


def measure_residual_adds(fn: Function, cfg: HwConfig, device: Any, *, seed: int = 0,
                          repeats: int = 5) -> list[ResidualAddMeasurement]:
    """Measure every ``qnn.add_q31`` of ``fn`` on the CPU and on ``device`` (see the
    module docstring)."""
    rng = np.random.default_rng(seed)
    out = []
    for call in residual_add_calls(fn):
        shape = tuple(call.checked_type.shape)  # type: ignore[union-attr]
        a, b = (rng.integers(-128, 128, shape).astype(np.int8) for _ in range(2))
        kernel = KERNELS["qnn.add_q31"]
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            want = kernel([a, b], dict(call.attrs))
            best = min(best, time.perf_counter() - t0)
        program = residual_add_program(cfg, shape, call.attrs, a, b)
        t0 = time.perf_counter()
        result = device.run(program)
        wall = time.perf_counter() - t0
        out.append(ResidualAddMeasurement(
            shape, best, result.cycles, estimated_program_cycles(program), wall,
            bool(np.array_equal(result.outputs["out"], want))))
    return out


def residual_add_device(m: ResidualAddMeasurement, cfg: HwConfig,
                        link_bytes_per_second: float | None = None) -> str:
    """``"accel"`` if the accelerator program is faster than the CPU kernel plus the
    host-link transfers of the CPU placement, else ``"cpu"`` (an untimed measurement
    uses the timing model's cycles)."""
    cycles = m.accel_cycles if m.accel_cycles is not None else m.accel_estimated_cycles
    accel = cycles / (cfg.clock_mhz * 1e6)
    cpu = m.cpu_seconds + (m.host_bytes / link_bytes_per_second
                           if link_bytes_per_second else 0.0)
    return "accel" if accel < cpu else "cpu"


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
from tensorfab.isa import HwConfig
from tensorfab.runtime.kernels import KERNELS

from .infer import infer_types
from .ir import Call, Function, post_order

__all__ = ["CPU_ADD_FIXED_SECONDS", "CPU_ADD_SECONDS_PER_ELEMENT", "AccelAddsRun",
           "ResidualAddMeasurement", "estimate_residual_add",
           "measure_residual_adds",
           "residual_add_calls", "residual_add_device", "run_with_accel_adds",
           "simulate_cycles"]


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
    ``exact`` None)."""
    shape = tuple(call.checked_type.shape)  # type: ignore[union-attr]
    cpu = CPU_ADD_FIXED_SECONDS + CPU_ADD_SECONDS_PER_ELEMENT * int(np.prod(shape))
    program = residual_add_program(cfg, shape, call.attrs)
    return ResidualAddMeasurement(shape, cpu, None, round(simulate_cycles(program, cfg)),
                                  0.0, None)


def measure_residual_adds(fn: Function, cfg: HwConfig, device: Any, *, seed: int = 0,
                          repeats: int = 5) -> list[ResidualAddMeasurement]:
    """Measure every ``qnn.add_q31`` of ``fn`` on the CPU and on ``device`` (see the
    module docstring)."""
    from tensorfab.compiler.tensor.timing import simulate

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
        timing = simulate(program.insns, cfg)
        out.append(ResidualAddMeasurement(
            shape, best, result.cycles, round(timing.cycles) if timing else 0, wall,
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


@dataclass(frozen=True)
class AccelAddsRun:
    """One run of a model with its residual adds as accelerator programs.

    Attributes
    ----------
    output : Any
        The model's output (host).
    seconds : float
        Wall time of the run.
    cpu_seconds : float
        Time in the CPU kernels (the adds excluded).
    program_cycles : int
        Cycles of the model's own accelerator programs.
    add_cycles : int
        Cycles of the residual-add programs.
    adds : int
        Residual adds run on the accelerator.
    """

    output: Any
    seconds: float
    cpu_seconds: float
    program_cycles: int
    add_cycles: int
    adds: int

    @property
    def total_cycles(self) -> int:
        """Accelerator cycles of the run, adds included."""
        return self.program_cycles + self.add_cycles


def run_with_accel_adds(program: Any, inputs: Any, device: Any, cfg: HwConfig,
                        model: Any = None) -> AccelAddsRun:
    """Run a lowered model (:class:`~tensorfab.runtime.interpreter.GraphProgram`) with
    every ``qnn.add_q31`` node run as :func:`residual_add_program` on ``device`` (its
    operands read to the host and written to the program's own DRAM image, since an
    ``accel.program`` node takes one activation), the ``accel.program`` nodes on
    ``model`` (a :class:`~tensorfab.runtime.resident.ResidentModel` of ``program`` on
    ``device``) or standalone, and the rest on the CPU kernels. The A/B counterpart of the
    model's own run with the adds on the CPU."""
    from tensorfab.runtime.interpreter import run_program
    from tensorfab.runtime.kernels import run_accel_program
    from tensorfab.runtime.resident import host_value

    cycles = {"programs": 0, "adds": 0, "n": 0}
    cpu = [0.0]
    cache: dict[tuple, Any] = {}

    def call(index: int, node: Any, args: list[Any], attrs: Any) -> Any:
        if node.op == "accel.program":
            if model is not None:
                out, result = model.run_accel(index, args[0])
            else:
                result = run_accel_program(host_value(args[0]), args[1], dict(attrs),
                                           device)
                out = result.outputs[attrs["output_segment"]]
            cycles["programs"] += int(result.cycles or attrs.get("estimated_cycles") or 0)
            return out
        host = [host_value(a) for a in args]
        if node.op == "qnn.add_q31":
            a, b = (np.ascontiguousarray(x, np.int8) for x in host)
            key = (a.shape, tuple(sorted(attrs.items())))
            if key not in cache:
                cache[key] = residual_add_program(cfg, a.shape, attrs)
            p = cache[key]
            image = p.dram_image()
            layout = p.layout()
            for name, x in (("a", a), ("b", b)):
                r = layout[name]
                image[r.offset: r.offset + r.nbytes] = x.view(np.uint8).ravel()
            result = device.run(p, image)
            cycles["adds"] += int(result.cycles if result.cycles is not None
                                  else round(simulate_cycles(p, cfg)))
            cycles["n"] += 1
            return result.outputs["out"]
        t0 = time.perf_counter()
        out = KERNELS[node.op](host, attrs)
        cpu[0] += time.perf_counter() - t0
        return out

    t0 = time.perf_counter()
    output = model.run(inputs, call=call) if model is not None else \
        host_value(run_program(program, inputs, call=call))
    return AccelAddsRun(output, time.perf_counter() - t0, cpu[0], cycles["programs"],
                        cycles["adds"], cycles["n"])


def simulate_cycles(program: Any, cfg: HwConfig) -> float:
    """The timing model's cycles for ``program`` (an untimed executor's stand-in)."""
    from tensorfab.compiler.tensor.timing import simulate

    timing = simulate(program.insns, cfg)
    return timing.cycles if timing else 0.0

"""Operator entry points: int8 conv2d, dense and batched matmul with fused epilogues.

Each function packs its operands into the blocked layouts, schedules (the caller's
:class:`.Schedule` or :func:`.default_schedule`), lowers to a
:class:`~tensorfab.isa.Program` and returns a :class:`CompiledOp` that runs it on any
:class:`~tensorfab.sim.Device` and unpacks the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tensorfab.isa import HwConfig, Program
from tensorfab.isa.layout import pack_activation, pack_bias_for, pack_weight, unpack_output

from .epilogue import Epilogue
from .errors import CompileError, integers
from .lower import lower
from .schedule import Schedule
from .schedule_source import ScheduleSource
from .tile_plan import TilePlan
from .tile_search import default_schedule
from .workload import Workload


@dataclass
class CompiledOp:
    """A lowered operator.

    Attributes
    ----------
    workload : Workload
        Its shape.
    schedule : Schedule
        The schedule used (print it to see the primitives).
    plan : TilePlan
        The resolved tiling.
    epilogue : Epilogue
        The fused epilogue.
    program : Program
        The program; its output segment is ``out``.
    out_shape : tuple[int, ...]
        Shape of the unpacked result.
    """

    workload: Workload
    schedule: Schedule
    plan: TilePlan
    epilogue: Epilogue
    program: Program
    out_shape: tuple[int, ...]

    def unpack(self, packed: np.ndarray) -> np.ndarray:
        """The unpacked int8 result from the packed ``out`` segment."""
        wl, cfg = self.workload, self.program.config
        g = wl.groups
        if packed.shape[0] % g:  # one image's blocked tensor holding every group
            packed = np.asarray(packed).reshape(g, -1, *packed.shape[2:])
        per = packed.shape[0] // g
        parts = [unpack_output(cfg, packed[i * per:(i + 1) * per], wl.batch, wl.out_channels)
                 for i in range(g)]
        full = np.stack(parts).reshape(self.out_shape[0], -1, *self.out_shape[2:])
        return full[:, :self.out_shape[1]]  # without padding groups (grouped_conv2d)

    def run(self, device: object = "fsim") -> np.ndarray:
        """Run on ``device`` (a :class:`~tensorfab.sim.Device` or its name) and return the
        unpacked result."""
        from tensorfab.sim import Device, get_device

        dev = get_device(device) if isinstance(device, str) else device
        if not isinstance(dev, Device):
            raise CompileError(f"device {device!r} is neither an executor name ('fsim', "
                               "'rtl', ...) nor a Device")
        return self.unpack(dev.run(self.program).outputs["out"])


def _epilogue(epilogue: Epilogue | None, bias: np.ndarray | None) -> Epilogue:
    ep = epilogue or Epilogue()
    if bias is not None:
        return dataclasses.replace(ep, bias=True)
    if ep.bias:
        raise CompileError("the epilogue asks for a bias but none was given")
    return ep


def _schedule(workload: Workload, cfg: HwConfig, ep: Epilogue, schedule: Schedule | None,
              vthreads: int | Sequence[int],
              schedules: ScheduleSource | None = None) -> Schedule:
    if not isinstance(cfg, HwConfig):
        raise CompileError(f"cfg {cfg!r} is not an HwConfig (e.g. "
                           "tensorfab.isa.PRESETS['default'])")
    ep.check_config(cfg)
    records = ep.record_entries(cfg, workload.out_channels, workload.groups)
    acc_records = ep.acc_record_entries(cfg, workload.out_channels, workload.groups)
    if schedule is None and schedules is not None:
        schedule = schedules.schedule(workload, cfg, ep)
    if schedule is None:
        return default_schedule(workload, cfg, vthreads, bias=ep.channel_tiles,
                                n_alu_ops=len(ep.alu_ops()), records=records,
                                residual=ep.residual is not None, acc_records=acc_records)
    if schedule.workload != workload or schedule.cfg != cfg:
        raise CompileError("the schedule was made for another workload or config")
    if schedule.bias != ep.channel_tiles:
        raise CompileError(f"the schedule was made with bias={schedule.bias}, the epilogue "
                         f"needs {ep.channel_tiles} per-channel tile(s)")
    if schedule.residual != (ep.residual is not None):
        raise CompileError("the schedule's residual reservation does not match the epilogue")
    if schedule.records != records:
        raise CompileError(f"the schedule reserves {schedule.records} weight entries for "
                           f"REQUANT records, the epilogue needs {records}")
    if schedule.acc_records != acc_records:
        raise CompileError(f"the schedule reserves {schedule.acc_records} accumulator "
                           f"entries for STORE records, the epilogue needs {acc_records}")
    return schedule


def _int8(name: str, a: np.ndarray) -> np.ndarray:
    """``a`` as int8 (:func:`~.errors.integers`)."""
    return integers(name, a, np.int8)


def _bias(bias: np.ndarray | None, out_channels: int, groups: int, cfg: HwConfig
          ) -> np.ndarray | None:
    if bias is None:
        return None
    b = integers("bias", bias, np.int32)
    if b.shape == (out_channels,):
        b = np.broadcast_to(b, (groups, out_channels))
    if b.shape != (groups, out_channels):
        raise CompileError(f"bias has shape {np.shape(bias)}, expected ({out_channels},)"
                         + (f" or ({groups}, {out_channels})" if groups > 1 else ""))
    return np.concatenate([pack_bias_for(cfg, b[i]) for i in range(groups)])


def conv2d(cfg: HwConfig, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *,
           stride: int | tuple[int, int] = 1,
           padding: int | tuple[int, int] | tuple[int, int, int, int] = 0,
           epilogue: Epilogue | None = None, schedule: Schedule | None = None,
           vthreads: int | Sequence[int] = 2, residual: np.ndarray | None = None,
           schedules: ScheduleSource | None = None) -> CompiledOp:
    """Compile an int8 2-D convolution ``(N, C, H, W) * (O, C, KH, KW)``.

    Parameters
    ----------
    cfg : HwConfig
        Target.
    x, w : numpy.ndarray
        Input (NCHW) and weights (OIHW), int8 values.
    bias : numpy.ndarray | None
        ``(O,)`` int32 bias (turns on the epilogue's bias).
    stride, padding
        As in :meth:`.Workload.conv2d`.
    epilogue : Epilogue | None
        ReLU, requantization, clip.
    schedule : Schedule | None
        A schedule of the same workload (default: :func:`.default_schedule`).
    vthreads : int | Sequence[int]
        Virtual threads of the default schedule; a sequence of counts is searched
        together and the fastest tiling wins (:func:`.default_schedule`).
    residual : numpy.ndarray | None
        ``(N, O, OH, OW)`` int8 contents of the ``res`` segment (an epilogue with
        :attr:`.Epilogue.residual`; zeros when omitted).
    schedules : ScheduleSource | None
        Asked for a schedule (e.g. a tuning log) when ``schedule`` is not given; the
        tile search picks when it has none.

    Returns
    -------
    CompiledOp
        Its result is ``(N, O, OH, OW)`` int8.
    """
    x, w = _int8("x", x), _int8("w", w)
    if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1]:
        raise CompileError(f"shapes {x.shape} and {w.shape} are not NCHW and OIHW with equal C")
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    wl = Workload.conv2d(n, c, h, wd, o, (kh, kw), stride, padding)
    ep = _epilogue(epilogue, bias)
    sched = _schedule(wl, cfg, ep, schedule, vthreads, schedules)
    plan = sched.plan()
    res = None
    if residual is not None:
        r = _int8("residual", residual)
        if r.shape != (n, o, wl.out_height, wl.out_width):
            raise CompileError(f"residual has shape {r.shape}, the output "
                               f"{(n, o, wl.out_height, wl.out_width)}")
        res = pack_activation(cfg, r)
    prog = lower(plan, ep, inp=pack_activation(cfg, x), wgt=pack_weight(cfg, w),
                 bias=_bias(bias, o, 1, cfg), residual=res)
    return CompiledOp(wl, sched, plan, ep, prog, (n, o, wl.out_height, wl.out_width))


def batch_matmul(cfg: HwConfig, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None,
                 *, epilogue: Epilogue | None = None, schedule: Schedule | None = None,
                 vthreads: int = 2) -> CompiledOp:
    """Compile ``out[g] = a[g] @ b[g]`` for ``a`` ``(G, M, K)`` and ``b`` ``(G, K, N)``
    int8 (one program; each group has its own operands).

    ``bias`` is ``(N,)`` (shared) or ``(G, N)``. The result is ``(G, M, N)`` int8.
    """
    a, b = _int8("a", a), _int8("b", b)
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise CompileError(f"shapes {a.shape} and {b.shape} are not (G, M, K) and (G, K, N)")
    g, m, k = a.shape
    n = b.shape[2]
    wl = Workload.dense(m, k, n, groups=g)
    ep = _epilogue(epilogue, bias)
    sched = _schedule(wl, cfg, ep, schedule, vthreads)
    plan = sched.plan()
    inp = np.concatenate([pack_activation(cfg, a[i].reshape(m, k, 1, 1)) for i in range(g)])
    wgt = np.concatenate([pack_weight(cfg, b[i].T.reshape(n, k, 1, 1)) for i in range(g)])
    prog = lower(plan, ep, inp=inp, wgt=wgt, bias=_bias(bias, n, g, cfg))
    return CompiledOp(wl, sched, plan, ep, prog, (g, m, n))


def dense(cfg: HwConfig, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *,
          epilogue: Epilogue | None = None, schedule: Schedule | None = None,
          vthreads: int = 2) -> CompiledOp:
    """Compile ``x @ w.T`` for ``x`` ``(M, K)`` and ``w`` ``(N, K)`` int8 (the layout of
    ONNX ``Gemm(transB=1)`` and PyTorch ``Linear``); ``bias`` is ``(N,)``. The result is
    ``(M, N)`` int8."""
    x, w = np.asarray(x), np.asarray(w)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise CompileError(f"shapes {x.shape} and {w.shape} are not (M, K) and (N, K)")
    op = batch_matmul(cfg, x[None], w.T[None], bias, epilogue=epilogue, schedule=schedule,
                      vthreads=vthreads)
    op.out_shape = (x.shape[0], w.shape[0])
    return op


def compile_workload(workload: Workload, cfg: HwConfig, epilogue: Epilogue | None = None, *,
                     schedule: Schedule | None = None, vthreads: int = 2) -> CompiledOp:
    """Compile ``workload`` without operand data (zeros), e.g. for statistics."""
    ep = epilogue or Epilogue()
    sched = _schedule(workload, cfg, ep, schedule, vthreads)
    plan = sched.plan()
    out_shape = (workload.groups, workload.batch, workload.out_channels,
                 workload.out_height, workload.out_width)
    return CompiledOp(workload, sched, plan, ep, lower(plan, ep), out_shape)


__all__ = ["CompiledOp", "batch_matmul", "compile_workload", "conv2d", "dense"]

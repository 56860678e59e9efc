"""Grouped and depthwise int8 convolutions on the GEMM core: block-diagonal weights.

A convolution with ``groups`` groups of ``C/groups`` input and ``O/groups`` output
channels is compiled as ``G' = groups / S`` independent convolutions (the tensor
compiler's workload ``groups``), each over ``S`` consecutive groups whose weights form
a block-diagonal ``(S·O/groups, S·C/groups, KH, KW)`` kernel, zeros off the diagonal
blocks. ``S`` is the smallest divisor of ``groups`` that makes a super-group's input and
output channels whole blocks of ``block_in`` and ``block_out`` (a depthwise
convolution on 16-lane blocks: ``S = 16``, one diagonal 16×16 weight entry per tap).

The data need no layout change for one image: the blocked input
``(1, C/block_in, H, W, 1, block_in)`` is, byte for byte, the grouped workload's
``(G'·1, C/(G'·block_in), H, W, 1, block_in)``, and likewise the output. A GEMM
micro-op does ``block_in × block_out`` multiply-accumulates of which, depthwise, only
the diagonal's ``block_in`` are the model's: ``1 / block_in`` of the peak. But every
output entry costs one micro-op per tap, where the vector ALU would need three per tap
(bring the shifted input into the accumulators, multiply by the tap's weights, add);
see docs/compiler.md, "Grouped and depthwise convolutions".
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tensorfab.isa import HwConfig
from tensorfab.isa.layout import pack_activation, pack_bias_for, pack_weight

from .epilogue import Epilogue
from .errors import CompileError
from .lower import lower
from .operators import CompiledOp, _schedule
from .workload import Workload

__all__ = ["MAX_DENSE_GROUPS", "block_diagonal_weights", "compile_super_groups", "grouped_conv2d",
           "super_group_plan", "super_group_size"]


#: The most groups a grouped convolution whose groups fill no whole blocks is run with as
#: one dense convolution of block-diagonal weights (it costs ``groups``× its MACs).
MAX_DENSE_GROUPS = 8


def super_group_size(cfg: HwConfig, channels_in: int, channels_out: int,
                     groups: int) -> int:
    """The smallest divisor ``S`` of ``groups`` such that ``S`` groups hold whole
    input and output blocks (see the module docstring).

    Raises
    ------
    CompileError
        No divisor does (e.g. 3 groups of 8 channels on 16-lane blocks).
    """
    if channels_in % groups or channels_out % groups:
        raise CompileError(f"{channels_in} input and {channels_out} output channels do not "
                           f"divide into {groups} groups")
    ci, co = channels_in // groups, channels_out // groups
    for s in range(1, groups + 1):
        if groups % s == 0 and (s * ci) % cfg.block_in == 0 and (s * co) % cfg.block_out == 0:
            return s
    raise CompileError(f"{groups} groups of {ci} input / {co} output channels: no number "
                       f"of whole groups fills blocks of {cfg.block_in} and {cfg.block_out} "
                       "lanes")


def super_group_plan(cfg: HwConfig, channels_in: int, channels_out: int,
                     groups: int) -> tuple[int, int]:
    """``(S, padded groups)``: :func:`super_group_size` when a divisor of ``groups``
    serves, else the smallest ``S`` whose super-groups fill whole blocks and ``groups``
    rounded up to a multiple of it, the extra groups all zeros, when that is exactly
    the blocked layout's channel padding (a depthwise convolution of 200 channels on
    16-lane blocks: ``S = 16`` over 208 groups, the last 8 of them padding), else, for
    at most :data:`MAX_DENSE_GROUPS` groups, ``(groups, groups)``: one dense convolution
    with the block-diagonal kernel, its channels padded to whole blocks as any dense
    convolution's (ShuffleNet's 4 groups of 34 channels: a 136×136 kernel, 4× the
    model's MACs on the GEMM core instead of a round trip to the CPU).

    Raises
    ------
    CompileError
        None fits (e.g. 32 groups of 3 channels on 16-lane blocks).
    """
    try:
        return super_group_size(cfg, channels_in, channels_out, groups), groups
    except CompileError as exc:
        ci, co = channels_in // groups, channels_out // groups
        s = math.lcm(cfg.block_in // math.gcd(ci, cfg.block_in),
                     cfg.block_out // math.gcd(co, cfg.block_out))
        padded = -(-groups // s) * s
        fits = (padded * ci == -(-channels_in // cfg.block_in) * cfg.block_in
                and padded * co == -(-channels_out // cfg.block_out) * cfg.block_out)
        if fits:
            return s, padded
        if groups <= MAX_DENSE_GROUPS:  # one dense convolution, channels padded as any
            return groups, groups
        raise CompileError(f"{exc}, padding them to {padded} groups would exceed the "
                           "blocked layout's channel padding, and one dense convolution of "
                           f"{groups} diagonal blocks would cost {groups}× the MACs "
                           f"(at most {MAX_DENSE_GROUPS} groups are taken so)") from None


def block_diagonal_weights(w: np.ndarray, groups: int, s: int,
                           padded_groups: int | None = None) -> np.ndarray:
    """``(G/s · s·co, s·ci, KH, KW)``: each super-group's ``s`` kernels
    ``(co, ci, KH, KW)`` on the diagonal of a dense kernel, zeros elsewhere (``w`` is the
    grouped OIHW kernel ``(groups·co, ci, KH, KW)``; ``G`` is ``padded_groups``, default
    ``groups``, the groups past ``groups`` all zeros, :func:`super_group_plan`)."""
    o, ci, kh, kw = w.shape
    co = o // groups
    if padded_groups is not None and padded_groups != groups:
        w = np.concatenate([w, np.zeros(((padded_groups - groups) * co, ci, kh, kw),
                                        w.dtype)])
        o, groups = w.shape[0], padded_groups
    out = np.zeros((o, s * ci, kh, kw), w.dtype)
    for g in range(groups):
        k = g % s
        out[g * co:(g + 1) * co, k * ci:(k + 1) * ci] = w[g * co:(g + 1) * co]
    return out


def grouped_conv2d(cfg: HwConfig, x: np.ndarray, w: np.ndarray,
                   bias: np.ndarray | None = None, *, groups: int,
                   stride: int | tuple[int, int] = 1,
                   padding: int | tuple[int, int] | tuple[int, int, int, int] = 0,
                   epilogue: Epilogue | None = None, vthreads: int = 2) -> CompiledOp:
    """Compile a grouped (or depthwise) int8 convolution of one image.

    Parameters
    ----------
    cfg : HwConfig
        Target.
    x : numpy.ndarray
        ``(1, C, H, W)`` int8 input.
    w : numpy.ndarray
        ``(O, C/groups, KH, KW)`` int8 weights (ONNX's grouped layout).
    bias : numpy.ndarray | None
        ``(O,)`` int32 bias.
    groups : int
        Groups (``C`` for a depthwise convolution).
    stride, padding
        As in :meth:`.Workload.conv2d`.
    epilogue : Epilogue | None
        As in :func:`.operators.conv2d`; per-channel multipliers for all ``O`` channels
        need one-pass requantization (``rounding="single"``).
    vthreads : int
        Virtual threads of the default schedule.

    Returns
    -------
    CompiledOp
        Its result is ``(1, O, OH, OW)`` int8.
    """
    x, w = np.asarray(x), np.asarray(w)
    if x.ndim != 4 or w.ndim != 4 or x.shape[0] != 1:
        raise CompileError(f"shapes {x.shape} and {w.shape} are not one NCHW image and OIHW")
    c = x.shape[1]
    o, ci = w.shape[:2]
    if ci * groups != c:
        raise CompileError(f"weights of {ci} input channels per group × {groups} groups "
                           f"!= {c} input channels")
    if epilogue is not None and epilogue.per_channel and not epilogue.one_pass:
        raise CompileError("a grouped convolution's per-channel requantization needs "
                           "rounding='single' (one REQUANT record per channel)")
    s, padded = super_group_plan(cfg, c, o, groups)
    dense = block_diagonal_weights(w.astype(np.int8), groups, s, padded)
    x = x.astype(np.int8)
    if padded != groups:  # zero channels for the padding groups
        x = np.concatenate([x, np.zeros((1, padded * ci - c, *x.shape[2:]), np.int8)],
                           axis=1)
        if bias is not None:
            bias = np.concatenate([np.asarray(bias), np.zeros(dense.shape[0] - o,
                                                              np.asarray(bias).dtype)])
        if epilogue is not None and epilogue.multiplier is not None:
            extra = (0,) * (dense.shape[0] - o)
            epilogue = dataclasses.replace(
                epilogue, multiplier=epilogue.multiplier + extra,
                shift=epilogue.shift + extra,  # type: ignore[operator]
                residual=None if epilogue.residual is None else epilogue.residual + extra)
    if padded // s == 1 and (c % cfg.block_in or o % cfg.block_out):
        from .operators import conv2d  # one dense convolution, channels padded

        op = conv2d(cfg, x, dense, bias, stride=stride, padding=padding,
                    epilogue=epilogue, vthreads=vthreads)
    else:
        op = compile_super_groups(cfg, x, dense, padded // s, bias, stride=stride,
                                  padding=padding, epilogue=epilogue, vthreads=vthreads)
    return dataclasses.replace(op, out_shape=(1, o, *op.out_shape[2:]))


def compile_super_groups(cfg: HwConfig, x: np.ndarray, dense: np.ndarray, super_groups: int,
                         bias: np.ndarray | None = None, *,
                         stride: int | tuple[int, int] = 1,
                         padding: int | tuple[int, int] | tuple[int, int, int, int] = 0,
                         epilogue: Epilogue | None = None, vthreads: int = 2,
                         image_shapes: bool = False) -> CompiledOp:
    """Compile ``super_groups`` independent convolutions of one image, super-group ``g``
    reading input channels ``[g·Ci, (g+1)·Ci)`` with the kernel
    ``dense[g·Co:(g+1)·Co]`` (``(super_groups·Co, Ci, KH, KW)``, from
    :func:`block_diagonal_weights`); ``image_shapes`` declares the program's ``inp``
    and ``out`` as one image's blocked tensors (see :func:`.lower.lower`)."""
    _, c, h, wd = x.shape
    o, ci, kh, kw = dense.shape
    gs = super_groups
    if ci * gs != c or o % gs or ci % cfg.block_in or (o // gs) % cfg.block_out:
        raise CompileError(f"{gs} super-groups of a {dense.shape} kernel over {c} input "
                           "channels are not whole blocks")
    per = o // gs
    wl = dataclasses.replace(Workload.conv2d(1, ci, h, wd, per, (kh, kw), stride, padding),
                             groups=gs)
    ep = epilogue or Epilogue()
    if bias is not None:
        ep = dataclasses.replace(ep, bias=True)
    if ep.per_channel and not ep.one_pass:
        raise CompileError("a grouped convolution's per-channel requantization needs "
                           "rounding='single' (one REQUANT record per channel)")
    sched = _schedule(wl, cfg, ep, None, vthreads)
    plan = sched.plan()
    wgt = np.concatenate([pack_weight(cfg, dense[g * per:(g + 1) * per]) for g in range(gs)])
    inp = pack_activation(cfg, x)
    inp = inp.reshape(gs, -1, *inp.shape[2:])  # the same bytes, one image per group
    packed_bias = None
    if bias is not None:
        b = np.asarray(bias, np.int32).reshape(gs, per)
        packed_bias = np.concatenate([pack_bias_for(cfg, b[g]) for g in range(gs)])
    program = lower(plan, ep, inp=inp.reshape(1, -1, *inp.shape[2:]) if image_shapes
                    else inp, wgt=wgt, bias=packed_bias, image_shapes=image_shapes)
    return CompiledOp(wl, sched, plan, ep, program, (1, o, wl.out_height, wl.out_width))

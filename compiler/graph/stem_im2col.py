"""Convolutions with few input channels as 1×1 convolutions over host-side im2col.

The accelerator reduces ``block_in`` input channels per GEMM micro-op, so a convolution
with few input channels wastes most lanes: ResNet's 7×7 stem over 3 colour channels
runs 49 taps × 1 block of 3/16 useful lanes per output. When such a convolution reads
data copied from the cpu anyway, :func:`im2col_small_channel_convs` moves the window
gathering to the cpu: an ``nn.im2col`` (before the copy) turns the ``C×KH×KW`` patch of
every output pixel into channels, and the accelerator runs a 1×1, stride-1 convolution
over them with the weight reshaped to ``(O, C·KH·KW, 1, 1)`` — 147 reduction values
pack into ⌈147/16⌉ = 10 blocks instead of 49. The sums are the same integers in
another order, so the result is bit-exact.

Run it after :func:`~.planning.plan_devices` and before
:func:`~.layout_planning.pack_accel_layouts`.
"""

from __future__ import annotations

import numpy as np

from .infer import infer_types
from .ir import Call, Constant, Expr, Function, post_order
from .layout_planning import hw_config_of
from .rewrite import rebuild
from .types import TensorType


def _blocks(n: int, block: int) -> int:
    return -(-n // block)


def im2col_gain(channels: int, kernel: tuple[int, int], block_in: int) -> tuple[int, int]:
    """Input-channel blocks reduced per output pixel: (as a convolution, after im2col)."""
    kh, kw = kernel
    return kh * kw * _blocks(channels, block_in), _blocks(channels * kh * kw, block_in)


def _rewrite(conv: Call) -> Call | None:
    """The 1×1 convolution over an im2col of ``conv``'s data, or None when ``conv`` is
    not a candidate (see the module docstring)."""
    dev = conv.virtual_device
    if (conv.op != "qnn.conv2d_integer" or dev is None or dev.kind != "accel"
            or conv.attrs["groups"] != 1 or tuple(conv.attrs["dilation"]) != (1, 1)
            or conv.attrs["data_layout"] != "NCHW" or conv.attrs["kernel_layout"] != "OIHW"):
        return None
    copy, w = conv.args[0], conv.args[1]
    if not (isinstance(copy, Call) and copy.op == "device_copy"
            and copy.attrs["src_device"].kind != "accel" and isinstance(w, Constant)):
        return None
    xt = infer_types(copy)
    if not isinstance(xt, TensorType) or xt.ndim != 4 or w.data.ndim != 4:
        return None
    o, c, kh, kw = w.data.shape
    if (kh, kw) == (1, 1):
        return None
    before, after = im2col_gain(c, (kh, kw), hw_config_of(dev).block_in)
    if after >= before:
        return None
    src = copy.attrs["src_device"]
    cols = Call("nn.im2col", [copy.args[0]],
                {"kernel_size": (kh, kw), "strides": tuple(conv.attrs["strides"]),
                 "padding": tuple(conv.attrs["padding"])}, src)
    moved = Call("device_copy", [cols], copy.attrs, copy.virtual_device)
    w2 = Constant(np.ascontiguousarray(w.data.reshape(o, c * kh * kw, 1, 1)),
                  w.virtual_device)
    attrs = {**conv.attrs, "strides": (1, 1), "padding": (0, 0, 0, 0)}
    return Call(conv.op, [moved, w2, *conv.args[2:]], attrs, dev, conv.name)


def im2col_small_channel_convs(fn: Function) -> Function:
    """``fn`` with every accelerator ``qnn.conv2d_integer`` whose data comes from the cpu
    and whose ``C·KH·KW`` patch packs into fewer ``block_in`` blocks than its taps do
    rewritten as ``nn.im2col`` on the cpu and a 1×1 convolution on the accelerator."""
    infer_types(fn)
    new: dict[int, Expr] = {}
    for node in post_order(fn):
        rebuilt = rebuild(node, new)
        if isinstance(rebuilt, Call):
            rebuilt = _rewrite(rebuilt) or rebuilt
        new[id(node)] = rebuilt
    out = new[id(fn)]
    assert isinstance(out, Function)
    infer_types(out)
    return out


__all__ = ["im2col_gain", "im2col_small_channel_convs"]

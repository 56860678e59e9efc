"""Shape functions: each kernel's output shape from its input shapes and attributes.

The VM's ``SHAPE_FUNC`` instruction calls them to size a result before the kernel runs
when a dim is symbolic (batch, sequence length). A function takes the list of input
shapes and the node's attributes and returns the output shape (a tuple of shapes for
``split``). Ops not listed have no shape function; the VM names the op when a program
needs one: ``layout_transform``, and the ``dynamic_*`` ops, whose output shape depends
on the values of their run-time parameters, not only on shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .accel_contract import ACCEL_PROGRAM
from .layout_transform import parse_layout

__all__ = ["SHAPE_FUNCTIONS", "ShapeFunction"]

Shape = tuple[int, ...]
ShapeFunction = Callable[[Sequence[Shape], Mapping[str, Any]], Any]
SHAPE_FUNCTIONS: dict[str, ShapeFunction] = {}


def _register(*names: str) -> Callable[[ShapeFunction], ShapeFunction]:
    def wrap(fn: ShapeFunction) -> ShapeFunction:
        for name in names:
            SHAPE_FUNCTIONS[name] = fn
        return fn
    return wrap


@_register("relu", "negative", "identity", "on_device", "device_copy", "leaky_relu",
           "hard_sigmoid", "hard_swish", "clip", "cast", "erf", "exp", "sqrt", "tanh",
           "sigmoid", "nn.softmax", "nn.layer_norm", "nn.lrn", "qnn.quantize",
           "qnn.dequantize", "qnn.requantize", "qnn.requantize_fixed", "qnn.requantize_q31",
           "qnn.hard_swish_q31", "qnn.channel_permute")
def _same(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """Elementwise on its first input: the same shape."""
    return tuple(shapes[0])


@_register("add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
           "qnn.add_q31", "qnn.mul_q31", "where", "less")
def _broadcast(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """numpy broadcasting of every input."""
    return tuple(np.broadcast_shapes(*shapes))


@_register("matmul", "qnn.matmul_integer")
def _matmul(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """numpy's matmul rule (batch dims broadcast)."""
    a, b = shapes[0], shapes[1]
    if len(b) == 1:
        return tuple(a[:-1])
    if len(a) == 1:
        return (*b[:-2], b[-1])
    batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    return (*batch, a[-2], b[-1])


def _window(size: int, k: int, s: int, d: int, pad: int, ceil: bool = False) -> int:
    room = size + pad - ((k - 1) * d + 1)
    return (-(-room // s) if ceil else room // s) + 1


@_register("nn.conv2d", "qnn.conv2d_integer")
def _conv2d(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """NCHW/OIHW, or the blocked layouts (``NCHW4n16c``) of the accelerator."""
    x, w = shapes[0], shapes[1]
    pt, pl, pb, pr = attrs["padding"]
    blocked = bool(parse_layout(attrs["data_layout"]).blocks)
    n, h, wd = (x[0] * x[4], x[2], x[3]) if blocked else (x[0], x[2], x[3])
    o, kh, kw = (w[0] * w[4], w[2], w[3]) if blocked else (w[0], w[2], w[3])
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    oh, ow = _window(h, kh, sh, dh, pt + pb), _window(wd, kw, sw, dw, pl + pr)
    if blocked:
        return (n // x[4], o // w[4], oh, ow, x[4], w[4])
    return (n, o, oh, ow)


@_register("nn.im2col")
def _im2col(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """(N, C*KH*KW, OH, OW)."""
    n, c, h, w = shapes[0]
    pt, pl, pb, pr = attrs["padding"]
    (kh, kw), (sh, sw) = attrs["kernel_size"], attrs["strides"]
    return (n, c * kh * kw, _window(h, kh, sh, 1, pt + pb), _window(w, kw, sw, 1, pl + pr))


@_register("nn.max_pool2d", "nn.avg_pool2d", "nn.max_pool2d_indices")
def _pool2d(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """NCHW pooling, ceil mode included."""
    n, c, h, w = shapes[0]
    pt, pl, pb, pr = attrs["padding"]
    k, s, d = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    ceil = bool(attrs["ceil_mode"])
    return (n, c, _window(h, k[0], s[0], d[0], pt + pb, ceil),
            _window(w, k[1], s[1], d[1], pl + pr, ceil))


@_register("nn.global_avg_pool2d", "nn.global_max_pool2d")
def _global_pool(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """Spatial dims kept as 1."""
    x = shapes[0]
    return (*x[:2], *(1 for _ in x[2:]))


@_register("qnn.global_avg_pool_q31")
def _global_pool_blocked(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """Axes 2 and 3 kept as 1 (NCHW or a blocked NCHW{n}n{c}c)."""
    x = shapes[0]
    return (*x[:2], 1, 1, *x[4:])


@_register("nn.batch_norm")
def _batch_norm(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    return tuple(shapes[0])


@_register("nn.pad")
def _pad(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """ONNX pads: all begins, then all ends."""
    x, pads = shapes[0], attrs["pads"]
    r = len(x)
    return tuple(d + pads[i] + pads[i + r] for i, d in enumerate(x))


@_register("mean", "reduce_sum", "reduce_max")
def _mean(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    x, axes = shapes[0], attrs["axes"]
    picked = set(range(len(x))) if axes is None else {a % len(x) for a in axes}
    if attrs["keepdims"]:
        return tuple(1 if i in picked else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in picked)


@_register("reshape")
def _reshape(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """0 copies the input dim, -1 takes what is left."""
    x = shapes[0]
    out = [x[i] if d == 0 else d for i, d in enumerate(attrs["newshape"])]
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(x) // known if known else 0
    return tuple(out)


@_register("flatten")
def _flatten(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    x = shapes[0]
    axis = attrs["axis"] % len(x) if attrs["axis"] < 0 else attrs["axis"]
    return (math.prod(x[:axis]), math.prod(x[axis:]))


@_register("transpose")
def _transpose(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    x, axes = shapes[0], attrs["axes"]
    return tuple(x[a] for a in axes) if axes else tuple(reversed(x))


@_register("squeeze")
def _squeeze(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    x, axes = shapes[0], attrs["axes"]
    drop = {i for i, d in enumerate(x) if d == 1} if axes is None else \
        {a % len(x) for a in axes}
    return tuple(d for i, d in enumerate(x) if i not in drop)


@_register("expand_dims")
def _expand_dims(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    x = list(shapes[0])
    rank = len(x) + len(attrs["axes"])
    for a in sorted(a % rank for a in attrs["axes"]):
        x.insert(a, 1)
    return tuple(x)


@_register("concatenate", "qnn.concat_q31")
def _concatenate(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    axis = attrs["axis"] % len(shapes[0])
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out)


@_register("split")
def _split(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> tuple[Shape, ...]:
    x = shapes[0]
    axis = attrs["axis"] % len(x)
    return tuple(tuple(n if i == axis else d for i, d in enumerate(x))
                 for n in attrs["sections"])


@_register("strided_slice")
def _strided_slice(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """ONNX Slice: each axis's length as Python's ``slice(begin, end, step)`` gives it."""
    out = list(shapes[0])
    for b, e, a, st in zip(attrs["begin"], attrs["end"], attrs["axes"], attrs["steps"],
                           strict=True):
        axis = a % len(out)
        out[axis] = len(range(*slice(b, e, st).indices(out[axis])))
    return tuple(out)


@_register("shape_of")
def _shape_of(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    return (len(shapes[0]),)


@_register("take")
def _take(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    x, idx = shapes[0], shapes[1]
    axis = attrs["axis"] % len(x)
    return (*x[:axis], *idx, *x[axis + 1:])


@_register(ACCEL_PROGRAM)
def _accel_program(shapes: Sequence[Shape], attrs: Mapping[str, Any]) -> Shape:
    """The compiled program's output segment (fixed when compiled)."""
    return tuple(attrs["out_shape"])

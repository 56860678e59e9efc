"""numpy CPU kernels, one per graph-IR operator (same names as the compiler's registry).

A kernel takes its input arrays and the call's attributes (every attribute of the op,
defaults filled in) and returns an array, or a tuple of arrays for ``split``. Float
kernels accumulate in float64 and return the input's dtype; integer kernels are exact
(int64 accumulation, int32 results); quantization rounds half to even in float32 as
onnxruntime does.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tensorfab.isa import AluOp, TensorfabError
from tensorfab.sim.fsim_alu import alu_apply, requant_values

from .accel_contract import ACCEL_PROGRAM, decode_program
from .blas_threads import limited_blas
from .layout_transform import layout_transform, parse_layout

Kernel = Callable[..., Any]
KERNELS: dict[str, Kernel] = {}


class KernelError(TensorfabError):
    """A kernel given inputs it cannot compute (names the op and what is wrong; run by
    the VM, the graph node too: :meth:`name_node`).

    Attributes
    ----------
    node : str or None
        The graph node the kernel ran for (its source name, else ``node <index>``), once
        :meth:`name_node` named it.
    """

    node: str | None = None

    def name_node(self, name: str, op: str, index: int) -> None:
        """Put the graph node the kernel ran for (node ``index``, ``name`` as the source
        model named it, running ``op``) first in the message, once: ``node 'ga_idx'
        (take): index 7 is out of range ...``. The VM calls this where it runs a kernel;
        a kernel it runs without a graph node (``index`` -1) keeps its message."""
        if self.node is not None or index < 0:
            return
        self.node = repr(name) if name else str(index)
        message = str(self)
        if message.startswith(f"{op}: "):
            message = message[len(op) + 2:]
        self.args = (f"node {self.node} ({op}): {message}", *self.args[1:])


def kernel(name: str) -> Callable[[Kernel], Kernel]:
    """Register a kernel as operator ``name``; it runs with numpy's floating-point
    warnings off (overflow to inf and nan are results, as in onnxruntime) and BLAS on
    :func:`~.blas_threads.kernel_blas_threads` threads."""
    def wrap(fn: Kernel) -> Kernel:
        @functools.wraps(fn)
        def quiet(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> Any:
            with np.errstate(all="ignore"), limited_blas():
                return fn(inputs, attrs)
        KERNELS[name] = quiet
        return fn
    return wrap


def _float_result(fn: Callable[..., np.ndarray]) -> Kernel:
    """Run ``fn`` on float64 copies of the inputs and cast back to input 0's dtype."""
    def run(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        dtype = inputs[0].dtype
        out = fn([np.asarray(a, dtype=np.float64) if a.dtype.kind == "f" else a
                  for a in inputs], attrs)
        return np.asarray(out).astype(dtype, copy=False)
    run.__doc__ = fn.__doc__
    return run


# ------------------------------------------------------------------------- elementwise
def _int_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(np.result_type(a, b))


def _binary(float_fn: Callable, int_fn: Callable) -> Kernel:
    def run(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        a, b = inputs
        if a.dtype.kind == "f":
            return float_fn(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
        return np.asarray(int_fn(a, b)).astype(a.dtype)
    return run


kernel("add")(_binary(np.add, np.add))
kernel("subtract")(_binary(np.subtract, np.subtract))
kernel("multiply")(_binary(np.multiply, np.multiply))
kernel("divide")(_binary(np.divide, _int_divide))
kernel("power")(_binary(np.power, np.power))
kernel("maximum")(_binary(np.maximum, np.maximum))
kernel("minimum")(_binary(np.minimum, np.minimum))


@kernel("less")
def less(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """a < b as bool."""
    return np.less(inputs[0], inputs[1])


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    return _float_result(lambda inputs, attrs: fn(inputs[0]))


_erf = np.frompyfunc(math.erf, 1, 1)
kernel("sigmoid")(_unary(lambda x: 1.0 / (1.0 + np.exp(-x))))
kernel("tanh")(_unary(np.tanh))
kernel("erf")(_unary(lambda x: _erf(x).astype(np.float64)))
kernel("sqrt")(_unary(np.sqrt))
kernel("exp")(_unary(np.exp))
kernel("hard_swish")(_unary(lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)))


@kernel("relu")
def relu(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """max(x, 0)."""
    x = inputs[0]
    return np.maximum(x, np.zeros((), x.dtype))


@kernel("negative")
def negative(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """-x."""
    return np.negative(inputs[0])


@kernel("identity")
@kernel("on_device")
@kernel("device_copy")
def identity(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The input (on the CPU a device copy moves nothing)."""
    return inputs[0]


@kernel("leaky_relu")
@_float_result
def leaky_relu(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """x if x >= 0 else alpha * x."""
    x = inputs[0]
    return np.where(x >= 0, x, x * attrs["alpha"])


@kernel("hard_sigmoid")
@_float_result
def hard_sigmoid(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """max(0, min(1, alpha * x + beta))."""
    return np.clip(inputs[0] * attrs["alpha"] + attrs["beta"], 0.0, 1.0)


@kernel("clip")
def clip(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """min(max(x, a_min), a_max), absent bounds skipped."""
    x = inputs[0]
    lo, hi = attrs["a_min"], attrs["a_max"]
    if lo is not None:
        x = np.maximum(x, np.asarray(lo).astype(x.dtype))
    if hi is not None:
        x = np.minimum(x, np.asarray(hi).astype(x.dtype))
    return x


@kernel("cast")
def cast(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Convert to ``dtype`` (float to int truncates toward zero)."""
    return inputs[0].astype(attrs["dtype"])


@kernel("where")
def where(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """cond ? x : y."""
    c, x, y = inputs
    return np.where(c, x, y)


# ------------------------------------------------------------------------------- conv
def _windows(x: np.ndarray, kh: int, kw: int, strides: Sequence[int],
             dilation: Sequence[int]) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) view of the windows of an already padded NCHW input."""
    dh, dw = dilation
    sh, sw = strides
    span = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    v = sliding_window_view(x, span, axis=(2, 3))
    return v[:, :, ::sh, ::sw, ::dh, ::dw]


def _conv_nchw(x: np.ndarray, w: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """Grouped, strided, dilated convolution of padded-with-zero data (any dtype)."""
    pt, pl, pb, pr = attrs["padding"]
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    g = attrs["groups"]
    win = _windows(x, kh, kw, attrs["strides"], attrs["dilation"])
    oh, ow = win.shape[2:4]
    win = win.reshape(n, g, cg, oh, ow, kh, kw)
    wg = w.reshape(g, o // g, cg, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True)
    return out.reshape(n, o, oh, ow)


@kernel("nn.im2col")
def im2col(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The windows of a convolution as channels: NCHW to (N, C*KH*KW, OH, OW), channel
    ``c*KH*KW + i*KW + j`` holding tap (i, j) of channel c; padding is zero."""
    x = inputs[0]
    pt, pl, pb, pr = attrs["padding"]
    kh, kw = attrs["kernel_size"]
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    win = _windows(x, kh, kw, attrs["strides"], (1, 1))  # (N, C, OH, OW, KH, KW)
    n, c, oh, ow = win.shape[:4]
    return np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3)).reshape(n, c * kh * kw,
                                                                         oh, ow)


def _blocked_conv(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], x: np.ndarray,
                  w: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """Run ``fn`` on plain layouts when data or kernel is blocked, re-block the result."""
    dl, kl = attrs["data_layout"], attrs["kernel_layout"]
    if not (parse_layout(dl).blocks or parse_layout(kl).blocks):
        return fn(x, w)
    y = fn(layout_transform(x, dl, "NCHW"), layout_transform(w, kl, "OIHW"))
    return layout_transform(y, "NCHW", dl[:4] + f"{x.shape[4]}n{w.shape[4]}c")


@kernel("nn.conv2d")
def conv2d(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """2-D convolution (NCHW/OIHW or the accelerator's blocked layouts)."""
    x, w = inputs

    def plain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _conv_nchw(a.astype(np.float64), b.astype(np.float64), attrs)
    return _blocked_conv(plain, x, w, attrs).astype(x.dtype)


def _zp(zp: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A zero point as int32, a 1-D one shaped to broadcast along ``axis``."""
    zp = np.asarray(zp).astype(np.int32)
    if zp.ndim == 1 and zp.size > 1:
        shape = [1] * ndim
        shape[axis] = zp.size
        return zp.reshape(shape)
    return zp.reshape(())


@kernel("qnn.conv2d_integer")
def conv2d_integer(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Integer convolution of (x - x_zero_point) and (w - w_zero_point) to int32."""
    x, w, xzp, wzp = inputs
    xs = x.astype(np.int64) - _zp(xzp, x.ndim, 1)
    ws = w.astype(np.int64) - _zp(wzp, w.ndim, 0)
    return _blocked_conv(lambda a, b: _conv_nchw(a, b, attrs), xs, ws,
                         attrs).astype(np.int32)


@kernel("matmul")
@_float_result
def matmul(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """numpy matmul."""
    return np.matmul(inputs[0], inputs[1])


@kernel("qnn.matmul_integer")
def matmul_integer(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """(a - a_zero_point) @ (b - b_zero_point) to int32; a's zero point may be per row,
    b's per column."""
    a, b, azp, bzp = inputs
    azp, bzp = np.asarray(azp).astype(np.int64), np.asarray(bzp).astype(np.int64)
    azp = azp.reshape(-1, 1) if azp.size > 1 else azp.reshape(())
    bzp = bzp.reshape(-1) if bzp.size > 1 else bzp.reshape(())
    return np.matmul(a.astype(np.int64) - azp, b.astype(np.int64) - bzp).astype(np.int32)


# --------------------------------------------------------------------------------- nn
@kernel("nn.batch_norm")
@_float_result
def batch_norm(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Inference batch norm over axis 1."""
    x, gamma, beta, mean, var = inputs
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = gamma / np.sqrt(var + attrs["epsilon"])
    return (x - mean.reshape(shape)) * scale.reshape(shape) + beta.reshape(shape)


def _pool_pads(x: np.ndarray, attrs: dict[str, Any]) -> tuple[list[int], list[int]]:
    """Begin and end padding per spatial axis, the end grown to cover ceil-mode windows."""
    pt, pl, pb, pr = attrs["padding"]
    begin, end = [pt, pl], [pb, pr]
    for i in range(2):
        k, s, d = attrs["pool_size"][i], attrs["strides"][i], attrs["dilation"][i]
        size = x.shape[2 + i]
        room = size + begin[i] + end[i] - ((k - 1) * d + 1)
        out = (-(-room // s) if attrs["ceil_mode"] else room // s) + 1
        if attrs["ceil_mode"] and (out - 1) * s >= size + begin[i]:
            out -= 1  # the last window would start in the end padding: dropped
        need = (out - 1) * s + (k - 1) * d + 1 - (size + begin[i] + end[i])
        end[i] += max(need, 0)
    return begin, end


@kernel("nn.max_pool2d")
def max_pool2d(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """2-D max pooling; padding never wins."""
    x = inputs[0]
    begin, end = _pool_pads(x, attrs)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = np.pad(x, ((0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1])),
                constant_values=low)
    win = _windows(xp, *attrs["pool_size"], attrs["strides"], attrs["dilation"])
    return win.max(axis=(4, 5))


@kernel("nn.max_pool2d_indices")
def max_pool2d_indices(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """MaxPool's Indices output: where each window's (first) maximum is, as an index
    into the flattened input, row-major (``storage_order`` 0) or with H and W swapped
    (1), as ONNX defines it."""
    x = inputs[0]
    n, c, h, w = x.shape
    begin, end = _pool_pads(x, attrs)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = np.pad(x, ((0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1])),
                constant_values=low)
    (kh, kw), (sh, sw) = attrs["pool_size"], attrs["strides"]
    dh, dw = attrs["dilation"]
    win = _windows(xp, kh, kw, attrs["strides"], attrs["dilation"])
    oh, ow = win.shape[2:4]
    k = win.reshape(*win.shape[:4], kh * kw).argmax(axis=-1)
    rows = np.arange(oh)[:, None] * sh - begin[0] + (k // kw) * dh
    cols = np.arange(ow)[None, :] * sw - begin[1] + (k % kw) * dw
    plane = (np.arange(n)[:, None, None, None] * c + np.arange(c)[None, :, None, None]) * h * w
    within = rows * w + cols if attrs["storage_order"] == 0 else rows + cols * h
    return (plane + within).astype(np.int64)


@kernel("nn.avg_pool2d")
def avg_pool2d(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """2-D average pooling; the divisor counts the declared padding with
    ``count_include_pad``, never the extra room of ceil mode."""
    x = inputs[0]
    begin, end = _pool_pads(x, attrs)
    pads = ((0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1]))
    xp = np.pad(x.astype(np.float64), pads)
    k, s, d = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    total = _windows(xp, *k, s, d).sum(axis=(4, 5))
    _, _, pb, pr = attrs["padding"]
    mask = np.zeros((1, 1, *x.shape[2:]))
    mask = np.pad(mask, pads, constant_values=0.0)
    h, w = x.shape[2:]
    if attrs["count_include_pad"]:
        mask[..., : begin[0] + h + pb, : begin[1] + w + pr] = 1.0
    else:
        mask[..., begin[0]: begin[0] + h, begin[1]: begin[1] + w] = 1.0
    count = _windows(mask, *k, s, d).sum(axis=(4, 5))
    return (total / count).astype(x.dtype)


@kernel("nn.global_avg_pool2d")
@_float_result
def global_avg_pool2d(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Mean over the spatial dims, kept."""
    x = inputs[0]
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)


@kernel("nn.global_max_pool2d")
def global_max_pool2d(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Max over the spatial dims, kept."""
    x = inputs[0]
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


@kernel("nn.lrn")
@_float_result
def lrn(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """ONNX LRN: x / (bias + alpha / size * sum of squares over nearby channels) ** beta."""
    x = inputs[0]
    size = attrs["size"]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = np.pad(x * x, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    total = sum(sq[:, i: i + c] for i in range(size))
    return x / (attrs["bias"] + attrs["alpha"] / size * total) ** attrs["beta"]


@kernel("nn.softmax")
@_float_result
def softmax(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Softmax along ``axis``."""
    x = inputs[0]
    e = np.exp(x - x.max(axis=attrs["axis"], keepdims=True))
    return e / e.sum(axis=attrs["axis"], keepdims=True)


@kernel("nn.layer_norm")
@_float_result
def layer_norm(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Normalize over dims axis..end, scale by gamma, shift by beta."""
    x, gamma, beta = inputs
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + attrs["epsilon"]) * gamma + beta


@kernel("nn.pad")
def pad(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Pad with ONNX's (begins..., ends...) order; constant, reflect, edge or wrap. A
    negative pad removes that many values from its side (first, as onnxruntime does)."""
    x = inputs[0]
    pads = [int(p) for p in attrs["pads"]]
    if min(pads, default=0) < 0:
        x = x[tuple(slice(max(-b, 0), d - max(-e, 0))
                    for d, b, e in zip(x.shape, pads[: x.ndim], pads[x.ndim:], strict=True))]
        pads = [max(p, 0) for p in pads]
    widths = list(zip(pads[: x.ndim], pads[x.ndim:], strict=True))
    if attrs["mode"] == "constant":
        return np.pad(x, widths, constant_values=np.asarray(attrs["value"]).astype(x.dtype))
    return np.pad(x, widths, mode=attrs["mode"])


@kernel("mean")
@_float_result
def mean(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Mean over ``axes`` (all when None)."""
    axes = attrs["axes"]
    return inputs[0].mean(axis=None if axes is None else tuple(axes),
                          keepdims=attrs["keepdims"])


@kernel("reduce_sum")
def reduce_sum(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Sum over ``axes`` (all when None) in the input's dtype."""
    x, axes = inputs[0], attrs["axes"]
    return np.sum(x, axis=None if axes is None else tuple(axes), keepdims=attrs["keepdims"],
                  dtype=x.dtype)


@kernel("reduce_max")
def reduce_max(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Max over ``axes`` (all when None); over an empty set, the dtype's lowest value
    (-inf for floats, False for bool), as ONNX defines it."""
    x, axes = inputs[0], attrs["axes"]
    lowest = (-np.inf if x.dtype.kind == "f" else False if x.dtype.kind == "b"
              else np.iinfo(x.dtype).min)
    return np.max(x, axis=None if axes is None else tuple(axes), keepdims=attrs["keepdims"],
                  initial=lowest)


# ----------------------------------------------------------------------------- shapes
@kernel("reshape")
def reshape(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Reshape; 0 copies the input dim, -1 is inferred."""
    x = inputs[0]
    shape = []
    for i, d in enumerate(attrs["newshape"]):
        if isinstance(d, str):
            raise KernelError(f"reshape: newshape {attrs['newshape']} has the symbol {d!r}; "
                              "the CPU kernel needs ints, 0 or -1")
        shape.append(x.shape[i] if d == 0 else d)
    return x.reshape(shape)


@kernel("flatten")
def flatten(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """(prod(dims[:axis]), prod(dims[axis:]))."""
    x = inputs[0]
    axis = attrs["axis"] + x.ndim if attrs["axis"] < 0 else attrs["axis"]
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@kernel("transpose")
def transpose(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Permute dims."""
    return np.transpose(inputs[0], attrs["axes"])


@kernel("squeeze")
def squeeze(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Drop unit dims."""
    axes = attrs["axes"]
    return np.squeeze(inputs[0], axis=None if axes is None else tuple(axes))


@kernel("expand_dims")
def expand_dims(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Insert unit dims at ``axes`` of the result."""
    x = inputs[0]
    rank = x.ndim + len(attrs["axes"])
    return np.expand_dims(x, tuple(a % rank for a in attrs["axes"]))


@kernel("concatenate")
def concatenate(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Join along ``axis``."""
    return np.concatenate(list(inputs), axis=attrs["axis"])


@kernel("split")
def split(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """Split into parts of extents ``sections`` along ``axis``."""
    cuts = np.cumsum(attrs["sections"])[:-1]
    return tuple(np.split(inputs[0], cuts, axis=attrs["axis"]))


@kernel("strided_slice")
def strided_slice(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """ONNX Slice."""
    x = inputs[0]
    index = [slice(None)] * x.ndim
    for b, e, a, s in zip(attrs["begin"], attrs["end"], attrs["axes"], attrs["steps"],
                          strict=True):
        index[a % x.ndim] = slice(b, e, s)
    return x[tuple(index)]


@kernel("take")
def take(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Gather along ``axis`` (negative indices count from the end)."""
    x, idx = inputs
    axis, idx = attrs["axis"], idx.astype(np.int64)
    size = x.shape[axis]
    outside = (idx < -size) | (idx >= size)
    if outside.any():
        raise KernelError(f"take: index {idx[outside].flat[0]} is out of range for axis "
                          f"{axis} of size {size} (indices run {-size}..{size - 1})")
    return np.take(x, idx, axis=axis)


@kernel("shape_of")
def shape_of(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The shape as int64."""
    return np.array(inputs[0].shape, dtype=np.int64)


# ------------------------------------------------------------- runtime-parameter ops
def _param(v: np.ndarray) -> tuple[int, ...]:
    return tuple(int(a) for a in np.asarray(v).reshape(-1))


def _as_declared(op: str, out: np.ndarray, declared: Sequence[int | str]) -> np.ndarray:
    """``out``, checked against the static dims of the shape its type declares (from
    ONNX shape inference at compile time)."""
    if len(declared) != out.ndim or any(isinstance(d, int) and d != n
                                        for d, n in zip(declared, out.shape, strict=False)):
        raise KernelError(f"{op}: the parameters given at run time make a result of shape "
                          f"{out.shape}; the model declares {tuple(declared)}")
    return out


@kernel("dynamic_reshape")
def dynamic_reshape(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Reshape to the shape of input 1 (0 copies the input dim unless ``allowzero``)."""
    x, shape = inputs[0], _param(inputs[1])
    out = x.reshape(shape) if attrs["allowzero"] else reshape([x], {"newshape": shape})
    return _as_declared("dynamic_reshape", out, attrs["out_shape"])


@kernel("dynamic_squeeze")
def dynamic_squeeze(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Drop the unit dims at the axes of input 1."""
    out = squeeze([inputs[0]], {"axes": _param(inputs[1])})
    return _as_declared("dynamic_squeeze", out, attrs["out_shape"])


@kernel("dynamic_expand_dims")
def dynamic_expand_dims(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Insert unit dims at the axes of input 1."""
    out = expand_dims([inputs[0]], {"axes": _param(inputs[1])})
    return _as_declared("dynamic_expand_dims", out, attrs["out_shape"])


@kernel("dynamic_strided_slice")
def dynamic_strided_slice(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """ONNX Slice with starts, ends, axes and steps as inputs 1-4."""
    begin, end, axes, steps = (_param(v) for v in inputs[1:5])
    out = strided_slice([inputs[0]], {"begin": begin, "end": end, "axes": axes,
                                      "steps": steps})
    return _as_declared("dynamic_strided_slice", out, attrs["out_shape"])


@kernel("dynamic_pad")
def dynamic_pad(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """ONNX Pad with pads, the constant value and axes as inputs 1-3."""
    x, pads, value, axes = inputs[0], _param(inputs[1]), inputs[2], _param(inputs[3])
    full = [0] * (2 * x.ndim)
    for k, a in enumerate(axes):
        full[a % x.ndim] = pads[k]
        full[a % x.ndim + x.ndim] = pads[k + len(axes)]
    fill = np.asarray(value).reshape(-1)[0] if value.size else 0
    out = pad([x], {"pads": tuple(full), "mode": attrs["mode"], "value": fill})
    return _as_declared("dynamic_pad", out, attrs["out_shape"])


def _dynamic_reduction(name: str, reduce: Kernel) -> Kernel:
    def run(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        axes = _param(inputs[1])
        if not axes and attrs["noop_with_empty_axes"]:
            out = inputs[0]
        else:
            out = reduce([inputs[0]], {"axes": axes or None, "keepdims": attrs["keepdims"]})
        return _as_declared(name, out, attrs["out_shape"])
    run.__doc__ = f"{name}: the reduction with the axes as input 1 (ONNX's empty axes: all, "
    run.__doc__ += "or none with noop_with_empty_axes)."
    return run


for _name, _reduce in (("dynamic_mean", mean), ("dynamic_reduce_sum", reduce_sum),
                       ("dynamic_reduce_max", reduce_max)):
    kernel(_name)(_dynamic_reduction(_name, _reduce))


@kernel("dynamic_full")
def dynamic_full(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The shape of input 0 filled with the scalar input 1."""
    out = np.full(_param(inputs[0]), inputs[1], dtype=inputs[1].dtype)
    return _as_declared("dynamic_full", out, attrs["out_shape"])


@kernel("dynamic_split")
def dynamic_split(inputs: Sequence[np.ndarray], attrs: dict[str, Any]
                  ) -> tuple[np.ndarray, ...]:
    """Split along ``axis`` into parts of the extents of input 1."""
    parts = split([inputs[0]], {"axis": attrs["axis"], "sections": _param(inputs[1])})
    if len(parts) != len(attrs["out_shapes"]):
        raise KernelError(f"dynamic_split: the sizes given at run time make {len(parts)} "
                          f"parts; the model declares {len(attrs['out_shapes'])}")
    return tuple(_as_declared("dynamic_split", p, d)
                 for p, d in zip(parts, attrs["out_shapes"], strict=True))


@kernel("layout_transform")
def layout_transform_kernel(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Relayout between plain and blocked forms."""
    return layout_transform(inputs[0], attrs["src_layout"], attrs["dst_layout"])


# -------------------------------------------------------------------------- quantized
def _per_axis(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast: per tensor, along ``axis``, or already
    of the tensor's rank."""
    v = np.asarray(v)
    if v.ndim > 1 and v.ndim == ndim:
        return v
    if v.ndim == 1 and v.size > 1:
        shape = [1] * ndim
        shape[axis % ndim] = v.size
        return v.reshape(shape)
    return v.reshape(())


def _saturate(v: np.ndarray, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


@kernel("qnn.quantize")
def quantize(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """saturate(round_half_even(x / scale) + zero_point) in float32."""
    x, scale, zp = inputs
    ax = attrs["axis"]
    q = np.rint(x.astype(np.float32) / _per_axis(scale, x.ndim, ax).astype(np.float32))
    return _saturate(q + _per_axis(zp, x.ndim, ax).astype(np.float32), attrs["out_dtype"])


@kernel("qnn.dequantize")
def dequantize(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """(x - zero_point) * scale in float32."""
    x, scale, zp = inputs
    ax = attrs["axis"]
    shifted = x.astype(np.int32) - _per_axis(zp, x.ndim, ax).astype(np.int32)
    return shifted.astype(np.float32) * _per_axis(scale, x.ndim, ax).astype(np.float32)


@kernel("qnn.requantize")
def requantize(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """saturate(round_half_even(float32(acc) * scale) + zero_point)."""
    x, scale, zp = inputs
    ax = attrs["axis"]
    v = np.rint(x.astype(np.float32) * _per_axis(scale, x.ndim, ax).astype(np.float32))
    return _saturate(v + _per_axis(zp, x.ndim, ax).astype(np.float32), attrs["out_dtype"])


@kernel("qnn.requantize_fixed")
def requantize_fixed(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The accelerator's requantization, with the functional simulator's ALU: MUL by the
    multiplier, SHR_RND by the shift, CLIP to int8."""
    a = alu_apply(AluOp.MUL, inputs[0], attrs["multiplier"])
    if attrs["shift"]:
        a = alu_apply(AluOp.SHR_RND, a, attrs["shift"])
    return alu_apply(AluOp.CLIP, a, 127).astype(np.int8)


def _scale_q31(a: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int
               ) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier on the ALU (multiplier and shift scalars or
    broadcastable per-channel arrays): SHL max(shift, 0), MULHI, SHR_RND max(-shift, 0)."""
    shift = np.asarray(shift)
    if np.any(shift > 0):
        a = alu_apply(AluOp.SHL, a, np.maximum(shift, 0))
    a = alu_apply(AluOp.MULHI, a, multiplier)
    if np.any(shift < 0):
        a = alu_apply(AluOp.SHR_RND, a, np.maximum(-shift, 0))
    return a


@kernel("qnn.requantize_q31")
def requantize_q31(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The accelerator's exact per-channel requantization (TFLite's arithmetic), with the
    functional simulator's ALU: SHL, MULHI, SHR_RND by per-channel operands, + zero
    point, CLIP to int8. Channels past the vectors (blocked padding) use multiplier 0."""
    x = inputs[0]
    n = len(attrs["multiplier"])
    if x.ndim == 4:
        chans, shape = x.shape[1], (1, -1, 1, 1)
    else:
        chans, shape = x.shape[1] * x.shape[5], (1, x.shape[1], 1, 1, 1, x.shape[5])
    mult = np.zeros(chans, np.int64)
    exp = np.zeros(chans, np.int64)
    mult[:n], exp[:n] = attrs["multiplier"], attrs["shift"]
    mult, exp = mult.reshape(shape), exp.reshape(shape)
    if attrs.get("rounding", "double") == "single":  # one REQUANT pass
        return requant_values(x, mult, 0, 31 - exp, attrs["zero_point"], -128,
                              127).astype(np.int8)
    a = _scale_q31(x.astype(np.int32), mult, exp)
    a = alu_apply(AluOp.ADD, a, attrs["zero_point"])
    return alu_apply(AluOp.CLIP, a, 127).astype(np.int8)


def _per_channel(x: np.ndarray, values: Sequence[int]) -> np.ndarray:
    """Per-channel ``values`` (int64) broadcastable against ``x`` (NCHW or blocked
    NCHW{n}n{c}c), 0 past them (the blocked layout's padding channels)."""
    if x.ndim == 4:
        chans, shape = x.shape[1], (1, -1, 1, 1)
    else:
        chans, shape = x.shape[1] * x.shape[5], (1, x.shape[1], 1, 1, 1, x.shape[5])
    out = np.zeros(chans, np.int64)
    out[:len(values)] = values
    return out.reshape(shape)


@kernel("qnn.requantize_residual_q31")
def requantize_residual_q31(inputs: Sequence[np.ndarray], attrs: dict[str, Any]
                            ) -> np.ndarray:
    """A residual add fused into REQUANT, as the accelerator's residual epilogue
    computes it: ``t = x + residual · factor`` wrapped to int32 (the GEMM and ALU
    arithmetic), then one REQUANT pass (bias 0: ``x`` holds it)."""
    x, r = inputs
    t = x.astype(np.int64) + r.astype(np.int64) * _per_channel(x, attrs["residual_factor"])
    t = (t + (1 << 31)) % (1 << 32) - (1 << 31)
    return requant_values(t, _per_channel(x, attrs["multiplier"]), 0,
                          31 - _per_channel(x, attrs["shift"]), attrs["zero_point"],
                          attrs["lo"], attrs["hi"]).astype(np.int8)


@kernel("qnn.add_q31")
def add_q31(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """TFLite's int8 ADD with the functional simulator's ALU (see the op's doc)."""
    a, b = np.broadcast_arrays(*(x.astype(np.int32) for x in inputs))
    a = alu_apply(AluOp.ADD, a, -attrs.get("a_zero_point", 0))
    b = alu_apply(AluOp.ADD, b, -attrs.get("b_zero_point", 0))
    left = attrs["left_shift"]
    sa = _scale_q31(alu_apply(AluOp.SHL, a, left), attrs["a_multiplier"], attrs["a_shift"])
    sb = _scale_q31(alu_apply(AluOp.SHL, b, left), attrs["b_multiplier"], attrs["b_shift"])
    y = _scale_q31(alu_apply(AluOp.ADD, sa, sb), attrs["out_multiplier"], attrs["out_shift"])
    y = alu_apply(AluOp.ADD, y, attrs["zero_point"])
    return alu_apply(AluOp.CLIP, y, 127).astype(np.int8)


def _to_int8(v: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """An int8 vector operator's output scale on int32 values ``v`` with the functional
    simulator's ALU: SHL left_shift, the Q31 multiplier (MULHI, shifts), + zero_point,
    CLIP; or with ``rounding="single"`` REQUANT's one rounding of the exact product."""
    if attrs.get("rounding", "double") == "single":
        return requant_values(v, attrs["multiplier"], 0, 31 - attrs["shift"],
                              attrs["zero_point"], -128, 127).astype(np.int8)
    v = alu_apply(AluOp.SHL, v, attrs["left_shift"])
    y = alu_apply(AluOp.ADD, _scale_q31(v, attrs["multiplier"], attrs["shift"]),
                  attrs["zero_point"])
    return alu_apply(AluOp.CLIP, y, 127).astype(np.int8)


@kernel("qnn.hard_swish_q31")
def hard_swish_q31(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """int8 hard-swish with the functional simulator's ALU (see the op's doc)."""
    x = alu_apply(AluOp.ADD, inputs[0].astype(np.int32), -attrs.get("input_zero_point", 0))
    t = alu_apply(AluOp.ADD, alu_apply(AluOp.SHL, x, attrs["t_shift"]), attrs["offset"])
    t = alu_apply(AluOp.MIN, alu_apply(AluOp.MAX, t, 0), attrs["upper"])
    return _to_int8(alu_apply(AluOp.MUL, x, t), attrs)


@kernel("qnn.mul_q31")
def mul_q31(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """int8 multiply with the functional simulator's ALU (see the op's doc)."""
    a, b = np.broadcast_arrays(*(x.astype(np.int32) for x in inputs))
    a = alu_apply(AluOp.ADD, a, -attrs.get("a_zero_point", 0))
    b = alu_apply(AluOp.ADD, b, -attrs.get("b_zero_point", 0))
    return _to_int8(alu_apply(AluOp.MUL, a, b), attrs)


@kernel("qnn.channel_permute")
def channel_permute(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Output channel ``j`` is input channel ``perm[j]`` (NCHW)."""
    x = inputs[0]
    if x.ndim != 4:
        raise KernelError(f"qnn.channel_permute takes NCHW on the CPU, got shape {x.shape}")
    return np.ascontiguousarray(x[:, list(attrs["perm"])])


@kernel("qnn.concat_q31")
def concat_q31(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """int8 channel concatenation, each input requantized to the output's scale with
    REQUANT's arithmetic (see the op's doc)."""
    parts = [requant_values(x, attrs[f"{k}_multiplier"], -attrs[f"{k}_zero_point"],
                            31 - attrs[f"{k}_shift"], attrs["zero_point"], -128, 127)
             for k, x in zip(("a", "b"), inputs, strict=True)]
    return np.concatenate(parts, axis=1).astype(np.int8)


@kernel("qnn.global_avg_pool_q31")
def global_avg_pool_q31(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """int8 global average pooling with the accelerator's arithmetic (see the op's doc)."""
    x = inputs[0]
    total = x.astype(np.int64).sum(axis=(2, 3), keepdims=True)
    total -= x.shape[2] * x.shape[3] * attrs.get("input_zero_point", 0)
    return _to_int8(total.astype(np.int32), attrs)


def segment_operand(program: Any, name: str, value: Any, what: str) -> np.ndarray:
    """``value`` as the array written to segment ``name`` of ``program`` (a
    :class:`~tensorfab.isa.Program`).

    Raises
    ------
    KernelError
        If its dtype or shape is not the segment's (the message starts with ``what``).
    """
    seg = program.segment(name)
    v = np.asarray(value)
    if tuple(v.shape) != seg.shape or str(v.dtype) != seg.dtype:
        raise KernelError(f"{what} {v.dtype}{tuple(v.shape)} does not fit segment "
                          f"{seg.name!r} ({seg.dtype}{seg.shape})")
    return v


def run_accel_program(x: np.ndarray, program: Any, attrs: Mapping[str, Any],
                      device: Any, *extra: np.ndarray) -> Any:
    """Run a decoded accelerator program (:func:`.accel_contract.decode_program`) on
    ``device`` (a :class:`~tensorfab.sim.Device`) with ``x`` written to its input segment
    (and a residual add's second operand to its ``extra_input_segment``), standalone
    with its whole image; the :class:`~tensorfab.sim.RunResult` (outputs, cycles,
    counters) of the run. The ``accel.program`` kernel and a
    :class:`~.loaded_model.LoadedModel` without device memory run programs through it."""
    operands = [(attrs["input_segment"], x, "input"),
                *((attrs["extra_input_segment"], v, "second input") for v in extra)]
    values = [(name, segment_operand(program, name, v, f"{ACCEL_PROGRAM}: {what}"))
              for name, v, what in operands]
    image = program.dram_image()
    layout = program.layout()
    for name, v in values:
        region = layout[name]
        image[region.offset: region.offset + region.nbytes] = np.ascontiguousarray(v).view(
            np.uint8).ravel()
    return device.run(program, image)


@kernel(ACCEL_PROGRAM)
def accel_program(inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Run a compiled accelerator program on an executor (the functional simulator by
    default): the input goes to its input segment, the output segment comes back."""
    from tensorfab.sim import get_device

    x, blob, *extra = inputs
    result = run_accel_program(x, decode_program(blob), attrs, get_device(attrs["executor"]),
                               *extra)
    return result.outputs[attrs["output_segment"]]

"""The operator registry: each IR operator's arity, attributes and type rule.

A type rule takes the argument types and the call's attributes and returns the result
type, or raises :class:`~tensorfab.compiler.graph.types.TypeInferenceError` naming the
mismatching dims (the caller adds which call it was). Operator names are shared with the
CPU kernels of :mod:`tensorfab.runtime.kernels`, which implement each of them in numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorfab.compiler.tensor.requant import ROUNDINGS
from tensorfab.runtime.accel_contract import (
    ACCEL_PROGRAM,
    ACCEL_PROGRAM_ARGS,
    ACCEL_PROGRAM_ATTRS,
    ACCEL_PROGRAM_DOC,
)
from tensorfab.runtime.layout_transform import parse_layout

from .device import VirtualDevice
from .types import (
    Dim,
    GraphError,
    TensorType,
    TupleType,
    Type,
    TypeInferenceError,
    as_tensor_type,
    check_dtype,
)

TypeRule = Callable[[list[Type], Mapping[str, Any]], Type]

FLOAT_DTYPES = ("float32", "float64", "float16")
QUANT_DTYPES = ("int8", "uint8")


@dataclass(frozen=True)
class OpDef:
    """An IR operator: name, argument count (``None``: any number ≥ 1), attribute
    defaults (every attribute the op takes; ``REQUIRED`` marks those without a default),
    type rule, one-line description."""

    name: str
    num_args: int | tuple[int, int] | None
    attrs: Mapping[str, Any]
    type_rule: TypeRule
    doc: str


REQUIRED = object()
OPS: dict[str, OpDef] = {}


def register(name: str, num_args: int | tuple[int, int] | None, attrs: Mapping[str, Any],
             doc: str) -> Callable[[TypeRule], TypeRule]:
    """Decorator registering a type rule as operator ``name``."""
    def wrap(rule: TypeRule) -> TypeRule:
        if name in OPS:
            raise GraphError(f"operator {name} is registered twice")
        OPS[name] = OpDef(name, num_args, dict(attrs), rule, doc)
        return rule
    return wrap


def get_op(name: str) -> OpDef:
    """The :class:`OpDef` of ``name``, or a :class:`GraphError` listing the known ops."""
    try:
        return OPS[name]
    except KeyError:
        raise GraphError(f"unknown operator {name!r}; known: {', '.join(sorted(OPS))}") from None


def normalize_attrs(op: OpDef, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``attrs`` with the op's defaults filled in; unknown or missing ones raise."""
    unknown = set(attrs) - set(op.attrs)
    if unknown:
        raise GraphError(f"{op.name}: unknown attributes {sorted(unknown)}; it takes "
                         f"{sorted(op.attrs) or 'none'}")
    out = {}
    for k, default in op.attrs.items():
        if k in attrs:
            out[k] = attrs[k]
        elif default is REQUIRED:
            raise GraphError(f"{op.name}: attribute {k!r} is required")
        else:
            out[k] = default
    return out


def check_arity(op: OpDef, n: int) -> None:
    """Raise unless ``n`` arguments suit ``op``; too many for an op with attributes,
    the message names them: they go by keyword (``reshape(x, newshape=(7, 7))``)."""
    want = op.num_args
    if want is None:
        ok, most, text = n >= 1, None, "at least 1"
    elif isinstance(want, tuple):
        ok, most, text = want[0] <= n <= want[1], want[1], f"{want[0]} to {want[1]}"
    else:
        ok, most, text = n == want, want, str(want)
    if not ok:
        attrs = (f"; attributes go by keyword: {', '.join(f'{k}=' for k in op.attrs)}"
                 if op.attrs and most is not None and n > most else "")
        plural = "" if text in ("1", "at least 1") else "s"
        raise GraphError(f"{op.name} takes {text} argument{plural}, got {n}{attrs}")


# ----------------------------------------------------------------------------- helpers
def _t(types: list[Type], i: int) -> TensorType:
    return as_tensor_type(types[i], f"argument {i}")


def _fail(msg: str) -> TypeInferenceError:
    return TypeInferenceError(msg)


def _same_dtype(types: list[Type]) -> str:
    dtypes = [_t(types, i).dtype for i in range(len(types))]
    if len(set(dtypes)) > 1:
        raise _fail(f"argument dtypes differ: {', '.join(dtypes)}")
    return dtypes[0]


def _want_dtype(t: TensorType, allowed: tuple[str, ...], what: str) -> None:
    if t.dtype not in allowed:
        raise _fail(f"{what} has dtype {t.dtype}; expected one of {', '.join(allowed)}")


def broadcast_dim(a: Dim, b: Dim, where: str = "") -> Dim:
    """Broadcast two dims (numpy rules; a symbol broadcasts only with itself or 1)."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    raise _fail(f"dims {a} and {b}{where} do not broadcast")


def broadcast_shapes(*shapes: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """Numpy broadcasting of shapes with symbolic dims; errors name the dims and axis."""
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for axis in range(ndim):
        d: Dim = 1
        for s in padded:
            d = broadcast_dim(d, s[axis], f" (axis {axis} of shapes "
                              f"{', '.join(str(tuple(x)) for x in shapes)})")
        out.append(d)
    return tuple(out)


def _axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise _fail(f"{what} {axis} is out of range for rank {ndim}")
    return axis % ndim if ndim else 0


def _static(d: Dim, what: str) -> int:
    if not isinstance(d, int):
        raise _fail(f"{what} is the symbol {d!r}; it must be static")
    return d


def _prod(dims: tuple[Dim, ...], what: str) -> int:
    return math.prod(_static(d, what) for d in dims)


# --------------------------------------------------------------------- elementwise ops
def _binary(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    a, b = _t(types, 0), _t(types, 1)
    dtype = _same_dtype(types)
    return TensorType(broadcast_shapes(a.shape, b.shape), dtype)


for _name, _doc in [("add", "a + b"), ("subtract", "a - b"), ("multiply", "a * b"),
                    ("divide", "a / b (integer division truncates toward zero)"),
                    ("power", "a ** b"), ("maximum", "max(a, b)"),
                    ("minimum", "min(a, b)")]:
    register(_name, 2, {}, f"elementwise {_doc}, numpy broadcasting")(_binary)


@register("less", 2, {}, "elementwise a < b as bool, numpy broadcasting")
def _less(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    a, b = _t(types, 0), _t(types, 1)
    _same_dtype(types)
    return TensorType(broadcast_shapes(a.shape, b.shape), "bool")


def _unary_float(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _want_dtype(x, FLOAT_DTYPES, "the input")
    return x


def _unary_any(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    return _t(types, 0)


for _name, _doc in [("sigmoid", "1 / (1 + exp(-x))"), ("tanh", "tanh(x)"),
                    ("erf", "the error function"), ("sqrt", "square root"),
                    ("exp", "exp(x)"), ("hard_swish", "x * hard_sigmoid(x, 1/6, 1/2)")]:
    register(_name, 1, {}, f"elementwise {_doc}")(_unary_float)
register("relu", 1, {}, "elementwise max(x, 0)")(_unary_any)
register("negative", 1, {}, "elementwise -x")(_unary_any)
register("leaky_relu", 1, {"alpha": 0.01}, "x if x >= 0 else alpha * x")(_unary_float)
register("hard_sigmoid", 1, {"alpha": 0.2, "beta": 0.5},
         "max(0, min(1, alpha * x + beta))")(_unary_float)
register("clip", 1, {"a_min": None, "a_max": None},
         "min(max(x, a_min), a_max); a bound of None is absent")(_unary_any)
register("identity", 1, {}, "x")(_unary_any)


@register("cast", 1, {"dtype": REQUIRED}, "convert to dtype (float to int truncates)")
def _cast(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    return TensorType(_t(types, 0).shape, check_dtype(attrs["dtype"]))


@register("where", 3, {}, "cond ? x : y, numpy broadcasting")
def _where(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    c, x, y = _t(types, 0), _t(types, 1), _t(types, 2)
    if c.dtype != "bool":
        raise _fail(f"the condition has dtype {c.dtype}, not bool")
    dtype = _same_dtype(types[1:])
    return TensorType(broadcast_shapes(c.shape, x.shape, y.shape), dtype)


# ------------------------------------------------------------------------------ nn ops
def _nchw(t: TensorType, what: str) -> None:
    if t.ndim != 4:
        raise _fail(f"{what} has shape {t.shape}; expected 4 dims (N, C, H, W)")


def _window_out(size: Dim, k: int, stride: int, pad: int, dilation: int, ceil: bool,
                what: str, pad_begin: int | None = None) -> int:
    """Output extent of a window op; in ceil mode, a last window that would start in the
    end padding is dropped (ONNX's and PyTorch's rule; ``pad_begin``: the begin padding
    of the total ``pad``)."""
    size = _static(size, what)
    span = dilation * (k - 1) + 1
    room = size + pad - span
    if room < 0:
        raise _fail(f"{what}: window of extent {span} does not fit input {size} with "
                    f"padding {pad}")
    out = (-(-room // stride) if ceil else room // stride) + 1
    if ceil and pad_begin is not None and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


# the least value of each window attribute: extents and steps 1, padding 0
_WINDOW_ATTR_MINIMUM = {"kernel_size": 1, "pool_size": 1, "strides": 1, "dilation": 1,
                        "padding": 0}


def _pair(attrs: Mapping[str, Any], key: str, n: int = 2) -> tuple[int, ...]:
    """A window attribute's ``n`` values, each at least its ``_WINDOW_ATTR_MINIMUM``."""
    v = tuple(attrs[key])
    if len(v) != n:
        raise _fail(f"attribute {key}={v} must have {n} values")
    least = _WINDOW_ATTR_MINIMUM[key]
    if min(v) < least:
        raise _fail(f"attribute {key}={v} must be "
                    f"{'at least 1' if least else 'non-negative'}")
    return v


@register("nn.conv2d", 2,
          {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
           "data_layout": "NCHW", "kernel_layout": "OIHW"},
          "2-D convolution; padding is (top, left, bottom, right); blocked layouts "
          "NCHW{b}n{c}c / OIHW{o}o{i}i as on the accelerator")
def _conv2d(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x, w = _t(types, 0), _t(types, 1)
    dtype = _same_dtype(types)
    return TensorType(conv2d_shape(x, w, attrs), dtype)


def conv2d_shape(x: TensorType, w: TensorType, attrs: Mapping[str, Any]) -> tuple[Dim, ...]:
    """Output shape of a 2-D convolution (plain or blocked layouts)."""
    sh, sw = _pair(attrs, "strides")
    dh, dw = _pair(attrs, "dilation")
    pt, pl, pb, pr = _pair(attrs, "padding", 4)
    groups = attrs["groups"]
    d_layout = parse_layout(attrs["data_layout"])
    k_layout = parse_layout(attrs["kernel_layout"])
    if d_layout.base != "NCHW" or k_layout.base != "OIHW":
        raise _fail(f"layouts {attrs['data_layout']}/{attrs['kernel_layout']}: expected "
                    "NCHW[{b}n{c}c] data and OIHW[{o}o{i}i] weights")
    if x.ndim != d_layout.ndim:
        raise _fail(f"data has shape {x.shape}; layout {attrs['data_layout']} has "
                    f"{d_layout.ndim} dims")
    if w.ndim != k_layout.ndim:
        raise _fail(f"weight has shape {w.shape}; layout {attrs['kernel_layout']} has "
                    f"{k_layout.ndim} dims")
    blocked = d_layout.blocks or k_layout.blocks
    if blocked:
        # groups: independent convolutions over consecutive channel blocks (a grouped
        # convolution's super-groups, their kernels block-diagonal)
        if groups < 1 or (isinstance(w.shape[0], int) and w.shape[0] % groups):
            raise _fail(f"groups={groups} does not divide the weight's {w.shape[0]} output "
                        "channel blocks")
        if x.shape[1] != w.shape[1] * groups or x.shape[5] != w.shape[5]:
            raise _fail(f"input channel blocks of data {x.shape} (dims 1, 5) and weight "
                        f"{w.shape} (dims 1, 5) × groups {groups} differ")
        kh, kw = _static(w.shape[2], "kernel height"), _static(w.shape[3], "kernel width")
        oh = _window_out(x.shape[2], kh, sh, pt + pb, dh, False, "height")
        ow = _window_out(x.shape[3], kw, sw, pl + pr, dw, False, "width")
        return (x.shape[0], w.shape[0], oh, ow, x.shape[4], w.shape[4])
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    if groups < 1:
        raise _fail(f"groups={groups} must be at least 1")
    c_static = _static(c, "input channel count")
    if c_static % groups or _static(o, "output channel count") % groups:
        raise _fail(f"groups={groups} does not divide input channels {c} and output "
                    f"channels {o}")
    if ci != c_static // groups:
        raise _fail(f"weight input channels {ci} (weight dim 1 of {w.shape}) != data "
                    f"channels {c} (data dim 1 of {x.shape}) / groups {groups}")
    oh = _window_out(h, _static(kh, "kernel height"), sh, pt + pb, dh, False, "height")
    ow = _window_out(wd, _static(kw, "kernel width"), sw, pl + pr, dw, False, "width")
    return (n, o, oh, ow)


@register("nn.im2col", 1, {"kernel_size": REQUIRED, "strides": (1, 1),
                          "padding": (0, 0, 0, 0)},
          "the windows of a 2-D convolution as channels: NCHW to (N, C*KH*KW, OH, OW), "
          "channel c*KH*KW + i*KW + j holding tap (i, j) of channel c (zero padding)")
def _im2col(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    if x.ndim != 4:
        raise _fail(f"data has shape {x.shape}; expected NCHW")
    kh, kw = _pair(attrs, "kernel_size")
    sh, sw = _pair(attrs, "strides")
    pt, pl, pb, pr = _pair(attrs, "padding", 4)
    n, c, h, wd = x.shape
    oh = _window_out(h, kh, sh, pt + pb, 1, False, "height")
    ow = _window_out(wd, kw, sw, pl + pr, 1, False, "width")
    return TensorType((n, _static(c, "channel count") * kh * kw, oh, ow), x.dtype)


@register("qnn.conv2d_integer", 4,
          {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
           "data_layout": "NCHW", "kernel_layout": "OIHW"},
          "integer convolution (x - x_zero_point) * (w - w_zero_point), int32 result")
def _conv2d_integer(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x, w = _t(types, 0), _t(types, 1)
    _want_dtype(x, QUANT_DTYPES, "the data")
    _want_dtype(w, QUANT_DTYPES, "the weight")
    _zero_point(types, 2, x, None)
    _zero_point(types, 3, w, 0 if _t(types, 3).ndim else None)
    return TensorType(conv2d_shape(x, w, attrs), "int32")


def _zero_point(types: list[Type], i: int, of: TensorType, axis: int | None) -> None:
    zp = _t(types, i)
    if zp.dtype != of.dtype:
        raise _fail(f"zero point (argument {i}) has dtype {zp.dtype}, its tensor {of.dtype}")
    _scale_shape(zp, of, axis, f"zero point (argument {i})")


def _quant_axis(axis: int, x: TensorType, scale: TensorType) -> int | None:
    """The normalized axis of a per-axis scale, None for a per-tensor one."""
    if scale.ndim == 0 or scale.shape == (1,) or (scale.ndim > 1 and scale.ndim == x.ndim):
        return None  # per tensor, or a full-rank scale that broadcasts
    return _axis(axis, x.ndim)


def _scale_shape(s: TensorType, of: TensorType, axis: int | None, what: str) -> None:
    if s.ndim == 0 or s.shape == (1,):
        return
    if s.ndim > 1 and s.ndim == of.ndim:  # broadcasts (e.g. per channel in a blocked layout)
        if any(d not in (1, e) for d, e in zip(s.shape, of.shape, strict=True)):
            raise _fail(f"{what} of shape {s.shape} does not broadcast to {of.shape}")
        return
    if s.ndim != 1 or axis is None:
        raise _fail(f"{what} has shape {s.shape}; expected a scalar"
                    + ("" if axis is None else f" or ({of.shape[axis]},)"))
    if s.shape[0] != of.shape[axis]:
        raise _fail(f"{what} has {s.shape[0]} values, axis {axis} of {of.shape} has "
                    f"{of.shape[axis]}")


@register("matmul", 2, {}, "numpy matmul (batched, broadcasting)")
def _matmul(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    a, b = _t(types, 0), _t(types, 1)
    dtype = _same_dtype(types)
    return TensorType(matmul_shape(a, b), dtype)


def matmul_shape(a: TensorType, b: TensorType) -> tuple[Dim, ...]:
    """Result shape of numpy's matmul, with errors naming the contracted dims."""
    if a.ndim == 0 or b.ndim == 0:
        raise _fail("matmul operands must have at least one dim")
    ash = (1, *a.shape) if a.ndim == 1 else a.shape
    bsh = (*b.shape, 1) if b.ndim == 1 else b.shape
    if ash[-1] != bsh[-2]:
        raise _fail(f"contracted dims differ: {ash[-1]} (last of {a.shape}) vs "
                    f"{bsh[-2]} (dim -2 of {b.shape})")
    batch = broadcast_shapes(ash[:-2], bsh[:-2])
    out = (*batch, ash[-2], bsh[-1])
    if a.ndim == 1:
        out = out[:-2] + out[-1:]
    if b.ndim == 1:
        out = out[:-1]
    return out


@register("qnn.matmul_integer", 4, {},
          "integer matmul (a - a_zero_point) @ (b - b_zero_point), int32 result")
def _matmul_integer(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    a, b = _t(types, 0), _t(types, 1)
    _want_dtype(a, QUANT_DTYPES, "a")
    _want_dtype(b, QUANT_DTYPES, "b")
    _zero_point(types, 2, a, a.ndim - 2 if a.ndim >= 2 else None)
    _zero_point(types, 3, b, b.ndim - 1)
    return TensorType(matmul_shape(a, b), "int32")


@register("nn.batch_norm", 5, {"epsilon": 1e-5},
          "inference batch norm over axis 1: (x - mean) / sqrt(var + eps) * gamma + beta")
def _batch_norm(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _want_dtype(x, FLOAT_DTYPES, "the input")
    if x.ndim < 2:
        raise _fail(f"input has shape {x.shape}; expected at least 2 dims")
    for i, what in enumerate(("gamma", "beta", "mean", "var"), start=1):
        p = _t(types, i)
        if p.shape != (x.shape[1],):
            raise _fail(f"{what} has shape {p.shape}; expected ({x.shape[1]},) "
                        f"(channels, dim 1 of {x.shape})")
    _same_dtype(types)
    return x


def _pool(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _nchw(x, "the input")
    kh, kw = _pair(attrs, "pool_size")
    sh, sw = _pair(attrs, "strides")
    dh, dw = _pair(attrs, "dilation")
    pt, pl, pb, pr = _pair(attrs, "padding", 4)
    ceil = attrs["ceil_mode"]
    oh = _window_out(x.shape[2], kh, sh, pt + pb, dh, ceil, "height", pt)
    ow = _window_out(x.shape[3], kw, sw, pl + pr, dw, ceil, "width", pl)
    return TensorType((x.shape[0], x.shape[1], oh, ow), x.dtype)


_POOL_ATTRS = {"pool_size": REQUIRED, "strides": (1, 1), "padding": (0, 0, 0, 0),
               "dilation": (1, 1), "ceil_mode": False}
register("nn.max_pool2d", 1, _POOL_ATTRS, "2-D max pooling (padding is -inf)")(_pool)


@register("nn.max_pool2d_indices", 1, {**_POOL_ATTRS, "storage_order": 0},
          "where nn.max_pool2d's maxima are: int64 indices into the flattened input "
          "(ONNX MaxPool's Indices output)")
def _pool_indices(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    return TensorType(as_tensor_type(_pool(types, attrs), "the pool").shape, "int64")
register("nn.avg_pool2d", 1, {**_POOL_ATTRS, "count_include_pad": False},
         "2-D average pooling")(_pool)


def _global_pool(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    if x.ndim < 3:
        raise _fail(f"input has shape {x.shape}; expected (N, C, spatial...)")
    return TensorType((*x.shape[:2], *(1,) * (x.ndim - 2)), x.dtype)


register("nn.global_avg_pool2d", 1, {}, "mean over the spatial dims (kept as 1)")(
    _global_pool)
register("nn.global_max_pool2d", 1, {}, "max over the spatial dims (kept as 1)")(
    _global_pool)


@register("nn.lrn", 1, {"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
          "local response normalization across channels (ONNX LRN)")
def _lrn(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _want_dtype(x, FLOAT_DTYPES, "the input")
    if x.ndim < 3:
        raise _fail(f"input has shape {x.shape}; expected (N, C, spatial...)")
    if attrs["size"] < 1:
        raise _fail(f"attribute size={attrs['size']} must be at least 1")
    return x


@register("nn.softmax", 1, {"axis": -1}, "softmax along axis")
def _softmax(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _want_dtype(x, FLOAT_DTYPES, "the input")
    _axis(attrs["axis"], x.ndim)
    return x


@register("nn.layer_norm", 3, {"axis": -1, "epsilon": 1e-5},
          "normalize over dims axis..end, then * gamma + beta (broadcast)")
def _layer_norm(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _want_dtype(x, FLOAT_DTYPES, "the input")
    axis = _axis(attrs["axis"], x.ndim)
    norm = x.shape[axis:]
    for i, what in ((1, "gamma"), (2, "beta")):
        p = _t(types, i)
        if broadcast_shapes(p.shape, norm) != norm:
            raise _fail(f"{what} has shape {p.shape}; it must broadcast to the normalized "
                        f"dims {norm}")
    _same_dtype(types)
    return x


@register("nn.pad", 1, {"pads": REQUIRED, "mode": "constant", "value": 0.0},
          "pad; pads are (begin of each axis..., end of each axis...) as in ONNX; mode "
          "constant, reflect, edge or wrap")
def _pad(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    pads = tuple(attrs["pads"])
    if len(pads) != 2 * x.ndim:
        raise _fail(f"pads has {len(pads)} values; rank {x.ndim} needs {2 * x.ndim}")
    if attrs["mode"] not in ("constant", "reflect", "edge", "wrap"):
        raise _fail(f"mode {attrs['mode']!r}: expected constant, reflect, edge or wrap")
    shape = []
    for i, d in enumerate(x.shape):
        if pads[i] == 0 and pads[i + x.ndim] == 0:
            shape.append(d)
        else:
            shape.append(_static(d, f"padded dim {i}") + pads[i] + pads[i + x.ndim])
    return TensorType(tuple(shape), x.dtype)


# ----------------------------------------------------------------------------- shapes
@register("reshape", 1, {"newshape": REQUIRED},
          "reshape; newshape entries: an int, 0 (copy the input dim, ONNX), -1 (inferred) "
          "or a symbol")
def _reshape(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    return TensorType(reshape_shape(x.shape, tuple(attrs["newshape"])), x.dtype)


def reshape_shape(shape: tuple[Dim, ...], newshape: tuple[Any, ...]) -> tuple[Dim, ...]:
    """Resolve a reshape target with 0 (copy), -1 (infer) and symbols."""
    out: list[Dim] = []
    infer = None
    for i, d in enumerate(newshape):
        if d == 0 and isinstance(d, int):
            if i >= len(shape):
                raise _fail(f"newshape {newshape}: 0 at position {i} has no input dim")
            out.append(shape[i])
        elif d == -1:
            if infer is not None:
                raise _fail(f"newshape {newshape} has more than one -1")
            infer = i
            out.append(-1)
        elif isinstance(d, str) or (isinstance(d, int) and d > 0):
            out.append(d)
        else:
            raise _fail(f"newshape {newshape}: entry {d!r} is not valid")
    # cancel symbols present on both sides, then compare the static products
    left = list(shape)
    right = [d for d in out if d != -1]
    for d in list(right):
        if isinstance(d, str) and d in left:
            left.remove(d)
            right.remove(d)
    symbols = [d for d in left if isinstance(d, str)]
    if infer is not None and len(symbols) == 1 and all(isinstance(d, int) for d in right) \
            and math.prod(d for d in left if isinstance(d, int)) == math.prod(right):
        out[infer] = symbols[0]  # (B, 4, 6, 6) to (-1, 144): the -1 is B
        return tuple(out)
    if any(isinstance(d, str) for d in left + right):
        raise _fail(f"cannot reshape {shape} to {newshape}: symbolic dims do not match")
    total, known = math.prod(left), math.prod(right)
    if infer is not None:
        if known == 0 or total % known:
            raise _fail(f"cannot reshape {shape} to {newshape}: {total} elements do not "
                        f"divide by {known}")
        out[infer] = total // known
    elif total != known:
        raise _fail(f"cannot reshape {shape} ({total} elements) to {tuple(out)} "
                    f"({known} elements)")
    return tuple(out)


@register("flatten", 1, {"axis": 1}, "reshape to (prod(dims[:axis]), prod(dims[axis:]))")
def _flatten(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    axis = attrs["axis"]
    if not -x.ndim <= axis <= x.ndim:
        raise _fail(f"axis {axis} is out of range for rank {x.ndim}")
    axis = axis + x.ndim if axis < 0 else axis
    head, tail = x.shape[:axis], x.shape[axis:]

    def merged(dims: tuple[Dim, ...]) -> Dim:
        if len(dims) == 1:
            return dims[0]
        return _prod(dims, "a flattened dim")
    return TensorType((merged(head) if head else 1, merged(tail) if tail else 1), x.dtype)


@register("transpose", 1, {"axes": None}, "permute dims (default: reverse them)")
def _transpose(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    axes = attrs["axes"]
    axes = tuple(range(x.ndim))[::-1] if axes is None else tuple(a % x.ndim for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise _fail(f"axes {attrs['axes']} are not a permutation of rank {x.ndim}")
    return TensorType(tuple(x.shape[a] for a in axes), x.dtype)


@register("squeeze", 1, {"axes": None}, "drop dims of extent 1 (all of them by default)")
def _squeeze(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    if attrs["axes"] is None:
        axes = {i for i, d in enumerate(x.shape) if d == 1}
    else:
        axes = {_axis(a, x.ndim) for a in attrs["axes"]}
        for a in axes:
            if x.shape[a] != 1:
                raise _fail(f"cannot squeeze axis {a} of {x.shape}: extent {x.shape[a]}")
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


@register("expand_dims", 1, {"axes": REQUIRED},
          "insert dims of extent 1 at axes of the result (ONNX Unsqueeze)")
def _expand_dims(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    rank = x.ndim + len(attrs["axes"])
    axes = sorted(_axis(a, rank) for a in attrs["axes"])
    if len(set(axes)) != len(axes):
        raise _fail(f"axes {attrs['axes']} repeat")
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return TensorType(tuple(shape), x.dtype)


@register("concatenate", None, {"axis": 0}, "join the arguments along axis")
def _concatenate(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    ts = [_t(types, i) for i in range(len(types))]
    dtype = _same_dtype(types)
    x = ts[0]
    axis = _axis(attrs["axis"], x.ndim)
    for i, t in enumerate(ts):
        if t.ndim != x.ndim:
            raise _fail(f"argument {i} has rank {t.ndim}, argument 0 rank {x.ndim}")
        for d in range(x.ndim):
            if d != axis and t.shape[d] != x.shape[d]:
                raise _fail(f"dim {d} differs: {t.shape[d]} (argument {i}, {t.shape}) vs "
                            f"{x.shape[d]} (argument 0, {x.shape})")
    shape = list(x.shape)
    shape[axis] = sum(_static(t.shape[axis], f"concatenated dim {axis}") for t in ts)
    return TensorType(tuple(shape), dtype)


@register("split", 1, {"axis": 0, "sections": REQUIRED},
          "split into a tuple of parts whose extents along axis are sections")
def _split(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    axis = _axis(attrs["axis"], x.ndim)
    sections = tuple(attrs["sections"])
    extent = _static(x.shape[axis], f"split axis {axis}")
    if sum(sections) != extent or any(s < 0 for s in sections):
        raise _fail(f"sections {sections} do not add up to dim {axis} of {x.shape}")
    fields = []
    for s in sections:
        shape = list(x.shape)
        shape[axis] = s
        fields.append(TensorType(tuple(shape), x.dtype))
    return TupleType(tuple(fields))


@register("strided_slice", 1, {"begin": REQUIRED, "end": REQUIRED, "axes": REQUIRED,
                               "steps": REQUIRED},
          "slice axes[i] from begin[i] to end[i] by steps[i] (ONNX Slice semantics)")
def _strided_slice(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    shape = list(x.shape)
    begin, end, axes, steps = (tuple(attrs[k]) for k in ("begin", "end", "axes", "steps"))
    if not len(begin) == len(end) == len(axes) == len(steps):
        raise _fail("begin, end, axes and steps differ in length")
    for b, e, a, s in zip(begin, end, axes, steps, strict=True):
        a = _axis(a, x.ndim)
        n = _static(x.shape[a], f"sliced dim {a}")
        if s == 0:
            raise _fail(f"step 0 on axis {a}")
        shape[a] = len(range(*slice(b, e, s).indices(n)))
    return TensorType(tuple(shape), x.dtype)


@register("take", 2, {"axis": 0}, "gather entries of data along axis at integer indices")
def _take(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x, idx = _t(types, 0), _t(types, 1)
    if idx.dtype not in ("int32", "int64"):
        raise _fail(f"indices have dtype {idx.dtype}; expected int32 or int64")
    axis = _axis(attrs["axis"], x.ndim)
    return TensorType((*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]), x.dtype)


@register("shape_of", 1, {}, "the shape as an int64 vector")
def _shape_of(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    return TensorType((_t(types, 0).ndim,), "int64")


@register("mean", 1, {"axes": None, "keepdims": True}, "mean over axes (all by default)")
def _mean(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    _want_dtype(_t(types, 0), FLOAT_DTYPES, "the input")
    return _reduced(types, attrs)


register("reduce_sum", 1, {"axes": None, "keepdims": True},
         "sum over axes (all by default)")(lambda types, attrs: _reduced(types, attrs))
register("reduce_max", 1, {"axes": None, "keepdims": True},
         "max over axes (all by default; an empty set gives the dtype's lowest)")(
    lambda types, attrs: _reduced(types, attrs))


def _reduced(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    axes = (set(range(x.ndim)) if attrs["axes"] is None
            else {_axis(a, x.ndim) for a in attrs["axes"]})
    if attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return TensorType(shape, x.dtype)


# ------------------------------------------------------------- runtime-parameter ops
# The shape ops whose parameters (a target shape, axes, slice bounds, pads, split
# sizes) arrive as tensors at run time, on the CPU only: the result's shape is the
# ``out_shape`` the frontend knows (ONNX shape inference; a symbol for each dim that
# depends on the parameters' values).
def _int_params(types: list[Type], first: int) -> None:
    for i in range(first, len(types)):
        p = _t(types, i)
        if p.ndim > 1 or p.dtype not in ("int32", "int64"):
            raise _fail(f"argument {i} is {p}; expected an int32 or int64 vector")


def _runtime_shaped(params: tuple[int, ...]) -> TypeRule:
    def rule(types: list[Type], attrs: Mapping[str, Any]) -> Type:
        for i in params:
            _int_params([types[i]], 0)
        return TensorType(tuple(attrs["out_shape"]), _t(types, 0).dtype)
    return rule


for _name, _n, _params, _attrs, _doc in [
        ("dynamic_reshape", 2, (1,), {"allowzero": False},
         "reshape to the shape given by argument 1 (ONNX Reshape: 0 copies, -1 inferred)"),
        ("dynamic_squeeze", 2, (1,), {}, "squeeze the axes given by argument 1"),
        ("dynamic_expand_dims", 2, (1,), {}, "insert unit dims at the axes of argument 1"),
        ("dynamic_strided_slice", 5, (1, 2, 3, 4), {},
         "ONNX Slice with starts, ends, axes, steps as arguments 1-4"),
        ("dynamic_pad", 4, (1, 3), {"mode": "constant"},
         "ONNX Pad with pads, the constant value and axes as arguments 1-3"),
        ("dynamic_mean", 2, (1,), {"keepdims": True, "noop_with_empty_axes": False},
         "ONNX ReduceMean with the axes as argument 1 (empty: all, or none with "
         "noop_with_empty_axes)"),
        ("dynamic_reduce_sum", 2, (1,), {"keepdims": True, "noop_with_empty_axes": False},
         "ONNX ReduceSum with the axes as argument 1"),
        ("dynamic_reduce_max", 2, (1,), {"keepdims": True, "noop_with_empty_axes": False},
         "ONNX ReduceMax with the axes as argument 1")]:
    register(_name, _n, {**_attrs, "out_shape": REQUIRED}, _doc)(_runtime_shaped(_params))


@register("dynamic_full", 2, {"out_shape": REQUIRED},
          "a tensor of the shape given by argument 1 filled with the scalar argument 2")
def _dynamic_full(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    _int_params(types[:1], 0)
    return TensorType(tuple(attrs["out_shape"]), _t(types, 1).dtype)


@register("dynamic_split", 2, {"axis": 0, "out_shapes": REQUIRED},
          "split along axis into parts of the extents given by argument 1")
def _dynamic_split(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _int_params(types, 1)
    return TupleType(tuple(TensorType(tuple(s), x.dtype) for s in attrs["out_shapes"]))


# --------------------------------------------------------------------------- quantized
@register("qnn.quantize", 3, {"axis": 1, "out_dtype": "int8"},
          "saturate(round_half_even(x / scale) + zero_point); per-axis scale allowed")
def _quantize(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x, s = _t(types, 0), _t(types, 1)
    _want_dtype(x, ("float32",), "the input")
    if s.dtype != "float32":
        raise _fail(f"scale has dtype {s.dtype}, not float32")
    axis = _quant_axis(attrs["axis"], x, s)
    _scale_shape(s, x, axis, "scale")
    out = TensorType(x.shape, check_dtype(attrs["out_dtype"]))
    _zero_point(types, 2, out, axis)
    return out


@register("qnn.dequantize", 3, {"axis": 1},
          "(x - zero_point) * scale as float32; per-axis scale allowed")
def _dequantize(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x, s = _t(types, 0), _t(types, 1)
    _want_dtype(x, (*QUANT_DTYPES, "int16", "uint16", "int32"), "the input")
    if s.dtype != "float32":
        raise _fail(f"scale has dtype {s.dtype}, not float32")
    axis = _quant_axis(attrs["axis"], x, s)
    _scale_shape(s, x, axis, "scale")
    _zero_point(types, 2, x, axis)
    return TensorType(x.shape, "float32")


@register("qnn.requantize", 3, {"axis": 1, "out_dtype": "int8"},
          "int32 to int8/uint8: saturate(round_half_even(float32(x) * scale) + zero_point)")
def _requantize(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x, s = _t(types, 0), _t(types, 1)
    _want_dtype(x, ("int32",), "the input")
    if s.dtype != "float32":
        raise _fail(f"scale has dtype {s.dtype}, not float32")
    axis = _quant_axis(attrs["axis"], x, s)
    _scale_shape(s, x, axis, "scale")
    out = TensorType(x.shape, check_dtype(attrs["out_dtype"]))
    _want_dtype(out, QUANT_DTYPES, "out_dtype")
    _zero_point(types, 2, out, axis)
    return out


@register("qnn.requantize_fixed", 1, {"multiplier": REQUIRED, "shift": REQUIRED},
          "int32 to int8 as the accelerator's ALU does it: clip(SHR_RND(x * multiplier, "
          "shift), -128, 127), the product wrapped to 32 bits, SHR_RND rounding half away "
          "from zero")
def _requantize_fixed(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _want_dtype(x, ("int32",), "the input")
    if not 0 <= attrs["multiplier"] <= 32767 or not 0 <= attrs["shift"] <= 31:
        raise _fail(f"multiplier {attrs['multiplier']} must be in 0..32767 and shift "
                    f"{attrs['shift']} in 0..31 (16-bit ALU immediates)")
    return TensorType(x.shape, "int8")


@register("qnn.requantize_q31", 1, {"multiplier": REQUIRED, "shift": REQUIRED,
                                   "zero_point": 0, "rounding": "double"},
          "int32 to int8 per output channel as TFLite's MultiplyByQuantizedMultiplier and "
          "the accelerator's exact epilogue: SHL max(shift, 0), MULHI multiplier (Q31), "
          "SHR_RND max(-shift, 0), + zero_point, clip to int8 (rounding 'double'), or "
          "the product rounded once by 31 - shift bits, + zero_point, clip (rounding "
          "'single', the REQUANT instruction); multiplier and shift have one entry per "
          "channel (axis 1 of NCHW, axes 1 and 5 of a blocked NCHW{n}n{c}c)")
def _requantize_q31(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _want_dtype(x, ("int32",), "the input")
    mult, shift = tuple(attrs["multiplier"]), tuple(attrs["shift"])
    if attrs["rounding"] not in ROUNDINGS:
        raise _fail(f"rounding {attrs['rounding']!r} is neither {ROUNDINGS[0]!r} nor "
                    f"{ROUNDINGS[1]!r}")
    if len(mult) != len(shift) or not mult:
        raise _fail(f"{len(mult)} multipliers and {len(shift)} shifts: one of each per "
                    "channel")
    if x.ndim not in (4, 6):
        raise _fail(f"the input {x} must be NCHW or blocked NCHW{{n}}n{{c}}c")
    chans = x.shape[1] if x.ndim == 4 else (
        x.shape[1] * x.shape[5] if isinstance(x.shape[1], int) and isinstance(x.shape[5], int)
        else None)
    if isinstance(chans, int) and (len(mult) > chans
                                   or (x.ndim == 4 and len(mult) != chans)):
        raise _fail(f"{len(mult)} per-channel multipliers for {chans} channels of {x}")
    for c, (m, e) in enumerate(zip(mult, shift, strict=True)):
        if not 0 <= m < 1 << 31 or not -31 <= e <= 30:
            raise _fail(f"channel {c}: multiplier {m} must be in 0..2^31-1 and shift {e} "
                        "in -31..30")
    if not -128 <= attrs["zero_point"] <= 127:
        raise _fail(f"zero_point {attrs['zero_point']} outside -128..127")
    return TensorType(x.shape, "int8")


@register("qnn.requantize_residual_q31", 2, {"multiplier": REQUIRED, "shift": REQUIRED,
                                             "residual_factor": REQUIRED, "zero_point": 0,
                                             "lo": -128, "hi": 127},
          "int32 accumulators plus an int8 residual to int8 per output channel, one "
          "rounding (a residual add fused into the convolution's REQUANT): t = x + "
          "residual · residual_factor (int32), then t · multiplier rounded once by "
          "31 - shift bits (half away from zero), + zero_point, clamped to lo..hi; "
          "per-channel attributes as qnn.requantize_q31's, the residual of x's shape")
def _requantize_residual_q31(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x, r = _t(types, 0), _t(types, 1)
    _want_dtype(r, ("int8",), "the residual")
    if tuple(r.shape) != tuple(x.shape):
        raise _fail(f"the residual {r} is not of the accumulators' shape {x}")
    if len(attrs["residual_factor"]) != len(attrs["multiplier"]):
        raise _fail(f"{len(attrs['residual_factor'])} residual factors for "
                    f"{len(attrs['multiplier'])} multipliers: one of each per channel")
    if not -128 <= attrs["lo"] <= attrs["hi"] <= 127:
        raise _fail(f"bounds lo {attrs['lo']}, hi {attrs['hi']} not within int8 in order")
    return _requantize_q31([x], {**attrs, "rounding": "single"})


@register("qnn.add_q31", 2, {"left_shift": 20, "a_multiplier": REQUIRED,
                             "a_shift": REQUIRED, "b_multiplier": REQUIRED,
                             "b_shift": REQUIRED, "out_multiplier": REQUIRED,
                             "out_shift": REQUIRED, "zero_point": 0, "a_zero_point": 0,
                             "b_zero_point": 0},
          "int8 + int8 to int8 with two scales, as TFLite's int8 ADD and the accelerator's "
          "ALU compute it: each operand less its zero point (a_zero_point, b_zero_point), "
          "SHL left_shift, then scaled by its Q31 multiplier "
          "(SHL max(shift, 0), MULHI, SHR_RND max(-shift, 0)), added, scaled by the output "
          "multiplier the same way, + zero_point, clipped to int8; same shapes (numpy "
          "broadcasting)")
def _add_q31(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    a, b = _int8_operands(types)
    if not 0 <= attrs["left_shift"] <= 24:
        raise _fail(f"left_shift {attrs['left_shift']} outside 0..24 (an int8 shifted by "
                    "it must fit 32 bits with headroom for the sum)")
    for k in ("a", "b", "out"):
        _check_multiplier(attrs[f"{k}_multiplier"], attrs[f"{k}_shift"], f"{k}: ")
    _check_zero_points(attrs, ("zero_point", "a_zero_point", "b_zero_point"))
    if attrs["left_shift"] > 23 and (attrs["a_zero_point"] or attrs["b_zero_point"]):
        raise _fail(f"left_shift {attrs['left_shift']} with input zero points: x - z (up "
                    "to 255) shifted by it must fit 32 bits")
    return TensorType(broadcast_shapes(a.shape, b.shape), "int8")


@register("qnn.hard_swish_q31", 1, {"t_shift": 0, "offset": REQUIRED, "upper": REQUIRED,
                                    "left_shift": 0, "multiplier": REQUIRED,
                                    "shift": REQUIRED, "zero_point": 0,
                                    "input_zero_point": 0, "rounding": "double"},
          "int8 hard-swish x·relu6(x + 3)/6 with the accelerator's ALU arithmetic: x less "
          "input_zero_point, t = "
          "min(max(SHL(x, t_shift) + offset, 0), upper) (offset and upper are 3 and 6 in "
          "units of x's step / 2^t_shift), "
          "p = x·t (int32), SHL left_shift, scaled by the Q31 multiplier (SHL max(shift, "
          "0), MULHI, SHR_RND max(-shift, 0)), + zero_point, clipped to int8")
def _hard_swish_q31(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _want_dtype(x, ("int8",), "the input")
    if not 0 <= attrs["t_shift"] <= 16:
        raise _fail(f"t_shift {attrs['t_shift']} outside 0..16")
    if not 0 <= attrs["offset"] <= attrs["upper"] <= 32767:
        raise _fail(f"offset {attrs['offset']} and upper {attrs['upper']} must satisfy "
                    "0 <= offset <= upper <= 32767 (16-bit ALU immediates)")
    _check_zero_points(attrs, ("input_zero_point",))
    _check_output_scale(attrs, _operand_range(attrs, ("input_zero_point",)) * attrs["upper"])
    return x


def _int8_operands(types: list[Type]) -> tuple[TensorType, TensorType]:
    """The two int8 operands of a binary integer operator."""
    a, b = _t(types, 0), _t(types, 1)
    _want_dtype(a, ("int8",), "operand a")
    _want_dtype(b, ("int8",), "operand b")
    return a, b


def _check_zero_points(attrs: Mapping[str, Any], names: Sequence[str]) -> None:
    """Zero points of an int8 operator in ``-128..127``."""
    for k in names:
        if not -128 <= attrs[k] <= 127:
            raise _fail(f"{k} {attrs[k]} outside -128..127")


def _operand_range(attrs: Mapping[str, Any], names: Sequence[str]) -> int:
    """The largest magnitude of an int8 operand less its zero point (any of ``names``
    nonzero: up to 255)."""
    return 256 if any(attrs[k] for k in names) else 128


def _check_multiplier(m: int, e: int, what: str = "") -> None:
    """A Q31 multiplier in ``0..2^31-1`` and its exponent in ``-31..30``."""
    if not 0 <= m < 1 << 31 or not -31 <= e <= 30:
        raise _fail(f"{what}multiplier {m} must be in 0..2^31-1 and shift {e} in -31..30")


def _check_output_scale(attrs: Mapping[str, Any], largest: int) -> None:
    """The checks of an int8 vector operator's output scale (``left_shift``,
    ``multiplier``, ``shift``, ``zero_point``, ``rounding``: ``"double"`` is SHL,
    MULHI and SHR_RND, ``"single"`` one REQUANT of the exact product by ``31 - shift``
    bits) for values up to ``largest`` in magnitude."""
    m, e, left = attrs["multiplier"], attrs["shift"], attrs["left_shift"]
    _check_multiplier(m, e)
    if attrs["rounding"] not in ("double", "single"):
        raise _fail(f"rounding={attrs['rounding']!r}; expected 'double' or 'single'")
    if attrs["rounding"] == "single" and left:
        raise _fail(f"left_shift {left} with rounding='single' (REQUANT's exact product "
                    "needs no headroom)")
    if not 0 <= left <= 30 or largest << max(left + max(e, 0), 0) >= 1 << 31:
        raise _fail(f"left_shift {left} (with shift {e}) lets values up to {largest} "
                    "overflow 32 bits")
    if not -128 <= attrs["zero_point"] <= 127:
        raise _fail(f"zero_point {attrs['zero_point']} outside -128..127")


@register("qnn.mul_q31", 2, {"left_shift": 0, "multiplier": REQUIRED, "shift": REQUIRED,
                             "zero_point": 0, "a_zero_point": 0, "b_zero_point": 0,
                             "rounding": "double"},
          "int8 · int8 to int8 (numpy broadcasting; squeeze-excite's channel-wise scale), "
          "with the accelerator's ALU arithmetic: the int32 product of a - a_zero_point "
          "and b - b_zero_point, SHL left_shift, "
          "scaled by the Q31 multiplier (SHL max(shift, 0), MULHI, SHR_RND max(-shift, "
          "0)), + zero_point, clipped to int8")
def _mul_q31(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    a, b = _int8_operands(types)
    _check_zero_points(attrs, ("a_zero_point", "b_zero_point"))
    _check_output_scale(attrs, _operand_range(attrs, ("a_zero_point",))
                        * _operand_range(attrs, ("b_zero_point",)))
    return TensorType(broadcast_shapes(a.shape, b.shape), "int8")


@register("qnn.concat_q31", 2, {"axis": 1, "a_multiplier": REQUIRED, "a_shift": REQUIRED,
                                "a_zero_point": 0, "b_multiplier": REQUIRED,
                                "b_shift": REQUIRED, "b_zero_point": 0, "zero_point": 0,
                                "a_channels": 0, "b_channels": 0},
          "int8 channel concatenation (axis 1: NCHW, or a blocked NCHW{n}n{c}c of "
          "a_channels and b_channels, 0: whole blocks) with each input requantized to the output's "
          "scale as REQUANT computes it: clamp(RDBPOT((x - x_zero_point) · x_multiplier, "
          "31 - x_shift) + zero_point, -128, 127) (a multiplier of 2^30 with shift 1 is a "
          "scale of 1: a copy when the zero points agree)")
def _concat_q31(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    a, b = _int8_operands(types)
    if attrs["axis"] != 1:
        raise _fail(f"axis {attrs['axis']}: the operator joins channels (axis 1)")
    if a.ndim not in (4, 6) or b.ndim != a.ndim or a.shape[:1] + a.shape[2:] != \
            b.shape[:1] + b.shape[2:]:
        raise _fail(f"operands {a} and {b}: expected NCHW (or blocked) activations that "
                    "differ only in their channels")
    lanes = 1 if a.ndim == 4 else int(a.shape[5])
    ca = attrs["a_channels"] or int(a.shape[1]) * lanes
    cb = attrs["b_channels"] or int(b.shape[1]) * lanes
    if -(-ca // lanes) != a.shape[1] or -(-cb // lanes) != b.shape[1]:
        raise _fail(f"a_channels {ca} and b_channels {cb} do not fill operands {a} and {b}")
    for x in ("a", "b"):
        _check_multiplier(attrs[f"{x}_multiplier"], attrs[f"{x}_shift"], f"{x}: ")
        if not 1 <= 31 - attrs[f"{x}_shift"] <= 62:
            raise _fail(f"{x}_shift {attrs[f'{x}_shift']}: REQUANT shifts by 31 - shift, "
                        "which must be in 1..62")
    _check_zero_points(attrs, ("a_zero_point", "b_zero_point", "zero_point"))
    return TensorType((a.shape[0], -(-(ca + cb) // lanes), *a.shape[2:]), "int8")


@register("qnn.channel_permute", 1, {"perm": REQUIRED},
          "int8 channel permutation: output channel j is input channel perm[j] (NCHW, or "
          "a blocked NCHW{n}n{c}c with the same blocks); ShuffleNet's channel shuffle")
def _channel_permute(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _want_dtype(x, ("int8",), "the input")
    perm = [int(p) for p in attrs["perm"]]
    if x.ndim not in (4, 6) or sorted(perm) != list(range(len(perm))):
        raise _fail(f"perm of {len(perm)} values for {x}: expected a permutation of the "
                    "channels of an NCHW (or blocked) activation")
    if x.ndim == 4 and len(perm) != x.shape[1]:
        raise _fail(f"perm has {len(perm)} values for {x.shape[1]} channels")
    return x


@register("qnn.global_avg_pool_q31", 1, {"left_shift": 0, "multiplier": REQUIRED,
                                         "shift": REQUIRED, "zero_point": 0,
                                         "input_zero_point": 0, "rounding": "double"},
          "int8 global average pooling with the accelerator's arithmetic: the int32 sum "
          "of x - input_zero_point over axes 2 and 3 (NCHW, or a blocked NCHW{n}n{c}c), "
          "SHL left_shift, scaled by "
          "the Q31 multiplier (1 / (H·W) and the scales), + zero_point, clipped to int8")
def _global_avg_pool_q31(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x = _t(types, 0)
    _want_dtype(x, ("int8",), "the input")
    if x.ndim not in (4, 6):
        raise _fail(f"the input is {x}; expected NCHW or a blocked NCHW{{n}}n{{c}}c")
    _check_zero_points(attrs, ("input_zero_point",))
    _check_output_scale(attrs, _operand_range(attrs, ("input_zero_point",))
                        * int(x.shape[2]) * int(x.shape[3]))
    return TensorType((*x.shape[:2], 1, 1, *x.shape[4:]), "int8")


@register(ACCEL_PROGRAM, ACCEL_PROGRAM_ARGS,
          {a.name: REQUIRED if a.required else a.default for a in ACCEL_PROGRAM_ATTRS},
          ACCEL_PROGRAM_DOC)
def _accel_program(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    x, blob = _t(types, 0), _t(types, 1)
    _want_dtype(x, ("int8",), "the input")
    if len(types) == 3:
        _want_dtype(_t(types, 2), ("int8",), "the second input")
        if not attrs["extra_input_segment"]:
            raise _fail("a third argument needs extra_input_segment (the segment it fills)")
    if blob.dtype != "uint8" or blob.ndim != 1:
        raise _fail(f"the program is {blob}; expected its bytes as a uint8 vector")
    return TensorType(tuple(attrs["out_shape"]), "int8")


# ------------------------------------------------------------ devices and layouts
@register("on_device", 1, {"device": REQUIRED},
          "annotation: the argument is computed on device (the planner removes it)")
def _on_device(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    if not isinstance(attrs["device"], VirtualDevice):
        raise _fail(f"device={attrs['device']!r} is not a virtual device")
    return types[0]


@register("device_copy", 1, {"src_device": REQUIRED, "dst_device": REQUIRED},
          "copy the argument from src_device to dst_device")
def _device_copy(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    for k in ("src_device", "dst_device"):
        if not isinstance(attrs[k], VirtualDevice):
            raise _fail(f"{k}={attrs[k]!r} is not a virtual device")
    return types[0]


@register("layout_transform", 1, {"src_layout": REQUIRED, "dst_layout": REQUIRED},
          "relayout between NCHW/OIHW and the accelerator's blocked NCHW{b}n{c}c / "
          "OIHW{o}o{i}i (blocked extents zero-padded)")
def _layout_transform(types: list[Type], attrs: Mapping[str, Any]) -> Type:
    from tensorfab.runtime.layout_transform import LayoutError, transformed_shape

    x = _t(types, 0)
    try:
        shape = transformed_shape(x.shape, attrs["src_layout"], attrs["dst_layout"])
    except LayoutError as e:
        raise _fail(str(e)) from None
    return TensorType(shape, x.dtype)

"""Converters from ONNX nodes (opsets 11 to 28) to graph-IR expressions.

Each converter takes the node's context (node, opset, attributes) and its input
expressions (``None`` for an omitted optional input) and returns one expression per ONNX
output (``None`` for an output it cannot produce). Inputs that the IR takes as
attributes (Reshape's shape, Slice's starts, Clip's bounds...) must be constants once
constant sub-graphs are folded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from tensorfab.compiler.graph.infer import infer_types
from tensorfab.compiler.graph.ir import Call, Constant, Expr, TupleGetItem
from tensorfab.compiler.graph.types import DTYPES, GraphError, TensorType

Converted = Sequence[Expr | None]


class OnnxImportError(GraphError):
    """An ONNX model that cannot be imported; names the file and the node."""


@dataclass
class NodeContext:
    """What a converter knows about its node."""

    node: onnx.NodeProto
    opset: int
    attrs: dict[str, Any]
    where: str
    #: ONNX shape inference's shapes of the node's outputs (None: unknown rank), dims
    #: it could not infer as symbols.
    output_shapes: Sequence[tuple[int | str, ...] | None] = ()
    #: The values of 1-D integer inputs computed at run time that are known at import
    #: all the same (None: not known): a shape made of symbolic dims, ``(N, -1)`` of
    #: ``Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])``.
    input_values: Sequence[tuple[int | str, ...] | None] = ()

    def input_value(self, k: int) -> tuple[int | str, ...] | None:
        """The value of input ``k`` known at import (see :attr:`input_values`)."""
        return self.input_values[k] if k < len(self.input_values) else None

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute ``name`` (bytes decoded to str), or ``default``."""
        v = self.attrs.get(name, default)
        return v.decode() if isinstance(v, bytes) else v

    def output_shape(self, k: int = 0) -> tuple[int | str, ...]:
        """The inferred shape of output ``k`` (for ops whose result shape depends on
        values known only at run time)."""
        shape = self.output_shapes[k] if k < len(self.output_shapes) else None
        if shape is None:
            raise self.error(f"ONNX shape inference gives no rank for output {k}; with "
                             "parameters computed at run time the rank must be known")
        return shape

    def error(self, message: str) -> OnnxImportError:
        """An :class:`OnnxImportError` naming this node."""
        return OnnxImportError(f"{self.where}: {message}")


ConverterFn = Callable[[NodeContext, list[Expr | None]], Converted]
CONVERTERS: dict[str, ConverterFn] = {}


def converter(*op_types: str) -> Callable[[ConverterFn], ConverterFn]:
    """Register a converter for ONNX ``op_types``."""
    def wrap(fn: ConverterFn) -> ConverterFn:
        for t in op_types:
            CONVERTERS[t] = fn
        return fn
    return wrap


def onnx_dtype(elem_type: int, what: str) -> str:
    """IR dtype name of an ONNX ``TensorProto`` element type."""
    try:
        np_type = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    except Exception:
        np_type = None
    for name, t in DTYPES.items():
        if np_type is not None and np.dtype(t) == np_type:
            return name
    raise OnnxImportError(f"{what}: element type "
                          f"{onnx.TensorProto.DataType.Name(elem_type)} is not supported; "
                          f"supported: {', '.join(DTYPES)}")


# ----------------------------------------------------------------------------- helpers
def _type(e: Expr) -> TensorType:
    t = infer_types(e)
    if not isinstance(t, TensorType):
        raise GraphError(f"expected a tensor, got {t}")
    return t


def _const_value(ctx: NodeContext, e: Expr | None, what: str) -> np.ndarray | None:
    if e is None:
        return None
    if not isinstance(e, Constant):
        raise ctx.error(f"{what} must be a constant (an initializer or computed from "
                        "constants and static shapes); here it is computed at run time")
    return e.data


def _ints(ctx: NodeContext, e: Expr | None, what: str) -> tuple[int, ...] | None:
    v = _const_value(ctx, e, what)
    return None if v is None else tuple(int(x) for x in v.reshape(-1))


def _at_run_time(*exprs: Expr | None) -> bool:
    """Whether a parameter input is computed at run time (not a constant)."""
    return any(e is not None and not isinstance(e, Constant) for e in exprs)


def _int_vector(values: Sequence[int]) -> Constant:
    return Constant(np.asarray(values, dtype=np.int64).reshape(-1))


def _call(op: str, *args: Expr, **attrs: Any) -> Call:
    return Call(op, list(args), attrs)


def _float32(e: Expr) -> Expr:
    """``e`` as float32 (scales given as float16 or float64)."""
    return e if _type(e).dtype == "float32" else _call("cast", e, dtype="float32")


def _scalar(value: float, like: Expr) -> Constant:
    return Constant(np.asarray(value, dtype=DTYPES[_type(like).dtype]))


def _arg(inputs: list[Expr | None], i: int) -> Expr | None:
    return inputs[i] if i < len(inputs) else None


def _need(ctx: NodeContext, inputs: list[Expr | None], i: int) -> Expr:
    e = _arg(inputs, i)
    if e is None:
        raise ctx.error(f"input {i} is required")
    return e


def _spatial(ctx: NodeContext, x: Expr) -> tuple[int, int]:
    t = _type(x)
    if t.ndim != 4:
        raise ctx.error(f"input has shape {t.shape}; only 2-D (NCHW) inputs are supported")
    h, w = t.shape[2:]
    return h, w  # type: ignore[return-value]


def _padding(ctx: NodeContext, x: Expr, kernel: Sequence[int], strides: Sequence[int],
             dilations: Sequence[int]) -> tuple[int, ...]:
    """(begin of each spatial axis..., end of each...) from ``pads`` or ``auto_pad``:
    (top, left, bottom, right) for a 2-D window."""
    auto = ctx.attr("auto_pad", "NOTSET")
    n = len(kernel)
    if auto in ("NOTSET", ""):
        pads = tuple(ctx.attr("pads", (0,) * (2 * n)))
        if len(pads) != 2 * n:
            raise ctx.error(f"pads {pads} must have {2 * n} values for a {n}-D window")
        return pads
    if auto == "VALID":
        return (0,) * (2 * n)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"auto_pad {auto!r} is not NOTSET, VALID, SAME_UPPER or SAME_LOWER")
    sizes = _type(x).shape[2:]
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        if not isinstance(size, int):
            raise ctx.error(f"auto_pad {auto} needs static spatial dims, got {size!r}")
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        begin.append(small if auto == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return (*begin, *end)


def _channel_vector(v: Expr, ndim: int) -> Expr:
    """A per-channel (C,) vector shaped (C, 1, ...) to broadcast against (N, C, ...)."""
    return _call("expand_dims", v, axes=tuple(range(1, ndim - 1)))


# ------------------------------------------------------------------------ elementwise
_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide",
           "Pow": "power"}


@converter(*_BINARY)
def _binary(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    a, b = _need(ctx, inputs, 0), _need(ctx, inputs, 1)
    if ctx.node.op_type == "Pow" and _type(b).dtype != _type(a).dtype:
        b = _call("cast", b, dtype=_type(a).dtype)
    return [_call(_BINARY[ctx.node.op_type], a, b)]


@converter("Less")
def _less(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("less", _need(ctx, inputs, 0), _need(ctx, inputs, 1))]


@converter("Max", "Min")
def _max_min(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    op = "maximum" if ctx.node.op_type == "Max" else "minimum"
    out = _need(ctx, inputs, 0)
    for e in inputs[1:]:
        if e is not None:
            out = _call(op, out, e)
    return [out]


@converter("Sum")
def _sum(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    out = _need(ctx, inputs, 0)
    for e in inputs[1:]:
        out = _call("add", out, e)
    return [out]


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sqrt": "sqrt",
          "HardSwish": "hard_swish", "Identity": "identity", "Neg": "negative",
          "Exp": "exp"}


@converter(*_UNARY)
def _unary(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    if ctx.node.op_type == "Identity":
        return [x]
    return [_call(_UNARY[ctx.node.op_type], x)]


@converter("Reciprocal")
def _reciprocal(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    return [_call("divide", _scalar(1.0, x), x)]


@converter("Size")
def _size(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    shape = _type(_need(ctx, inputs, 0)).shape
    if not all(isinstance(d, int) for d in shape):
        raise ctx.error(f"Size of the shape {shape} with symbolic dims is not supported")
    return [Constant(np.asarray(int(np.prod(shape, dtype=np.int64)), dtype=np.int64))]


@converter("Gelu")
def _gelu(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    """Gelu (opset 20) as the IR's elementwise operators: ``x/2 · (1 + erf(x/√2))``, or
    with ``approximate="tanh"`` ``x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))``."""
    x = _need(ctx, inputs, 0)
    approximate = ctx.attr("approximate", "none")
    if approximate == "none":
        inner = _call("erf", _call("multiply", x, _scalar(1 / np.sqrt(2.0), x)))
    elif approximate == "tanh":
        cube = _call("multiply", _call("multiply", x, x), x)
        poly = _call("add", x, _call("multiply", cube, _scalar(0.044715, x)))
        inner = _call("tanh", _call("multiply", poly, _scalar(np.sqrt(2.0 / np.pi), x)))
    else:
        raise ctx.error(f"approximate={approximate!r}: expected 'none' or 'tanh'")
    half = _call("multiply", x, _scalar(0.5, x))
    return [_call("multiply", half, _call("add", inner, _scalar(1.0, x)))]


@converter("LeakyRelu")
def _leaky_relu(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("leaky_relu", _need(ctx, inputs, 0), alpha=float(ctx.attr("alpha", 0.01)))]


@converter("HardSigmoid")
def _hard_sigmoid(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("hard_sigmoid", _need(ctx, inputs, 0), alpha=float(ctx.attr("alpha", 0.2)),
                  beta=float(ctx.attr("beta", 0.5)))]


@converter("Clip")
def _clip(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    if any(not isinstance(b, Constant | None) for b in inputs[1:3]):
        # bounds computed at run time: min(max(x, min), max), as ONNX defines Clip
        lo_e, hi_e = _arg(inputs, 1), _arg(inputs, 2)
        if lo_e is not None:
            x = _call("maximum", x, lo_e)
        if hi_e is not None:
            x = _call("minimum", x, hi_e)
        return [x]
    lo = _const_value(ctx, _arg(inputs, 1), "Clip's min")
    hi = _const_value(ctx, _arg(inputs, 2), "Clip's max")
    for name, v in (("min", lo), ("max", hi)):
        if v is not None and v.size != 1:
            raise ctx.error(f"Clip's {name} has shape {v.shape}; ONNX takes one value (a "
                            "scalar)")
    integer = _type(x).dtype not in ("float32", "float64", "float16")

    def bound(v: np.ndarray | None) -> float | int | None:
        if v is None:
            return None
        return int(v.reshape(())) if integer else float(v.reshape(()))
    a_min, a_max = bound(lo), bound(hi)
    if a_min is not None and a_max is not None and a_min > a_max:
        a_min = a_max  # ONNX: min above max sets every value to max
    return [_call("clip", x, a_min=a_min, a_max=a_max)]


@converter("Where")
def _where(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("where", *(_need(ctx, inputs, i) for i in range(3)))]


@converter("Cast")
def _cast(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("cast", _need(ctx, inputs, 0), dtype=onnx_dtype(ctx.attr("to"), ctx.where))]


@converter("CastLike")
def _cast_like(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("cast", _need(ctx, inputs, 0), dtype=_type(_need(ctx, inputs, 1)).dtype)]


@converter("Dropout")
def _dropout(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    if _at_run_time(_arg(inputs, 2)):
        raise ctx.error("training_mode computed at run time is not supported (inference "
                        "only: training_mode must be absent or a constant False)")
    training = _const_value(ctx, _arg(inputs, 2), "Dropout's training_mode")
    if training is not None and bool(training.reshape(())):
        raise ctx.error("training_mode=True is not supported (inference only)")
    t = _type(x)
    mask = Constant(np.ones(t.shape, np.bool_)) if t.is_static else None
    return [x, mask]


# ---------------------------------------------------------------------------- nn ops
@converter("Conv")
def _conv(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x, w = _need(ctx, inputs, 0), _need(ctx, inputs, 1)
    _spatial(ctx, x)
    kernel = tuple(_type(w).shape[2:])
    strides = tuple(ctx.attr("strides", (1, 1)))
    dilations = tuple(ctx.attr("dilations", (1, 1)))
    pads = _padding(ctx, x, kernel, strides, dilations)  # type: ignore[arg-type]
    y: Expr = _call("nn.conv2d", x, w, strides=strides, padding=pads, dilation=dilations,
                    groups=int(ctx.attr("group", 1)))
    b = _arg(inputs, 2)
    if b is not None:
        y = _call("add", y, _channel_vector(b, 4))
    return [y]


@converter("ConvInteger")
def _conv_integer(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x, w = _need(ctx, inputs, 0), _need(ctx, inputs, 1)
    _spatial(ctx, x)
    kernel = tuple(_type(w).shape[2:])
    strides = tuple(ctx.attr("strides", (1, 1)))
    dilations = tuple(ctx.attr("dilations", (1, 1)))
    pads = _padding(ctx, x, kernel, strides, dilations)  # type: ignore[arg-type]
    xzp = _arg(inputs, 2) or _scalar(0, x)
    wzp = _arg(inputs, 3) or _scalar(0, w)
    return [_call("qnn.conv2d_integer", x, w, xzp, wzp, strides=strides, padding=pads,
                  dilation=dilations, groups=int(ctx.attr("group", 1)))]


@converter("QLinearConv")
def _qlinear_conv(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x, xs, xzp, w, ws, wzp, ys, yzp = (_need(ctx, inputs, i) for i in range(8))
    _spatial(ctx, x)
    kernel = tuple(_type(w).shape[2:])
    strides = tuple(ctx.attr("strides", (1, 1)))
    dilations = tuple(ctx.attr("dilations", (1, 1)))
    pads = _padding(ctx, x, kernel, strides, dilations)  # type: ignore[arg-type]
    acc: Expr = _call("qnn.conv2d_integer", x, w, xzp, wzp, strides=strides, padding=pads,
                      dilation=dilations, groups=int(ctx.attr("group", 1)))
    b = _arg(inputs, 8)
    if b is not None:
        acc = _call("add", acc, _channel_vector(b, 4))
    scale = _call("divide", _call("multiply", xs, ws), ys)
    return [_call("qnn.requantize", acc, scale, yzp, axis=1, out_dtype=_type(yzp).dtype)]


@converter("Gemm")
def _gemm(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    a, b = _need(ctx, inputs, 0), _need(ctx, inputs, 1)
    if ctx.attr("transA", 0):
        a = _call("transpose", a, axes=(1, 0))
    if ctx.attr("transB", 0):
        b = _call("transpose", b, axes=(1, 0))
    y: Expr = _call("matmul", a, b)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if alpha != 1.0:
        y = _call("multiply", y, _scalar(alpha, y))
    c = _arg(inputs, 2)
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = _call("multiply", c, _scalar(beta, c))
        y = _call("add", y, c)
    return [y]


@converter("MatMul")
def _matmul(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("matmul", _need(ctx, inputs, 0), _need(ctx, inputs, 1))]


@converter("MatMulInteger")
def _matmul_integer(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    a, b = _need(ctx, inputs, 0), _need(ctx, inputs, 1)
    azp = _arg(inputs, 2) or _scalar(0, a)
    bzp = _arg(inputs, 3) or _scalar(0, b)
    return [_call("qnn.matmul_integer", a, b, azp, bzp)]


@converter("QLinearMatMul")
def _qlinear_matmul(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    a, a_s, azp, b, b_s, bzp, ys, yzp = (_need(ctx, inputs, i) for i in range(8))
    acc = _call("qnn.matmul_integer", a, b, azp, bzp)
    a_s, b_s, ys = (_float32(s) for s in (a_s, b_s, ys))
    scale = _call("divide", _call("multiply", a_s, b_s), ys)
    return [_call("qnn.requantize", acc, scale, yzp, axis=-1, out_dtype=_type(yzp).dtype)]


@converter("BatchNormalization")
def _batch_norm(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    if ctx.attr("training_mode", 0):
        raise ctx.error("training_mode=1 is not supported (inference only)")
    args = [_need(ctx, inputs, i) for i in range(5)]
    return [_call("nn.batch_norm", *args, epsilon=float(ctx.attr("epsilon", 1e-5)))]


def _pool_attrs(ctx: NodeContext, x: Expr) -> dict[str, Any]:
    _spatial(ctx, x)
    kernel = tuple(ctx.attr("kernel_shape"))
    strides = tuple(ctx.attr("strides", (1, 1)))
    dilations = tuple(ctx.attr("dilations", (1, 1)))
    if len(kernel) != 2:
        raise ctx.error(f"kernel_shape {kernel}: only 2-D pooling is supported")
    return {"pool_size": kernel, "strides": strides, "dilation": dilations,
            "padding": _padding(ctx, x, kernel, strides, dilations),
            "ceil_mode": bool(ctx.attr("ceil_mode", 0))}


def _as_2d_pool(ctx: NodeContext, x: Expr) -> NodeContext | None:
    """For a 1-D pool (N, C, L): the context of the same pool over (N, C, 1, L) (a unit
    window across the inserted height); None for any other rank."""
    if _type(x).ndim != 3:
        return None
    attrs = dict(ctx.attrs)
    attrs["kernel_shape"] = (1, *ctx.attr("kernel_shape"))
    for key, unit in (("strides", 1), ("dilations", 1)):
        if key in attrs:
            attrs[key] = (unit, *attrs[key])
    if "pads" in attrs:
        begin, end = attrs["pads"]
        attrs["pads"] = (0, begin, 0, end)
    return NodeContext(ctx.node, ctx.opset, attrs, ctx.where, ctx.output_shapes)


def _pool_3d(ctx: NodeContext, x: Expr, op: str, **extra: Any) -> Expr:
    """A 3-D max or average pool as two 2-D ones: over (H, W) with the depth folded into
    the channels, then over D with (H', W') flattened. Exact for max; for the average,
    the window and its divisor are products over the axes, so the two means compose."""
    n, c, d, h, w = (_static_dim(ctx, v) for v in _type(x).shape)
    kernel = tuple(ctx.attr("kernel_shape"))
    strides = tuple(ctx.attr("strides", (1, 1, 1)))
    dilations = tuple(ctx.attr("dilations", (1, 1, 1)))
    pads = _padding(ctx, x, kernel, strides, dilations)
    ceil = bool(ctx.attr("ceil_mode", 0))
    plane = _call(op, _call("reshape", x, newshape=(n, c * d, h, w)), pool_size=kernel[1:],
                  strides=strides[1:], dilation=dilations[1:],
                  padding=(pads[1], pads[2], pads[4], pads[5]), ceil_mode=ceil, **extra)
    _, _, h2, w2 = _type(plane).shape
    depth = _call(op, _call("reshape", plane, newshape=(n, c, d, h2 * w2)),
                  pool_size=(kernel[0], 1), strides=(strides[0], 1),
                  dilation=(dilations[0], 1), padding=(pads[0], 0, pads[3], 0),
                  ceil_mode=ceil, **extra)
    return _call("reshape", depth, newshape=(n, c, _type(depth).shape[2], h2, w2))


def _static_dim(ctx: NodeContext, d: int | str) -> int:
    if not isinstance(d, int):
        raise ctx.error(f"a 3-D pool needs static dims; got the symbol {d!r}")
    return d


def _check_pool_pads(ctx: NodeContext) -> None:
    """Refuse explicit ``pads`` that reach ``kernel_shape``: a window then lies wholly in
    the padding and has no value (a max of none, a mean of nothing: -inf and NaN);
    onnxruntime refuses such a pool too."""
    if ctx.attr("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return
    kernel, pads = tuple(ctx.attr("kernel_shape")), tuple(ctx.attr("pads", ()))
    n = len(kernel)
    if len(pads) == 2 * n and any(max(pads[i], pads[i + n]) >= kernel[i] for i in range(n)):
        raise ctx.error(f"pads {pads} with kernel_shape {kernel}: each pad must be smaller "
                        "than the kernel along its axis (a window wholly in the padding "
                        "has no value)")


def _pool(ctx: NodeContext, x: Expr, op: str, **extra: Any) -> Expr:
    _check_pool_pads(ctx)
    if _type(x).ndim == 5:
        return _pool_3d(ctx, x, op, **extra)
    flat = _as_2d_pool(ctx, x)
    if flat is None:
        return _call(op, x, **_pool_attrs(ctx, x), **extra)
    x4 = _call("expand_dims", x, axes=(2,))
    return _call("squeeze", _call(op, x4, **_pool_attrs(flat, x4), **extra), axes=(2,))


@converter("MaxPool")
def _max_pool(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    indices = None
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        if _type(x).ndim != 4:
            raise ctx.error("the Indices output is supported for 2-D pools only")
        indices = _call("nn.max_pool2d_indices", x, **_pool_attrs(ctx, x),
                        storage_order=int(ctx.attr("storage_order", 0)))
    return [_pool(ctx, x, "nn.max_pool2d"), indices]


@converter("AveragePool")
def _avg_pool(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    return [_pool(ctx, x, "nn.avg_pool2d",
                  count_include_pad=bool(ctx.attr("count_include_pad", 0)))]


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    op = "nn.global_avg_pool2d" if ctx.node.op_type == "GlobalAveragePool" else \
        "nn.global_max_pool2d"
    return [_call(op, _need(ctx, inputs, 0))]


@converter("LRN")
def _lrn(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("nn.lrn", _need(ctx, inputs, 0), size=int(ctx.attr("size")),
                  alpha=float(ctx.attr("alpha", 1e-4)), beta=float(ctx.attr("beta", 0.75)),
                  bias=float(ctx.attr("bias", 1.0)))]


@converter("Softmax")
def _softmax(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    t = _type(x)
    if ctx.opset >= 13:
        return [_call("nn.softmax", x, axis=int(ctx.attr("axis", -1)))]
    axis = int(ctx.attr("axis", 1)) % max(t.ndim, 1)
    if axis == t.ndim - 1:
        return [_call("nn.softmax", x, axis=-1)]
    # opsets before 13 take the softmax of the flattened trailing dims
    flat = _call("flatten", x, axis=axis)
    return [_call("reshape", _call("nn.softmax", flat, axis=1), newshape=t.shape)]


@converter("LayerNormalization")
def _layer_norm(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x, scale = _need(ctx, inputs, 0), _need(ctx, inputs, 1)
    bias = _arg(inputs, 2) or Constant(np.zeros((), DTYPES[_type(x).dtype]))
    axis, epsilon = int(ctx.attr("axis", -1)), float(ctx.attr("epsilon", 1e-5))
    y = _call("nn.layer_norm", x, scale, bias, axis=axis, epsilon=epsilon)
    if len([o for o in ctx.node.output[1:] if o]) == 0:
        return [y, None, None]
    # the optional Mean and InvStdDev outputs, over the normalized axes (kept as 1),
    # in float32 (stash_type 1) or the input's type (stash_type 0)
    stash = x
    if int(ctx.attr("stash_type", 1)) == 1 and _type(x).dtype != "float32":
        stash = _call("cast", x, dtype="float32")
    ndim = _type(x).ndim
    axes = tuple(range(axis % ndim, ndim))
    mean = _call("mean", stash, axes=axes, keepdims=True)
    centered = _call("subtract", stash, mean)
    var = _call("mean", _call("multiply", centered, centered), axes=axes, keepdims=True)
    inv_std = _call("divide", _scalar(1.0, stash),
                    _call("sqrt", _call("add", var, _scalar(epsilon, stash))))
    return [y, mean, inv_std]


@converter("Pad")
def _pad(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    ndim = _type(x).ndim
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.error(f"mode {mode!r} is not supported (constant, reflect, edge, wrap "
                        "are)")
    if _at_run_time(*inputs[1:4]):
        value = _arg(inputs, 2) or Constant(np.zeros((), DTYPES[_type(x).dtype]))
        axes_e = _arg(inputs, 3) or _int_vector(range(ndim))
        return [_call("dynamic_pad", x, _need(ctx, inputs, 1), value, axes_e, mode=mode,
                      out_shape=ctx.output_shape())]
    pads = _ints(ctx, _need(ctx, inputs, 1), "Pad's pads")
    value = _const_value(ctx, _arg(inputs, 2), "Pad's constant_value")
    axes = _ints(ctx, _arg(inputs, 3), "Pad's axes")
    if axes is not None:
        full = [0] * (2 * ndim)
        for k, a in enumerate(axes):
            full[a % ndim] = pads[k]
            full[a % ndim + ndim] = pads[k + len(axes)]
        pads = tuple(full)
    fill = 0.0 if value is None or value.size == 0 else value.reshape(()).item()
    return [_call("nn.pad", x, pads=pads, mode=mode, value=fill)]


#: ONNX reductions: (IR op, its run-time-axes form, the opset since which the axes are
#: an input rather than an attribute).
_REDUCTIONS = {"ReduceMean": ("mean", "dynamic_mean", 18),
               "ReduceSum": ("reduce_sum", "dynamic_reduce_sum", 13),
               "ReduceMax": ("reduce_max", "dynamic_reduce_max", 18)}


@converter(*_REDUCTIONS)
def _reduce(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    op, dynamic_op, axes_input_since = _REDUCTIONS[ctx.node.op_type]
    x = _need(ctx, inputs, 0)
    if ctx.opset >= axes_input_since:
        if _at_run_time(_arg(inputs, 1)):
            return [_call(dynamic_op, x, _arg(inputs, 1),
                          keepdims=bool(ctx.attr("keepdims", 1)),
                          noop_with_empty_axes=bool(ctx.attr("noop_with_empty_axes", 0)),
                          out_shape=ctx.output_shape())]
        axes = _ints(ctx, _arg(inputs, 1), f"{ctx.node.op_type}'s axes")
        if not axes and ctx.attr("noop_with_empty_axes", 0):
            return [x]
    else:
        axes = ctx.attr("axes")
    return [_call(op, x, axes=None if not axes else tuple(axes),
                  keepdims=bool(ctx.attr("keepdims", 1)))]


# ----------------------------------------------------------------------------- shapes
@converter("Flatten")
def _flatten(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("flatten", _need(ctx, inputs, 0), axis=int(ctx.attr("axis", 1)))]


@converter("Reshape")
def _reshape(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    known = ctx.input_value(1)
    if _at_run_time(_need(ctx, inputs, 1)) and known is not None \
            and not (ctx.attr("allowzero", 0) and 0 in known):
        return [_call("reshape", x, newshape=known)]  # symbols as they are
    if _at_run_time(_need(ctx, inputs, 1)):
        return [_call("dynamic_reshape", x, _need(ctx, inputs, 1),
                      allowzero=bool(ctx.attr("allowzero", 0)), out_shape=ctx.output_shape())]
    shape = _ints(ctx, _need(ctx, inputs, 1), "Reshape's shape")
    if ctx.attr("allowzero", 0) and 0 in shape:
        raise ctx.error("allowzero=1 with a 0 in the shape (an empty tensor) is not "
                        "supported")
    return [_call("reshape", x, newshape=shape)]


@converter("Transpose")
def _transpose(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    perm = ctx.attr("perm")
    return [_call("transpose", _need(ctx, inputs, 0),
                  axes=None if perm is None else tuple(perm))]


def _axes(ctx: NodeContext, inputs: list[Expr | None], name: str) -> tuple[int, ...] | None:
    if ctx.opset >= 13:
        return _ints(ctx, _arg(inputs, 1), f"{name}'s axes")
    axes = ctx.attr("axes")
    return None if axes is None else tuple(axes)


@converter("Squeeze")
def _squeeze(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    if ctx.opset >= 13 and _at_run_time(_arg(inputs, 1)):
        return [_call("dynamic_squeeze", _need(ctx, inputs, 0), _arg(inputs, 1),
                      out_shape=ctx.output_shape())]
    return [_call("squeeze", _need(ctx, inputs, 0), axes=_axes(ctx, inputs, "Squeeze"))]


@converter("Unsqueeze")
def _unsqueeze(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    if ctx.opset >= 13 and _at_run_time(_arg(inputs, 1)):
        return [_call("dynamic_expand_dims", _need(ctx, inputs, 0), _arg(inputs, 1),
                      out_shape=ctx.output_shape())]
    axes = _axes(ctx, inputs, "Unsqueeze")
    if axes is None:
        raise ctx.error("Unsqueeze needs axes")
    return [_call("expand_dims", _need(ctx, inputs, 0), axes=axes)]


@converter("Concat")
def _concat(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("concatenate", *(e for e in inputs if e is not None),
                  axis=int(ctx.attr("axis")))]


@converter("Split")
def _split(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    t = _type(x)
    axis = int(ctx.attr("axis", 0)) % t.ndim
    extent = t.shape[axis]
    if not isinstance(extent, int):
        raise ctx.error(f"split axis {axis} is the symbol {extent!r}; it must be static")
    if ctx.opset >= 13 and _at_run_time(_arg(inputs, 1)):
        shapes = tuple(ctx.output_shape(k) for k in range(len(ctx.node.output)))
        parts = _call("dynamic_split", x, _arg(inputs, 1), axis=axis, out_shapes=shapes)
        return [TupleGetItem(parts, i) for i in range(len(shapes))]
    if ctx.opset >= 13:
        sizes = _ints(ctx, _arg(inputs, 1), "Split's split")
    else:
        sizes = ctx.attr("split")
        sizes = None if sizes is None else tuple(sizes)
    n = len(ctx.node.output)
    if sizes is None:
        if ctx.opset >= 18 and ctx.attr("num_outputs") is not None:
            n = int(ctx.attr("num_outputs"))
        part = -(-extent // n)
        sizes = tuple(min(part, extent - i * part) for i in range(n))
    parts = _call("split", x, axis=axis, sections=tuple(sizes))
    return [TupleGetItem(parts, i) for i in range(len(sizes))]


@converter("Slice")
def _slice(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    if _at_run_time(*inputs[1:5]):
        starts_e, ends_e = _need(ctx, inputs, 1), _need(ctx, inputs, 2)
        n = _type(starts_e).shape[0]
        if not isinstance(n, int):
            raise ctx.error(f"starts has the symbolic length {n!r}; it must be static")
        axes_e = _arg(inputs, 3) or _int_vector(range(n))
        steps_e = _arg(inputs, 4) or _int_vector([1] * n)
        return [_call("dynamic_strided_slice", x, starts_e, ends_e, axes_e, steps_e,
                      out_shape=ctx.output_shape())]
    starts = _ints(ctx, _need(ctx, inputs, 1), "Slice's starts")
    ends = _ints(ctx, _need(ctx, inputs, 2), "Slice's ends")
    axes = _ints(ctx, _arg(inputs, 3), "Slice's axes") or tuple(range(len(starts)))
    steps = _ints(ctx, _arg(inputs, 4), "Slice's steps") or (1,) * len(starts)
    return [_call("strided_slice", x, begin=starts, end=ends, axes=axes, steps=steps)]


@converter("Gather")
def _gather(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    return [_call("take", _need(ctx, inputs, 0), _need(ctx, inputs, 1),
                  axis=int(ctx.attr("axis", 0)))]


@converter("Shape")
def _shape(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    x = _need(ctx, inputs, 0)
    t = _type(x)
    start, end = ctx.attr("start", 0), ctx.attr("end")
    dims = t.shape[slice(start, end)]
    if all(isinstance(d, int) for d in dims):
        return [Constant(np.array(dims, dtype=np.int64))]
    out: Expr = _call("shape_of", x)
    if (start, end) != (0, None):
        out = _call("strided_slice", out, begin=(start,),
                    end=(end if end is not None else t.ndim,), axes=(0,), steps=(1,))
    return [out]


@converter("Constant")
def _constant(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    if "value" in ctx.attrs:
        return [Constant(onnx.numpy_helper.to_array(ctx.attrs["value"]))]
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in ctx.attrs:
            return [Constant(np.array(ctx.attrs[key], dtype=dtype))]
    raise ctx.error(f"Constant with attributes {sorted(ctx.attrs)} is not supported (value, "
                    "value_float(s), value_int(s) are)")


@converter("ConstantOfShape")
def _constant_of_shape(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    value = ctx.attrs.get("value")
    fill = (onnx.numpy_helper.to_array(value).reshape(-1) if value is not None
            else np.zeros(1, np.float32))
    if _at_run_time(_need(ctx, inputs, 0)):
        return [_call("dynamic_full", _need(ctx, inputs, 0), Constant(fill[:1].reshape(())),
                      out_shape=ctx.output_shape())]
    shape = _ints(ctx, _need(ctx, inputs, 0), "ConstantOfShape's shape")
    return [Constant(np.full(shape, fill[0], dtype=fill.dtype))]


# -------------------------------------------------------------------------- quantized
def _zero_point_or_default(zp: Expr | None, dtype: str) -> Expr:
    return zp if zp is not None else Constant(np.zeros((), DTYPES[dtype]))


#: Element types of QuantizeLinear/DequantizeLinear (on the CPU; the accelerator's
#: int8 path takes int8 only).
_QUANTIZED = ("int8", "uint8", "int16", "uint16")


@converter("QuantizeLinear")
def _quantize(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    if ctx.attr("block_size", 0):
        raise ctx.error("blocked quantization (block_size) is not supported")
    x, scale = _need(ctx, inputs, 0), _need(ctx, inputs, 1)
    zp = _arg(inputs, 2)
    out_dtype = _type(zp).dtype if zp is not None else "uint8"
    if ctx.attr("output_dtype", 0):
        out_dtype = onnx_dtype(ctx.attr("output_dtype"), ctx.where)
    precision = ctx.attr("precision", 0)
    if precision and onnx_dtype(precision, ctx.where) != "float32":
        raise ctx.error(f"precision {onnx.TensorProto.DataType.Name(precision)} is not "
                        "supported (float32 is)")
    if out_dtype not in _QUANTIZED:
        raise ctx.error(f"quantizing to {out_dtype} is not supported "
                        f"({', '.join(_QUANTIZED)} are)")
    return [_call("qnn.quantize", x, scale, _zero_point_or_default(zp, out_dtype),
                  axis=int(ctx.attr("axis", 1)), out_dtype=out_dtype)]


@converter("DequantizeLinear")
def _dequantize(ctx: NodeContext, inputs: list[Expr | None]) -> Converted:
    if ctx.attr("block_size", 0):
        raise ctx.error("blocked quantization (block_size) is not supported")
    x, scale = _need(ctx, inputs, 0), _need(ctx, inputs, 1)
    output_dtype = ctx.attr("output_dtype", 0)
    if output_dtype and onnx_dtype(output_dtype, ctx.where) != "float32":
        raise ctx.error(f"output_dtype {onnx.TensorProto.DataType.Name(output_dtype)} is "
                        "not supported (float32 is)")
    if _type(x).dtype not in (*_QUANTIZED, "int32"):
        raise ctx.error(f"dequantizing {_type(x).dtype} is not supported "
                        f"({', '.join(_QUANTIZED)}, int32 are)")
    zp = _zero_point_or_default(_arg(inputs, 2), _type(x).dtype)
    return [_call("qnn.dequantize", x, scale, zp, axis=int(ctx.attr("axis", 1)))]


def supported_op_types() -> list[str]:
    """The ONNX op_types the importer converts."""
    return sorted(CONVERTERS)


__all__ = ["CONVERTERS", "NodeContext", "OnnxImportError", "supported_op_types"]

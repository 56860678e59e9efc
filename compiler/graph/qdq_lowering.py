"""QDQ to integer operators: the int8 form of a quantized (QDQ) program.

A QDQ program computes in float between ``qnn.dequantize`` and ``qnn.quantize``.
:func:`lower_qdq` rewrites each ``quantize(f(dequantize(...)), scale, 0)`` into integer
operators with the same meaning (as onnxruntime's QDQ fusion into QLinearConv does):

* ``quantize(conv2d(dq(x), dq(W)) [+ bias], s_y)`` → ``requantize(conv2d_integer(x, W)
  + bias_int32, s_x * s_w / s_y)`` (per-channel weight scales give per-channel
  multipliers); the same for ``matmul`` (a constant transposed weight is transposed at
  compile time);
* ``quantize(op(dq(x, s_x)), s_y)`` for an op that commutes with a positive scale
  (relu, max pooling, flatten, reshape, transpose, identity) → ``op(x)`` when
  ``s_x == s_y``, else ``requantize(op(int32(x)), s_x / s_y)``;
* ``quantize(dq(x, s_x), s_y)`` → ``x`` or ``requantize(int32(x), s_x / s_y)``;
* ``quantize(hard_swish(dq(x, s_x)), s_y)`` → ``qnn.hard_swish_q31(x)`` (3 and 6 in
  ``x``'s steps, the product ``x · relu6(x + 3)`` scaled by ``s_x² / 6 s_y``);
* ``quantize(global_avg_pool2d(dq(x, s_x)), s_y)`` → ``qnn.global_avg_pool_q31(x)``
  (the int32 sum scaled by ``s_x / (H·W·s_y)``); ``quantize(multiply(dq(a, s_a),
  dq(b, s_b)), s_y)`` of two int8 activations → ``qnn.mul_q31(a, b)`` (the product
  scaled by ``s_a · s_b / s_y``);
* ``quantize(clip(dq(x, s), lo, hi), s)`` (ReLU6 after a convolution) → the int8
  ``clip(x, round(lo/s), round(hi/s))``;
* ``quantize(matmul(dq(a, s_a), dq(b, s_b)), s_y)`` of two int8 activations (attention's
  batched matmuls) → ``requantize(matmul_integer(a, b), s_a * s_b / s_y)``;
* a per-channel ``s_y`` (a vector along the last axis) after a ``matmul`` with a
  constant weight gives per-channel multipliers ``s_x * s_w / s_y``;
* ``quantize(add(dq(a, s_a), dq(b, s_b)), s_y)`` of two int8 tensors (a residual add) →
  ``qnn.add_q31(a, b)``, TFLite's int8 ADD: both operands shifted left by 20 and scaled
  by ``s_a / 2m`` and ``s_b / 2m`` (``m = max(s_a, s_b)``), added, and scaled by
  ``2m / (2^20 s_y)``, each scale a Q31 multiplier and shift.

Only symmetric quantization (zero points 0, int8) is lowered; anything else stays in
QDQ form, which the CPU runs as it is. Run :func:`fold_constants` first so that weights
are constants.
"""

from __future__ import annotations

import numpy as np

from .ir import Call, Constant, Expr, Function
from .rewrite import rewrite

#: Operators that commute with multiplication by a positive scale.
SCALE_COMMUTING = frozenset({"relu", "nn.max_pool2d", "flatten", "reshape", "transpose",
                             "identity", "squeeze", "expand_dims"})


def _const(e: Expr) -> np.ndarray | None:
    return e.data if isinstance(e, Constant) else None


def _dequantized(e: Expr) -> tuple[Expr, np.ndarray] | None:
    """(int8 tensor, float32 scale) of a symmetric ``qnn.dequantize``, else None."""
    if not (isinstance(e, Call) and e.op == "qnn.dequantize"):
        return None
    scale, zp = _const(e.args[1]), _const(e.args[2])
    if scale is None or zp is None or np.any(zp != 0):
        return None
    if e.args[0].checked_type.dtype not in ("int8", "int32"):  # type: ignore[union-attr]
        return None
    return e.args[0], scale.astype(np.float32)


def _int8_activations(call: Call) -> list[tuple[Expr, np.ndarray]] | None:
    """``[(int8 tensor, scale), ...]`` of ``call``'s arguments when every one is a
    per-tensor symmetric ``dequantize`` of an int8 activation (not a constant)."""
    operands = [_dequantized(a) for a in call.args]
    if any(d is None or isinstance(d[0], Constant) or d[1].size != 1
           or d[0].checked_type.dtype != "int8" for d in operands):  # type: ignore[union-attr]
        return None
    return operands  # type: ignore[return-value]


def _int8_weight(e: Expr, transpose: bool = False) -> tuple[Constant, np.ndarray] | None:
    """A constant int8 weight behind a symmetric dequantize (optionally transposed),
    per tensor or per output channel: per channel along another axis (a reduction axis,
    e.g. a weight shared by a MatMul and a Gemm with transB, quantized for one of them)
    scales the products inside the sum, which an integer accumulator cannot."""
    if transpose:
        if not (isinstance(e, Call) and e.op == "transpose" and e.attrs["axes"] in
                (None, (1, 0))):
            return None
        e = e.args[0]
    dq = _dequantized(e)
    if dq is None or not isinstance(dq[0], Constant) or dq[0].data.dtype != np.int8:
        return None
    w, scale = dq[0].data, dq[1]
    out_axis = 0 if transpose or w.ndim == 4 else w.ndim - 1  # OIHW, (K, N), or (N, K)ᵀ
    if scale.size > 1 and int(e.attrs["axis"]) % w.ndim != out_axis:  # type: ignore[union-attr]
        return None
    return (Constant(w.T.copy()) if transpose else dq[0]), scale


def _requantize(acc: Expr, multiplier: np.ndarray, axis: int, device) -> Expr:
    m = np.asarray(multiplier, np.float32)
    if m.size == 1:
        m = m.reshape(())
    return Call("qnn.requantize", [acc, Constant(m), Constant(np.zeros(m.shape, np.int8))],
                {"axis": axis, "out_dtype": "int8"}, device)


def _int32(e: Expr) -> Expr:
    return Call("cast", [e], {"dtype": "int32"}, e.virtual_device)


def _bias_int32(bias: Expr, acc_scale: np.ndarray, channels: int) -> np.ndarray | None:
    """The bias as int32 in units of ``acc_scale``, shaped to broadcast per channel."""
    if isinstance(bias, Call) and bias.op in ("expand_dims", "reshape"):
        bias = bias.args[0]
    dq = _dequantized(bias)
    if dq is not None and isinstance(dq[0], Constant):
        real = dq[0].data.astype(np.float64) * dq[1].astype(np.float64)
    elif isinstance(bias, Constant) and bias.data.dtype == np.float32:
        real = bias.data.astype(np.float64)
    else:
        return None
    if real.size != channels:
        return None
    return np.rint(real.reshape(-1) / acc_scale.astype(np.float64)).astype(np.int32)


def lower_qdq(fn: Function) -> Function:
    """``fn`` with symmetric QDQ patterns replaced by integer operators (see the module
    docstring); the rest is unchanged."""
    def rule(e: Expr, _old: Expr) -> Expr:
        if not (isinstance(e, Call) and e.op == "qnn.quantize"
                and e.attrs["out_dtype"] == "int8"):
            return e
        ys, yz = _const(e.args[1]), _const(e.args[2])
        if ys is None or yz is None or np.any(yz != 0):
            return e
        x, dev = e.args[0], e.virtual_device
        if ys.size != 1:  # per channel: only a dense layer's output (last axis)
            ndim = len(x.checked_type.shape)  # type: ignore[union-attr]
            if e.attrs["axis"] not in (-1, ndim - 1) or ys.ndim != 1:
                return e
            inner, bias = (x.args if isinstance(x, Call) and x.op == "add" else (x, None))
            if not (isinstance(inner, Call) and inner.op == "matmul"):
                return e
            return _lower_linear(e, inner, bias, ys.astype(np.float32), x.name) or e
        ys = ys.astype(np.float32).reshape(())
        dq = _dequantized(x)
        if dq is not None:
            q, s = dq
            if q.checked_type.dtype == "int8" and s.size == 1 and s == ys:  # type: ignore[union-attr]
                return q
            return _requantize(_int32(q), s / ys, 1, dev)
        if isinstance(x, Call) and x.op == "add":
            added = _lower_add(x, ys)
            if added is not None:
                return added
        bias = None
        if isinstance(x, Call) and x.op == "add":
            x, bias = x.args
        if isinstance(x, Call) and x.op in ("nn.conv2d", "matmul"):
            return (_lower_linear(e, x, bias, ys, e.args[0].name)
                    or (_lower_activation_matmul(x, ys)
                        if bias is None and x.op == "matmul" else None) or e)
        if bias is None and isinstance(x, Call) and x.op == "hard_swish":
            return _lower_hard_swish(x, ys) or e
        if bias is None and isinstance(x, Call) and x.op == "nn.global_avg_pool2d":
            return _lower_global_avg_pool(x, ys) or e
        if bias is None and isinstance(x, Call) and x.op == "multiply":
            return _lower_multiply(x, ys) or e
        if bias is None and isinstance(x, Call) and x.op == "clip":
            clipped = _lower_clip(x, ys)
            if clipped is not None:
                return clipped
            inner, inner_bias = linear_and_bias(x.args[0])
            if inner is None:
                return e
            lowered = _lower_linear(e, inner, inner_bias, ys, x.args[0].name)
            return e if lowered is None else int8_clip(lowered, x, float(ys), 0)
        if bias is None and isinstance(x, Call) and x.op in SCALE_COMMUTING:
            dq = _dequantized(x.args[0])
            if dq is None or dq[1].size != 1 or dq[0].checked_type.dtype != "int8":  # type: ignore[union-attr]
                return e
            q, s = dq
            if s == ys:
                return Call(x.op, [q, *x.args[1:]], x.attrs, dev, x.name)
            inner = Call(x.op, [_int32(q), *x.args[1:]], x.attrs, dev, x.name)
            return _requantize(inner, s / ys, 1, dev)
        return e
    return rewrite(fn, rule)


def _lower_clip(clip: Call, ys: np.ndarray) -> Expr | None:
    """``clip(x, round(lo/s), round(hi/s))`` in int8 for ``clip(dq(x, s), lo, hi)``
    quantized with the same scale ``s`` (ReLU6 after a convolution; :func:`int8_clip`)."""
    dq = _dequantized(clip.args[0])
    if dq is None or dq[1].size != 1 or dq[0].checked_type.dtype != "int8":  # type: ignore[union-attr]
        return None
    q, s = dq
    if s != ys:
        return None
    return int8_clip(q, clip, float(s.reshape(())), 0)


def int8_clip(q: Expr, clip: Call, s: float, z: int) -> Call:
    """The int8 form of float ``clip`` applied before quantizing with ``(s, z)``, on
    ``q``, the int8 quantization of its input: ``clip(q, z + round(lo/s), z +
    round(hi/s))`` within int8 — exact, as ``round(clip(v, lo, hi)/s) + z =
    clip(round(v/s) + z, ...)`` for rounding that is monotone and exact on integers. A
    bound the float clip does not have (ONNX Clip without ``min`` or ``max``) is int8's."""
    lo, hi = (int(np.clip(z + np.rint(np.float32(clip.attrs[k]) / np.float32(s)), -128, 127))
              if clip.attrs.get(k) is not None else limit
              for k, limit in (("a_min", -128), ("a_max", 127)))
    return Call("clip", [q], {"a_min": lo, "a_max": hi}, clip.virtual_device, clip.name)


def linear_and_bias(e: Expr) -> tuple[Call | None, Expr | None]:
    """``(conv2d or matmul, bias or None)`` of ``e`` = ``linear(...) [+ bias]``, else
    ``(None, None)``."""
    bias = None
    if isinstance(e, Call) and e.op == "add":
        e, bias = e.args
    if isinstance(e, Call) and e.op in ("nn.conv2d", "matmul"):
        return e, bias
    return None, None


def _lower_hard_swish(hs: Call, ys: np.ndarray) -> Expr | None:
    """``qnn.hard_swish_q31(x)`` for ``hard_swish(dq(x, s))`` of an int8 per-tensor
    ``x`` (:func:`~tensorfab.compiler.tensor.hard_swish.hard_swish_attrs`)."""
    from tensorfab.compiler.tensor.hard_swish import hard_swish_attrs

    dq = _dequantized(hs.args[0])
    if dq is None or dq[1].size != 1 or dq[0].checked_type.dtype != "int8":  # type: ignore[union-attr]
        return None
    attrs = hard_swish_attrs(float(dq[1].reshape(())), float(ys.reshape(())))
    if attrs is None:
        return None
    return Call("qnn.hard_swish_q31", [dq[0]], attrs, hs.virtual_device, hs.name)


def _lower_global_avg_pool(pool: Call, ys: np.ndarray) -> Expr | None:
    """``qnn.global_avg_pool_q31(x)`` for ``global_avg_pool2d(dq(x, s))`` of an int8
    per-tensor NCHW ``x``
    (:func:`~tensorfab.compiler.tensor.global_pool.global_avg_pool_attrs`)."""
    from tensorfab.compiler.tensor.global_pool import global_avg_pool_attrs

    dq = _dequantized(pool.args[0])
    if dq is None or dq[1].size != 1 or dq[0].checked_type.dtype != "int8":  # type: ignore[union-attr]
        return None
    shape = dq[0].checked_type.shape  # type: ignore[union-attr]
    if len(shape) != 4:
        return None
    attrs = global_avg_pool_attrs(float(dq[1].reshape(())), float(ys.reshape(())),
                                  int(shape[2]) * int(shape[3]))
    return Call("qnn.global_avg_pool_q31", [dq[0]], attrs, pool.virtual_device, pool.name)


def _lower_multiply(mul: Call, ys: np.ndarray) -> Expr | None:
    """``qnn.mul_q31(a, b)`` for ``multiply(dq(a), dq(b))`` of two int8 per-tensor
    activations (:func:`~tensorfab.compiler.tensor.channel_scale.mul_attrs`)."""
    from tensorfab.compiler.tensor.channel_scale import mul_attrs

    operands = _int8_activations(mul)
    if operands is None:
        return None
    (a, sa), (b, sb) = operands
    attrs = mul_attrs(float(sa.reshape(())), float(sb.reshape(())), float(ys.reshape(())))
    return Call("qnn.mul_q31", [a, b], attrs, mul.virtual_device, mul.name)


#: TFLite's left shift of int8 ADD operands (headroom for the scaled sum).
ADD_LEFT_SHIFT = 20


def add_q31_attrs(sa: float, sb: float, sy: float) -> dict[str, int]:
    """The ``qnn.add_q31`` scales of ``s_a · a + s_b · b`` quantized with ``s_y``
    (TFLite's: both operands shifted left by :data:`ADD_LEFT_SHIFT` and scaled by
    ``s / 2m``, ``m = max(s_a, s_b)``, the sum by ``2m / (2^20 s_y)``), zero points 0."""
    from tensorfab.compiler.tensor.requant import quantize_multiplier_q31

    sa, sb, sy = (float(np.float32(s)) for s in (sa, sb, sy))
    twice_max = 2.0 * max(sa, sb)
    attrs: dict[str, int] = {"left_shift": ADD_LEFT_SHIFT, "zero_point": 0}
    for name, real in (("a", sa / twice_max), ("b", sb / twice_max),
                       ("out", twice_max / ((1 << ADD_LEFT_SHIFT) * sy))):
        attrs[f"{name}_multiplier"], attrs[f"{name}_shift"] = quantize_multiplier_q31(real)
    return attrs


def _lower_add(add: Call, ys: np.ndarray) -> Expr | None:
    """``qnn.add_q31`` for ``add(dq(a), dq(b))`` of two int8 per-tensor operands."""
    operands = _int8_activations(add)
    if operands is None:
        return None
    (a, sa), (b, sb) = operands
    attrs = add_q31_attrs(float(sa.reshape(())), float(sb.reshape(())),
                          float(ys.reshape(())))
    return Call("qnn.add_q31", [a, b], attrs, add.virtual_device, add.name)


def _lower_activation_matmul(mm: Call, ys: np.ndarray) -> Expr | None:
    """``requantize(matmul_integer(a, b), s_a s_b / s_y)`` for a matmul of two int8
    per-tensor activations."""
    operands = _int8_activations(mm)
    if operands is None:
        return None
    (a, sa), (b, sb) = operands
    zero = Constant(np.zeros((), np.int8))
    acc = Call("qnn.matmul_integer", [a, b, zero, zero], {}, mm.virtual_device, mm.name)
    return _requantize(acc, (sa * sb).astype(np.float32) / ys, -1, mm.virtual_device)


def _lower_linear(q: Call, x: Call, bias: Expr | None, ys: np.ndarray,
                  bias_name: str) -> Expr | None:
    dev = q.virtual_device
    data = _dequantized(x.args[0])
    if data is None or data[1].size != 1 or data[0].checked_type.dtype != "int8":  # type: ignore[union-attr]
        return None
    xq, xs = data
    zero = Constant(np.zeros((), np.int8))
    if x.op == "nn.conv2d":
        weight = _int8_weight(x.args[1])
        if weight is None or x.attrs["data_layout"] != "NCHW":
            return None
        wq, ws = weight
        acc: Expr = Call("qnn.conv2d_integer", [xq, wq, zero, zero], x.attrs, dev, x.name)
        channels, axis = wq.data.shape[0], 1
    else:
        weight = _int8_weight(x.args[1]) or _int8_weight(x.args[1], transpose=True)
        if weight is None or weight[0].data.ndim != 2:
            return None
        wq, ws = weight
        acc = Call("qnn.matmul_integer", [xq, wq, zero, zero], {}, dev, x.name)
        channels, axis = wq.data.shape[1], -1
    acc_scale = (xs * ws).astype(np.float32)
    if bias is not None:
        b = _bias_int32(bias, acc_scale, channels)
        if b is None:
            return None
        shape = (-1, 1, 1) if x.op == "nn.conv2d" else (-1,)
        acc = Call("add", [acc, Constant(b.reshape(shape))], {}, dev, bias_name)
    return _requantize(acc, acc_scale / ys, axis, dev)


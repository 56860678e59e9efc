"""Asymmetric (uint8, nonzero zero point) QDQ programs to integer operators.

onnxruntime's ``quantize_static`` quantizes activations to uint8 with a zero point by
default. A uint8 tensor ``q`` with zero point ``z`` is, exactly, the int8 tensor
``q - 128`` with zero point ``z - 128`` (the same real values ``(q - z) · s``), so
:func:`lower_asymmetric_qdq` first computes every uint8 tensor that a ``qnn.quantize``
or ``qnn.requantize`` (QLinearConv, QLinearMatMul) makes, or that a model input brings,
as int8 (:func:`uint8_as_int8`), then lowers the patterns with nonzero zero points:

* ``quantize(conv2d(dq(x, s_x, z_x), dq(W, s_w, 0)) [+ b], s_y, z_y)`` →
  ``requantize(conv2d_integer(x', W) + b', s_x s_w / s_y, z_y)``, where the bias
  ``b' = round(b / (s_x s_w)) - z_x · Σ W[o]`` (the sum over the kernel of each output
  channel) takes the input's zero point out of the products; a convolution with
  padding pads ``x`` with ``z_x`` first (``x' = pad(x, z_x)``, the quantized form of
  the float model's zero padding), so the correction is the same for every output
  position. The requantization's zero point ``z_y`` runs in the accelerator's
  epilogue; a ReLU that onnxruntime removed (its output range starts at 0) is the
  saturation at ``z_y = -128``.
* the same for ``matmul`` with a constant weight (``b' -= z_x · Σ_k W[k, n]``);
* ``conv2d_integer(x, W, z_x, 0)`` (QLinearConv's, ConvInteger's) of an int8 input
  with a nonzero constant zero point and a constant int8 weight →
  ``conv2d_integer(pad(x, z_x), W, 0, 0) - z_x · Σ W[o]`` (the same int32 sums, exact;
  the correction joins a bias added after it), so that it reaches the accelerator as
  the QDQ form does;
* ``quantize(add(dq(a, s_a, z_a), dq(b, s_b, z_b)), s_y, z_y)`` of two activations (a
  residual add) → ``qnn.add_q31(a, b)`` with the three zero points (each operand less
  its own before the scaling, the output's added after it);
* ``quantize(global_avg_pool2d(dq(x, s_x, z_x)), s_y, z_y)`` →
  ``qnn.global_avg_pool_q31(x)`` (the sum of ``x - z_x``, scaled, plus ``z_y``);
* ``quantize(hard_swish(dq(x, s_x, z_x)), s_y, z_y)`` → ``qnn.hard_swish_q31(x)`` with
  both zero points, and ``quantize(multiply(dq(a, ...), dq(b, ...)), s_y, z_y)`` of two
  int8 activations (squeeze-excite's scale) → ``qnn.mul_q31(a, b)`` with the three
  (hard-swish and hard-sigmoid in a QDQ model are recognized first:
  :mod:`.mobile_activations`);
* ``quantize(concatenate(dq(x_1, s_1, z_1), ..., axis=1), s_y, z_y)`` of int8
  activations (zero points or not) → a chain of ``qnn.concat_q31``, each input
  requantized to the output's scale by REQUANT's arithmetic (copied when it is at that
  scale already);
* ``quantize(clip(dq(x, s, z), lo, hi), s, z)`` → ``clip(x, z + round(lo/s), z +
  round(hi/s))``, and a clip over a convolution or matmul (a folded hard-sigmoid) → the
  integer form below, then that clip;
* ``quantize(op(dq(x, s, z)), s, z)`` for an op that commutes with ``q ↦ (q - z) s``
  (max pooling, reshapes, transposes, flatten) → ``op(x)``, and
  ``quantize(dq(x, s, z), s, z)`` → ``x``.

Anything else keeps its QDQ form and runs in float on the CPU. Symmetric patterns are
left to :func:`~tensorfab.compiler.graph.qdq_lowering.lower_qdq`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .device import VirtualDevice
from .infer import infer_types
from .ir import Call, Constant, Expr, Function, TupleGetItem, Var, children, post_order
from .qdq_lowering import _bias_int32, _const, _int8_weight, int8_clip, linear_and_bias
from .rewrite import rebuild, rewrite

__all__ = ["lower_asymmetric_qdq", "uint8_as_int8"]

#: Operators through which ``q ↦ (q - z)·s`` commutes (a monotone affine map).
_AFFINE_COMMUTING = frozenset({"nn.max_pool2d", "flatten", "reshape", "transpose",
                               "identity", "squeeze", "expand_dims"})


def _dtype(e: Expr) -> str:
    return e.checked_type.dtype  # type: ignore[union-attr]


def uint8_as_int8(fn: Function) -> Function:
    """``fn`` with its uint8 quantized tensors computed as int8 ones, 128 less (exact).

    A uint8 ``qnn.quantize`` or ``qnn.requantize`` (QLinearConv's, QLinearMatMul's)
    with a constant zero point ``z`` quantizes to int8 with ``z - 128``; so does a
    uint8 constant or model input read by a ``qnn.dequantize``, ``qnn.conv2d_integer``
    or ``qnn.matmul_integer`` with a constant zero point (an input through a CPU
    ``x - 128``, :func:`_as_int8`). Each reader of such a tensor gets its zero point
    shifted, as a copy of the constant for that use: a zero-point initializer shared
    with a reader that stays uint8 keeps its value there. Max pooling and data
    movement (:data:`_SHIFT_COMMUTING`) pass the shifted tensor on; any other reader,
    and the function's result (a uint8 model output), gets it shifted back
    (:func:`_as_uint8`).

    Parameters
    ----------
    fn : Function
        A program (typed or not).

    Returns
    -------
    Function
        The same computation, its results' types unchanged.
    """
    infer_types(fn)
    shifter = _Uint8Shifter()
    new: dict[int, Expr] = {}
    for node in post_order(fn):  # no type inference until every node is rebuilt
        new[id(node)] = shifter.rebuild(node, new)
    out = new[id(fn)]
    assert isinstance(out, Function)
    infer_types(out)
    return out


#: Operators whose result for a data argument (the first, or all of concatenate's)
#: 128 less is their result 128 less: data movement, and maxima (the shift keeps order;
#: max pooling pads with the dtype's minimum, which shifts with it).
_SHIFT_COMMUTING = frozenset({
    "nn.max_pool2d", "nn.global_max_pool2d", "reduce_max", "flatten", "reshape",
    "transpose", "identity", "squeeze", "expand_dims", "strided_slice", "take", "split",
    "concatenate"})

#: The (data, zero point) argument positions of the operators that read quantized data.
_ZERO_POINTS: dict[str, tuple[tuple[int, int], ...]] = {
    "qnn.dequantize": ((0, 2),),
    "qnn.conv2d_integer": ((0, 2), (1, 3)),
    "qnn.matmul_integer": ((0, 2), (1, 3)),
}


def _uint8_constant(e: Expr) -> bool:
    return isinstance(e, Constant) and e.data.dtype == np.uint8


class _Uint8Shifter:
    """The node-by-node rewrite of :func:`uint8_as_int8`: which rebuilt nodes stand for
    a uint8 tensor 128 less, and the shifted constants, inputs and shifted-back results
    made so far (one of each per original node, shared by its readers)."""

    def __init__(self) -> None:
        self.shifted: set[int] = set()  # ids of rebuilt nodes that are (uint8 - 128)
        self.constants: dict[int, Constant] = {}
        self.inputs: dict[int, Expr] = {}
        self.restored: dict[int, Expr] = {}

    def rebuild(self, node: Expr, new: dict[int, Expr]) -> Expr:
        """``node`` with its children replaced by their rebuilt forms, shifted or not."""
        if isinstance(node, Call):
            return self._call(node, [new[id(a)] for a in node.args])
        if isinstance(node, TupleGetItem) and id(new[id(node.tuple_value)]) in self.shifted:
            return self._mark(rebuild(node, new))  # a part of a shifted split
        return rebuild(node, {id(c): self._uint8(new[id(c)]) for c in children(node)})

    def _call(self, node: Call, args: list[Expr]) -> Expr:
        if node.op in ("qnn.quantize", "qnn.requantize") \
                and node.attrs["out_dtype"] == "uint8" and _uint8_constant(args[2]):
            args = [*map(self._uint8, args[:2]), self._constant(args[2])]
            return self._mark(Call(node.op, args, {**node.attrs, "out_dtype": "int8"},
                                   node.virtual_device, node.name))
        kept: set[int] = set()  # the shifted arguments this call reads as such
        for data, zp in _ZERO_POINTS.get(node.op, ()):
            if not _uint8_constant(args[zp]):
                continue
            if _uint8_constant(args[data]):
                args[data] = self._constant(args[data])
            elif isinstance(args[data], Var) and _dtype(args[data]) == "uint8":
                args[data] = self._input(args[data])
            elif id(args[data]) not in self.shifted:
                continue
            args[zp] = self._constant(args[zp])
            kept.add(data)
        commutes = self._commutes(node.op, args)
        if commutes:
            kept.update(range(len(args)))
        args = [a if i in kept else self._uint8(a) for i, a in enumerate(args)]
        if all(a is b for a, b in zip(args, node.args, strict=True)):
            return node
        call = Call(node.op, args, node.attrs, node.virtual_device, node.name)
        return self._mark(call) if commutes else call

    def _commutes(self, op: str, args: list[Expr]) -> bool:
        """Whether ``op`` of ``args`` is, shifted, the shift of the result."""
        if op not in _SHIFT_COMMUTING:
            return False
        data = args if op == "concatenate" else args[:1]
        return all(id(a) in self.shifted for a in data) \
            and not any(id(a) in self.shifted for a in args[len(data):])

    def _mark(self, e: Expr) -> Expr:
        self.shifted.add(id(e))
        return e

    def _constant(self, c: Expr) -> Constant:
        """The uint8 constant ``c`` less 128, as int8 (one copy per constant)."""
        assert isinstance(c, Constant)
        if id(c) not in self.constants:
            self.constants[id(c)] = Constant(
                (c.data.astype(np.int16) - 128).astype(np.int8), c.virtual_device)
        return self.constants[id(c)]

    def _input(self, x: Var) -> Expr:
        """The uint8 input ``x`` less 128, as int8 (one per input)."""
        if id(x) not in self.inputs:
            self.inputs[id(x)] = self._mark(_as_int8(x))
        return self.inputs[id(x)]

    def _uint8(self, e: Expr) -> Expr:
        """``e`` as the uint8 tensor it stands for (itself if it is not shifted)."""
        if id(e) not in self.shifted:
            return e
        if id(e) not in self.restored:
            self.restored[id(e)] = _as_uint8(e)
        return self.restored[id(e)]


def _as_int8(x: Var) -> Expr:
    """The int8 tensor ``x - 128`` of the uint8 model input ``x`` (exact)."""
    return _offset(x, -128, "int8")


def _as_uint8(x: Expr) -> Expr:
    """The uint8 tensor that the int8 ``x`` of :func:`uint8_as_int8` stands for
    (``x + 128``, exact), named as ``x``."""
    return _offset(x, 128, "uint8", x.name if isinstance(x, Call) else "")


def _offset(x: Expr, delta: int, dtype: str, name: str = "") -> Expr:
    """``x + delta`` as ``dtype``, through int16 on the CPU kernels' ``cast`` and
    ``add``."""
    dev = x.virtual_device
    wide = Call("cast", [x], {"dtype": "int16"}, dev, name)
    shifted = Call("add", [wide, Constant(np.array(delta, np.int16))], {}, dev, name)
    return Call("cast", [shifted], {"dtype": dtype}, dev, name)


def _dequantized(e: Expr) -> tuple[Expr, float, int] | None:
    """(int8 activation, scale, zero point) of a per-tensor ``qnn.dequantize``."""
    if not (isinstance(e, Call) and e.op == "qnn.dequantize"):
        return None
    scale, zp = _const(e.args[1]), _const(e.args[2])
    if scale is None or zp is None or scale.size != 1 or zp.size != 1:
        return None
    if isinstance(e.args[0], Constant) or _dtype(e.args[0]) != "int8":
        return None
    return e.args[0], float(np.float32(scale.reshape(()))), int(zp.reshape(()))


def lower_asymmetric_qdq(fn: Function) -> Function:
    """``fn`` with uint8 QDQ as int8 (:func:`uint8_as_int8`) and the QDQ patterns with
    nonzero zero points replaced by integer operators (see the module docstring).

    Parameters
    ----------
    fn : Function
        A QDQ program with constant weights (run
        :func:`~tensorfab.compiler.graph.constant_folding.fold_constants` first).

    Returns
    -------
    Function
        The program with those patterns lowered; the rest unchanged (symmetric patterns
        are :func:`~tensorfab.compiler.graph.qdq_lowering.lower_qdq`'s).
    """
    def rule(e: Expr, _old: Expr) -> Expr:
        if isinstance(e, Call) and e.op == "qnn.conv2d_integer":
            return _lower_integer_conv(e) or e
        if isinstance(e, Call) and e.op == "add":
            return _merged_bias(e) or e
        if not (isinstance(e, Call) and e.op == "qnn.quantize"
                and e.attrs["out_dtype"] == "int8"):
            return e
        ys, yz = _const(e.args[1]), _const(e.args[2])
        if ys is None or yz is None or ys.size != 1 or yz.size != 1:
            return e
        sy, zy = np.float32(ys.reshape(())), int(yz.reshape(()))
        x = e.args[0]
        dq = _dequantized(x)
        if dq is not None:
            return dq[0] if (dq[1], dq[2]) == (sy, zy) else e
        if isinstance(x, Call) and x.op in _AFFINE_COMMUTING:
            dq = _dequantized(x.args[0])
            if dq is None or (dq[1], dq[2]) != (sy, zy):
                return e
            return Call(x.op, [dq[0], *x.args[1:]], x.attrs, x.virtual_device, x.name)
        if isinstance(x, Call) and x.op == "nn.global_avg_pool2d":
            return _lower_global_avg_pool(x, sy, zy) or e
        if isinstance(x, Call) and x.op == "concatenate":
            return _lower_concat(x, sy, zy) or e
        if isinstance(x, Call) and x.op == "hard_swish":
            return _lower_hard_swish(x, sy, zy) or e
        if isinstance(x, Call) and x.op == "multiply":
            return _lower_multiply(x, sy, zy) or e
        if isinstance(x, Call) and x.op == "clip":
            return _lower_clip(e, x, sy, zy) or e
        bias = None
        if isinstance(x, Call) and x.op == "add":
            added = _lower_add(x, sy, zy)
            if added is not None:
                return added
            x, bias = x.args
        if isinstance(x, Call) and x.op in ("nn.conv2d", "matmul"):
            return _lower_linear(e, x, bias, sy, zy) or e
        return e
    return rewrite(uint8_as_int8(fn), rule)


def _lower_global_avg_pool(pool: Call, sy: np.float32, zy: int) -> Expr | None:
    """``qnn.global_avg_pool_q31(x)`` with the input's and the output's zero points for
    ``global_avg_pool2d(dq(x, s_x, z_x))`` of an int8 NCHW activation."""
    from tensorfab.compiler.tensor.global_pool import global_avg_pool_attrs

    dq = _dequantized(pool.args[0])
    if dq is None or not (dq[2] or zy):
        return None  # symmetric: lower_qdq's
    x, sx, zx = dq
    shape = x.checked_type.shape  # type: ignore[union-attr]
    if len(shape) != 4:
        return None
    attrs = global_avg_pool_attrs(sx, float(sy), int(shape[2]) * int(shape[3]), zy, zx)
    return Call("qnn.global_avg_pool_q31", [x], attrs, pool.virtual_device, pool.name)


def _lower_concat(cat: Call, sy: np.float32, zy: int) -> Expr | None:
    """``qnn.concat_q31`` of the first two inputs, then of that and each next one (at
    the output's scale already: copied), for a channel concatenation of per-tensor int8
    activations."""
    from tensorfab.compiler.tensor.concat import concat_attrs

    operands = [_dequantized(a) for a in cat.args]
    if len(operands) < 2 or any(d is None for d in operands) \
            or len(_shape(cat)) != 4 or cat.attrs["axis"] % 4 != 1:
        return None
    (joined, s, z), *rest = operands  # type: ignore[misc]
    channels = _shape(joined)[1]
    for x, sx, zx in rest:  # type: ignore[misc]
        attrs = concat_attrs(s, z, sx, zx, float(sy), zy) | {
            "a_channels": channels, "b_channels": _shape(x)[1]}
        joined = Call("qnn.concat_q31", [joined, x], attrs, cat.virtual_device, cat.name)
        s, z, channels = float(sy), zy, channels + _shape(x)[1]
    return joined


def _shape(e: Expr) -> tuple[int, ...]:
    return tuple(e.checked_type.shape)  # type: ignore[union-attr]


def _asymmetric_pair(call: Call, zy: int
                     ) -> tuple[tuple[Expr, float, int], tuple[Expr, float, int]] | None:
    """The two dequantized int8 activations of ``call`` with their scales and zero
    points, when some zero point (theirs or the output's ``zy``) is nonzero; None for
    another pattern or a symmetric one (:func:`~.qdq_lowering.lower_qdq`'s)."""
    operands = [_dequantized(a) for a in call.args]
    if len(operands) != 2 or operands[0] is None or operands[1] is None:
        return None
    if not (operands[0][2] or operands[1][2] or zy):
        return None
    return operands[0], operands[1]


def _lower_hard_swish(hs: Call, sy: np.float32, zy: int) -> Expr | None:
    """``qnn.hard_swish_q31(x)`` with the input's and the output's zero points for
    ``hard_swish(dq(x, s_x, z_x))`` of an int8 activation."""
    from tensorfab.compiler.tensor.hard_swish import hard_swish_attrs

    dq = _dequantized(hs.args[0])
    if dq is None or not (dq[2] or zy):
        return None  # symmetric: lower_qdq's
    x, sx, zx = dq
    attrs = hard_swish_attrs(sx, float(sy), zy, zx)
    if attrs is None:
        return None
    return Call("qnn.hard_swish_q31", [x], attrs, hs.virtual_device, hs.name)


def _lower_multiply(mul: Call, sy: np.float32, zy: int) -> Expr | None:
    """``qnn.mul_q31(a, b)`` with the three zero points for ``multiply(dq(a, s_a, z_a),
    dq(b, s_b, z_b))`` of two int8 activations."""
    from tensorfab.compiler.tensor.channel_scale import mul_attrs

    operands = _asymmetric_pair(mul, zy)
    if operands is None:
        return None
    (a, sa, za), (b, sb, zb) = operands
    attrs = mul_attrs(sa, sb, float(sy), zy, za, zb)
    return Call("qnn.mul_q31", [a, b], attrs, mul.virtual_device, mul.name)


def _lower_clip(q: Call, clip: Call, sy: np.float32, zy: int) -> Expr | None:
    """The int8 clip of ``quantize(clip(dq(x, s, z)), s, z)``, or of a clip over a
    convolution or matmul quantized with a zero point (:func:`.qdq_lowering.int8_clip`)."""
    dq = _dequantized(clip.args[0])
    if dq is not None:
        x, sx, zx = dq
        if (sx, zx) != (sy, zy) or not zy:
            return None  # another scale: the CPU's; symmetric: lower_qdq's
        return int8_clip(x, clip, float(sy), zy)
    linear, bias = linear_and_bias(clip.args[0])
    if linear is None:
        return None
    lowered = _lower_linear(q, linear, bias, sy, zy)
    return None if lowered is None else int8_clip(lowered, clip, float(sy), zy)


def _lower_add(add: Call, sy: np.float32, zy: int) -> Expr | None:
    """``qnn.add_q31(a, b)`` with the operands' and the output's zero points for
    ``add(dq(a, s_a, z_a), dq(b, s_b, z_b))`` of two int8 activations (a residual add
    of an asymmetric model), scaled as :func:`~.qdq_lowering.lower_qdq` scales a
    symmetric one."""
    from .qdq_lowering import add_q31_attrs

    operands = _asymmetric_pair(add, zy)
    if operands is None:
        return None
    (a, sa, za), (b, sb, zb) = operands
    attrs = add_q31_attrs(sa, sb, float(sy)) | {"zero_point": zy, "a_zero_point": za,
                                                "b_zero_point": zb}
    return Call("qnn.add_q31", [a, b], attrs, add.virtual_device, add.name)


def _lower_linear(q: Call, lin: Call, bias: Expr | None, sy: np.float32, zy: int
                  ) -> Expr | None:
    """The integer form of a quantized conv2d or matmul whose input or output has a
    nonzero zero point (None: not this pattern, or symmetric)."""
    data = _dequantized(lin.args[0])
    if data is None:
        return None
    xq, sx, zx = data
    if zx == 0 and zy == 0:
        return None  # symmetric: lower_qdq's
    dev = q.virtual_device
    zero = Constant(np.zeros((), np.int8))
    if lin.op == "nn.conv2d":
        weight = _int8_weight(lin.args[1])
        if weight is None or lin.attrs["data_layout"] != "NCHW" \
                or lin.attrs["kernel_layout"] != "OIHW":
            return None
        wq, ws = weight
        w = wq.data.astype(np.int64)
        xq, attrs = _padded_with_zero_point(xq, zx, lin.attrs, dev)
        acc: Expr = Call("qnn.conv2d_integer", [xq, wq, zero, zero], attrs, dev, lin.name)
        channels, axis, shape = w.shape[0], 1, (-1, 1, 1)
        weight_sums = w.sum(axis=(1, 2, 3))
    else:
        weight = _int8_weight(lin.args[1]) or _int8_weight(lin.args[1], transpose=True)
        if weight is None or weight[0].data.ndim != 2:
            return None
        wq, ws = weight
        acc = Call("qnn.matmul_integer", [xq, wq, zero, zero], {}, dev, lin.name)
        channels, axis, shape = wq.data.shape[1], -1, (-1,)
        weight_sums = wq.data.astype(np.int64).sum(axis=0)
    acc_scale = (np.float32(sx) * ws.astype(np.float32)).reshape(-1)
    if acc_scale.size == 1:
        acc_scale = np.full(channels, acc_scale[0], np.float32)
    b = np.zeros(channels, np.int64)
    if bias is not None:
        real = _bias_int32(bias, acc_scale, channels)
        if real is None:
            return None
        b = real.astype(np.int64)
    b -= zx * weight_sums
    if np.abs(b).max(initial=0) >= 1 << 31:
        return None
    acc = Call("add", [acc, Constant(b.astype(np.int32).reshape(shape))], {}, dev,
               q.args[0].name)
    multiplier = (acc_scale / sy).astype(np.float32)
    return Call("qnn.requantize", [acc, Constant(multiplier),
                                   Constant(np.full(multiplier.shape, zy, np.int8))],
                {"axis": axis, "out_dtype": "int8"}, dev)


def _padded_with_zero_point(x: Expr, zx: int, attrs: Mapping[str, Any],
                            dev: VirtualDevice | None) -> tuple[Expr, dict[str, Any]]:
    """``x`` padded with its zero point ``zx`` by an ``nn.pad`` (the quantized form of
    the float model's zero padding) and the convolution attributes ``attrs`` without
    their padding; ``(x, attrs)`` as they are when ``zx`` is 0 or nothing is padded."""
    if zx == 0 or not any(attrs["padding"]):
        return x, dict(attrs)
    pt, pl, pb, pr = attrs["padding"]
    padded = Call("nn.pad", [x], {"pads": (0, 0, pt, pl, 0, 0, pb, pr),
                                  "mode": "constant", "value": float(zx)}, dev)
    return padded, {**attrs, "padding": (0, 0, 0, 0)}


def _scalar_zero_point(z: Expr) -> int | None:
    """The value of a constant per-tensor int8 zero point (None: another kind)."""
    if not (isinstance(z, Constant) and z.data.dtype == np.int8 and z.data.size == 1):
        return None
    return int(z.data.reshape(()))


def _lower_integer_conv(conv: Call) -> Expr | None:
    """``conv2d_integer(pad(x, z_x), W, 0, 0) - z_x · Σ W[o]`` for a
    ``conv2d_integer(x, W, z_x, 0)`` (QLinearConv's, ConvInteger's) of an int8 input
    with a nonzero constant zero point ``z_x`` and a constant int8 weight with zero
    points 0: the same int32 sums (exact), as :func:`_lower_linear` lowers the QDQ form
    (None: not this pattern, or a correction beyond int32)."""
    from tensorfab.compiler.tensor.requant import fold_input_zero_point

    x, w, xz, wz = conv.args
    zx = _scalar_zero_point(xz)
    if not zx or _dtype(x) != "int8" or conv.attrs["data_layout"] != "NCHW" \
            or conv.attrs["kernel_layout"] != "OIHW" \
            or not (isinstance(w, Constant) and w.data.dtype == np.int8) \
            or not (isinstance(wz, Constant) and not np.any(wz.data)):
        return None
    correction = fold_input_zero_point(None, w.data, zx)
    if np.abs(correction).max(initial=0) >= 1 << 31:
        return None
    dev = conv.virtual_device
    x, attrs = _padded_with_zero_point(x, zx, conv.attrs, dev)
    zero = Constant(np.zeros((), np.int8))
    acc = Call("qnn.conv2d_integer", [x, w, zero, zero], attrs, dev, conv.name)
    return Call("add", [acc, Constant(correction.astype(np.int32).reshape(-1, 1, 1))], {},
                dev, conv.name)


def _merged_bias(add: Call) -> Expr | None:
    """``add(conv, c1 + c2)`` for ``add(add(conv, c1), c2)`` of an integer convolution's
    sums and two int32 constants (a zero-point correction and the model's bias), so
    that the chain has the one bias ``add`` an accelerator epilogue takes (None: not
    this pattern, or a sum beyond int32)."""
    inner, c2 = add.args
    if not (isinstance(inner, Call) and inner.op == "add"
            and isinstance(inner.args[0], Call) and inner.args[0].op == "qnn.conv2d_integer"):
        return None
    c1 = inner.args[1]
    if not all(isinstance(c, Constant) and c.data.dtype == np.int32 for c in (c1, c2)):
        return None
    total = c1.data.astype(np.int64) + c2.data.astype(np.int64)  # type: ignore[union-attr]
    if np.abs(total).max(initial=0) >= 1 << 31:
        return None
    return Call("add", [inner.args[0], Constant(total.astype(np.int32))], add.attrs,
                add.virtual_device, add.name)

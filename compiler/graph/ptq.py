"""Post-training quantization by tensorfab: a float program to its QDQ form.

:func:`quantize_graph` takes a float program (after :func:`~.constant_folding.fold_constants`
and :func:`~.batch_norm_folding.fold_batch_norm`) and calibration batches, and returns
the program in the QDQ form the ONNX frontend gives a model quantized by onnxruntime,
so that :func:`~.qdq_lowering.lower_qdq`, the partitioning and the accelerator lowering
apply unchanged:

* the *linear* operators, ``nn.conv2d`` (NCHW/OIHW, constant weight) and ``matmul``
  with a constant 2-D weight, read ``dequantize(W_q, s_w, 0, axis=c)``: per output
  channel symmetric int8 weights, ``s_w[c] = max|W[c]| / 127``,
  ``W_q = clip(round(W / s_w), -127, 127)``;
* a constant per-channel bias added to a linear operator (its only reader) becomes
  ``dequantize(b_q, s_x · s_w, 0)`` with ``b_q = round(b / (s_x · s_w))`` in int32;
* per-tensor symmetric int8 activations, ``quantize``/``dequantize`` pairs with
  ``s = amax / 127`` from an observer (:mod:`.calibration`: ``minmax`` or
  ``percentile``) on: each linear operator's data input, and its output (after the
  bias; observed after a ``relu`` or a ReLU6 ``clip(0, hi)`` that is its only reader,
  whose negative side is zero anyway, so the positive side gets the whole int8 range);
* operators that commute with a positive scale (relu, max pooling, flatten, reshape,
  transpose...) on a quantized tensor keep its scale (no observer), so they run in
  int8 after lowering;
* an ``add`` of two quantized activations (a residual connection) gets an observed
  output scale (after a ``relu`` that is its only reader), so that it lowers to the
  integer ``qnn.add_q31``;
* a ``hard_swish`` or ``nn.global_avg_pool2d`` of a quantized activation, a
  ``multiply`` of two (squeeze-excite's channel-wise scale) and a channel
  ``concatenate`` of quantized NCHW activations get an observed output scale, so that
  they lower to the integer ``qnn.hard_swish_q31``, ``qnn.global_avg_pool_q31``,
  ``qnn.mul_q31`` and ``qnn.concat_q31``.

Five options serve transformers (all off by default, as CNNs want):

* ``activation_matmuls``: a ``matmul`` of two float activations (attention's
  ``Q·Kᵀ`` and ``P·V``) gets per-tensor int8 inputs and an observed per-tensor output,
  so that it lowers to ``qnn.matmul_integer`` of two int8 activations;
* ``residual_adds=False``: an ``add`` of two quantized activations stays float (a
  transformer's residual stream has channels a hundred times its typical magnitude,
  which one int8 scale cannot hold; its layer norm runs in float anyway);
* ``outlier_channels=k``: each dense layer's ``k`` input channels of largest
  calibrated magnitude computed apart in float
  (:func:`~.outlier_channels.split_outlier_channels`), so that one int8 scale covers the
  rest;
* ``two_part_probabilities`` (with ``activation_matmuls``): ``softmax(x)·V`` as two
  int8 matmuls of the probabilities' high part (fixed scale ``1/127``) and their
  remainder (:func:`~.probability_split.split_probabilities`), for attention over long
  sequences whose weights are near one int8 step;
* ``per_channel_outputs``: a linear operator's output read only by float operators
  (not by a scale-commuting op, a ``relu`` or another quantized operator) gets one
  observed scale per channel (last axis), which the accelerator's per-channel
  requantization applies for free and the float reader's ``dequantize`` undoes.

Everything else stays float and reads the dequantized values.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Set

import numpy as np

from .calibration import ChannelMinMaxObserver, observe, symmetric_scale
from .infer import infer_types
from .ir import Call, Constant, Expr, Function, Tuple, Var, post_order
from .outlier_channels import split_outlier_channels
from .probability_split import split_probabilities
from .qdq_lowering import SCALE_COMMUTING
from .rewrite import rebuild

__all__ = ["quantize_graph", "quantize_weight"]


def quantize_weight(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8 of ``w`` along ``axis``: ``(w_q, scale)`` with
    ``scale[c] = max|w[c]| / 127`` (1 for an all-zero channel) in float32."""
    w = np.asarray(w, np.float32)
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    amax = np.abs(moved).max(axis=1).astype(np.float64)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def _linear(e: Expr) -> bool:
    if not (isinstance(e, Call) and e.op in ("nn.conv2d", "matmul")):
        return False
    x, w = e.args[0], e.args[1]
    if isinstance(x, Constant) or not isinstance(w, Constant) or w.data.dtype != np.float32:
        return False
    if x.checked_type.dtype != "float32":  # type: ignore[union-attr]
        return False
    if e.op == "nn.conv2d":
        return (w.data.ndim == 4 and e.attrs["data_layout"] == "NCHW"
                and e.attrs["kernel_layout"] == "OIHW")
    return w.data.ndim == 2


def _activation_matmul(e: Expr) -> bool:
    """A ``matmul`` of two float activations (no constant operand)."""
    if not (isinstance(e, Call) and e.op == "matmul"):
        return False
    return all(not isinstance(a, Constant) and a.checked_type.dtype == "float32"  # type: ignore[union-attr]
               and len(a.checked_type.shape) >= 2 for a in e.args)  # type: ignore[union-attr]


def _channels(linear: Call) -> int:
    w = linear.args[1].data  # type: ignore[union-attr]
    return int(w.shape[0] if linear.op == "nn.conv2d" else w.shape[1])


def _bias_of(linear: Call, readers: list[Call]) -> Call | None:
    """The ``add`` of a constant per-channel bias that is ``linear``'s only reader."""
    if len(readers) != 1 or readers[0].op != "add" or readers[0].args[0] is not linear:
        return None
    b = readers[0].args[1]
    c = _channels(linear)
    if not isinstance(b, Constant) or b.data.dtype != np.float32 or b.data.size != c:
        return None
    want = {(c, 1, 1), (1, c, 1, 1)} if linear.op == "nn.conv2d" else {(c,), (1, c)}
    return readers[0] if b.data.shape in want else None


def _qdq(e: Expr, scale: np.float32 | np.ndarray) -> Expr:
    """``dequantize(quantize(e, scale, 0), scale, 0)`` (int8, per tensor, or per channel
    of the last axis for a vector ``scale``)."""
    ndim = len(e.checked_type.shape)  # type: ignore[union-attr]
    axis = 1 if ndim >= 2 else 0
    if np.ndim(scale):
        axis = ndim - 1
    s = Constant(np.asarray(scale, np.float32))
    z = Constant(np.zeros(np.shape(scale), np.int8))
    q = Call("qnn.quantize", [e, s, z], {"axis": axis, "out_dtype": "int8"},
             e.virtual_device)
    return Call("qnn.dequantize", [q, s, z], {"axis": axis}, e.virtual_device)


def quantize_graph(fn: Function, calibration: Iterable[Mapping[str, np.ndarray]], *,
                   method: str = "minmax", percentile: float = 99.99,
                   activation_matmuls: bool = False, residual_adds: bool = True,
                   per_channel_outputs: bool = False, outlier_channels: int = 0,
                   two_part_probabilities: bool = False) -> Function:
    """The QDQ int8 form of the float program ``fn`` (see the module docstring).

    Parameters
    ----------
    fn : Function
        A float program, constants folded (weights are constants).
    calibration : iterable of mappings
        Calibration batches: input name to array, fitting ``fn``'s inputs.
    method : str
        Activation observer: ``"minmax"`` or ``"percentile"``.
    percentile : float
        The percentile of ``|x|`` of the ``percentile`` observer.
    activation_matmuls, residual_adds, per_channel_outputs, two_part_probabilities : bool
        The transformer options of the module docstring.
    outlier_channels : int
        Input channels of each dense layer kept in float (0: none).

    Returns
    -------
    Function
        The program with ``qnn.quantize``/``qnn.dequantize`` pairs; unchanged when it has
        no linear operator to quantize.

    Raises
    ------
    CalibrationError
        Empty calibration data, batches that do not fit the inputs, a bad method.
    """
    calibration = list(calibration)
    if activation_matmuls and two_part_probabilities:
        fn = split_probabilities(fn)
    fn, float_matmuls = split_outlier_channels(fn, calibration, outlier_channels)
    infer_types(fn)
    nodes = list(post_order(fn))
    readers: dict[int, list[Call]] = defaultdict(list)
    for e in nodes:
        if isinstance(e, Call):
            for a in e.args:
                readers[id(a)].append(e)
    linears = [e for e in nodes if _linear(e) and id(e) not in float_matmuls]
    act_mms = [e for e in nodes if activation_matmuls and _activation_matmul(e)]
    bias: dict[int, Call] = {}
    ends: set[int] = set()
    for lin in linears:
        b = _bias_of(lin, readers[id(lin)])  # type: ignore[arg-type]
        if b is not None:
            bias[id(lin)] = b
        ends.add(id(b if b is not None else lin))
    # which observed tensor gives each quantized tensor its scale
    source: dict[int, Expr] = {}
    linear_inputs = {id(lin.args[0]) for lin in linears}
    linear_inputs |= {id(a) for mm in act_mms for a in mm.args}
    ends |= {id(mm) for mm in act_mms}
    for e in nodes:
        if id(e) in ends or (residual_adds and _residual_add(e, source.keys() | linear_inputs)):
            r = readers[id(e)]
            source[id(e)] = r[0] if (len(r) == 1 and _rectifier(r[0])
                                     and e is not fn.body) else e
        elif (isinstance(e, Call) and e.op in SCALE_COMMUTING and e.args
              and id(e.args[0]) in source):
            source[id(e)] = source[id(e.args[0])]
        elif _rectifier(e) and source.get(id(e.args[0])) is e:  # type: ignore[union-attr]
            source[id(e)] = e  # a ReLU6 clip observed in its producer's place
        elif _int8_activation(e) and all(
                id(a) in source or id(a) in linear_inputs for a in e.args):  # type: ignore[union-attr]
            source[id(e)] = e
    for lin in linears:
        source.setdefault(id(lin.args[0]), lin.args[0])
    for mm in act_mms:
        for a in mm.args:
            if not (isinstance(a, Call) and a.op == "qnn.dequantize"):  # already int8
                source.setdefault(id(a), a)
    if not linears and not act_mms:
        return fn
    channel_wise: set[int] = set()
    if per_channel_outputs:
        by_id = {id(n): n for n in nodes}
        passed_on = {id(src) for k, src in source.items() if k != id(src)}
        mm_ids = {id(mm) for mm in act_mms}
        channel_wise = {k for k in ends
                        if source[k] is by_id[k] and k not in linear_inputs
                        and k not in passed_on and k not in mm_ids
                        and not any(r.op in SCALE_COMMUTING or _rectifier(r)
                                    or id(r) in ends for r in readers[k])}
    observed = list({id(e): e for e in source.values()}.values())
    observers = _observers(fn, observed, channel_wise, calibration, method, percentile)
    scale_of = {id(e): (_channel_scales(o) if id(e) in channel_wise  # type: ignore[arg-type]
                        else symmetric_scale(o.amax()))
                for e, o in zip(observed, observers, strict=True)}
    scale = {k: scale_of[id(src)] for k, src in source.items()}

    linear_ids = {id(lin) for lin in linears}
    bias_ids = {id(b) for b in bias.values()}
    new: dict[int, Expr] = {}   # rebuilt, as computed
    read: dict[int, Expr] = {}  # as readers see it (dequantized when quantized)

    class _Reads(dict):
        def __missing__(self, key: int) -> Expr:
            return read.get(key, new[key])

    class _Outputs(_Reads):  # a model input returned as an output is returned exact
        def __missing__(self, key: int) -> Expr:
            return new[key] if isinstance(new[key], Var) else super().__missing__(key)

    for e in nodes:
        if isinstance(e, Function):
            out: Expr = Function(e.params, _Outputs()[id(e.body)], e.ret_type,
                                 e.result_device, e.virtual_device)
        elif isinstance(e, Var):
            out = e
        elif isinstance(e, Tuple) and e is fn.body:
            out = rebuild(e, _Outputs())
        else:
            out = rebuild(e, _Reads())
            if id(e) in linear_ids:
                out = _quantized_linear(e, out)  # type: ignore[arg-type]
            elif id(e) in bias_ids:
                lin = e.args[0]
                out = Call("add", [out.args[0],  # type: ignore[attr-defined]
                                   _bias(lin, e.args[1], scale[id(lin.args[0])])],  # type: ignore[union-attr, arg-type]
                           e.attrs, e.virtual_device)
        new[id(e)] = out
        if id(e) in scale and not isinstance(e, Function):
            infer_types(out)
            read[id(e)] = _qdq(out, scale[id(e)])
    result = new[id(fn)]
    assert isinstance(result, Function)
    infer_types(result)
    return result


def _observers(fn: Function, observed: list[Expr], channel_wise: set[int],
               calibration: Iterable[Mapping[str, np.ndarray]], method: str,
               percentile: float) -> list:
    """Observers of ``observed``: per channel for the ids in ``channel_wise``, else of
    ``method``."""
    from .calibration import make_observer

    obs = [ChannelMinMaxObserver() if id(e) in channel_wise else
           make_observer(method, percentile) for e in observed]
    return observe(fn, observed, calibration, method, percentile, obs)


def _channel_scales(observer: ChannelMinMaxObserver) -> np.ndarray:
    """Per-channel int8 scales ``amax / 127`` (1 for an all-zero channel)."""
    amax = observer.channel_amax()
    return np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)


def _rectifier(e: Expr) -> bool:
    """A ``relu``, or a ``clip`` from 0 (ReLU6, or no upper bound): observed in its
    reader's place, its negative side being zero anyway (and its upper bound within the
    observed range, so the int8 clip it lowers to is exact,
    :func:`~.qdq_lowering.lower_qdq`)."""
    if not isinstance(e, Call):
        return False
    if e.op == "relu":
        return True
    lo, hi = (e.attrs.get("a_min"), e.attrs.get("a_max")) if e.op == "clip" else (None, None)
    return lo is not None and float(lo) == 0.0 and (hi is None or float(hi) > 0)


#: Float activations that get an observed output scale when their input is quantized,
#: so that they lower to integer operators (:func:`~.qdq_lowering.lower_qdq`), and a
#: channel concatenation of NCHW activations (:func:`_int8_activation`).
INT8_ACTIVATIONS = frozenset({"hard_swish", "nn.global_avg_pool2d", "multiply"})


def _int8_activation(e: Expr) -> bool:
    """One of :data:`INT8_ACTIVATIONS`, or a ``concatenate`` of NCHW activations along
    the channels (it lowers to ``qnn.concat_q31``)."""
    if not isinstance(e, Call):
        return False
    if e.op == "concatenate":
        shape = e.checked_type.shape  # type: ignore[union-attr]
        return len(shape) == 4 and e.attrs["axis"] % 4 == 1
    return e.op in INT8_ACTIVATIONS


def _residual_add(e: Expr, quantized: Set[int]) -> bool:
    """An ``add`` of two quantized activations (ids in ``quantized``; a residual
    connection): it gets an observed output scale, so that it lowers to the integer
    ``qnn.add_q31``."""
    return (isinstance(e, Call) and e.op == "add" and len(e.args) == 2
            and all(not isinstance(a, Constant) and id(a) in quantized for a in e.args))


def _weight_scales(lin: Call) -> np.ndarray:
    w = lin.args[1].data  # type: ignore[union-attr]
    return quantize_weight(w, 0 if lin.op == "nn.conv2d" else 1)[1]


def _quantized_linear(old: Call, rebuilt: Call) -> Call:
    """``rebuilt`` (data argument already dequantized) reading its weight through a
    per-channel ``dequantize``."""
    axis = 0 if old.op == "nn.conv2d" else 1
    wq, ws = quantize_weight(old.args[1].data, axis)  # type: ignore[union-attr]
    w = Call("qnn.dequantize", [Constant(wq), Constant(ws),
                                Constant(np.zeros(ws.shape, np.int8))], {"axis": axis})
    return Call(old.op, [rebuilt.args[0], w, *rebuilt.args[2:]], old.attrs,
                old.virtual_device, old.name)


def _bias(lin: Call, b: Constant, s_x: np.float32) -> Expr:
    """The int32 bias in units of ``s_x · s_w`` behind a ``dequantize``, shaped as the
    float one broadcast (``(C, 1, 1)`` after a convolution)."""
    acc_scale = (np.asarray(s_x, np.float32) * _weight_scales(lin)).astype(np.float32)
    real = b.data.reshape(-1).astype(np.float64)
    bq = np.clip(np.rint(real / acc_scale.astype(np.float64)), -2**31, 2**31 - 1)
    dq: Expr = Call("qnn.dequantize", [Constant(bq.astype(np.int32)), Constant(acc_scale),
                                       Constant(np.zeros(acc_scale.shape, np.int32))],
                    {"axis": 0})
    if lin.op == "nn.conv2d":
        dq = Call("expand_dims", [dq], {"axes": (1, 2)})
    return dq

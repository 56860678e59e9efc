"""Blocked layouts on the accelerator, transformed only where data crosses devices.

After :func:`~tensorfab.compiler.graph.planning.plan_devices`,
:func:`pack_accel_layouts` keeps every 4-D tensor that lives on an accelerator in the
blocked layout of today's tensor compiler (:mod:`tensorfab.isa.layout`):
activations ``NCHW{batch}n{block}c``, convolution weights ``OIHW{block_out}o{block_in}i``,
the blocks read from the device's :class:`~tensorfab.isa.HwConfig`. A copy onto the
accelerator is preceded by a ``layout_transform`` on the cpu; a copy back is followed by
the inverse transform (and a slice dropping the channel padding), also on the cpu.

A convolution takes its data blocked by ``block_in`` (:func:`activation_layout`) and
gives its result blocked by ``block_out`` (:func:`conv_output_layout`); elementwise
operators keep the layout of their blocked operand, constants are packed at compile
time into the layout of the operand they meet. Where a blocked value reaches an
accelerator operator in another blocking than it takes (a convolution's result read by
the next convolution when ``block_in != block_out``, or two operands of a binary
operator blocked differently), :func:`pack_accel_layouts` inserts the relayout there: a
copy to the cpu, the inverse transform and slice, the transform to the wanted layout
and a copy back (:func:`relayout`). The accelerator has no instruction that moves data
between blockings, and the memory plan reads a program's output in place only when
the next program's input has the same blocked shape
(:func:`tensorfab.runtime.memory_plan.plan_memory`). With ``block_in == block_out``
(every preset) two accelerator operators never have a transform between them.
"""

from __future__ import annotations

import numpy as np

from tensorfab.isa import PRESETS, HwConfig
from tensorfab.runtime.layout_transform import layout_transform, parse_layout

from .device import CPU, VirtualDevice
from .infer import infer_types
from .ir import Call, Constant, Expr, Function, Let, Tuple, TupleGetItem, Var, post_order
from .planning import short
from .types import GraphError, TensorType

#: Accelerator operators that work on a blocked tensor unchanged (elementwise).
LAYOUT_AGNOSTIC = frozenset({
    "relu", "clip", "cast", "sigmoid", "tanh", "leaky_relu", "hard_sigmoid", "hard_swish",
    "negative", "identity", "exp", "erf", "sqrt", "qnn.requantize_fixed",
    "qnn.requantize_q31", "qnn.hard_swish_q31", "qnn.global_avg_pool_q31",
    "qnn.channel_permute",
})
BINARY = frozenset({"add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
                    "qnn.add_q31", "qnn.mul_q31", "qnn.requantize_residual_q31",
                    "qnn.concat_q31"})
QUANT = frozenset({"qnn.quantize", "qnn.dequantize", "qnn.requantize"})
CONV = frozenset({"nn.conv2d", "qnn.conv2d_integer"})


class LayoutPlanningError(GraphError):
    """An accelerator operator with no blocked-layout form, or blocked data where plain
    data is required; names the call and its device."""


def hw_config_of(device: VirtualDevice) -> HwConfig:
    """The :class:`HwConfig` an accel device carries."""
    if device.config is None:
        raise LayoutPlanningError(f"device {device} carries no HwConfig (a name that is no "
                                  f"preset, {', '.join(PRESETS)}, needs the config itself: "
                                  "accel(cfg))")
    return device.config


def activation_layout(cfg: HwConfig, channel_block: int | None = None) -> str:
    """``NCHW{batch}n{block}c`` (input channels blocked by ``block_in`` by default)."""
    return f"NCHW{cfg.batch}n{channel_block or cfg.block_in}c"


def conv_output_layout(cfg: HwConfig) -> str:
    """``NCHW{batch}n{block_out}c``: a convolution's result on the accelerator (its output
    channels blocked by ``block_out``)."""
    return activation_layout(cfg, cfg.block_out)


def weight_layout(cfg: HwConfig) -> str:
    """``OIHW{block_out}o{block_in}i``."""
    return f"OIHW{cfg.block_out}o{cfg.block_in}i"


def _is_4d(e: Expr) -> bool:
    t = infer_types(e)
    return isinstance(t, TensorType) and t.ndim == 4


def pack_accel_layouts(fn: Function) -> Function:
    """Blocked layouts for the accelerator's 4-D tensors, with transforms only next to
    device copies and relayouts only where an operator takes another blocking than its
    operand has (see the module docstring). ``fn`` must be planned (every node has a
    device).

    Raises
    ------
    LayoutPlanningError
        An accelerator operator that cannot take blocked data (the message names it and
        suggests the cpu), a non-constant convolution weight, grouped convolutions,
        non-zero zero points of a blocked integer convolution, or a blocked result.
    """
    infer_types(fn)
    new: dict[int, Expr] = {}
    layout: dict[int, str | None] = {}

    def pack_constant(c: Constant, to: str, device: VirtualDevice) -> Constant:
        return Constant(layout_transform(c.data, to[:4], to), device)

    relayouts: dict[tuple[int, str], Expr] = {}

    def as_layout(plain: Expr, x: Expr, lay: str, to: str, device: VirtualDevice) -> Expr:
        """``x`` (the rebuilt ``plain``, blocked as ``lay``) blocked as ``to``, one
        relayout per value and layout."""
        key = (id(x), to)
        if key not in relayouts:
            shape = infer_types(plain).shape  # type: ignore[union-attr]
            relayouts[key] = relayout(x, lay, to, shape, device)
        return relayouts[key]

    let_value = {id(n.var): n.value for n in post_order(fn.body) if isinstance(n, Let)}
    for p in fn.params:
        new[id(p)] = p
        layout[id(p)] = None
    for e in post_order(fn.body):
        k = id(e)
        if k in new:
            continue
        dev = e.virtual_device
        if dev is None and not isinstance(e, Var):
            raise LayoutPlanningError(f"{short(e)} has no device: run plan_devices first")
        if isinstance(e, Constant):
            new[k], layout[k] = e, None
        elif isinstance(e, Var):  # let-bound: its value is rebuilt already
            value_of = let_value[k]
            value = new[id(value_of)]
            annotation = e.type_annotation
            if annotation is not None and layout[id(value_of)]:
                annotation = infer_types(value)
            new[k], layout[k] = Var(e.name, annotation, e.virtual_device), layout[id(value_of)]
        elif isinstance(e, Call) and e.op == "device_copy":
            new[k], layout[k] = _copy(e, new, layout)
        elif isinstance(e, Call):
            args = [new[id(a)] for a in e.args]
            lays = [layout[id(a)] for a in e.args]
            if dev.kind != "accel" or (not any(lays) and e.op not in CONV):
                if any(lays):
                    raise LayoutPlanningError(f"{short(e)} on {dev} reads blocked data")
                new[k], layout[k] = Call(e.op, args, e.attrs, dev, e.name), None
            else:
                new[k], layout[k] = _accel_call(e, args, lays, dev, pack_constant,
                                                 as_layout)
        elif isinstance(e, Tuple | TupleGetItem):
            kids = e.fields if isinstance(e, Tuple) else (e.tuple_value,)
            if any(layout[id(x)] for x in kids):
                raise LayoutPlanningError(f"{short(e)} on {dev} holds blocked tensors; "
                                          "tuples of accelerator tensors are not supported")
            new[k] = (Tuple([new[id(f)] for f in e.fields], dev) if isinstance(e, Tuple)
                      else TupleGetItem(new[id(e.tuple_value)], e.index, dev))
            layout[k] = None
        elif isinstance(e, Let):
            new[k] = Let(new[id(e.var)], new[id(e.value)], new[id(e.body)], e.virtual_device)
            layout[k] = layout[id(e.body)]
        elif isinstance(e, Function):
            raise LayoutPlanningError("nested functions are not supported")
    if layout[id(fn.body)]:
        raise LayoutPlanningError(f"the result {short(fn.body)} is a blocked tensor on "
                                  f"{fn.body.virtual_device}; return it on the cpu")
    result = Function(fn.params, new[id(fn.body)], fn.ret_type, fn.result_device)
    infer_types(result)
    return result


def _copy(e: Call, new: dict[int, Expr], layout: dict[int, str | None]
          ) -> tuple[Expr, str | None]:
    src, dst = e.attrs["src_device"], e.attrs["dst_device"]
    x, lay = new[id(e.args[0])], layout[id(e.args[0])]
    if dst.kind == "accel" and src.kind != "accel" and _is_4d(x):
        target = activation_layout(hw_config_of(dst))
        return _packed_copy(x, target, src, dst, e.attrs), target
    if lay and dst.kind != "accel":
        plain_shape = infer_types(e.args[0]).shape  # type: ignore[union-attr]
        copied = Call("device_copy", [x], e.attrs, dst)
        return _unpacked(copied, lay, plain_shape, dst), None
    if lay:
        raise LayoutPlanningError(f"{short(e)}: copying blocked data between accelerators "
                                  "is not supported")
    return Call("device_copy", [x], e.attrs, dst), None


def _packed_copy(x: Expr, target: str, src: VirtualDevice, dst: VirtualDevice,
                 copy_attrs: dict) -> Expr:
    """Plain NCHW ``x`` on ``src`` transformed to ``target`` there and copied to ``dst``."""
    packed = Call("layout_transform", [x], {"src_layout": "NCHW", "dst_layout": target}, src)
    return Call("device_copy", [packed], copy_attrs, dst)


def _unpacked(x: Expr, lay: str, plain_shape: tuple, dev: VirtualDevice) -> Expr:
    """Blocked ``x`` (layout ``lay``) on ``dev`` as plain NCHW of ``plain_shape``: the
    inverse transform, then a slice dropping the padding of the blocked axes."""
    unpacked: Expr = Call("layout_transform", [x], {"src_layout": lay, "dst_layout": "NCHW"},
                          dev)
    padded = infer_types(unpacked).shape  # type: ignore[union-attr]
    if padded != plain_shape:
        axes = tuple(i for i in range(4) if padded[i] != plain_shape[i])
        unpacked = Call("strided_slice", [unpacked],
                        {"begin": (0,) * len(axes), "end": tuple(plain_shape[i] for i in axes),
                         "axes": axes, "steps": (1,) * len(axes)}, dev)
    return unpacked


def relayout(x: Expr, src_layout: str, dst_layout: str, plain_shape: tuple,
             device: VirtualDevice) -> Expr:
    """Blocked ``x`` on the accelerator ``device``, in ``src_layout``, as ``dst_layout``
    on the same device: copied to the cpu, unpacked to ``plain_shape`` (its padding
    dropped), packed again and copied back (the accelerator has no instruction that
    moves data between blockings)."""
    to_cpu = Call("device_copy", [x], {"src_device": device, "dst_device": CPU}, CPU)
    plain = _unpacked(to_cpu, src_layout, plain_shape, CPU)
    return _packed_copy(plain, dst_layout, CPU, device,
                        {"src_device": CPU, "dst_device": device})


def _pack_per_channel(values: np.ndarray, layout: str, device: VirtualDevice) -> Constant:
    """A per-channel vector as a constant that broadcasts against a blocked activation
    (every row of the batch block gets the values; padded channels get 0)."""
    batch_block = dict(parse_layout(layout).blocks).get("N", 1)
    c = np.broadcast_to(values.reshape(1, -1, 1, 1), (batch_block, values.size, 1, 1))
    return Constant(layout_transform(np.ascontiguousarray(c), "NCHW", layout), device)


def _accel_call(e: Call, args: list[Expr], lays: list[str | None], dev: VirtualDevice,
                pack_constant, as_layout) -> tuple[Expr, str | None]:
    cfg = hw_config_of(dev)
    hint = "; place it on the cpu (on_device(..., cpu)) or leave it unannotated"
    if e.op in CONV:
        data, weight = e.args[0], e.args[1]
        groups = e.attrs["groups"]
        if groups != 1 and e.op != "qnn.conv2d_integer":
            raise LayoutPlanningError(f"{short(e)} on {dev}: grouped float convolutions "
                                      f"have no blocked form{hint}")
        if groups != 1:  # super-groups of whole blocks with block-diagonal kernels
            from tensorfab.compiler.tensor.errors import CompileError
            from tensorfab.compiler.tensor.grouped_conv import (
                block_diagonal_weights,
                super_group_plan,
            )

            if not isinstance(weight, Constant):
                raise LayoutPlanningError(f"{short(e)} on {dev}: the weight must be a "
                                          "constant to be packed for the accelerator")
            try:
                s, padded = super_group_plan(cfg, int(infer_types(data).shape[1]),  # type: ignore[union-attr]
                                             weight.data.shape[0], groups)
            except CompileError as exc:
                raise LayoutPlanningError(f"{short(e)} on {dev}: {exc}{hint}") from exc
            weight = Constant(block_diagonal_weights(weight.data, groups, s, padded),
                              weight.virtual_device)
            groups = padded // s
        act = activation_layout(cfg)
        x = args[0]
        if lays[0] is None:
            if not isinstance(data, Constant):
                raise LayoutPlanningError(
                    f"{short(e)} on {dev}: its data is a plain tensor already on the "
                    "accelerator (a parameter placed there?); put it on the cpu so that a "
                    "copy with a layout transform is inserted")
            x = pack_constant(data, act, dev)
        elif lays[0] != act:  # e.g. the result of a convolution when block_in != block_out
            x = as_layout(data, x, lays[0], act, dev)
        if not isinstance(weight, Constant):
            raise LayoutPlanningError(f"{short(e)} on {dev}: the weight must be a constant "
                                      "to be packed for the accelerator")
        w = pack_constant(weight, weight_layout(cfg), dev)
        rest = args[2:]
        if e.op == "qnn.conv2d_integer":
            for zp in e.args[2:]:
                if not isinstance(zp, Constant) or np.any(zp.data != 0):
                    raise LayoutPlanningError(f"{short(e)} on {dev}: blocked integer "
                                              "convolutions take zero points of 0")
        attrs = {**e.attrs, "data_layout": act, "kernel_layout": weight_layout(cfg),
                 "groups": groups}
        return Call(e.op, [x, w, *rest], attrs, dev, e.name), conv_output_layout(cfg)
    blocked = next(lay for lay in lays if lay)
    if e.op == "nn.pad":  # the same pads of H and W; none of the blocks
        pads = tuple(e.attrs["pads"])
        if len(pads) != 8 or any(pads[i] for i in (0, 1, 4, 5)):
            raise LayoutPlanningError(f"{short(e)} on {dev}: pads {pads} of other axes than "
                                      f"the height and width have no blocked form{hint}")
        blocked_pads = (*pads[:4], 0, 0, *pads[4:], 0, 0)
        return Call(e.op, args, {**e.attrs, "pads": blocked_pads}, dev, e.name), blocked
    if e.op in LAYOUT_AGNOSTIC:
        return Call(e.op, args, e.attrs, dev, e.name), blocked
    if e.op in QUANT:
        out = [args[0]]
        for a in e.args[1:]:
            shape = infer_types(a).shape  # type: ignore[union-attr]
            if shape in ((), (1,)):
                out.append(a)
            elif (isinstance(a, Constant) and a.data.ndim == 1
                  and e.attrs["axis"] % 4 == 1):
                out.append(_pack_per_channel(a.data, blocked, dev))
            else:
                raise LayoutPlanningError(f"{short(e)} on {dev}: scales of shape {shape} "
                                          f"along axis {e.attrs['axis']} have no blocked "
                                          f"form{hint}")
        return Call(e.op, out, e.attrs, dev, e.name), blocked
    if e.op in BINARY:
        out = []
        for a, new_a, lay in zip(e.args, args, lays, strict=True):
            if lay == blocked:
                out.append(new_a)
            elif lay:
                out.append(as_layout(a, new_a, lay, blocked, dev))
            elif isinstance(a, Constant) and a.data.size == 1:
                out.append(a)
            elif isinstance(a, Constant) and a.data.ndim <= 4:
                c = a.data.reshape((1,) * (4 - a.data.ndim) + a.data.shape)
                if c.shape[1] == 1 or any(d != 1 for d in c.shape[2:]) or c.shape[0] != 1:
                    raise LayoutPlanningError(f"{short(e)} on {dev}: constant of shape "
                                              f"{a.data.shape} is not per-channel{hint}")
                out.append(_pack_per_channel(c.reshape(-1), blocked, dev))
            else:
                raise LayoutPlanningError(f"{short(e)} on {dev}: operands in layouts "
                                          f"{lay} and {blocked}{hint}")
        return Call(e.op, out, e.attrs, dev, e.name), blocked
    raise LayoutPlanningError(f"{short(e)} on {dev} has no blocked-layout form{hint}")


__all__ = ["LayoutPlanningError", "activation_layout", "conv_output_layout",
           "pack_accel_layouts", "relayout", "weight_layout"]

"""Accelerator chains compiled by the tensor compiler into programs the runtime runs.

After partitioning, planning, :func:`~.layout_planning.pack_accel_layouts` and
:func:`~.fixed_point.fixed_point_requantize`, each accelerator chain
``conv2d_integer → [add bias] → requantize_fixed → [relu] → [clip]`` (blocked layouts)
is compiled with :func:`tensorfab.compiler.conv2d` and its fused
:class:`~tensorfab.compiler.Epilogue` (a dilated convolution as the same convolution
with zeros between its kernel's taps, :func:`dilated_kernel`), and replaced by one
``accel.program`` call whose second argument is the program's bytes (TFABPROG). The
program's ``inp`` and ``out`` segments are the blocked activations the chain reads and
writes, so no layout changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from tensorfab.compiler.tensor.epilogue import Epilogue
from tensorfab.compiler.tensor.errors import CompileError
from tensorfab.compiler.tensor.operators import conv2d as compile_conv2d
from tensorfab.compiler.tensor.schedule_source import ScheduleSource
from tensorfab.compiler.tensor.tile_search import MODEL_VTHREADS
from tensorfab.compiler.tensor.timing import estimated_program_cycles
from tensorfab.runtime.accel_contract import ACCEL_PROGRAM
from tensorfab.runtime.layout_transform import layout_transform

from .channel_affine_as_conv import is_channel_affine
from .infer import infer_types
from .ir import Call, Constant, Expr, Function, post_order
from .layout_planning import conv_output_layout, hw_config_of
from .partitioning import ACCEL_ACTIVATIONS, chain_in_order
from .rewrite import call_readers, rebuild, rewrite
from .types import GraphError


class AcceleratorLoweringError(GraphError):
    """An accelerator chain the tensor compiler cannot take (names the call)."""


#: Operators of an accelerator chain after its convolution.
_CHAIN_OPS = ("add", "qnn.requantize_fixed", "qnn.requantize_q31",
              "qnn.requantize_residual_q31", "relu", "clip")


def _chain_from(end: Call) -> list[Call] | None:
    """The chain ending at ``end`` (its nodes, convolution first), if ``end`` closes one."""
    chain = [end]
    e = end
    while isinstance(e, Call) and e.op != "qnn.conv2d_integer":
        if e.op not in _CHAIN_OPS or not e.args:
            return None
        e = e.args[0]
        if not isinstance(e, Call):
            return None
        chain.append(e)
    chain.reverse()
    ops = [c.op for c in chain]
    if ops[0] != "qnn.conv2d_integer" or not {
            "qnn.requantize_fixed", "qnn.requantize_q31",
            "qnn.requantize_residual_q31"} & set(ops):
        return None
    return chain if chain_in_order(ops) else None


def chain_end(conv: Call, readers: dict[int, list[Call]]) -> Call:
    """The last node of the accelerator chain starting at ``conv``: through each single
    reader on the same device that continues the chain (an operator of a chain taking
    the node as its first argument)."""
    end = conv
    while True:
        nxt = readers.get(id(end), [])
        if not (len(nxt) == 1 and nxt[0].op in _CHAIN_OPS and nxt[0].args[0] is end
                and nxt[0].virtual_device == conv.virtual_device):
            return end
        end = nxt[0]


def dilated_kernel(w: np.ndarray, dilation: tuple[int, int]) -> np.ndarray:
    """The OIHW kernel ``w`` with ``dilation - 1`` zero rows and columns between its taps:
    a convolution with it (dilation 1) equals the dilated convolution with ``w``, bit for
    bit, at ``(k - 1) · d + 1`` squared taps (see
    :data:`~.partitioning.MAX_DILATED_TAPS_RATIO`)."""
    dh, dw = dilation
    o, c, kh, kw = w.shape
    out = np.zeros((o, c, (kh - 1) * dh + 1, (kw - 1) * dw + 1), w.dtype)
    out[:, :, ::dh, ::dw] = w
    return out


def model_vthreads(cfg: Any) -> tuple[int, ...]:
    """The thread counts a model's convolution on ``cfg`` is searched over:
    :data:`~tensorfab.compiler.tensor.tile_search.MODEL_VTHREADS` that its token
    queues hold (one thread when none)."""
    return tuple(v for v in MODEL_VTHREADS if v <= cfg.dep_queue_depth) or (1,)


def _padded(values: tuple[int, ...], channels: int) -> tuple[int, ...]:
    """Per-channel values extended with 0 over the blocked layout's padding channels (as
    the ``qnn.requantize_q31`` kernel does)."""
    return tuple(values) + (0,) * (channels - len(values))


def _compile(chain: list[Call], schedules: ScheduleSource | None = None,
             requant_stage: str = "store") -> Call:
    conv = chain[0]
    dev = conv.virtual_device
    cfg = hw_config_of(dev)
    x, w = conv.args[0], conv.args[1]
    if not isinstance(w, Constant):
        raise AcceleratorLoweringError(f"{conv.op}: the weight is not a constant")
    plain_w = layout_transform(w.data, conv.attrs["kernel_layout"], "OIHW")
    xt = infer_types(x)
    n_pad, c_pad = xt.shape[0] * xt.shape[4], xt.shape[1] * xt.shape[5]  # type: ignore[union-attr]
    h, wd = xt.shape[2], xt.shape[3]  # type: ignore[union-attr]
    pt, pl, pb, pr = conv.attrs["padding"]
    sh, sw = conv.attrs["strides"]
    dilation = tuple(conv.attrs["dilation"])
    kh, kw = plain_w.shape[2], plain_w.shape[3]
    if dilation != (1, 1):  # the same convolution with zeros between the taps
        plain_w = dilated_kernel(plain_w, dilation)  # type: ignore[arg-type]
    bias = None
    requant = relu = clip = None
    per_channel: Any = None
    residual: Call | None = None
    for node in chain[1:]:
        if node.op == "add":
            b = node.args[1]
            if not isinstance(b, Constant):
                raise AcceleratorLoweringError("the bias is not a constant")
            out_channels = plain_w.shape[0]
            if b.data.size == 1:  # one value for every channel
                bias = np.full(out_channels, b.data.reshape(()), np.int32)
            else:
                plain = layout_transform(np.ascontiguousarray(b.data),
                                         conv_output_layout(cfg), "NCHW")
                bias = plain[0, :, 0, 0].astype(np.int32)
        elif node.op == "qnn.requantize_fixed":
            requant = (node.attrs["multiplier"], node.attrs["shift"])
        elif node.op == "qnn.requantize_q31":
            per_channel = node.attrs
        elif node.op == "qnn.requantize_residual_q31":
            per_channel = {**node.attrs, "rounding": "single"}
            clip = (int(node.attrs["lo"]), int(node.attrs["hi"]))
            residual = node
        elif node.op == "relu":
            relu = True
        elif node.op == "clip":  # a bound ONNX's Clip leaves out: its int8's
            limits = np.iinfo(infer_types(node).dtype)  # type: ignore[union-attr]
            clip = (limits.min if node.attrs["a_min"] is None else int(node.attrs["a_min"]),
                    limits.max if node.attrs["a_max"] is None else int(node.attrs["a_max"]))
    if per_channel is None:
        epilogue = Epilogue(bias=bias is not None, requant=requant, relu=bool(relu),
                            clip=clip)
    else:
        if relu and per_channel["zero_point"] != 0:
            raise AcceleratorLoweringError(
                f"qnn.requantize_q31 with zero_point {per_channel['zero_point']} followed "
                "by relu (max with 0, not with the zero point) has no exact epilogue")
        epilogue = Epilogue(bias=bias is not None, relu=bool(relu), clip=clip,
                            multiplier=_padded(per_channel["multiplier"], plain_w.shape[0]),
                            shift=_padded(per_channel["shift"], plain_w.shape[0]),
                            zero_point=per_channel["zero_point"],
                            rounding=per_channel.get("rounding", "double"),
                            requant_stage=requant_stage,
                            residual=None if residual is None else _padded(
                                per_channel["residual_factor"], plain_w.shape[0]))
    dummy = np.zeros((n_pad, c_pad, h, wd), np.int8)
    if conv.attrs["groups"] != 1:  # super-groups with block-diagonal kernels
        from tensorfab.compiler.tensor.grouped_conv import compile_super_groups

        op = compile_super_groups(cfg, dummy, plain_w, conv.attrs["groups"], bias,
                                  stride=(sh, sw), padding=(pt, pb, pl, pr),
                                  epilogue=epilogue, image_shapes=True)
    else:
        op = compile_conv2d(cfg, dummy, plain_w, bias, stride=(sh, sw),
                            padding=(pt, pb, pl, pr), epilogue=epilogue,
                            vthreads=model_vthreads(cfg), schedules=schedules)
    blob = np.frombuffer(op.program.to_bytes(), np.uint8).copy()
    out_shape = tuple(infer_types(chain[-1]).shape)  # type: ignore[union-attr]
    seg_shape = op.program.segment("out").shape
    if seg_shape != out_shape:
        raise AcceleratorLoweringError(f"compiled output {seg_shape} != blocked {out_shape}")
    layer = "+".join(c.op.split(".")[-1] for c in chain) + f" {kh}x{kw}/{sh}"
    if dilation != (1, 1):
        layer += f" dilation {dilation[0]}x{dilation[1]}"
    attrs = {"out_shape": out_shape, "layer": layer,
             "estimated_cycles": estimated_program_cycles(op.program)}
    if residual is None:
        return Call(ACCEL_PROGRAM, [x, Constant(blob, dev)], attrs, dev, source_names(chain))
    return Call(ACCEL_PROGRAM, [x, Constant(blob, dev), residual.args[1]],
                {**attrs, "extra_input_segment": "res"}, dev,
                source_names(chain))


def describe_nodes(chain: list[Call]) -> str:
    """Where a chain comes from, for an error: its source nodes' names (the ONNX nodes'
    :attr:`~.ir.Call.name`, as :func:`source_names` gives them to its program) and its
    operators (``nodes 'conv0', 'clip0' (qnn.conv2d_integer+...+clip on the
    accelerator)``)."""
    names = list(dict.fromkeys(c.name for c in chain if c.name))
    ops = f"{'+'.join(c.op for c in chain)} on the accelerator"
    if not names:
        return f"the chain {ops}"
    return (f"node{'s' if len(names) > 1 else ''} {', '.join(map(repr, names))} "
            f"({ops})")


@contextmanager
def naming_nodes(chain: list[Call]) -> Iterator[None]:
    """Prefix a :class:`CompileError` (an epilogue's ``clip bounds (6, 0) must satisfy
    ...``, a tile that does not fit) or :class:`AcceleratorLoweringError` raised inside
    with the chain's source nodes (:func:`describe_nodes`; the names the frontend gave
    the calls, :func:`~.ir.name_new_calls`): the tensor compiler knows no node names."""
    try:
        yield
    except (CompileError, AcceleratorLoweringError) as exc:  # (the class kept)
        raise type(exc)(f"{describe_nodes(chain)}: {exc}") from exc


def source_names(chain: list[Call]) -> str:
    """The source names of a fused chain's calls, each once, in order, joined by ``+``
    (``conv1+relu1``)."""
    return "+".join(dict.fromkeys(c.name for c in chain if c.name))


def _residual_add_from(end: Call, readers: dict[int, list[Call]]) -> list[Call] | None:
    """``[add]`` or ``[add, relu]`` when ``end`` closes a residual add on the
    accelerator (:func:`~.partitioning.residual_add_chains`)."""
    if end.op == "qnn.add_q31":
        r = readers.get(id(end), [])
        fused = len(r) == 1 and r[0].op == "relu" and r[0].virtual_device == end.virtual_device
        return None if fused else [end]
    if end.op == "relu" and isinstance(end.args[0], Call) and \
            end.args[0].op == "qnn.add_q31" and \
            end.args[0].virtual_device == end.virtual_device and \
            len(readers.get(id(end.args[0]), [])) == 1:
        return [end.args[0], end]
    return None


def _compile_residual_add(nodes: list[Call]) -> Call:
    """One ``accel.program`` for ``qnn.add_q31`` [+ ``relu``]: operand 0 to segment
    ``a``, operand 1 to ``b``
    (:func:`~tensorfab.compiler.tensor.residual_add.residual_add_program`)."""
    from tensorfab.compiler.tensor.residual_add import residual_add_program

    add = nodes[0]
    dev = add.virtual_device
    cfg = hw_config_of(dev)
    shape = tuple(infer_types(add).shape)  # type: ignore[union-attr]
    relu = len(nodes) == 2
    program = residual_add_program(cfg, shape, add.attrs, relu=relu)
    blob = np.frombuffer(program.to_bytes(), np.uint8).copy()
    return Call(ACCEL_PROGRAM, [add.args[0], Constant(blob, dev), add.args[1]],
                {"out_shape": shape, "layer": "add_q31+relu" if relu else "add_q31",
                 "input_segment": "a", "extra_input_segment": "b",
                 "estimated_cycles": estimated_program_cycles(program)}, dev,
                source_names(nodes))


def _compile_activation(node: Call, requant_stage: str = "store") -> Call:
    """One ``accel.program`` for an integer operator with a vector program
    (:data:`~.partitioning.ACCEL_ACTIVATIONS`): ``qnn.hard_swish_q31``
    (:func:`~tensorfab.compiler.tensor.hard_swish.hard_swish_program`),
    ``qnn.global_avg_pool_q31`` (:func:`~tensorfab.compiler.tensor.global_pool.
    global_avg_pool_program`), a channel-wise ``qnn.mul_q31``
    (:func:`~tensorfab.compiler.tensor.channel_scale.channel_scale_program`, the
    per-channel operand to segment ``s``) or ``qnn.concat_q31``
    (:func:`~tensorfab.compiler.tensor.concat.concat_program`, segments ``a`` and
    ``b``), an int8 ``nn.pad`` (:func:`~tensorfab.compiler.tensor.pad.pad_program`) or
    ``qnn.channel_permute`` (:func:`~tensorfab.compiler.tensor.channel_permute.
    channel_permute_program`); input segment ``x`` otherwise. ``requant_stage`` is
    where a concatenation's REQUANT runs (``"store"`` or ``"alu"``)."""
    from tensorfab.compiler.tensor.channel_permute import channel_permute_program
    from tensorfab.compiler.tensor.channel_scale import channel_scale_program
    from tensorfab.compiler.tensor.concat import concat_program
    from tensorfab.compiler.tensor.global_pool import global_avg_pool_program
    from tensorfab.compiler.tensor.hard_swish import hard_swish_program
    from tensorfab.compiler.tensor.pad import pad_program, spatial_pads

    from .partitioning import channel_scale_operands

    dev = node.virtual_device
    cfg = hw_config_of(dev)
    x = node.args[0]
    shape = tuple(infer_types(x).shape)  # type: ignore[union-attr]
    extra: list[Expr] = []
    attrs: dict[str, Any] = {"input_segment": "x"}
    if node.op == "qnn.hard_swish_q31":
        program, layer = hard_swish_program(cfg, shape, node.attrs), "hard_swish"
    elif node.op == "nn.pad":
        pads = spatial_pads(node.attrs["pads"])
        if pads is None:
            raise AcceleratorLoweringError(f"nn.pad by {node.attrs['pads']}: not spatial")
        value = int(node.attrs["value"])
        program, layer = pad_program(cfg, shape, pads, value), "pad"
    elif node.op == "qnn.channel_permute":
        program = channel_permute_program(cfg, shape, node.attrs["perm"])
        layer = "channel_permute"
    elif node.op == "qnn.concat_q31":
        b = node.args[1]
        b_shape = tuple(infer_types(b).shape)  # type: ignore[union-attr]
        program = concat_program(cfg, shape, b_shape, node.attrs,
                                 requant_stage=requant_stage)
        layer = "concat"
        extra, attrs = [b], {"input_segment": "a", "extra_input_segment": "b"}
    elif node.op == "qnn.global_avg_pool_q31":
        program, layer = global_avg_pool_program(cfg, shape, node.attrs), "global_avg_pool"
    else:
        operands = channel_scale_operands(node)
        if operands is None:
            raise AcceleratorLoweringError(f"{node.op}: not a channel-wise scale")
        x, s = operands
        shape = tuple(infer_types(x).shape)  # type: ignore[union-attr]
        mul = dict(node.attrs)
        if x is not node.args[0]:  # the scale first: its zero point is a_zero_point
            mul["a_zero_point"], mul["b_zero_point"] = (node.attrs.get("b_zero_point", 0),
                                                        node.attrs.get("a_zero_point", 0))
        program, layer = channel_scale_program(cfg, shape, mul), "mul_q31"
        extra, attrs["extra_input_segment"] = [s], "s"
    blob = np.frombuffer(program.to_bytes(), np.uint8).copy()
    out_shape = tuple(infer_types(node).shape)  # type: ignore[union-attr]
    return Call(ACCEL_PROGRAM, [x, Constant(blob, dev), *extra],
                {"out_shape": out_shape, "layer": layer, **attrs,
                 "estimated_cycles": estimated_program_cycles(program)}, dev,
                source_names([node]))


#: Layers (the ``layer`` attribute's first word) of programs that do no multiply-
#: accumulate of the model: an identity GEMM moves their operands into the accumulators.
NO_MODEL_MACS = ("add_q31", "hard_swish", "global_avg_pool", "mul_q31", "concat", "pad",
                 "channel_permute")


def is_model_mac_layer(layer: str) -> bool:
    """Whether an ``accel.program`` of this ``layer`` attribute computes MACs of the
    model (a convolution or dense layer), not a vector program (:data:`NO_MODEL_MACS`)."""
    return not str(layer).startswith(NO_MODEL_MACS)


def accel_chain_macs(planned: Function) -> list[int]:
    """The multiply-accumulates of each accelerator convolution of a planned program
    (before blocked layouts pad the channels), in the post order of the ends of their
    chains (the order of the ``accel.program`` calls that replace them: a convolution
    with a fused residual comes after the program computing the residual). A batch
    norm's scale and shift run as a convolution
    (:func:`~tensorfab.compiler.graph.channel_affine_as_conv.channel_affine_as_conv`)
    count 0: they are no multiply-accumulates of the model."""
    infer_types(planned)
    readers = call_readers(planned)
    by_end: dict[int, int] = {}
    for e in post_order(planned):
        if (isinstance(e, Call) and e.op == "qnn.conv2d_integer"
                and e.virtual_device is not None and e.virtual_device.kind == "accel"):
            w = e.args[1].checked_type.shape  # type: ignore[union-attr]
            y = e.checked_type.shape  # type: ignore[union-attr]
            macs = int(np.prod(y)) * int(w[1]) * int(w[2]) * int(w[3])
            if is_channel_affine(e):  # a batch norm's scale: no MACs of the model
                macs = 0
            by_end[id(chain_end(e, readers))] = macs
    return [by_end[id(e)] for e in post_order(planned) if id(e) in by_end]


def with_macs(fn: Function, macs: list[int]) -> Function:
    """``fn`` with each ``accel.program`` call (in post order, one per accelerator
    convolution, ``macs`` from :func:`accel_chain_macs`) given its layer's unpadded
    MACs, and each residual-add or activation program 0 (:data:`NO_MODEL_MACS`)."""
    left = iter(macs)

    def rule(e, _old):  # type: ignore[no-untyped-def]
        if isinstance(e, Call) and e.op == ACCEL_PROGRAM:
            if not is_model_mac_layer(e.attrs.get("layer", "")):
                return Call(e.op, e.args, {**e.attrs, "macs": 0}, e.virtual_device, e.name)
            m = next(left, None)
            if m is None:
                raise AcceleratorLoweringError("more accelerator programs than accelerator "
                                               "convolutions")
            return Call(e.op, e.args, {**e.attrs, "macs": m}, e.virtual_device, e.name)
        return e

    out = rewrite(fn, rule)
    if next(left, None) is not None:
        raise AcceleratorLoweringError("fewer accelerator programs than accelerator "
                                       "convolutions")
    return out


def lower_accelerator_chains(fn: Function, schedules: ScheduleSource | None = None,
                             requant_stage: str = "store") -> Function:
    """``fn`` with each complete accelerator chain replaced by an ``accel.program`` call
    running its compiled program (see the module docstring); ``schedules`` (e.g. a
    tuning log) is asked for each convolution's schedule before the tile search;
    ``requant_stage`` is where a one-pass REQUANT runs (``"store"`` or ``"alu"``): the
    convolutions' :attr:`.Epilogue.requant_stage` and the concatenations'."""
    infer_types(fn)
    readers: dict[int, list[Call]] = {}
    for e in post_order(fn):
        if isinstance(e, Call):
            for a in e.args:
                readers.setdefault(id(a), []).append(e)
    new: dict[int, Expr] = {}
    for node in post_order(fn):
        rebuilt = rebuild(node, new)
        if (isinstance(node, Call) and node.virtual_device is not None
                and node.virtual_device.kind == "accel"):
            if node.op in ACCEL_ACTIVATIONS:
                with naming_nodes([rebuilt]):  # type: ignore[list-item]
                    new[id(node)] = _compile_activation(rebuilt,  # type: ignore[arg-type]
                                                        requant_stage)
                continue
            adds = _residual_add_from(node, readers)
            if adds is not None:
                added = [new[id(c)] for c in adds[:-1]] + [rebuilt]
                with naming_nodes(added):  # type: ignore[arg-type]
                    new[id(node)] = _compile_residual_add(added)  # type: ignore[arg-type]
                continue
            chain = _chain_from(node)
            continues = any(r.virtual_device == node.virtual_device and r.args[0] is node
                            and r.op in _CHAIN_OPS
                            for r in readers.get(id(node), []))
            if (chain is not None and not continues
                    and all(len(readers.get(id(c), [])) == 1 for c in chain[:-1])):
                nodes = [new[id(c)] for c in chain[:-1]] + [rebuilt]
                with naming_nodes(nodes):  # type: ignore[arg-type]
                    rebuilt = _compile(nodes, schedules,  # type: ignore[arg-type]
                                       requant_stage)
        new[id(node)] = rebuilt
    out = new[id(fn)]
    assert isinstance(out, Function)
    infer_types(out)
    return out


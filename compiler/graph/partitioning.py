"""Partitioning onto the accelerator: annotate the int8 convolution chains it can run.

A chain starts at a ``qnn.conv2d_integer`` the accelerator takes (groups 1, zero points
0, a constant int8 weight; any padding, asymmetric included; a dilation whose
zero-inserted kernel does at most :data:`MAX_DILATED_TAPS_RATIO` times the MACs) and grows
through its single reader while that reader is an accelerator epilogue: ``add`` of a
constant per-channel bias, ``qnn.requantize`` with constant scales,
``qnn.requantize_fixed``, ``relu``, ``clip``.
:func:`annotate_accelerator` wraps each chain's last
node in ``on_device(..., accel)`` and each of the chain's computed inputs in
``on_device(..., cpu)``, and places the function's parameters and result that nothing
places on the cpu too (a model takes and returns host arrays: an int8 model input that
a chain reads, or an int8 model output that a chain computes, crosses with a copy and
a layout transform like any other border), so that
:func:`~tensorfab.compiler.graph.planning.plan_devices` puts exactly the chains on the
accelerator and copies data at their borders.

Integer operators with a vector program of their own (``qnn.hard_swish_q31``,
``qnn.global_avg_pool_q31``, squeeze-excite's channel-wise ``qnn.mul_q31``, and the
data-moving channel concatenation ``qnn.concat_q31``, permutation
``qnn.channel_permute`` and int8 ``nn.pad``, these when an accelerator operator reads
them) go to the
accelerator whenever the config can run them and their input is computed there
(:func:`activation_chains`), so that the activations around them stay in device memory.

Residual adds (``qnn.add_q31`` of two same-shape int8 activations, with the ``relu``
that is its only reader) go to the accelerator by ``residual_adds``: ``"cpu"`` (none),
``"accel"`` (all), ``"auto"`` (each where
:func:`~tensorfab.compiler.graph.residual_add_placement.residual_add_device` puts it:
the accelerator program's timing-model cycles at the config's clock against the CPU
kernel's cost model fitted to its measured times, plus the host-link transfers at
``link_bytes_per_second``; see docs/compiler.md, "Residual adds").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tensorfab.compiler.tensor.schedule import max_pad
from tensorfab.compiler.tensor.vector_program import vector_program_refusal
from tensorfab.isa import HwConfig

from .device import CPU, VirtualDevice
from .infer import infer_types
from .ir import Call, Constant, Expr, Function, Var, post_order
from .rewrite import call_readers, rebuild, single_reader_chain
from .types import GraphError

EPILOGUE = frozenset({"add", "qnn.requantize", "qnn.requantize_fixed", "qnn.requantize_q31",
                      "qnn.requantize_residual_q31", "relu", "clip"})

#: The operators of an accelerator chain in their order, each at most once (a
#: requantization of any kind counts as ``qnn.requantize``).
CHAIN_ORDER = ("qnn.conv2d_integer", "add", "qnn.requantize", "relu", "clip")


def chain_in_order(ops: Sequence[str]) -> bool:
    """Whether a chain's operators ``ops`` (convolution first) are a chain the
    accelerator runs: in :data:`CHAIN_ORDER`, each at most once, with a requantization
    (its STORE writes int8: a convolution's int32 sums without one stay on the CPU)."""
    kinds = ["qnn.requantize" if o.startswith("qnn.requantize") else o for o in ops]
    if "qnn.requantize" not in kinds or not set(kinds) <= set(CHAIN_ORDER):
        return False
    index = [CHAIN_ORDER.index(k) for k in kinds]
    return index == sorted(set(index))


#: A dilated convolution runs on the accelerator as the same convolution with zeros
#: between its kernel's taps (:func:`~.accel_lowering.dilated_kernel`) while that does at
#: most this many times its MACs (3x3 at dilation 2: 25 / 9 = 2.8); beyond, on the CPU.
MAX_DILATED_TAPS_RATIO = 3.0


def dilated_taps_ratio(conv: Call) -> float:
    """Taps of ``conv``'s kernel with zeros between its taps over its own taps."""
    kh, kw = conv.args[1].checked_type.shape[-2:]  # type: ignore[union-attr]
    dh, dw = conv.attrs["dilation"]
    return ((kh - 1) * dh + 1) * ((kw - 1) * dw + 1) / (kh * kw)


def _float_conv_reason(e: Call) -> str:
    """Why the float convolution ``e`` was not quantized: its weight's zero points
    (asymmetric weights), its element type (the quantizer's float32), or no QDQ form."""
    w = e.args[1]
    if isinstance(w, Call) and w.op == "qnn.dequantize" and isinstance(w.args[2], Constant) \
            and np.any(w.args[2].data != 0):
        return ("not quantized to int8 (a float convolution: its weight's QDQ pair has "
                "zero points, asymmetric uint8 weights or a weight quantized as an "
                "activation; the int8 path takes symmetric int8 weights, zero point 0)")
    dtype = infer_types(e).dtype  # type: ignore[union-attr]
    if dtype != "float32":
        return (f"not quantized to int8 (a {dtype} convolution: tensorfab's quantizer "
                "takes float32 ones; --quantizer ort quantizes this model)")
    return "not quantized to int8 (a float convolution)"


def accelerator_conv_refusal(e: Expr, cfg: HwConfig | None = None) -> str | None:
    """Why the accelerator (of ``cfg``, if given: then its LOAD's padding limit counts
    too) does not take the convolution ``e`` (None: it takes it).

    The reason is what ``tensorfab compile`` and ``tensorfab inspect`` show for a
    convolution left on the CPU (see :func:`cpu_convolutions`).
    """
    if not isinstance(e, Call) or e.op not in ("qnn.conv2d_integer", "nn.conv2d"):
        return "not a convolution"
    if e.op == "nn.conv2d":
        return _float_conv_reason(e)
    a = e.attrs
    if a["groups"] != 1:
        why = _grouped_refusal(e, cfg)
        if why is not None:
            return why
    if a["data_layout"] != "NCHW":
        return f"data_layout={a['data_layout']}: the accelerator takes NCHW"
    ratio = dilated_taps_ratio(e)
    if ratio > MAX_DILATED_TAPS_RATIO:
        return (f"dilation {tuple(a['dilation'])}: its kernel with zeros between the taps "
                f"would do {ratio:.1f}x the MACs (the accelerator takes up to "
                f"{MAX_DILATED_TAPS_RATIO:g}x)")
    if not (isinstance(e.args[1], Constant) and e.args[1].data.dtype == np.int8):
        return "its weight is not a constant int8 tensor"
    if e.args[0].checked_type.dtype != "int8":  # type: ignore[union-attr]
        return f"its input is {e.args[0].checked_type.dtype}, not int8"  # type: ignore[union-attr]
    if not all(isinstance(z, Constant) and not np.any(z.data) for z in e.args[2:]):
        return "a nonzero zero point: the accelerator takes symmetric int8"
    if cfg is not None and max(a["padding"]) > max_pad(cfg):
        return (f"padding {tuple(a['padding'])}: a LOAD of {cfg.name} pads at most "
                f"{max_pad(cfg)} per side")
    return None


def _grouped_refusal(e: Call, cfg: HwConfig | None) -> str | None:
    """Why a grouped convolution stays on the CPU (None: block-diagonal super-groups
    on the GEMM core take it, :mod:`tensorfab.compiler.tensor.grouped_conv`)."""
    from tensorfab.compiler.tensor.errors import CompileError
    from tensorfab.compiler.tensor.grouped_conv import super_group_plan
    from tensorfab.isa.formats import requant_supported

    g = e.attrs["groups"]
    if cfg is None:
        return f"groups={g}: no accelerator config to map its groups onto"
    if not requant_supported(cfg):
        return (f"groups={g}: grouped convolutions need REQUANT's per-channel records "
                f"({cfg.name} has none)")
    x, w = e.args[0].checked_type, e.args[1].checked_type
    if x.shape[0] != cfg.batch:  # type: ignore[union-attr]
        return f"groups={g}: the accelerator's grouped convolution takes one batch block"
    try:
        super_group_plan(cfg, x.shape[1], w.shape[0], g)  # type: ignore[union-attr]
    except CompileError as exc:
        return str(exc)
    return None


def _accelerator_conv(e: Expr, cfg: HwConfig | None = None) -> bool:
    return (isinstance(e, Call) and e.op == "qnn.conv2d_integer"
            and accelerator_conv_refusal(e, cfg) is None)


def cpu_convolutions(fn: Function, cfg: HwConfig | None = None) -> list[str]:
    """One line per convolution the CPU kernels run in ``fn``, a program after
    :func:`~.accel_lowering.lower_accelerator_chains` (whose accelerator convolutions
    are ``accel.program`` calls): the operator, its input and output shapes, kernel and
    stride, and why it is not on the accelerator."""
    infer_types(fn)
    lines = []
    for e in post_order(fn):
        if not (isinstance(e, Call) and e.op in ("qnn.conv2d_integer", "nn.conv2d")):
            continue
        why = accelerator_conv_refusal(e, cfg) or (
            "no requantization to int8 follows it" if cfg is None or cfg.vector_alu else
            f"no requantization to int8 that config {cfg.name!r}'s STOREs compute follows "
            "it (it has no vector ALU)")
        x, w = e.args[0].checked_type, e.args[1].checked_type
        kernel = "x".join(str(d) for d in w.shape[2:])  # type: ignore[union-attr]
        stride = "x".join(str(s) for s in e.attrs["strides"])
        lines.append(f"{e.op} {tuple(x.shape)} -> "  # type: ignore[union-attr]
                     f"{tuple(e.checked_type.shape)} {kernel}/{stride}: "  # type: ignore[union-attr]
                     f"{why}")
    return lines


def _epilogue_step(e: Call, prev: Expr) -> bool:
    if e.op not in EPILOGUE or e.args[0] is not prev:
        return False
    if e.op == "add":
        return isinstance(e.args[1], Constant)
    if e.op == "qnn.requantize":
        return all(isinstance(a, Constant) for a in e.args[1:])
    if e.op == "qnn.requantize_residual_q31":  # the residual: an activation of its shape
        return not isinstance(e.args[1], Constant)
    return True


def accelerator_chains(fn: Function, cfg: HwConfig | None = None) -> list[list[Call]]:
    """The chains (convolution first) that :func:`annotate_accelerator` would place (on
    the accelerator of ``cfg``, if given)."""
    infer_types(fn)
    readers = call_readers(fn)
    chains = []
    for e in post_order(fn):
        if not _accelerator_conv(e, cfg):
            continue
        follow = single_reader_chain(e, fn, readers,  # type: ignore[arg-type]
                                     lambda nxt, prev: True if _epilogue_step(nxt, prev)
                                     else None)
        chain: list[Call] = [e, *(c for c, _ in follow)]  # type: ignore[list-item]
        while chain and not chain_in_order([c.op for c in chain]):
            chain.pop()  # the longest start that is a chain; none: the CPU runs it
        if chain and (cfg is None or cfg.vector_alu or store_requant_chain(chain)):
            chains.append(chain)
    return chains


def store_requant_chain(chain: Sequence[Call]) -> bool:
    """Whether the chain's epilogue is its STOREs' REQUANT alone (one rounding,
    ``qnn.requantize_q31`` or ``qnn.requantize_residual_q31``): the only one a config
    without the vector ALU runs."""
    return any(c.op == "qnn.requantize_residual_q31" or (
        c.op == "qnn.requantize_q31" and c.attrs.get("rounding") == "single") for c in chain)


RESIDUAL_ADD_PLACEMENTS = ("cpu", "accel", "auto")


def _residual_add_chain(e: Expr, readers: dict[int, list[Call]]) -> list[Call] | None:
    """``[add]`` or ``[add, relu]`` for a ``qnn.add_q31`` the accelerator can run."""
    if not (isinstance(e, Call) and e.op == "qnn.add_q31"):
        return None
    a, b = (x.checked_type for x in e.args)
    if isinstance(e.args[0], Constant) or isinstance(e.args[1], Constant) or \
            a.shape != b.shape or len(a.shape) != 4:  # type: ignore[union-attr]
        return None
    r = readers.get(id(e), [])
    if len(r) == 1 and r[0].op == "relu":
        return [e, r[0]]
    return [e]


def residual_add_chains(fn: Function, device: VirtualDevice, residual_adds: str = "cpu",
                        link_bytes_per_second: float | None = None) -> list[list[Call]]:
    """The residual adds (each with its fused ``relu``) that :func:`annotate_accelerator`
    puts on ``device`` for the ``residual_adds`` policy (see the module docstring)."""
    if residual_adds not in RESIDUAL_ADD_PLACEMENTS:
        raise GraphError(f"residual_adds={residual_adds!r}; expected one of "
                         f"{', '.join(RESIDUAL_ADD_PLACEMENTS)}")
    if residual_adds == "cpu":
        return []
    from .layout_planning import hw_config_of
    from .residual_add_placement import estimate_residual_add, residual_add_device

    cfg = hw_config_of(device)
    if vector_program_refusal(cfg) is not None:
        return []
    infer_types(fn)
    readers = call_readers(fn)
    chains = []
    for e in post_order(fn):
        chain = _residual_add_chain(e, readers)
        if chain is None:
            continue
        if residual_adds == "auto" and residual_add_device(
                estimate_residual_add(chain[0], cfg), cfg, link_bytes_per_second) != "accel":
            continue
        chains.append(chain)
    return chains


#: Integer operators the accelerator runs as vector programs of their own
#: (:mod:`tensorfab.compiler.tensor.hard_swish`, :mod:`~tensorfab.compiler.tensor.
#: global_pool`, :mod:`~tensorfab.compiler.tensor.channel_scale`), on 4-D tensors.
ACCEL_ACTIVATIONS = frozenset({"qnn.hard_swish_q31", "qnn.global_avg_pool_q31",
                               "qnn.mul_q31", "qnn.concat_q31", "nn.pad",
                               "qnn.channel_permute"})
#: Those of :data:`ACCEL_ACTIVATIONS` with one output scale in
#: :mod:`tensorfab.compiler.tensor.vector_program`'s attributes (the concatenation
#: scales each input with a REQUANT record of its own; padding moves values).
OUTPUT_SCALE_ACTIVATIONS = ACCEL_ACTIVATIONS - {"qnn.concat_q31", "nn.pad",
                                                 "qnn.channel_permute"}


def permute_refusal(e: Call, cfg: HwConfig) -> str | None:
    """Why the ``qnn.channel_permute`` ``e`` cannot run as a program on ``cfg`` (its
    input apart), or None (:func:`~tensorfab.compiler.tensor.channel_permute.
    channel_permute_program`)."""
    from tensorfab.compiler.tensor.channel_gather import block_sources
    from tensorfab.compiler.tensor.channel_permute import permuted_channels

    shape = infer_types(e.args[0]).shape  # type: ignore[union-attr]
    if shape[0] > cfg.batch:
        return (f"int8 channel permutation of a batch of {shape[0]}: the program takes one "
                f"batch block ({cfg.batch} on config {cfg.name!r})")
    entries = sum(len(s) for s in block_sources(permuted_channels(e.attrs["perm"]),
                                                cfg.block_out))
    if entries > cfg.wgt_depth or 4 * entries + 2 > cfg.uop_depth:
        return (f"int8 channel permutation gathering {entries} blocks: more than config "
                f"{cfg.name!r}'s weight or micro-op buffer holds")
    return None


def pad_refusal(e: Call, cfg: HwConfig) -> str | None:
    """Why the ``nn.pad`` ``e`` cannot run as a program on ``cfg`` (its input apart), or
    None (:func:`~tensorfab.compiler.tensor.pad.pad_program`)."""
    from tensorfab.compiler.tensor.pad import spatial_pads

    t = infer_types(e.args[0])
    value = float(e.attrs["value"])
    if t.dtype != "int8" or len(t.shape) != 4:  # type: ignore[union-attr]
        return "no accelerator lowering for this operator (the accelerator pads int8 NCHW)"
    if e.attrs["mode"] != "constant" or spatial_pads(e.attrs["pads"]) is None:
        return (f"{e.attrs['mode']} padding of {tuple(e.attrs['pads'])}: the accelerator "
                "pads the height and width with a constant")
    if value != round(value) or not -128 <= value <= 127:
        return f"padding with {value}: the accelerator pads with an int8 value"
    if t.shape[0] > cfg.batch:  # type: ignore[union-attr]
        return (f"int8 padding of a batch of {t.shape[0]}: the program takes one batch "  # type: ignore[union-attr]
                f"block ({cfg.batch} on config {cfg.name!r})")
    return None


def concat_refusal(e: Call, cfg: HwConfig) -> str | None:
    """Why the ``qnn.concat_q31`` ``e`` cannot run as a program on ``cfg`` (its inputs
    apart), or None (:func:`~tensorfab.compiler.tensor.concat.concat_program`)."""
    from tensorfab.compiler.tensor.channel_gather import block_sources
    from tensorfab.compiler.tensor.concat import CONCAT_INPUTS, concat_channels, is_copy
    from tensorfab.isa.formats import alu_requant_supported

    a, b = (tuple(infer_types(x).shape) for x in e.args)  # type: ignore[union-attr]
    if len(a) != 4:
        return f"int8 concatenation of {len(a)}-D tensors (the program joins NCHW channels)"
    if a[0] > cfg.batch:
        return (f"int8 concatenation of a batch of {a[0]}: the program takes one batch "
                f"block ({cfg.batch} on config {cfg.name!r})")
    if not alu_requant_supported(cfg) and not all(is_copy(e.attrs, x) for x in CONCAT_INPUTS):
        return (f"int8 concatenation of inputs at other scales: config {cfg.name!r} has no "
                "REQUANT to bring them to the output's")
    channels = concat_channels({"a_channels": a[1], "b_channels": b[1]}, a, b, 1)
    entries = sum(len(s) for s in block_sources(channels, cfg.block_out))
    blocks = -(-len(channels) // cfg.block_out)
    if entries + blocks > cfg.wgt_depth or 4 * (entries + blocks) + 2 > cfg.uop_depth:
        return (f"int8 concatenation gathering {entries} blocks: more than config "
                f"{cfg.name!r}'s weight or micro-op buffer holds")
    return None


#: Those of :data:`ACCEL_ACTIVATIONS` that only move data (worth a program only when an
#: accelerator operator reads their result), each with the rule that says why its
#: program cannot run on a config (its inputs apart; None: it can).
MOVING_REFUSALS: dict[str, Callable[[Call, HwConfig], str | None]] = {
    "qnn.concat_q31": concat_refusal, "nn.pad": pad_refusal,
    "qnn.channel_permute": permute_refusal}
MOVING_ACTIVATIONS = frozenset(MOVING_REFUSALS)


def channel_scale_operands(e: Call) -> tuple[Expr, Expr] | None:
    """``(x, s)`` when ``e`` (a ``qnn.mul_q31``) multiplies an ``N×C×H×W`` activation by
    an ``N×C×1×1`` one (either order; or the same in a blocked layout), else None."""
    if len(e.args) != 2 or any(isinstance(a, Constant) for a in e.args):
        return None
    shapes = [tuple(infer_types(a).shape) for a in e.args]  # type: ignore[union-attr]
    if any(len(s) not in (4, 6) for s in shapes):
        return None
    (a, b), (sa, sb) = e.args, shapes
    for x, s, sx, ss in ((a, b, sa, sb), (b, a, sb, sa)):
        if ss == (*sx[:2], 1, 1, *sx[4:]):
            return x, s
    return None


def activation_chains(fn: Function, cfg: HwConfig, on_accel: set[int],
                      accel_members: set[int] | None = None) -> list[list[Call]]:
    """``[op]`` for each integer operator of :data:`ACCEL_ACTIVATIONS` on 4-D tensors
    whose inputs the accelerator computes (their ids in ``on_accel``, the ends of the
    other chains, or earlier such operators), when ``cfg`` has ``block_in ==
    block_out``, 8-bit inputs and 32-bit accumulators (what their programs need); a
    ``qnn.mul_q31`` only as a channel-wise scale (:func:`channel_scale_operands`), an
    operator of :data:`MOVING_REFUSALS` only where its rule has no objection. One whose
    input the CPU computes stays there: its program would move that input to the device
    and save nothing. So does an operator of
    :data:`MOVING_ACTIVATIONS` that no accelerator operator reads (an element of
    ``accel_members``, the other chains' operators, or another operator taken here): its
    result would only travel to the host, padded to whole channel blocks."""
    if vector_program_refusal(cfg) is not None:
        return []
    infer_types(fn)
    inputs_of: dict[int, tuple[Expr, ...]] = {}
    taken: list[Call] = []
    on = set(on_accel)
    for e in post_order(fn):
        if not (isinstance(e, Call) and e.op in ACCEL_ACTIVATIONS):
            continue
        if e.op == "qnn.mul_q31":
            operands = channel_scale_operands(e)
            inputs: tuple[Expr, ...] = operands[:1] if operands is not None else ()
        elif e.op in MOVING_REFUSALS:  # a concatenation reads all its inputs
            moved = tuple(e.args) if e.op == "qnn.concat_q31" else e.args[:1]
            inputs = moved if MOVING_REFUSALS[e.op](e, cfg) is None else ()
        else:
            inputs = e.args[:1] if len(e.args[0].checked_type.shape) == 4 else ()  # type: ignore[union-attr]
        if inputs and all(id(x) in on for x in inputs):
            taken.append(e)
            inputs_of[id(e)] = inputs
            on.add(id(e))
    readers, members = call_readers(fn), accel_members or set()
    while True:  # drop what no accelerator operator reads, and what read only that
        kept = {id(e) for e in taken}
        dropped = {id(e) for e in taken
                   if (e.op in MOVING_ACTIVATIONS and not any(
                       id(r) in members or id(r) in kept for r in readers[id(e)]))
                   or not all(id(x) in on_accel or id(x) in kept for x in inputs_of[id(e)])}
        if not dropped:
            return [[e] for e in taken]
        taken = [e for e in taken if id(e) not in dropped]


def annotate_accelerator(fn: Function, device: VirtualDevice,
                         default: VirtualDevice = CPU, *, residual_adds: str = "cpu",
                         link_bytes_per_second: float | None = None) -> Function:
    """``fn`` with its accelerator chains (and residual adds, by ``residual_adds``)
    annotated for ``device``, and their computed inputs, the unplaced parameters and
    the unplaced result for ``default`` (see the module docstring)."""
    from .layout_planning import hw_config_of

    chains = accelerator_chains(fn, hw_config_of(device))
    chains += residual_add_chains(fn, device, residual_adds, link_bytes_per_second)
    chains += activation_chains(fn, hw_config_of(device), {id(c[-1]) for c in chains},
                                {id(e) for c in chains for e in c})
    members = {id(e) for chain in chains for e in chain}
    ends = {id(chain[-1]) for chain in chains}
    inputs = {id(a) for chain in chains for e in chain for a in e.args
              if id(a) not in members and not isinstance(a, Var | Constant)}
    new: dict[int, Expr] = {}
    for node in post_order(fn):
        rebuilt = rebuild(node, new)
        if id(node) in ends:
            rebuilt = Call("on_device", [rebuilt], {"device": device})
        elif id(node) in inputs:
            rebuilt = Call("on_device", [rebuilt], {"device": default})
        new[id(node)] = rebuilt
    out = new[id(fn)]
    assert isinstance(out, Function)
    out = _boundaries_on(out, default)
    infer_types(out)
    return out


def _boundaries_on(fn: Function, default: VirtualDevice) -> Function:
    """``fn`` with the parameters and the result that no annotation places put on
    ``default``: a model takes and returns host arrays, so an input an accelerator chain
    reads directly (an int8 model input) is copied there with its layout transform, and
    a result an accelerator chain computes (an int8 model output) is copied back."""
    unplaced = [p for p in fn.params if p.virtual_device is None]
    if not unplaced and fn.result_device is not None:
        return fn
    new: dict[int, Expr] = {id(p): p.with_device(default) for p in unplaced}
    for node in post_order(fn.body):
        if id(node) not in new:
            new[id(node)] = rebuild(node, new)
    params = [new.get(id(p), p) for p in fn.params]
    return Function(params, new[id(fn.body)], fn.ret_type, fn.result_device or default,
                    fn.virtual_device)

"""ONNX to graph IR: :func:`from_onnx`.

The model is checked with ``onnx.checker``, converted to opset 13 by
``onnx.version_converter`` when older than opset 11, shape-inferred by
``onnx.shape_inference`` (strict), then converted node by node with the converters of
:mod:`.onnx_ops`. Sub-graphs whose inputs are all constant (the ``Shape → Gather →
Concat → Reshape`` chains of exported models) are evaluated at import with the runtime's
CPU kernels, except quantization ops, which stay as they are for the quantized flow.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference, version_converter

from tensorfab.compiler.graph.infer import infer_types
from tensorfab.compiler.graph.ir import Call, Constant, Expr, Function, Tuple, Var, name_new_calls
from tensorfab.compiler.graph.types import GraphError, TensorType
from tensorfab.isa import TensorfabError
from tensorfab.runtime.kernels import KERNELS

from .onnx_ops import CONVERTERS, Converted, NodeContext, OnnxImportError, onnx_dtype

#: Opsets of the default ONNX domain converted natively.
MIN_OPSET, MAX_OPSET = 11, 28
#: Older models are converted to this opset first.
CONVERT_TO_OPSET = 13


def _load(model: onnx.ModelProto | str | os.PathLike) -> tuple[onnx.ModelProto, str]:
    if isinstance(model, onnx.ModelProto):
        return model, "<model>"
    where = str(model)
    try:
        proto = onnx.load(where, load_external_data=False)
    except FileNotFoundError:
        raise OnnxImportError(f"{where}: no such file") from None
    except Exception as e:  # onnx raises protobuf DecodeError and others
        raise OnnxImportError(f"{where}: not an ONNX model, or a damaged one (it does not "
                              f"parse: {e})") from None
    if not proto.ir_version and not proto.HasField("graph"):  # parsed from nothing
        what = ("the file is empty (0 bytes)" if os.path.getsize(where) == 0
                else "it holds no ir_version and no graph")
        raise OnnxImportError(f"{where}: not an ONNX model: {what}")
    _load_external_data(proto, where)
    return proto, where


def _load_external_data(proto: onnx.ModelProto, where: str) -> None:
    """Read the initializers kept in external data files (next to the model); a missing
    or short file is an error naming the tensor and the file."""
    from onnx.external_data_helper import (
        ExternalDataInfo,
        load_external_data_for_model,
        uses_external_data,
    )

    folder = os.path.dirname(os.path.abspath(where))
    external = [t for t in proto.graph.initializer if uses_external_data(t)]
    for t in external:
        location = ExternalDataInfo(t).location
        if not os.path.isfile(os.path.join(folder, location)):
            raise OnnxImportError(
                f"{where}: initializer {t.name!r} keeps its data in the external file "
                f"{location!r}, which is missing (looked in {folder}); keep the data "
                "files next to the .onnx file")
    if external:
        try:
            load_external_data_for_model(proto, folder)
        except Exception as e:  # a short or unreadable data file
            raise OnnxImportError(f"{where}: cannot read its external data: {e}") from None


def default_opset(model: onnx.ModelProto, where: str = "<model>") -> int:
    """Opset version of the default (``ai.onnx``) domain; a model without one is an
    error naming the file, the domains it imports and its first node of another domain."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    domains = ", ".join(f"{e.domain} {e.version}" for e in model.opset_import) or "none"
    other = next((n for n in model.graph.node if n.domain not in ("", "ai.onnx")), None)
    node = (f"; its node {other.name or other.op_type!r} (op_type {other.op_type}, domain "
            f"{other.domain!r}) is not supported" if other is not None else "")
    raise OnnxImportError(f"{where}: the model imports no opset of the default ONNX "
                          f"domain (it imports: {domains}){node}; only ai.onnx ops are "
                          "supported")


def prepare_model(model: onnx.ModelProto | str | os.PathLike) -> tuple[onnx.ModelProto, str]:
    """Load, check, convert an old opset and infer shapes; errors name the file."""
    prepared = _prepare(model)
    return prepared.proto, prepared.where


def _converted_nodes(old: onnx.ModelProto, new: onnx.ModelProto, opset: int) -> dict[str, str]:
    """For each node of the converted model ``new`` that the version converter made of
    another op_type or left without the original's name: its first output to the
    original node (``"Upsample 'up0'"``), found by the outputs they share."""
    originals = {}
    for index, node in enumerate(old.graph.node):
        for out in node.output:
            originals.setdefault(out, (node, node.name or f"#{index}"))
    converted = {}
    for node in new.graph.node:
        found = next((originals[o] for o in node.output if o in originals), None)
        if found is not None and (found[0].op_type != node.op_type
                                  or found[0].name != node.name):
            converted[node.output[0]] = f"{found[0].op_type} {found[1]!r} of opset {opset}"
    return converted


def _prepare(model: onnx.ModelProto | str | os.PathLike) -> PreparedOnnx:
    proto, where = _load(model)
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        raise OnnxImportError(f"{where}: the onnx checker rejects the model: {e}") from None
    if not proto.graph.output:  # the checker lets it through; nothing would be computed
        raise OnnxImportError(f"{where}: the graph has no outputs; a model computes at "
                              "least one (list it in graph.output)")
    opset = default_opset(proto, where)
    converted_from, converted = None, {}
    if opset < MIN_OPSET:
        try:
            old, proto = proto, version_converter.convert_version(proto, CONVERT_TO_OPSET)
        except Exception as e:
            raise OnnxImportError(f"{where}: opset {opset} could not be converted to "
                                  f"{CONVERT_TO_OPSET}: {e}") from None
        converted_from, converted = opset, _converted_nodes(old, proto, opset)
    elif opset > MAX_OPSET:
        raise OnnxImportError(f"{where}: opset {opset} is newer than the supported "
                              f"{MIN_OPSET}..{MAX_OPSET}")
    try:
        proto = shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    except Exception as e:
        raise OnnxImportError(f"{where}: onnx shape inference fails: {e}") from None
    return PreparedOnnx(proto, where, converted_from, converted)


@dataclass(frozen=True)
class PreparedOnnx:
    """An ONNX model loaded, checked, converted to a supported opset and shape-inferred
    once (:func:`load_onnx`): the importer and the compiler take it without doing any
    of that again.

    Attributes
    ----------
    proto : onnx.ModelProto
        The prepared model.
    where : str
        Its file (``<model>`` for an in-memory model), for error messages.
    converted_from : int or None
        The model's own opset when it was converted (an opset before ``MIN_OPSET``).
    converted : mapping
        For nodes the conversion replaced or renamed, their first output to the model's
        node (op_type and name), which error messages name too.
    """

    proto: onnx.ModelProto
    where: str
    converted_from: int | None = None
    converted: Mapping[str, str] = field(default_factory=dict)


def load_onnx(model: onnx.ModelProto | str | os.PathLike | PreparedOnnx) -> PreparedOnnx:
    """``model`` prepared (:func:`prepare_model`), or as it is when it already is.

    Raises
    ------
    OnnxImportError
        As :func:`prepare_model`.
    """
    if isinstance(model, PreparedOnnx):
        return model
    return _prepare(model)


def _input_type(value: onnx.ValueInfoProto, override: Sequence | None) -> TensorType:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        what = {"sequence_type": "a sequence", "optional_type": "an optional",
                "map_type": "a map", "sparse_tensor_type": "a sparse tensor"}.get(
                    kind or "", "of no declared type")
        raise OnnxImportError(f"input {value.name!r} is {what}; only tensor inputs are "
                              "supported")
    t = value.type.tensor_type
    dtype = onnx_dtype(t.elem_type, f"input {value.name!r}")
    if override is not None:
        return TensorType(tuple(override), dtype)
    dims: list[int | str] = []
    for i, d in enumerate(t.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.dim_param:
            dims.append(_symbol(d.dim_param))
        else:
            dims.append(_symbol(f"{value.name}_d{i}"))
    return TensorType(tuple(dims), dtype)


def symbolic_inputs(model: PreparedOnnx, input_shapes: dict[str, Sequence[int | str]]
                    | None = None) -> list[tuple[str, tuple[int | str, ...]]]:
    """``(name, shape)`` of each graph input of ``model`` with a symbolic dim that
    ``input_shapes`` does not fix (a ``dim_param``, no dim, or a negative ``dim_value``);
    inputs that are not tensors, or of an element type the importer refuses, are left to
    :func:`from_onnx` to name (with the model's file and the node reading them), so this
    raises no error of its own."""
    fixed = input_shapes or {}
    graph = model.proto.graph
    inits = {i.name for i in graph.initializer}
    out = []
    for value in graph.input:
        if value.name in inits or value.name in fixed or \
                value.type.WhichOneof("value") != "tensor_type":
            continue
        try:
            shape = _input_type(value, None).shape
        except GraphError:  # e.g. element type BFLOAT16: from_onnx's error, with the file
            continue
        if any(isinstance(d, str) for d in shape):
            out.append((value.name, tuple(shape)))
    return out


def _symbol(name: str) -> str:
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return text if text and (text[0].isalpha() or text[0] == "_") else "s_" + text


def from_onnx(model: onnx.ModelProto | str | os.PathLike | PreparedOnnx,
              input_shapes: Mapping[str, Sequence[int | str]] | None = None) -> Function:
    """Import an ONNX model as a graph-IR :class:`Function`.

    Parameters
    ----------
    model : onnx.ModelProto, path or PreparedOnnx
        The model, its file, or the model prepared once (:func:`load_onnx`).
    input_shapes : mapping, optional
        Shapes (ints or symbol names) replacing the declared shapes of named inputs,
        e.g. to fix a symbolic batch.

    Returns
    -------
    Function
        One parameter per graph input that is not an initializer, in order; the result
        is the graph's output, or a tuple of its outputs.

    Raises
    ------
    OnnxImportError
        A malformed model (the checker's message and the file), an unsupported opset or
        operator (naming the node, its op_type and opset, and the supported ops), or a
        node whose types do not check.
    """
    prepared = load_onnx(model)
    return _Importer(prepared.proto, prepared.where, dict(input_shapes or {}),
                     prepared).run()


class _Importer:
    def __init__(self, proto: onnx.ModelProto, where: str,
                 input_shapes: dict[str, Sequence[int | str]],
                 prepared: PreparedOnnx | None = None) -> None:
        self.proto = proto
        self.where = where
        self.input_shapes = input_shapes
        self.opset = default_opset(proto)
        self.converted_from = prepared.converted_from if prepared is not None else None
        self.converted = prepared.converted if prepared is not None else {}
        self.folded: dict[int, tuple[Expr, Expr]] = {}
        self.value_infos: dict[str, onnx.ValueInfoProto] | None = None
        #: integer tensors computed at run time whose values are known at import (symbolic
        #: dims): value name to (entries, whether it is a scalar)
        self.known: dict[str, tuple[tuple[int | str, ...], bool]] = {}

    def run(self) -> Function:
        graph = self.proto.graph
        env: dict[str, Expr] = {}
        for init in graph.initializer:
            env[init.name] = Constant(numpy_helper.to_array(init))
        params = []
        names = [v.name for v in graph.input if v.name not in env]
        unknown = set(self.input_shapes) - set(names)
        if unknown:
            raise OnnxImportError(f"{self.where}: input_shapes names {sorted(unknown)}, the "
                                  f"model's inputs are {names}")
        for value in graph.input:
            if value.name in env:
                continue
            try:
                t = _input_type(value, self.input_shapes.get(value.name))
            except GraphError as e:  # names the input
                raise OnnxImportError(f"{self.where}: {e}{self.consumer(value.name)}") from None
            var = Var(value.name, t)
            params.append(var)
            env[value.name] = var
        for index, node in enumerate(graph.node):
            self.convert_node(index, node, env)
        outputs = []
        for out in graph.output:
            if out.name not in env:
                raise OnnxImportError(f"{self.where}: graph output {out.name!r} is never "
                                      "computed")
            outputs.append(env[out.name])
        body = outputs[0] if len(outputs) == 1 else Tuple(outputs)
        fn = Function(params, body)
        infer_types(fn)
        return fn

    def inferred_shape(self, name: str) -> tuple[int | str, ...] | None:
        """ONNX shape inference's shape of value ``name``: dims it could not infer as
        symbols named after the value; None when the rank is unknown."""
        if self.value_infos is None:
            graph = self.proto.graph
            self.value_infos = {v.name: v for v in [*graph.value_info, *graph.output]}
        value = self.value_infos.get(name)
        if value is None or not value.type.tensor_type.HasField("shape"):
            return None
        dims: list[int | str] = []
        for i, d in enumerate(value.type.tensor_type.shape.dim):
            # some exporters (Paddle's) write -1 for a dynamic dim: a symbol too
            dims.append(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0
                        else _symbol(d.dim_param or f"{name}_d{i}"))
        return tuple(dims)

    def consumer(self, name: str) -> str:
        """``" (the input of node ... (op_type ..., opset ...))"`` for the first node
        reading value ``name``, or ``""``."""
        for index, node in enumerate(self.proto.graph.node):
            if name in node.input:
                name_text = node.name or f"#{index}"
                return (f" (an input of node {name_text!r}, op_type {node.op_type}, opset "
                        f"{self.opset})")
        return ""

    def describe(self, index: int, node: onnx.NodeProto) -> str:
        name = node.name or f"#{index}"
        opset = f"opset {self.opset}"
        if self.converted_from is not None:  # the user's model has other opsets and nodes
            origin = next((self.converted[o] for o in node.output if o in self.converted),
                          None)
            opset += (f", converted from the model's {origin}" if origin is not None else
                      f", converted from the model's opset {self.converted_from}")
        return f"{self.where}: node {name!r} (op_type {node.op_type}, {opset})"

    def convert_node(self, index: int, node: onnx.NodeProto, env: dict[str, Expr]) -> None:
        what = self.describe(index, node)
        converter = CONVERTERS.get(node.op_type)
        if node.domain not in ("", "ai.onnx") or converter is None:
            domain = f" in domain {node.domain!r}" if node.domain else ""
            raise OnnxImportError(f"{what}{domain} is not supported; supported op_types: "
                                  f"{', '.join(sorted(CONVERTERS))}")
        inputs: list[Expr | None] = []
        for name in node.input:
            if not name:
                inputs.append(None)
            elif name not in env:
                raise OnnxImportError(f"{what}: input {name!r} is not defined before it")
            else:
                inputs.append(env[name])
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        values = [self.known_value(name, env) for name in node.input]
        ctx = NodeContext(node, self.opset, attrs, what,
                          [self.inferred_shape(name) for name in node.output],
                          [None if v is None or v[1] else v[0] for v in values])
        self.track_known(node, attrs, env, values)
        try:
            for i in inputs:
                if i is not None:
                    infer_types(i)
            outs: Converted = converter(ctx, inputs)
            outs = [self.fold(o) if o is not None else None for o in outs]
            name_new_calls([o for o in outs if o is not None],
                           node.name or next((n for n in node.output if n), ""), set())
            for o in outs:
                if o is not None:
                    infer_types(o)
        except OnnxImportError:
            raise
        except TensorfabError as e:
            raise OnnxImportError(f"{what}: {e}") from None
        for k, name in enumerate(node.output):
            if not name:
                continue
            if k >= len(outs) or outs[k] is None:
                raise OnnxImportError(f"{what}: output {k} ({name!r}) is not supported")
            env[name] = outs[k]

    def known_value(self, name: str, env: dict[str, Expr]
                    ) -> tuple[tuple[int | str, ...], bool] | None:
        """(entries, scalar) of integer value ``name`` when known at import: a constant
        of rank 0 or 1, or a shape computed from symbolic dims (:meth:`track_known`)."""
        if name in self.known:
            return self.known[name]
        e = env.get(name)
        if isinstance(e, Constant) and e.data.dtype.kind in "iu" and e.data.ndim <= 1:
            return tuple(int(v) for v in e.data.reshape(-1)), e.data.ndim == 0
        return None

    def track_known(self, node: onnx.NodeProto, attrs: dict[str, Any], env: dict[str, Expr],
                    values: list[tuple[tuple[int | str, ...], bool] | None]) -> None:
        """Record the value of ``node``'s output when it is a shape made of symbolic dims
        known at import: Shape, and Gather, Unsqueeze, Squeeze, Concat, Slice, Cast or
        Identity of such values (the ``x.view(x.size(0), -1)`` of PyTorch's exports)."""
        op, out = node.op_type, node.output[0] if node.output else ""
        if not out or not values:
            return
        found: tuple[tuple[int | str, ...], bool] | None = None
        if op == "Shape" and node.input[0] in env:
            t = infer_types(env[node.input[0]])
            if isinstance(t, TensorType):
                start, end = attrs.get("start", 0), attrs.get("end")
                found = tuple(t.shape[slice(start, end)]), False
        elif values[0] is None:
            return
        elif op in ("Identity", "Cast"):
            found = values[0]
        elif op == "Gather" and attrs.get("axis", 0) == 0 and len(values) > 1 \
                and values[1] is not None and not values[0][1]:
            entries = values[0][0]
            try:
                found = tuple(entries[i] for i in values[1][0]), values[1][1]
            except IndexError:
                return
        elif op == "Unsqueeze" and values[0][1]:
            found = values[0][0], False
        elif op == "Squeeze" and len(values[0][0]) == 1 and not values[0][1]:
            found = values[0][0], True
        elif op == "Concat" and all(v is not None for v in values):
            found = tuple(d for v in values for d in v[0]), False  # type: ignore[union-attr]
        elif op == "Slice" and len(values) >= 3 and not values[0][1] \
                and all(v is not None for v in values[1:]):
            starts, ends = values[1][0], values[2][0]  # type: ignore[index]
            axes = values[3][0] if len(values) > 3 else (0,)  # type: ignore[index]
            steps = values[4][0] if len(values) > 4 else (1,)  # type: ignore[index]
            if len(starts) == 1 and tuple(axes) in ((0,), (-1,)):
                entries = values[0][0]
                found = tuple(entries[slice(starts[0], ends[0], steps[0])]), False
        if found is not None and any(isinstance(d, str) for d in found[0]):
            self.known[out] = found

    def fold(self, expr: Expr) -> Expr:
        """Evaluate calls whose arguments are all constants (not quantization ops, whose
        structure the quantized flow needs, nor tuple-valued ones)."""
        # the memo keeps each original node alive, so that its id is not reused
        memo = self.folded
        stack = [expr]
        while stack:
            e = stack[-1]
            if id(e) in memo or not isinstance(e, Call):
                memo.setdefault(id(e), (e, e))
                stack.pop()
                continue
            pending = [a for a in e.args if id(a) not in memo]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            args = [memo[id(a)][1] for a in e.args]
            if (all(isinstance(a, Constant) for a in args) and not e.op.startswith("qnn.")
                    and e.op in KERNELS and e.op != "split"):
                value = KERNELS[e.op]([a.data for a in args], dict(e.attrs))
                memo[id(e)] = (e, Constant(np.asarray(value)))
            elif any(a is not b for a, b in zip(args, e.args, strict=True)):
                memo[id(e)] = (e, Call(e.op, args, e.attrs, name=e.name))
            else:
                memo[id(e)] = (e, e)
        return memo[id(expr)][1]

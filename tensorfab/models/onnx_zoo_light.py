"""The ONNX model zoo's classic CNNs at full size, as the ``onnx`` wheel ships them
(``onnx/backend/test/data/light/light_NAME.onnx``), with seeded random weights.

The wheel's "light" models keep the zoo's graphs (opset 9, old-IR style: initializers
listed among the graph inputs) but replace every weight by a ``ConstantOfShape`` node
of one value. :func:`load_light_model` puts seeded weights of the same shapes in their
place, as initializers:

* convolution and fully connected weights He-normal (``N(0, 2 / fan_in)``), biases
  ``N(0, 0.05)``;
* batch norms: scale ``U(0.5, 1.5)`` and shift ``N(0, 0.2)``, and the running mean and
  variance *measured*: one onnxruntime pass over a seeded image in which every batch norm
  normalizes by its input's batch statistics, so each batch norm sees the statistics of
  the activations that reach it and activations neither vanish nor explode;
* the per-channel scale and shift of Caffe's ``Scale`` layer (``Unsqueeze`` then ``Mul``
  or ``Add``): ``U(0.5, 1.5)`` and ``N(0, 0.2)``.

Nothing is copied into the repository: the files are read from the installed ``onnx``
package (``importlib.resources``).
"""

from __future__ import annotations

import importlib.resources
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tensorfab.isa.errors import TensorfabError

__all__ = ["LIGHT_MODELS", "LightModel", "LightModelError", "light_model_path",
           "load_light_model"]

#: The zoo models the ``onnx`` wheel ships, by the name in ``light_NAME.onnx``.
LIGHT_MODELS: tuple[str, ...] = (
    "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
    "shufflenet", "squeezenet", "vgg19", "zfnet512")

#: Models whose graph fixes no spatial size (no flattening reshape, no 7×7 pooling
#: of the last feature map): they take any input size of at least ``min`` pixels.
_ANY_SIZE: dict[str, int] = {"squeezenet": 32}

_FULL_SIZE = 224


class LightModelError(TensorfabError):
    """A light zoo model that is not there or cannot be built as asked."""


@dataclass(frozen=True)
class LightModel:
    """One light zoo model with seeded weights.

    Attributes
    ----------
    name : str
        Its name in :data:`LIGHT_MODELS`.
    model : onnx.ModelProto
        The model: opset 9 as shipped, the weights as initializers (also listed among
        the graph inputs, as the original lists its initializers).
    input_name : str
        The image input's name.
    input_shape : tuple of int
        Its shape, ``(1, 3, size, size)``.
    """

    name: str
    model: onnx.ModelProto
    input_name: str
    input_shape: tuple[int, ...]


def light_model_path(name: str) -> str:
    """The path of ``light_NAME.onnx`` in the installed ``onnx`` package.

    Raises
    ------
    LightModelError
        An unknown name, or an ``onnx`` package without the file.
    """
    if name not in LIGHT_MODELS:
        raise LightModelError(f"unknown light zoo model {name!r}; known: "
                              f"{', '.join(LIGHT_MODELS)}")
    path = (importlib.resources.files("onnx") / "backend" / "test" / "data" / "light"
            / f"light_{name}.onnx")
    if not path.is_file():
        raise LightModelError(f"light zoo model {name!r}: {path} is not in the installed "
                              f"onnx package (onnx {onnx.__version__})")
    return str(path)


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    out: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in graph.node:
        for k, name in enumerate(node.input):
            out[name].append((node, k))
    return out


def _attr(node: onnx.NodeProto, name: str, default: int = 0) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(helper.get_attribute_value(a))
    return default


def _weight(name: str, shape: tuple[int, ...], uses: list[tuple[onnx.NodeProto, int]],
            rng: np.random.Generator, model: str, scales: set[str]) -> np.ndarray:
    """A seeded tensor for the weight ``name`` by what reads it."""
    if len(uses) != 1:
        raise LightModelError(f"light zoo model {model!r}: weight {name!r} is read by "
                              f"{len(uses)} nodes, expected one")
    node, k = uses[0]
    op = node.op_type
    if (op == "Conv" and k == 1) or (op == "Reshape" and k == 0):  # (a reshaped FC)
        fan_in = int(np.prod(shape[1:]))
        return rng.standard_normal(shape, np.float32) * np.float32(np.sqrt(2.0 / fan_in))
    if op == "Gemm" and k == 1:
        fan_in = shape[1] if _attr(node, "transB") else shape[0]
        return rng.standard_normal(shape, np.float32) * np.float32(np.sqrt(2.0 / fan_in))
    if op in ("Conv", "Gemm") and k == 2:
        return rng.normal(0, 0.05, shape)
    if op == "BatchNormalization":  # scale, shift, mean, var (the last two measured)
        return (rng.uniform(0.5, 1.5, shape) if k == 1 else rng.normal(0, 0.2, shape)
                if k == 2 else np.zeros(shape) if k == 3 else np.ones(shape))
    if op == "Unsqueeze":  # Caffe's Scale layer: Unsqueeze, then Mul or Add
        return (rng.uniform(0.5, 1.5, shape) if node.output[0] in scales
                else rng.normal(0, 0.2, shape))
    raise LightModelError(f"light zoo model {model!r}: no seeded weight for {name!r}, "
                          f"input {k} of {op} node {node.name or node.output[0]!r}")


def _is_weight(tensor: np.ndarray, name: str, consumers: dict) -> bool:
    return tensor.dtype.kind == "f" and bool(consumers.get(name))


def _measure_batch_norms(model: onnx.ModelProto, input_name: str,
                         images: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each batch norm's input mean and variance per channel over ``images``, with every
    batch norm before it normalizing by its own batch statistics (one onnxruntime run)."""
    import onnxruntime as ort

    graph = onnx.GraphProto()
    graph.CopyFrom(model.graph)
    inits = {t.name: t for t in graph.initializer}
    nodes: list[onnx.NodeProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    stats: dict[str, tuple[str, str]] = {}
    for node in graph.node:
        if node.op_type != "BatchNormalization":
            nodes.append(node)
            continue
        x, scale, shift = node.input[0], node.input[1], node.input[2]
        p = f"{node.output[0]}__bn"
        eps = helper.get_attribute_value(next(
            (a for a in node.attribute if a.name == "epsilon"),
            helper.make_attribute("epsilon", 1e-5)))
        for src, dst in ((scale, f"{p}.s"), (shift, f"{p}.b")):
            arr = numpy_helper.to_array(inits[src]).reshape(-1, 1, 1)
            graph.initializer.append(numpy_helper.from_array(arr.astype(np.float32), dst))
        graph.initializer.append(numpy_helper.from_array(np.array(eps, np.float32),
                                                         f"{p}.eps"))
        nodes += [
            helper.make_node("ReduceMean", [x], [f"{p}.mean"], axes=[0, 2, 3]),
            helper.make_node("Sub", [x, f"{p}.mean"], [f"{p}.d"]),
            helper.make_node("Mul", [f"{p}.d", f"{p}.d"], [f"{p}.d2"]),
            helper.make_node("ReduceMean", [f"{p}.d2"], [f"{p}.var"], axes=[0, 2, 3]),
            helper.make_node("Add", [f"{p}.var", f"{p}.eps"], [f"{p}.ve"]),
            helper.make_node("Sqrt", [f"{p}.ve"], [f"{p}.sd"]),
            helper.make_node("Div", [f"{p}.d", f"{p}.sd"], [f"{p}.n"]),
            helper.make_node("Mul", [f"{p}.n", f"{p}.s"], [f"{p}.ns"]),
            helper.make_node("Add", [f"{p}.ns", f"{p}.b"], [node.output[0]]),
        ]
        stats[node.output[0]] = (f"{p}.mean", f"{p}.var")
        outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                    for n in (f"{p}.mean", f"{p}.var")]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.output[:]
    graph.output.extend(outputs)
    aux = helper.make_model(graph, opset_imports=list(model.opset_import))
    aux.ir_version = model.ir_version
    options = ort.SessionOptions()
    options.log_severity_level = 3  # the replaced batch norms' inputs are unused
    session = ort.InferenceSession(aux.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    values = session.run([o.name for o in outputs], {input_name: images})
    got = dict(zip((o.name for o in outputs), values, strict=True))
    return {bn: (got[m].ravel(), got[v].ravel()) for bn, (m, v) in stats.items()}


def load_light_model(name: str, seed: int = 0, size: int = _FULL_SIZE) -> LightModel:
    """The light zoo model ``name`` with seeded weights (see the module docstring).

    Parameters
    ----------
    name : str
        One of :data:`LIGHT_MODELS`.
    seed : int
        Seeds the weights and the image the batch-norm statistics are measured on.
    size : int
        The input's height and width: 224 as the zoo's models take; a smaller size only
        for a model whose graph fixes none (``squeezenet``).

    Raises
    ------
    LightModelError
        An unknown or missing model, a size the model's graph does not allow, a weight
        of a kind this loader does not know.
    """
    path = light_model_path(name)
    if size != _FULL_SIZE and (name not in _ANY_SIZE or size < _ANY_SIZE[name]):
        allowed = (f"224 or at least {_ANY_SIZE[name]}" if name in _ANY_SIZE else
                   "only 224: its graph fixes the spatial size (a flattening reshape or "
                   "a 7×7 pooling of the last feature map)")
        raise LightModelError(f"light zoo model {name!r}: input size {size} is not "
                              f"supported; it takes {allowed}")
    src = onnx.load(path)
    graph = src.graph
    rng = np.random.default_rng(seed)
    consumers = _consumers(graph)
    scales = {n.output[0] for n in graph.node if n.op_type == "Unsqueeze"  # Scale layers
              and [c.op_type for c, _ in consumers.get(n.output[0], [])] == ["Mul"]}
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    weights: dict[str, np.ndarray] = {}
    kept_nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape":
            shape = tuple(int(d) for d in inits[node.input[0]])
            out = node.output[0]
            weights[out] = _weight(out, shape, consumers[out], rng, name, scales)
        else:
            kept_nodes.append(node)
    for tname, arr in inits.items():
        if _is_weight(arr, tname, consumers) and tname not in weights:
            weights[tname] = _weight(tname, arr.shape, consumers[tname], rng, name,
                                     scales)
    shapes_kept = {t: a for t, a in inits.items()
                   if not _is_weight(a, t, consumers) and consumers.get(t)
                   and not all(n.op_type == "ConstantOfShape" for n, _ in consumers[t])}
    image = next(i for i in graph.input if i.name not in inits)
    input_shape = (1, 3, size, size)
    new_inits = [numpy_helper.from_array(np.asarray(a, np.float32), n)
                 for n, a in weights.items()]
    new_inits += [numpy_helper.from_array(a, n) for n, a in shapes_kept.items()]
    inputs = [helper.make_tensor_value_info(image.name, TensorProto.FLOAT, input_shape)]
    inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
               for t in new_inits]  # old-IR style, as the zoo's files list them
    outputs = [helper.make_tensor_value_info(o.name, TensorProto.FLOAT, None)
               for o in graph.output]
    new_graph = helper.make_graph(kept_nodes, graph.name or name, inputs, outputs,
                                  new_inits)
    model = helper.make_model(new_graph, opset_imports=list(src.opset_import),
                              producer_name=src.producer_name)
    model.ir_version = src.ir_version
    bn = [n for n in kept_nodes if n.op_type == "BatchNormalization"]
    if bn:
        image_data = np.random.default_rng(seed + 1).normal(  # batch 1: some reshapes
            0, 1, input_shape).astype(np.float32)             # fix the batch size
        measured = _measure_batch_norms(model, image.name, image_data)
        by_name = {t.name: t for t in model.graph.initializer}
        for node in bn:
            mean, var = measured[node.output[0]]
            by_name[node.input[3]].CopyFrom(numpy_helper.from_array(
                mean.astype(np.float32), node.input[3]))
            by_name[node.input[4]].CopyFrom(numpy_helper.from_array(
                var.astype(np.float32), node.input[4]))
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    onnx.checker.check_model(model)
    return LightModel(name, model, image.name, input_shape)

"""Small seeded versions of standard CNN topologies as ONNX graphs (onnx.helper), for
checking what the compiler puts on the accelerator: AlexNet's ``groups=2``
convolutions, ShuffleNet's grouped 1×1 convolutions with a channel shuffle and
depthwise 3×3, DenseNet's concatenation followed by a batch norm that cannot fold
into a convolution, and MobileNetV3's hard-swish (spelled out as exporters write it)
and squeeze-excite with hard-sigmoid.

Each builder returns a float model with one input ``x`` (NCHW) and one output ``y``;
the weights come from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["TOPOLOGIES", "alexnet_groups", "densenet_block", "mobilenet_v3_block",
           "shufflenet_unit"]


class _Graph:
    """Nodes and initializers of one graph under construction."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv(self, x: str, name: str, cin: int, cout: int, k: int, *, stride: int = 1,
             groups: int = 1, relu: bool = True) -> str:
        fan_in = cin // groups * k * k
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // groups, k, k))
        b = self.rng.normal(0, 0.05, cout)
        y = self.node("Conv", [x, self.const(f"{name}.w", w.astype(np.float32)),
                               self.const(f"{name}.b", b.astype(np.float32))], name,
                      kernel_shape=[k, k], strides=[stride, stride], group=groups,
                      pads=[k // 2] * 4)
        return self.node("Relu", [y], f"{name}.relu") if relu else y

    def batch_norm(self, x: str, name: str, channels: int) -> str:
        r = self.rng
        params = [r.uniform(0.5, 1.5, channels), r.normal(0, 0.1, channels),
                  r.normal(0, 0.1, channels), r.uniform(0.5, 1.5, channels)]
        names = [self.const(f"{name}.{p}", v.astype(np.float32))
                 for p, v in zip(("scale", "bias", "mean", "var"), params, strict=True)]
        return self.node("BatchNormalization", [x, *names], name)

    def hard_swish(self, x: str, name: str) -> str:
        """``x · clip(x + 3, 0, 6) / 6`` as PyTorch's and Paddle's exporters write it."""
        three, zero, six = (self.const(f"{name}.{k}", np.array(v, np.float32))
                            for k, v in (("three", 3.0), ("zero", 0.0), ("six", 6.0)))
        t = self.node("Clip", [self.node("Add", [x, three], f"{name}.add"), zero, six],
                      f"{name}.clip")
        return self.node("Div", [self.node("Mul", [x, t], f"{name}.mul"), six], name)

    def model(self, y: str, name: str, shape: tuple[int, ...],
              out_shape: tuple[int, ...]) -> onnx.ModelProto:
        out = self.node("Identity", [y], "y")
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def alexnet_groups(seed: int = 0, size: int = 32) -> onnx.ModelProto:
    """AlexNet's shape at small scale: a dense stem, then three ``groups=2``
    convolutions (its conv2, conv4, conv5), max pooling, a classifier."""
    g = _Graph(seed)
    x = g.conv("x", "conv1", 3, 32, 5, stride=2)
    x = g.node("MaxPool", [x], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv(x, "conv2", 32, 64, 5, groups=2)
    x = g.conv(x, "conv3", 64, 96, 3)
    x = g.conv(x, "conv4", 96, 96, 3, groups=2)
    x = g.conv(x, "conv5", 96, 64, 3, groups=2)
    x = g.node("GlobalAveragePool", [x], "gap")
    x = g.node("Flatten", [x], "flat")
    w = g.rng.normal(0, 0.1, (64, 10)).astype(np.float32)
    x = g.node("MatMul", [x, g.const("fc.w", w)], "fc")
    return g.model(x, "alexnet_groups", (1, 3, size, size), (1, 10))


def shufflenet_unit(seed: int = 0, size: int = 16) -> onnx.ModelProto:
    """A ShuffleNet v1 stage at small scale: a stem, then two units of grouped 1×1
    (``groups=3``), channel shuffle (reshape, transpose, reshape), depthwise 3×3,
    grouped 1×1 and a residual add."""
    g = _Graph(seed)
    c, groups = 48, 3
    x = g.conv("x", "stem", 3, c, 3)
    for u in range(2):
        y = g.conv(x, f"u{u}.g1", c, c, 1, groups=groups)
        y = g.node("Reshape", [y, g.const(f"u{u}.s1", np.array([1, groups, c // groups,
                                                                 size, size], np.int64))],
                   f"u{u}.split")
        y = g.node("Transpose", [y], f"u{u}.shuffle", perm=[0, 2, 1, 3, 4])
        y = g.node("Reshape", [y, g.const(f"u{u}.s2", np.array([1, c, size, size],
                                                                np.int64))], f"u{u}.merge")
        y = g.conv(y, f"u{u}.dw", c, c, 3, groups=c, relu=False)
        y = g.conv(y, f"u{u}.g2", c, c, 1, groups=groups, relu=False)
        x = g.node("Relu", [g.node("Add", [x, y], f"u{u}.add")], f"u{u}.out")
    x = g.node("GlobalAveragePool", [x], "gap")
    return g.model(g.node("Flatten", [x], "flat"), "shufflenet_unit", (1, 3, size, size),
                   (1, c))


def densenet_block(seed: int = 0, size: int = 16, growth: int = 8) -> onnx.ModelProto:
    """A DenseNet dense block at small scale: each layer is batch norm, ReLU and a
    3×3 convolution (``growth`` output channels; DenseNet-121 has 32) of the
    concatenation of all earlier outputs; the batch norm after a concatenation cannot
    fold into a convolution (its input is several)."""
    g = _Graph(seed)
    features = [g.conv("x", "stem", 3, 16, 3)]
    channels = 16
    for i in range(3):
        cat = (features[0] if len(features) == 1
               else g.node("Concat", features, f"l{i}.cat", axis=1))
        y = g.node("Relu", [g.batch_norm(cat, f"l{i}.bn", channels)], f"l{i}.relu")
        features.append(g.conv(y, f"l{i}.conv", channels, growth, 3, relu=False))
        channels += growth
    x = g.node("GlobalAveragePool", [g.node("Concat", features, "cat", axis=1)], "gap")
    return g.model(g.node("Flatten", [x], "flat"), "densenet_block", (1, 3, size, size),
                   (1, channels))


def mobilenet_v3_block(seed: int = 0, size: int = 16) -> onnx.ModelProto:
    """MobileNetV3 at small scale: a stride-2 stem with hard-swish, an inverted residual
    block (1×1 expansion, depthwise 3×3 with hard-swish, squeeze-excite: global average
    pooling, 1×1 with ReLU, 1×1 with hard-sigmoid, channel-wise multiply; 1×1
    projection, residual add), global average pooling and a classifier."""
    g = _Graph(seed)
    c, e, r = 16, 48, 12
    x = g.hard_swish(g.conv("x", "stem", 3, c, 3, stride=2, relu=False), "stem.hswish")
    y = g.conv(x, "expand", c, e, 1)
    y = g.hard_swish(g.conv(y, "dw", e, e, 3, groups=e, relu=False), "dw.hswish")
    s = g.node("GlobalAveragePool", [y], "se.pool")
    s = g.conv(s, "se.reduce", e, r, 1)
    s = g.node("HardSigmoid", [g.conv(s, "se.expand", r, e, 1, relu=False)], "se.gate",
               alpha=1.0 / 6.0, beta=0.5)
    y = g.node("Mul", [y, s], "se.scale")
    y = g.conv(y, "project", e, c, 1, relu=False)
    x = g.node("Add", [x, y], "residual")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "gap")], "flat")
    w = g.rng.normal(0, 0.2, (c, 10)).astype(np.float32)
    x = g.node("MatMul", [x, g.const("fc.w", w)], "fc")
    return g.model(x, "mobilenet_v3_block", (1, 3, size, size), (1, 10))


#: The builders by name.
TOPOLOGIES: dict[str, Callable[..., onnx.ModelProto]] = {
    "alexnet_groups": alexnet_groups,
    "shufflenet_unit": shufflenet_unit,
    "densenet_block": densenet_block,
    "densenet_block_g16": functools.partial(densenet_block, growth=16),
    "mobilenet_v3_block": mobilenet_v3_block,
}

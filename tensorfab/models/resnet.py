"""ResNet-18 as ONNX, built with onnx.helper, weights drawn from a fixed seed.

The torchvision architecture (7×7/2 stem, 3×3/2 max pool, four stages of two basic
blocks with 1×1/2 downsampling convolutions, global average pool, 1000-way dense), with
batch normalization after every convolution, as exporters write it. The weights are
He-initialized and the batch-norm statistics random (no trained weights ship with any
package we may use): it exercises the frontend, the passes and the runtime at the real
network's shapes, not its accuracy.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
        n = self.name("conv")
        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        self.nodes.append(helper.make_node(
            "Conv", [x, self.init(f"{n}.w", w)], [f"{n}.out"], name=n,
            kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
        b = self.name("bn")
        params = [self.init(f"{b}.gamma", self.rng.uniform(0.5, 1.0, cout)),
                  self.init(f"{b}.beta", self.rng.standard_normal(cout) * 0.1),
                  self.init(f"{b}.mean", self.rng.standard_normal(cout) * 0.1),
                  self.init(f"{b}.var", self.rng.uniform(0.5, 1.5, cout))]
        self.nodes.append(helper.make_node("BatchNormalization", [f"{n}.out", *params],
                                           [f"{b}.out"], name=b, epsilon=1e-5))
        if not relu:
            return f"{b}.out"
        r = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [f"{b}.out"], [f"{r}.out"], name=r))
        return f"{r}.out"

    def block(self, x: str, cin: int, cout: int, stride: int) -> str:
        y = self.conv_bn(x, cin, cout, 3, stride, relu=True)
        y = self.conv_bn(y, cout, cout, 3, 1, relu=False)
        skip = x if stride == 1 and cin == cout else self.conv_bn(x, cin, cout, 1, stride,
                                                                  relu=False)
        a = self.name("add")
        self.nodes.append(helper.make_node("Add", [y, skip], [f"{a}.out"], name=a))
        r = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [f"{a}.out"], [f"{r}.out"], name=r))
        return f"{r}.out"


def resnet18_onnx(seed: int = 0, image_size: int = 224, classes: int = 1000,
                  opset: int = 17) -> onnx.ModelProto:
    """ResNet-18 taking ``input`` of shape ``(N, 3, image_size, image_size)`` and giving
    ``logits`` of shape ``(N, classes)``; checked by the onnx checker."""
    return resnet_onnx(seed, image_size, classes, STAGES, opset=opset)


def resnet_onnx(seed: int = 0, image_size: int = 224, classes: int = 1000,
                stages: tuple[tuple[int, int], ...] = STAGES, blocks_per_stage: int = 2,
                opset: int = 17) -> onnx.ModelProto:
    """A ResNet of basic blocks: the ResNet-18 stem (7×7/2 convolution with
    ``stages[0][0]`` channels, 3×3/2 max pool), then per stage ``(channels, stride)``
    ``blocks_per_stage`` basic blocks (the first with the stride, and a 1×1 projection
    where the shape changes), global average pool and dense. ``resnet_onnx(stages=((6,
    1), (10, 2)), blocks_per_stage=1, image_size=16, classes=10)`` is a small
    residual model with channel counts that no accelerator block divides."""
    b = _Builder(seed)
    stem = stages[0][0]
    x = b.conv_bn("input", 3, stem, 7, 2, relu=True)
    b.nodes.append(helper.make_node("MaxPool", [x], ["pool.out"], name="pool",
                                    kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "pool.out", stem
    for cout, stride in stages:
        x = b.block(x, cin, cout, stride)
        for _ in range(blocks_per_stage - 1):
            x = b.block(x, cout, cout, 1)
        cin = cout
    b.nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap.out"], name="gap"))
    b.nodes.append(helper.make_node("Flatten", ["gap.out"], ["flat.out"], name="flatten"))
    fc = b.init("fc.w", b.rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin))
    fcb = b.init("fc.b", b.rng.standard_normal(classes) * 0.01)
    b.nodes.append(helper.make_node("Gemm", ["flat.out", fc, fcb], ["logits"], name="fc",
                                    transB=1))
    graph = helper.make_graph(
        b.nodes, "resnet18" if (stages, blocks_per_stage) == (STAGES, 2) else "resnet",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                       ["N", 3, image_size, image_size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tensorfab.models.resnet")
    model.ir_version = min(model.ir_version, 9)
    onnx.checker.check_model(model)
    return model

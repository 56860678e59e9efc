"""A small CNN for scikit-learn's bundled digits (8×8 grey images, 10 classes), trained
in numpy and exported to ONNX with ``onnx.helper``.

The data set ships inside scikit-learn (nothing downloads). The network is::

    x (N, 1, 8, 8) ─ Conv 3×3, 16, pad 1 ─ Relu ─ Conv 3×3, 32, stride 2, pad 1 ─ Relu
      ─ Flatten ─ Gemm 512→10 ─ logits (N, 10)

Every weighted layer is one the accelerator runs (conv2d and dense with a fused bias
and ReLU); the first convolution has one input channel, like an image stem.

``python -m tensorfab.models.digits`` trains it (seeded; a few seconds) and rewrites
the shipped ``tensorfab/models/digits_cnn.onnx``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

#: Seed of the weight initialisation, the split and the batch order.
SEED = 2026
#: Fraction of the 1,797 images held out for testing.
TEST_FRACTION = 0.2
OPSET = 13
MODEL_FILE = "digits_cnn.onnx"


def model_path() -> Path:
    """File system path of the shipped ONNX model."""
    return Path(str(resources.files("tensorfab") / "models" / MODEL_FILE))


@dataclass(frozen=True)
class DigitsData:
    """The digits split: images ``(N, 1, 8, 8)`` float32 in [0, 1], labels int64."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_data() -> DigitsData:
    """scikit-learn's digits, scaled to [0, 1] and split (stratified, seeded)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=TEST_FRACTION, random_state=SEED,
                                          stratify=y)
    return DigitsData(xtr, ytr, xte, yte)


# ----------------------------------------------------------------- numpy network
def _im2col(x: np.ndarray, k: int, stride: int, pad: int) -> tuple[np.ndarray, int, int]:
    """``(N, C, H, W)`` → ``(N, OH, OW, C·k·k)`` patches."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    cols = np.empty((n, oh, ow, c, k, k), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, :, :, i, j] = xp[:, :, i:i + stride * oh:stride,
                                        j:j + stride * ow:stride].transpose(0, 2, 3, 1)
    return cols.reshape(n, oh, ow, c * k * k), oh, ow


def _col2im(dcols: np.ndarray, shape: tuple[int, ...], k: int, stride: int,
            pad: int) -> np.ndarray:
    n, c, h, w = shape
    _, oh, ow, _ = dcols.shape
    d = dcols.reshape(n, oh, ow, c, k, k)
    dxp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), dtype=dcols.dtype)
    for i in range(k):
        for j in range(k):
            dxp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] += \
                d[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return dxp[:, :, pad:pad + h, pad:pad + w]


#: (name, out channels, in channels, stride) of the two convolutions.
CONVS = (("conv1", 16, 1, 1), ("conv2", 32, 16, 2))
HIDDEN = 32 * 4 * 4


def init_params(seed: int = SEED) -> dict[str, np.ndarray]:
    """He-initialised weights (OIHW convolutions, ``(10, 512)`` classifier)."""
    rng = np.random.default_rng(seed)
    p: dict[str, np.ndarray] = {}
    for name, o, i, _ in CONVS:
        p[f"{name}.w"] = (rng.standard_normal((o, i, 3, 3)) * np.sqrt(2 / (i * 9))
                          ).astype(np.float32)
        p[f"{name}.b"] = np.zeros(o, np.float32)
    p["fc.w"] = (rng.standard_normal((10, HIDDEN)) * np.sqrt(1 / HIDDEN)).astype(np.float32)
    p["fc.b"] = np.zeros(10, np.float32)
    return p


def forward(p: dict[str, np.ndarray], x: np.ndarray,
            cache: list | None = None) -> np.ndarray:
    """Logits of ``x`` ``(N, 1, 8, 8)``; fills ``cache`` for :func:`_backward`."""
    h = x
    for name, o, _, stride in CONVS:
        cols, _, _ = _im2col(h, 3, stride, 1)
        z = cols @ p[f"{name}.w"].reshape(o, -1).T + p[f"{name}.b"]
        a = np.maximum(z, 0)
        if cache is not None:
            cache.append((h.shape, cols, z))
        h = a.transpose(0, 3, 1, 2)
    flat = h.reshape(h.shape[0], -1)
    if cache is not None:
        cache.append(flat)
    return flat @ p["fc.w"].T + p["fc.b"]


def _backward(p: dict[str, np.ndarray], cache: list, dlogits: np.ndarray
              ) -> dict[str, np.ndarray]:
    g: dict[str, np.ndarray] = {}
    flat = cache[-1]
    g["fc.w"] = dlogits.T @ flat
    g["fc.b"] = dlogits.sum(0)
    dh = (dlogits @ p["fc.w"]).reshape(flat.shape[0], 32, 4, 4)
    for (name, o, _, stride), (shape, cols, z) in zip(reversed(CONVS), reversed(cache[:-1]),
                                                      strict=True):
        dz = dh.transpose(0, 2, 3, 1) * (z > 0)
        g[f"{name}.w"] = (dz.reshape(-1, o).T @ cols.reshape(-1, cols.shape[-1])
                          ).reshape(p[f"{name}.w"].shape)
        g[f"{name}.b"] = dz.sum((0, 1, 2))
        dcols = dz @ p[f"{name}.w"].reshape(o, -1)
        dh = _col2im(dcols, shape, 3, stride, 1)
    return g


def train(data: DigitsData, epochs: int = 30, batch: int = 32, lr: float = 2e-3,
          seed: int = SEED) -> dict[str, np.ndarray]:
    """Train with Adam on softmax cross-entropy; returns the parameters (float32)."""
    rng = np.random.default_rng(seed)
    p = {k: v.astype(np.float64) for k, v in init_params(seed).items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    x, y = data.x_train.astype(np.float64), data.y_train
    step = 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for s in range(0, len(x), batch):
            idx = order[s:s + batch]
            cache: list = []
            logits = forward(p, x[idx], cache)
            e = np.exp(logits - logits.max(1, keepdims=True))
            prob = e / e.sum(1, keepdims=True)
            prob[np.arange(len(idx)), y[idx]] -= 1
            grads = _backward(p, cache, prob / len(idx))
            step += 1
            for k, gk in grads.items():
                m[k] = 0.9 * m[k] + 0.1 * gk
                v2[k] = 0.999 * v2[k] + 0.001 * gk * gk
                mh, vh = m[k] / (1 - 0.9 ** step), v2[k] / (1 - 0.999 ** step)
                p[k] -= lr * mh / (np.sqrt(vh) + 1e-8)
    return {k: v.astype(np.float32) for k, v in p.items()}


def accuracy(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of ``x`` the numpy network classifies as ``y``."""
    return float(np.mean(forward(p, x).argmax(1) == y))


# -------------------------------------------------------------------------- ONNX
def to_onnx(p: dict[str, np.ndarray]):
    """The trained network as an ONNX model (opset 13, dynamic batch)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(v, name=k) for k, v in sorted(p.items())]
    nodes = [
        helper.make_node("Conv", ["input", "conv1.w", "conv1.b"], ["c1"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"], name="conv2",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Flatten", ["r2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tensorfab.models.digits")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main(argv: list[str]) -> int:
    """Train, report accuracy, write the ONNX model (``--out PATH``, default: shipped)."""
    import onnx

    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else model_path()
    data = load_data()
    p = train(data)
    print(f"train accuracy {accuracy(p, data.x_train, data.y_train):.4f}, "
          f"test accuracy {accuracy(p, data.x_test, data.y_test):.4f} "
          f"({len(data.y_test)} held-out images)")
    onnx.save(to_onnx(p), out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A small CNN for scikit-learn's 8×8 digits, trained in numpy, exported as ONNX.

``conv 3×3 (1→8) → relu → maxpool 2 → conv 3×3 (8→16) → relu → maxpool 2 → flatten →
dense (64→10)``, trained with Adam on softmax cross-entropy from a fixed seed. The data
is scikit-learn's bundled digits set (1797 images, no download), scaled to [0, 1] and
split 80/20 with a fixed permutation.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KERNEL = 3
CHANNELS = (1, 8, 16)
CLASSES = 10


def load_digits_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels); images are float32
    ``(N, 1, 8, 8)`` in [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


@dataclass
class DigitsCNN:
    """Trained weights (float32) and the test accuracy measured after training."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    fc: np.ndarray  # (10, 64): ONNX Gemm with transB=1
    fc_b: np.ndarray
    test_accuracy: float

    def params(self) -> list[np.ndarray]:
        """The weights in training order."""
        return [self.w1, self.b1, self.w2, self.b2, self.fc, self.fc_b]

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Forward pass in numpy (float64)."""
        return _forward(self.params(), x)[0]


# ------------------------------------------------------------------ numpy layers
def _im2col(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) with padding 1 → (N, H*W, C*3*3) patches of a 3×3 'same' conv."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((n, c, KERNEL, KERNEL, h, w), x.dtype)
    for i in range(KERNEL):
        for j in range(KERNEL):
            cols[:, :, i, j] = xp[:, :, i:i + h, j:j + w]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n, h * w, c * KERNEL * KERNEL)


def _col2im(dcols: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    n, c, h, w = shape
    d = dcols.reshape(n, h, w, c, KERNEL, KERNEL).transpose(0, 3, 4, 5, 1, 2)
    dxp = np.zeros((n, c, h + 2, w + 2), dcols.dtype)
    for i in range(KERNEL):
        for j in range(KERNEL):
            dxp[:, :, i:i + h, j:j + w] += d[:, :, i, j]
    return dxp[:, :, 1:-1, 1:-1]


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, _, h, wd = x.shape
    cols = _im2col(x)
    out = cols @ w.reshape(w.shape[0], -1).T + b
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), cols


def _pool(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def _pool_back(x: np.ndarray, y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    up = np.repeat(np.repeat(y, 2, axis=2), 2, axis=3)
    mask = (x == up)
    mask = mask / mask.reshape(*x.shape[:2], x.shape[2] // 2, 2, x.shape[3] // 2, 2).sum(
        axis=(3, 5)).repeat(2, axis=2).repeat(2, axis=3)
    return mask * np.repeat(np.repeat(dy, 2, axis=2), 2, axis=3)


def _forward(p: list[np.ndarray], x: np.ndarray) -> tuple[np.ndarray, dict]:
    w1, b1, w2, b2, fc, fc_b = p
    c1, cols1 = _conv(x.astype(np.float64), w1, b1)
    r1 = np.maximum(c1, 0)
    p1 = _pool(r1)
    c2, cols2 = _conv(p1, w2, b2)
    r2 = np.maximum(c2, 0)
    p2 = _pool(r2)
    flat = p2.reshape(len(x), -1)
    logits = flat @ fc.T + fc_b
    return logits, {"cols1": cols1, "c1": c1, "r1": r1, "p1": p1, "cols2": cols2, "c2": c2,
                    "r2": r2, "p2": p2, "flat": flat, "x": x}


def _backward(p: list[np.ndarray], cache: dict, dlogits: np.ndarray) -> list[np.ndarray]:
    w1, _, w2, _, fc, _ = p
    n = len(dlogits)
    d_fc = dlogits.T @ cache["flat"]
    d_fcb = dlogits.sum(axis=0)
    dp2 = (dlogits @ fc).reshape(cache["p2"].shape)
    dr2 = _pool_back(cache["r2"], cache["p2"], dp2)
    dc2 = dr2 * (cache["c2"] > 0)
    dc2r = dc2.transpose(0, 2, 3, 1).reshape(n, -1, w2.shape[0])
    dw2 = np.einsum("npo,npk->ok", dc2r, cache["cols2"]).reshape(w2.shape)
    db2 = dc2r.sum(axis=(0, 1))
    dp1 = _col2im(dc2r @ w2.reshape(w2.shape[0], -1), cache["p1"].shape)
    dr1 = _pool_back(cache["r1"], cache["p1"], dp1)
    dc1 = dr1 * (cache["c1"] > 0)
    dc1r = dc1.transpose(0, 2, 3, 1).reshape(n, -1, w1.shape[0])
    dw1 = np.einsum("npo,npk->ok", dc1r, cache["cols1"]).reshape(w1.shape)
    db1 = dc1r.sum(axis=(0, 1))
    return [dw1, db1, dw2, db2, d_fc, d_fcb]


def train_digits_cnn(seed: int = 0, epochs: int = 12, batch: int = 32,
                     lr: float = 0.01) -> DigitsCNN:
    """Train the CNN with Adam from ``seed`` (deterministic) and measure test accuracy."""
    xtr, ytr, xte, yte = load_digits_split(seed)
    r = np.random.default_rng(seed)
    c0, c1, c2 = CHANNELS

    def he(*shape: int) -> np.ndarray:
        return r.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
    p = [he(c1, c0, KERNEL, KERNEL), np.zeros(c1), he(c2, c1, KERNEL, KERNEL), np.zeros(c2),
         he(CLASSES, c2 * 2 * 2), np.zeros(CLASSES)]
    m = [np.zeros_like(q) for q in p]
    v = [np.zeros_like(q) for q in p]
    step = 0
    for _ in range(epochs):
        order = r.permutation(len(xtr))
        for k in range(0, len(order), batch):
            idx = order[k:k + batch]
            logits, cache = _forward(p, xtr[idx])
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            prob = e / e.sum(axis=1, keepdims=True)
            prob[np.arange(len(idx)), ytr[idx]] -= 1.0
            grads = _backward(p, cache, prob / len(idx))
            step += 1
            for i, g in enumerate(grads):
                m[i] = 0.9 * m[i] + 0.1 * g
                v[i] = 0.999 * v[i] + 0.001 * g * g
                mh, vh = m[i] / (1 - 0.9 ** step), v[i] / (1 - 0.999 ** step)
                p[i] = p[i] - lr * mh / (np.sqrt(vh) + 1e-8)
    f32 = [q.astype(np.float32) for q in p]
    accuracy = float((_forward(f32, xte)[0].argmax(axis=1) == yte).mean())
    return DigitsCNN(*f32, test_accuracy=accuracy)


def digits_cnn_onnx(model: DigitsCNN, opset: int = 17) -> onnx.ModelProto:
    """The trained CNN as an ONNX model (input ``image`` of shape ``(N, 1, 8, 8)``,
    output ``logits`` of shape ``(N, 10)``), checked by the onnx checker."""
    inits = {"w1": model.w1, "b1": model.b1, "w2": model.w2, "b2": model.b2,
             "fc": model.fc, "fc_b": model.fc_b}
    n = helper.make_node
    nodes = [
        n("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        n("Relu", ["c1"], ["r1"], name="relu1"),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        n("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2], name="pool2"),
        n("Flatten", ["p2"], ["flat"], axis=1, name="flatten"),
        n("Gemm", ["flat", "fc", "fc_b"], ["logits"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tensorfab.models.digits_cnn")
    proto.ir_version = min(proto.ir_version, 9)
    onnx.checker.check_model(proto)
    return proto


#: The shipped model file (package data), written by ``python -m tensorfab.models.digits_cnn``.
MODEL_FILE = "digits_cnn.onnx"


def model_path() -> Path:
    """File system path of the shipped ONNX model (trained with seed 0)."""
    return Path(str(resources.files("tensorfab") / "models" / MODEL_FILE))


def sample_files() -> dict[str, bytes]:
    """A small model to try the model commands on, by file name: the shipped digits CNN
    (``digits.onnx``, input ``image``), 256 training images to calibrate on
    (``calib.npy``, and ``calib.npz`` keyed by the input's name) and 16 test images
    (``images.npy``), float32 ``(N, 1, 8, 8)``."""
    import io

    train, _, test, _ = load_digits_split(0)

    def npy(array: np.ndarray) -> bytes:
        buf = io.BytesIO()
        np.save(buf, array)
        return buf.getvalue()

    npz = io.BytesIO()
    np.savez(npz, image=train[:256])
    return {"digits.onnx": model_path().read_bytes(), "calib.npy": npy(train[:256]),
            "images.npy": npy(test[:16]), "calib.npz": npz.getvalue()}


def main(argv: list[str]) -> int:
    """Train with seed 0 and write the ONNX model (``--out PATH``, default: the shipped
    file); prints the test accuracy."""
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else model_path()
    model = train_digits_cnn(seed=0)
    onnx.save(digits_cnn_onnx(model), out)
    print(f"test accuracy {model.test_accuracy:.4f}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The text-orientation classifier of RapidOCR (PaddleOCR's ``ch_ppocr_mobile_v2.0_cls``,
a MobileNetV3-style network) and text-line images to measure it on, made here.

The model ships as ``ch_ppocr_mobile_v2.0_cls_infer.onnx`` in the PyPI package
``rapidocr-onnxruntime`` (1.4.4, installed with ``pip install --no-deps``: its own
dependencies, OpenCV among them, are not needed to read the file). Its weights are
``Constant`` nodes; it has depthwise convolutions, hard-sigmoid, hard-swish and
squeeze-excite blocks, and says whether a text line is upright (class 0, label ``"0"``)
or upside down (class 1, ``"180"``).

The images are rendered with Pillow's bundled font (Aileron) from a fixed word list and
seed: dark text on a light background, cropped tight around the text, half of them
rotated by 180°. :func:`preprocess` is RapidOCR's ``TextClassifier.resize_norm_img``:
resize to height 48 keeping the aspect ratio (width at most 192, rounded up), scale to
[-1, 1], pad on the right with zeros to 3×48×192. Its resize is OpenCV's bilinear
(``INTER_LINEAR``: half-pixel centres, edge clamped, no antialiasing), written here in
numpy (:func:`resize_bilinear`).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorfab.isa import TensorfabError

__all__ = ["INPUT_SHAPE", "LABELS", "OrientationError", "OrientationSet", "classifier_path",
           "orientation_set", "preprocess", "render_text_line", "resize_bilinear"]

#: The PyPI package (and its version) holding the model file.
MODEL_PACKAGE = "rapidocr_onnxruntime"
MODEL_PACKAGE_PIN = "rapidocr-onnxruntime==1.4.4"
MODEL_FILE = "models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
#: The classifier's input (channels, height, width), RapidOCR's ``cls_image_shape``.
INPUT_SHAPE = (3, 48, 192)
#: Class index → RapidOCR's label (``label_list``).
LABELS = ("0", "180")

#: Words the text lines are made of (common English words; the classifier was trained on
#: Chinese and Latin text lines).
_WORD_TEXT = """
the of and to in is you that it he was for on are as with his they at be this from have or
by one had not but what all were when we there can an your which their said if do will
each about how up out them then she many some so these would other into has more her two
like him see time could no make than first been its who now people my made over did down
only way find use may water long little very after words called just where most know get
through back much go good new write our me man too any day same right look think also
around another came come work three word must because does part even place well such here
take why things help put years different away again off went old number great tell men say
small every found still between name should home big give air line set own under read last
never us left end along while might next sound below saw something thought both few those
always looked show large often together asked house world going want school important
until form food keep children feet land side without boy once animals life enough took
sometimes four head above kind began almost live page got earth need far hand high year
mother light parts country father let night following picture being study second eyes soon
times story boys since white days ever paper hard near sentence better best across during
today others however sure means knew try told young miles sun ways thing whole hear
example heard several change answer room sea against top turned learn point city play
toward five using himself usually money seen invoice total amount date order street
station price account number 2024 12.50 No. 7 Tel: Fax: www email@example.com
"""
WORDS = tuple(_WORD_TEXT.split())

#: Font sizes (pixels) the lines are rendered at.
FONT_SIZES = (22, 26, 30, 34, 38, 44)


class OrientationError(TensorfabError, ValueError):
    """The model package is missing, or an image cannot be preprocessed (names why)."""


def classifier_path() -> Path:
    """The classifier's ONNX file inside the installed ``rapidocr-onnxruntime`` package.

    The package is located without importing it (its ``__init__`` needs OpenCV, which is
    not installed).

    Raises
    ------
    OrientationError
        The package or the file is missing (the message says how to install it).
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise OrientationError(f"the orientation classifier's package is not installed: "
                               f"pip install --no-deps {MODEL_PACKAGE_PIN}")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise OrientationError(f"{path}: the classifier file is missing from the installed "
                               f"{MODEL_PACKAGE} (expected {MODEL_PACKAGE_PIN})")
    return path


def render_text_line(rng: np.random.Generator) -> np.ndarray:
    """One text line (1 to 5 words) as an RGB ``uint8`` image, cropped tight.

    Dark text (grey level 0–69) on a light background (200–255), a margin of 2–7 pixels,
    the font size drawn from :data:`FONT_SIZES`, a third of the lines capitalized.
    """
    from PIL import Image, ImageDraw, ImageFont

    words = rng.choice(np.array(WORDS), int(rng.integers(1, 6)))
    text = " ".join(str(w) for w in words)
    if rng.random() < 1 / 3:
        text = text.capitalize()
    font = ImageFont.load_default(size=int(rng.choice(FONT_SIZES)))
    left, top, right, bottom = font.getbbox(text)
    pad = int(rng.integers(2, 8))
    bg, fg = int(rng.integers(200, 256)), int(rng.integers(0, 70))
    image = Image.new("RGB", (right - left + 2 * pad, bottom - top + 2 * pad), (bg,) * 3)
    ImageDraw.Draw(image).text((pad - left, pad - top), text, font=font, fill=(fg,) * 3)
    return np.asarray(image)


def resize_bilinear(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """``image`` (H×W×C) resized to ``height``×``width`` as OpenCV's ``INTER_LINEAR``:
    sample points at half-pixel centres, clamped at the edges, no antialiasing (float32).
    """
    h, w = image.shape[:2]
    ys = np.clip((np.arange(height) + 0.5) * h / height - 0.5, 0, h - 1)
    xs = np.clip((np.arange(width) + 0.5) * w / width - 0.5, 0, w - 1)
    y0, x0 = np.floor(ys).astype(np.intp), np.floor(xs).astype(np.intp)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy = (ys - y0).astype(np.float32)[:, None, None]
    fx = (xs - x0).astype(np.float32)[None, :, None]
    a = image.astype(np.float32).reshape(h, w, -1)
    top = a[y0][:, x0] * (1 - fx) + a[y0][:, x1] * fx
    bottom = a[y1][:, x0] * (1 - fx) + a[y1][:, x1] * fx
    return (top * (1 - fy) + bottom * fy).reshape(height, width, *image.shape[2:])


def preprocess(image: np.ndarray) -> np.ndarray:
    """RapidOCR's classifier preprocessing of one RGB (H×W×3) image: a float32
    3×48×192 array (see the module docstring).

    Raises
    ------
    OrientationError
        The image is not H×W×3 or is empty.
    """
    if image.ndim != 3 or image.shape[2] != 3 or min(image.shape[:2]) == 0:
        raise OrientationError(f"expected an H×W×3 image, got shape {image.shape}")
    _, height, width = INPUT_SHAPE
    h, w = image.shape[:2]
    resized_w = min(width, math.ceil(height * w / h))
    resized = resize_bilinear(image, resized_w, height).transpose(2, 0, 1) / 255
    out = np.zeros(INPUT_SHAPE, np.float32)
    out[:, :, :resized_w] = (resized - 0.5) / 0.5
    return out


@dataclass(frozen=True)
class OrientationSet:
    """Preprocessed text lines and their labels (0 upright, 1 rotated by 180°)."""

    images: np.ndarray
    labels: np.ndarray


def orientation_set(count: int, seed: int = 0) -> OrientationSet:
    """``count`` rendered text lines, each rotated by 180° with probability ½, in the
    classifier's input form (``count``×3×48×192 float32) with their labels."""
    rng = np.random.default_rng(seed)
    images = np.empty((count, *INPUT_SHAPE), np.float32)
    labels = np.empty(count, np.int64)
    for k in range(count):
        line = render_text_line(rng)
        labels[k] = int(rng.random() < 0.5)
        images[k] = preprocess(line[::-1, ::-1] if labels[k] else line)
    return OrientationSet(images, labels)

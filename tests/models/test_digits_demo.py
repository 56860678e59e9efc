"""``tensorfab demo``: the kernel demo, then the digits CNN in float and int8."""

from __future__ import annotations

import re

import onnxruntime as ort
from rich.console import Console

from tensorfab.demo import run_demo
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path


def test_demo_runs_kernel_and_digits_cnn() -> None:
    console = Console(record=True, width=200)
    assert run_demo(console) == 0
    text = console.export_text()
    assert "result check against numpy: PASS" in text
    assert "int8 result check against the CPU integer graph: PASS" in text
    for layer in ("conv1", "conv2", "dense3"):
        assert layer in text
    m = re.search(r"(\d+) test images: float accuracy ([0-9.]+) .*int8 accuracy ([0-9.]+)",
                  text)
    assert m is not None
    _, _, x, y = load_digits_split(0)
    sess = ort.InferenceSession(str(model_path()), providers=["CPUExecutionProvider"])
    want = (sess.run(None, {"image": x})[0].argmax(axis=1) == y).mean()
    assert int(m.group(1)) == len(x)
    assert float(m.group(2)) == round(float(want), 4)
    assert abs(float(m.group(3)) - float(m.group(2))) <= 0.01

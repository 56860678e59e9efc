"""``tensorfab bench orientation`` and ``bench efficientnet`` on subsets: their keys, and
their figures against ones computed here (onnxruntime's float decisions, the rendered
labels, byte counts of the input and output)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from tensorfab.benches.efficientnet import run_efficientnet_bench
from tensorfab.benches.orientation import run_orientation_bench
from tensorfab.models.orientation import classifier_path, orientation_set


def test_orientation_bench_on_ten_lines() -> None:
    r = run_orientation_bench(images=10)
    json.dumps(r)  # one JSON object
    s = orientation_set(10, seed=0)
    sess = ort.InferenceSession(str(classifier_path()), providers=["CPUExecutionProvider"])
    float_pred = sess.run(None, {"x": s.images})[0].argmax(axis=1)
    assert r["float_accuracy"] == round(float((float_pred == s.labels).mean()), 4)
    assert r["test_images"] == 10 and r["int8_accuracy"] >= 0.8
    assert r["accel_mac_fraction"] == 1.0 and r["macs"] == r["accel_macs"]
    assert r["io_bytes"] == s.images[:1].nbytes + 2 * 4  # one line in, two probabilities out
    assert r["host_bytes"] > 0 and r["fsim"]["total_cycles"] > 0
    # hard-swish and squeeze-excite run on the accelerator: the activations stay there
    assert not [op for op in r["cpu_operators"] if op.startswith(
        ("hard_sigmoid", "hard_swish", "multiply", "clip", "divide", "nn.global_avg_pool2d"))]
    assert r["host_bytes"] <= 2 * r["io_bytes"] and r["meets_target"]


@pytest.mark.slow
def test_efficientnet_bench_on_one_photograph() -> None:
    r = run_efficientnet_bench(photos=("coffee",))
    json.dumps(r)
    assert r["views"] == 12 and r["photos"]["coffee"]["float_top1"] == "espresso"
    assert r["float_top1_unambiguous"] == 1.0
    assert r["accel_mac_fraction"] == 1.0
    assert r["host_bytes"] <= 2 * r["io_bytes"] == 2 * (3 * 224 * 224 * 4 + 1000 * 4)
    assert r["int8_agreement"] >= 0.9
    assert np.isfinite(r["fsim"]["utilization"])

"""``tensorfab bench digits`` on a subset: its keys, and its accuracies against ones
computed here independently (the float model on tensorfab's interpreter, onnxruntime's
own int8 execution of the QDQ model)."""

from __future__ import annotations

import json

import numpy as np
from ort_reference import reference_session

from tensorfab.benches.digits import run_digits_bench
from tensorfab.cli import main as cli_main
from tensorfab.compiler.frontend import from_onnx
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.models.digits_int8 import compile_digits_int8

N = 80


def test_digits_bench_accuracies_against_independent_computation() -> None:
    r = run_digits_bench("fsim", images=N)
    for key in ("float_accuracy", "int8_accuracy", "test_images", "accel_mac_fraction",
                "int8_seconds", "compile_seconds", "matches_reference"):
        assert key in r
    assert r["test_images"] == N
    _, _, x, y = load_digits_split(0)
    x, y = x[:N], y[:N]
    float_acc = (evaluate(from_onnx(str(model_path())), [x]).argmax(axis=1) == y).mean()
    assert r["float_accuracy"] == round(float(float_acc), 6)
    # onnxruntime's int8 execution of the same QDQ model: the fixed-point network on the
    # accelerator predicts within two images of it
    qdq = compile_digits_int8(batch=8, per_channel=r["per_channel"]).qdq
    ort_int8 = reference_session(qdq).run(None,
                                                                            {"image": x})[0]
    ort_acc = (ort_int8.argmax(axis=1) == y).mean()
    assert abs(r["int8_accuracy"] - ort_acc) <= 2 / N
    assert r["matches_reference"] is True
    assert r["float_accuracy"] - r["int8_accuracy"] <= 0.025  # 2 images of 80
    # every MAC on the accelerator: conv1, conv2 and the dense layer (a 1x1 convolution)
    assert r["accel_mac_fraction"] == 1.0


def test_bench_command_prints_json_last(capsys, monkeypatch) -> None:
    import tensorfab.benches as benches

    monkeypatch.setitem(benches.BENCHES, "digits",
                        lambda target="fsim": run_digits_bench(target, images=40))
    assert cli_main(["bench", "digits", "--json"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["test_images"] == 40 and last["target"] == "fsim"
    assert 0.0 <= last["int8_accuracy"] <= 1.0 and np.isfinite(last["float_accuracy"])

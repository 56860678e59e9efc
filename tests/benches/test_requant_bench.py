"""The requant benchmark (tensorfab.benches.requant) on one layer: its JSON keys, its
float reference, and its accuracy figures against an independent count."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tensorfab.benches import BENCHES
from tensorfab.benches.requant import float_reference, main, run_requant_bench


def test_float_reference_rounds_half_away_and_clamps() -> None:
    acc = np.array([5, -5, 15, -15, 10_000, -10_000]).reshape(1, -1, 1, 1)
    got = float_reference(acc, 0.1, 0).ravel()
    assert got.tolist() == [1, -1, 2, -2, 127, -128]  # 0.5 -> 1, 1.5 -> 2
    per = float_reference(acc, np.full(6, 0.2), 3).ravel()
    assert per.tolist() == [4, 2, 6, 0, 127, -128]


def test_requant_bench_on_fsim_last_line_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = main(["--target", "fsim", "--layers", "C11", "--vthreads", "2", "--json"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == json.loads(json.dumps(out))
    # every key says which epilogue it measures
    assert not [k for k in out if k.endswith(("_old", "_new")) or k in (
        "equal_fraction", "max_abs_diff", "mean_utilization_best")]
    for kind in ("single", "tflite", "16bit"):
        for what in ("equal_fraction", "max_abs_diff", "mean_utilization_best"):
            assert f"{what}_{kind}" in out
    layer = out["layers"]["C11"]
    assert set(layer) == {"single", "tflite", "16bit", "no_epilogue"}
    assert out["outputs"] == 512 * 7 * 7
    assert out["equal_fraction_single"] == layer["single"]["equal_fraction"] >= 0.999
    assert out["max_abs_diff_single"] <= 1 and out["all_correct"]
    assert out["no_epilogue_correct"]
    # the 16-bit path keeps about 5 bits of scale on this layer: visibly less exact
    assert out["equal_fraction_16bit"] < 0.95
    assert "requant" in BENCHES


def test_requant_bench_fsim_is_untimed() -> None:
    out = run_requant_bench("fsim", layers=["C4"], vthreads=(1,))
    assert out["mean_utilization_best_single"] is None
    assert out["targets"]["mean_utilization_best_single"]["met"] is None
    assert out["targets"]["equal_fraction_single"]["met"] is True

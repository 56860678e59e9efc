"""``tensorfab bench topologies`` on one model: its keys, and its figures against ones
computed here (the ONNX model's MACs counted from its weights, byte counts)."""

from __future__ import annotations

import json

import numpy as np
from onnx import numpy_helper

from tensorfab.benches.topologies import run_topologies_bench
from tensorfab.models.cnn_topologies import alexnet_groups


def test_topologies_bench_on_alexnet() -> None:
    r = run_topologies_bench(models=("alexnet_groups",))
    json.dumps(r)
    model = alexnet_groups()
    # conv MACs = output elements x weight elements per output channel, numpy-counted
    sizes = {"conv1": 16, "conv2": 8, "conv3": 8, "conv4": 8, "conv5": 8}
    macs = 0
    for init in model.graph.initializer:
        w = numpy_helper.to_array(init)
        name = init.name.split(".")[0]
        if init.name.endswith(".w") and name in sizes:
            macs += w.shape[0] * sizes[name] ** 2 * int(np.prod(w.shape[1:]))
        elif init.name == "fc.w":
            macs += int(w.size)
    for quantizer in ("tensorfab", "ort_uint8"):
        row = r["models"]["alexnet_groups"][quantizer]
        assert row["macs"] == macs == row["accel_macs"] and row["accel_mac_fraction"] == 1.0
        assert row["exact"] and row["cosine"] > 0.99
        assert row["io_bytes"] == 3 * 32 * 32 * 4 + 10 * 4
        assert row["host_bytes"] > row["io_bytes"]
    assert any(op.startswith("nn.pad") for op in r["models"]["alexnet_groups"]["ort_uint8"]
               ["cpu_operators"])


def test_topologies_bench_takes_a_board_config() -> None:
    """``--config ecp5-25f`` names a board configuration as on every command (the
    compiler was handed the name and took it for a missing preset): the model runs
    bit-exact against the int8 graph, its grouped convolutions partly on the 1×4×2
    core."""
    r = run_topologies_bench(config="ecp5-25f", models=("alexnet_groups",))
    assert r["config"] == "ecp5-25f"
    for quantizer in ("tensorfab", "ort_uint8"):
        row = r["models"]["alexnet_groups"][quantizer]
        assert row["exact"] and row["cosine"] > 0.99
        assert 0 < row["accel_macs"] < row["macs"]

"""The user's ONNX node names survive compilation: each kernel of the compiled program, the
per-layer table, the Perfetto trace and the ``.tfm``'s ``graph.json`` say which node(s)
of the model it computes (a fused accelerator program joins its nodes' names)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from tensorfab.cli import main
from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.models import load_digits_split, resnet_onnx
from tensorfab.models.digits_cnn import model_path


@pytest.fixture(scope="module")
def calib() -> np.ndarray:
    return load_digits_split(0)[0][:64]


def _named(program) -> list[tuple[str, str]]:
    return [(n.op, n.name) for n in program.nodes if n.name]


def test_digits_kernels_carry_their_onnx_node_names(calib) -> None:
    model = compile_onnx(model_path(), config="tiny", calibration={"image": calib},
                         input_shapes={"image": (8, 1, 8, 8)})
    names = _named(model.program)
    accel = [n for op, n in names if op == "accel.program"]
    # each convolution fused with its relu; the Gemm alone
    assert accel == ["conv1+relu1", "conv2+relu2", "fc"]
    assert ("nn.max_pool2d", "pool1") in names and ("nn.max_pool2d", "pool2") in names
    onnx_names = {n.name for n in onnx.load(model_path()).graph.node}
    for _, name in names:
        assert set(name.split("+")) <= onnx_names, name


def test_float_path_and_unnamed_nodes_use_the_output_name(calib) -> None:
    proto = onnx.load(model_path())
    for node in proto.graph.node:
        if node.op_type == "Relu":
            node.name = ""
    model = compile_onnx(proto, input_shapes={"image": (2, 1, 8, 8)})
    relu_outputs = {n.output[0] for n in proto.graph.node if n.op_type == "Relu"}
    got = {name for op, name in _named(model.program) if op == "relu"}
    assert got == relu_outputs


def test_residual_add_keeps_its_name() -> None:
    proto = resnet_onnx(stages=((6, 1), (10, 2)), blocks_per_stage=1, image_size=16,
                        classes=10)
    adds = [n.name for n in proto.graph.node if n.op_type == "Add"]
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((8, 3, 16, 16)).astype(np.float32)
    model = compile_onnx(proto, config="tiny", calibration={"input": calib},
                         input_shapes={"input": (1, 3, 16, 16)})
    names = "+".join(name for _, name in _named(model.program)).split("+")
    for add in adds:
        assert add in names


def test_table_trace_and_graph_json_show_node_names(tmp_path: Path, calib, capsys) -> None:
    np.savez(tmp_path / "calib.npz", image=calib)
    tfm = tmp_path / "m.tfm"
    assert main(["compile", str(model_path()), "-o", str(tfm), "--shape", "image=2,1,8,8",
                 "--config", "tiny", "--calib", str(tmp_path / "calib.npz"), "--json"]) == 0
    with zipfile.ZipFile(tfm) as z:
        graph = json.loads(z.read("graph.json"))
    accel = [n["name"] for n in graph["nodes"] if n["op"] == "accel.program"]
    assert accel == ["conv1+relu1", "conv2+relu2", "fc"]
    capsys.readouterr()
    np.save(tmp_path / "x.npy", calib[:2])
    trace = tmp_path / "t.json"
    assert main(["run", str(tfm), "--input", str(tmp_path / "x.npy"), "--trace",
                 str(trace)]) == 0
    table = capsys.readouterr().out
    for name in ("conv1+relu1", "conv2+relu2", "pool1", "fc"):
        assert name in table
    events = json.loads(trace.read_text())["traceEvents"]
    names = [e["args"]["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "accel"]
    assert names == ["conv1+relu1", "conv2+relu2", "fc"]

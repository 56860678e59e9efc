"""Every preset and board configuration, and a JSON configuration whose ``block_in`` and
``block_out`` differ the other way from ``ecp5-25f``'s, compiles the shipped digits CNN,
a two-layer MLP and a small ResNet (basic blocks, identity and projection shortcuts,
channel counts no block divides) with every convolution and dense layer on the
accelerator, and runs them
bit for bit as the integer graph does on the CPU kernels: standalone and resident on the
functional simulator, resident on the RTL (tiny and ecp5-25f in the default run, the
rest in the slow set)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorfab.compiler.graph.accel_lowering import is_model_mac_layer
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.model_compile import CompiledModel, compile_onnx
from tensorfab.fpga_builds.board_configs import board_config
from tensorfab.isa import HwConfig
from tensorfab.models import load_digits_split, resnet_onnx
from tensorfab.models.digits_cnn import model_path
from tensorfab.runtime.interpreter import run_program
from tensorfab.runtime.resident import ResidentModel
from tensorfab.sim import FunctionalSimulator

#: Presets, board configurations, and "json": the JSON file :func:`json_config` writes.
CONFIGS = ("tiny", "small", "default", "large", "ecp5-25f", "ecp5-25f-4x4", "up5k", "json")
#: Configurations whose RTL runs in the default set: tiny's Verilator build is shared
#: with many other tests; ecp5-25f is the board config with block_in != block_out.
RTL_DEFAULT = ("tiny", "ecp5-25f")
#: Accelerator layers of each model: the digits CNN's two convolutions and dense layer;
#: the MLP's two dense layers; the ResNet's stem, two convolutions per block, the
#: projection and the dense layer.
ACCEL_LAYERS = {"digits": 3, "mlp": 2, "resnet": 7}


@pytest.fixture(scope="module")
def json_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ecp5-25f with block_in 2 and block_out 4, as a JSON file."""
    cfg = board_config("ecp5-25f").replace(name="ecp5-i2-o4", block_in=2, block_out=4)
    path = tmp_path_factory.mktemp("configs") / "ecp5-i2-o4.json"
    path.write_text(cfg.to_json())
    return path


def mlp_onnx() -> onnx.ModelProto:
    """Flatten, dense 64→30, relu, dense 30→10 on 8×8 images."""
    r = np.random.default_rng(5)
    inits = [numpy_helper.from_array((r.standard_normal(shape) * 0.2).astype(np.float32), n)
             for n, shape in (("w1", (64, 30)), ("b1", (30,)), ("w2", (30, 10)),
                              ("b2", (10,)))]
    nodes = [helper.make_node("Flatten", ["x"], ["f"]),
             helper.make_node("Gemm", ["f", "w1", "b1"], ["h"]),
             helper.make_node("Relu", ["h"], ["hr"]),
             helper.make_node("Gemm", ["hr", "w2", "b2"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


_COMPILED: dict[tuple[str, HwConfig], tuple[CompiledModel, np.ndarray]] = {}


def compiled(model: str, cfg: HwConfig, requant_stage: str = "store"
             ) -> tuple[CompiledModel, np.ndarray]:
    """``model`` (``digits``, ``mlp`` or ``resnet``) compiled for ``cfg`` (REQUANT in
    ``requant_stage``), and an input batch."""
    key = (model, cfg, requant_stage)
    if key not in _COMPILED:
        if model in ("digits", "mlp"):
            train, _, test, _ = load_digits_split(0)
            result = compile_onnx(str(model_path()) if model == "digits" else mlp_onnx(),
                                  config=cfg, calibration=train[:256],
                                  input_shapes={"image": (4, 1, 8, 8)} if model == "digits"
                                  else None, requant_stage=requant_stage)
            x = test[:4]
        else:
            r = np.random.default_rng(0)
            onnx_model = resnet_onnx(stages=((6, 1), (10, 2)), blocks_per_stage=1,
                                     image_size=16, classes=10)
            result = compile_onnx(onnx_model, config=cfg,
                                  calibration=r.standard_normal((8, 3, 16, 16)
                                                                ).astype(np.float32),
                                  input_shapes={"input": (2, 3, 16, 16)},
                                  requant_stage=requant_stage)
            x = r.standard_normal((2, 3, 16, 16)).astype(np.float32)
        _COMPILED[key] = (result, x)
    return _COMPILED[key]


def config_of(name: str, json_config: Path) -> HwConfig:
    return board_config(json_config if name == "json" else name)


@pytest.mark.parametrize("model", ["digits", "mlp", "resnet"])
@pytest.mark.parametrize("name", CONFIGS)
def test_compiles_and_runs_bit_exact_on_fsim(name: str, model: str, json_config: Path) -> None:
    cfg = config_of(name, json_config)
    result, x = compiled(model, cfg)
    layers = [n for n in result.program.nodes if n.op == "accel.program"
              and is_model_mac_layer(n.attrs.get("layer"))]  # adds and pooling aside
    assert len(layers) == ACCEL_LAYERS[model] and not result.cpu_convolutions
    want = evaluate(result.integer_function, [x])
    assert np.ptp(want) > 0
    np.testing.assert_array_equal(run_program(result.program, [x]), want)
    with ResidentModel(result.program, FunctionalSimulator()) as resident:
        np.testing.assert_array_equal(resident.run([x]), want)
        in_place = resident.plan.on_device_inputs
    if model == "resnet":
        # a block's second convolution reads the first one's output in place where the
        # blockings agree; otherwise the relayout goes through the host
        assert (in_place > 0) == (cfg.block_in == cfg.block_out)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in RTL_DEFAULT
                                               else pytest.mark.slow) for n in CONFIGS])
def test_runs_bit_exact_resident_on_rtl(name: str, json_config: Path) -> None:
    from tensorfab.sim.rtl import RtlSimulator

    cfg = config_of(name, json_config)
    device = RtlSimulator()
    for model in ("digits", "mlp", "resnet"):
        result, x = compiled(model, cfg)
        with ResidentModel(result.program, device) as resident:
            np.testing.assert_array_equal(resident.run([x]),
                                          evaluate(result.integer_function, [x]))

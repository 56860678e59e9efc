"""The text form round-trips every ONNX model of the tests: the imported graph
(``parse(astext(f)) == f``), its planned (complete) form through the compact text
(``complete == expand_devices(parse(astext(complete)))``), and the function
``compile_onnx`` plans for the accelerator, whose ``.tfm`` text names its large
constants ``meta[c<slot>]``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx_models import encoder_layer, qdq_cnn, small_cnn
from test_model_graph_text import residual_block_onnx

from tensorfab.compiler.frontend import from_onnx
from tensorfab.compiler.graph import Var, astext, parse, post_order, structural_equal
from tensorfab.compiler.graph.planning import expand_devices, plan_devices
from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.models import load_digits_split
from tensorfab.models.digits_cnn import model_path
from tensorfab.models.resnet import resnet18_onnx


def _small_resnet18() -> onnx.ModelProto:
    return resnet18_onnx(image_size=32, classes=10)


# name -> (model, calibration batch, input shapes); the float ResNet-18's text inlines
# 11 M weights (60 MB), so its import round trip is a slow case
ONNX_MODELS = {
    "small_cnn": lambda: (small_cnn(), None, None),
    "encoder_layer": lambda: (encoder_layer(), None, None),
    "qdq_cnn": lambda: (qdq_cnn(), None, None),
    "digits": lambda: (onnx.load(str(model_path())), load_digits_split(0)[0][:32],
                       {"image": (4, 1, 8, 8)}),
    "residual_block": lambda: (residual_block_onnx(), np.random.default_rng(1).standard_normal(
        (8, 16, 6, 6)).astype(np.float32), None),
    "resnet18": lambda: (_small_resnet18(), np.random.default_rng(2).standard_normal(
        (2, 3, 32, 32)).astype(np.float32), {"input": (1, 3, 32, 32)}),
}
IMPORT_CASES = [pytest.param(n, marks=pytest.mark.slow) if n == "resnet18" else n
                for n in sorted(ONNX_MODELS)]


def _complete_round_trip(complete) -> None:
    text = astext(complete)
    assert "on_device" not in text  # the compact form: devices only where they belong
    compact = parse(text)
    assert structural_equal(expand_devices(compact), complete)
    assert astext(expand_devices(compact)) == text


@pytest.mark.parametrize("name", IMPORT_CASES)
def test_imported_model_round_trips_and_its_planned_form_too(name: str) -> None:
    model, _, shapes = ONNX_MODELS[name]()
    f = from_onnx(model, input_shapes=shapes)
    text = astext(f)
    g = parse(text)
    assert structural_equal(g, f)
    assert astext(g) == text
    _complete_round_trip(plan_devices(f))


@pytest.mark.parametrize("name", ["digits", "residual_block", "resnet18"])
def test_compiled_function_round_trips_with_its_devices(name: str) -> None:
    model, calib, shapes = ONNX_MODELS[name]()
    config = "default" if name == "resnet18" else "tiny"
    compiled = compile_onnx(model, config=config, calibration=calib, input_shapes=shapes)
    fn = compiled.function
    kinds = {e.virtual_device.kind for e in post_order(fn.body)
             if not isinstance(e, Var) and e.virtual_device is not None}
    assert kinds == {"cpu", "accel"}  # a planned program, partly on the accelerator
    # the .tfm's text: large constants by reference, parsed back given the arrays
    constants = {f"c{slot}": v for slot, v in compiled.program.constants.items()}
    back = parse(compiled.graph_text, constants)
    assert structural_equal(expand_devices(back), fn)
    if name != "resnet18":  # the whole text with constants inlined (ResNet's is 15 MB)
        _complete_round_trip(fn)

"""ONNX convolutions with asymmetric padding (``auto_pad=SAME_UPPER`` at stride 2, as
TF-exported models have) and dilation 2 run on the accelerator; dilation 3 stays on the
CPU, and ``compile``/``inspect`` say why. Results equal the CPU kernels' bit for bit and a numpy
integer convolution written here."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorfab.cli import main
from tensorfab.compiler.graph import Call, parse, post_order, structural_equal
from tensorfab.compiler.graph.planning import expand_devices
from tensorfab.compiler.model_compile import compile_onnx
from tensorfab.runtime.interpreter import run_program


def same_upper_then_dilated_onnx(seed: int = 0) -> onnx.ModelProto:
    """conv 3x3 /2 SAME_UPPER on 10x10 (padding top/left 0, bottom/right 1) -> relu ->
    conv 3x3 dilation 2 -> relu -> conv 3x3 dilation 3 -> relu."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2
                                      ).astype(np.float32), f"w{i}") for i in range(3)]
    inits += [numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32),
                                      f"b{i}") for i in range(3)]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], strides=[2, 2],
                              auto_pad="SAME_UPPER"),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], dilations=[2, 2],
                              pads=[2, 2, 2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], dilations=[3, 3],
                              pads=[3, 3, 3, 3]),
             helper.make_node("Relu", ["c2"], ["y"])]
    graph = helper.make_graph(
        nodes, "pads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 5, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _calib() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((16, 8, 10, 10)).astype(np.float32)


@pytest.fixture(scope="module")
def compiled():
    return compile_onnx(same_upper_then_dilated_onnx(), config="default",
                        calibration=_calib())


def conv_int_reference(x: np.ndarray, w: np.ndarray, stride: int,
                       pads: tuple[int, int, int, int], dilation: int = 1) -> np.ndarray:
    """Integer NCHW convolution, ``pads`` = (top, left, bottom, right)."""
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    o, _, kh, kw = w.shape
    oh = (xp.shape[2] - (kh - 1) * dilation - 1) // stride + 1
    ow = (xp.shape[3] - (kw - 1) * dilation - 1) // stride + 1
    out = np.zeros((x.shape[0], o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dilation, j * dilation
            win = xp[:, :, y0:y0 + stride * oh:stride, x0:x0 + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", win, w[:, :, i, j].astype(np.int64))
    return out


def test_same_upper_and_dilation_2_on_the_accelerator_3_on_the_cpu_with_the_reason(
        compiled) -> None:
    calls = [e for e in post_order(compiled.function) if isinstance(e, Call)]
    layers = [e.attrs["layer"] for e in calls if e.op == "accel.program"]
    assert len(layers) == 2 and layers[1].endswith("3x3/1 dilation 2x2")
    conv = [e for e in calls if e.op == "qnn.conv2d_integer"]
    assert len(conv) == 1
    assert conv[0].virtual_device.kind == "cpu" and conv[0].attrs["dilation"] == (3, 3)
    assert len(compiled.cpu_convolutions) == 1
    assert "dilation (3, 3)" in compiled.cpu_convolutions[0]
    assert compiled.graph_text.startswith("// on the CPU: qnn.conv2d_integer (2, 8, 5, 5) "
                                          "-> (2, 8, 5, 5) 3x3/1x1: dilation (3, 3): its "
                                          "kernel with zeros between the taps would do "
                                          "5.4x the MACs")
    # the comment is skipped by the parser: the text still gives back the function
    consts = {f"c{s}": v for s, v in compiled.program.constants.items()}
    assert structural_equal(expand_devices(parse(compiled.graph_text, consts)),
                            compiled.function)


def test_accelerator_equals_the_cpu_kernels_bit_for_bit(compiled) -> None:
    cpu = compile_onnx(same_upper_then_dilated_onnx(), config=None, calibration=_calib())
    assert not any(e.op == "accel.program" for e in post_order(cpu.function)
                   if isinstance(e, Call))
    x = np.random.default_rng(2).standard_normal((2, 8, 10, 10)).astype(np.float32)
    got = run_program(compiled.program, [x])
    np.testing.assert_array_equal(got, run_program(cpu.program, [x]))
    assert np.abs(got).max() > 0


# SAME_UPPER at stride 2 pads top/left 0, bottom/right 1; a dilated 3x3 with its pads
@pytest.mark.parametrize("pads, stride, dilation", [((0, 0, 1, 1), 2, 1),
                                                    ((2, 1, 2, 3), 1, 2)])
def test_accelerator_program_equals_a_numpy_integer_convolution(pads, stride, dilation
                                                                ) -> None:
    """The accelerator program against numpy: requantized by 2^-8, which the fixed-point
    epilogue computes exactly (round half away from zero) and numpy below too."""
    from tensorfab.compiler.graph import accel
    from tensorfab.compiler.graph import builder as gb
    from tensorfab.compiler.graph.accel_lowering import lower_accelerator_chains
    from tensorfab.compiler.graph.device import CPU
    from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
    from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
    from tensorfab.compiler.graph.lower_runtime import lower_to_runtime
    from tensorfab.compiler.graph.partitioning import annotate_accelerator
    from tensorfab.compiler.graph.planning import plan_devices
    from tensorfab.isa import get_config

    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (16, 16, 3, 3)).astype(np.int8)
    x = gb.var("x", (1, 16, 10, 10), "int8", device=CPU)
    y = gb.requantize(gb.conv2d_integer(x, w, np.int8(0), np.int8(0), padding=pads,
                                        strides=(stride, stride),
                                        dilation=(dilation, dilation)),
                      np.float32(2.0 ** -8), np.int8(0), out_dtype="int8")
    f = fixed_point_requantize(gb.function([x], y, result_device=CPU), rounding="single")
    fn = lower_accelerator_chains(pack_accel_layouts(plan_devices(
        annotate_accelerator(f, accel(get_config("default"))))))
    assert [e.op for e in post_order(fn) if isinstance(e, Call)].count("accel.program") == 1
    xv = rng.integers(-128, 128, (1, 16, 10, 10)).astype(np.int8)
    got = run_program(lower_to_runtime(fn), [xv])
    acc = conv_int_reference(xv, w, stride, pads, dilation)
    want = np.clip(np.sign(acc) * ((np.abs(acc) + 128) >> 8), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, want)


def test_compile_and_inspect_show_the_cpu_convolution_and_why(tmp_path, capsys) -> None:
    onnx_path, tfm = tmp_path / "m.onnx", tmp_path / "m.tfm"
    onnx.save(same_upper_then_dilated_onnx(), onnx_path)
    np.save(tmp_path / "calib.npy", _calib())
    assert main(["compile", str(onnx_path), "-o", str(tfm), "--config", "default",
                 "--calib", str(tmp_path / "calib.npy"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["accel_programs"] == 2
    assert len(info["cpu_convolutions"]) == 1 and "dilation (3, 3)" in \
        info["cpu_convolutions"][0]
    assert main(["inspect", str(tfm)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "// on the CPU: " + info["cpu_convolutions"][0]
    assert "@accel(default)" in out


def test_run_report_names_the_cpu_convolution_under_its_row(tmp_path, capsys) -> None:
    onnx_path, tfm = tmp_path / "m.onnx", tmp_path / "m.tfm"
    onnx.save(same_upper_then_dilated_onnx(), onnx_path)
    np.save(tmp_path / "calib.npy", _calib())
    np.save(tmp_path / "x.npy", _calib()[:2])
    assert main(["compile", str(onnx_path), "-o", str(tfm), "--config", "default",
                 "--calib", str(tmp_path / "calib.npy")]) == 0
    capsys.readouterr()
    for model in (tfm, onnx_path):  # the .tfm's comments, or the compilation's list
        args = ["run", str(model), "--input", str(tmp_path / "x.npy"), "--target", "fsim"]
        if model == onnx_path:
            args += ["--config", "default", "--calib", str(tmp_path / "calib.npy")]
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "convolutions on the CPU" in out
        line = next(ln for ln in out.splitlines() if "dilation (3, 3)" in ln)
        row = int(line.split()[0].lstrip("#"))
        # the columns #, node, device, op: the row without its node name
        cells = [[c.strip() for c in ln.split("│")[1:5]] for ln in out.splitlines()]
        cells = [c[:1] + c[2:] for c in cells]
        assert [str(row), "cpu", "qnn.conv2d_integer"] in cells

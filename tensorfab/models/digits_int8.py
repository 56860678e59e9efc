"""The shipped digits CNN in int8 with its convolution chains on the accelerator.

One function compiles it (onnxruntime's QDQ quantization calibrated on the training
split, per-channel weights by default, integer lowering, the accelerator's exact
per-channel requantization (or the per-tensor fixed-point one),
partitioning, device planning, blocked layouts, each convolution chain compiled by the
tensor compiler); the result runs on the runtime's interpreter with the accelerator
programs on any executor (``fsim``, ``rtl``). ``tensorfab bench digits`` and
``tensorfab demo`` use it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from tensorfab.isa import HwConfig, get_config
from tensorfab.runtime.accel_contract import ACCEL_PROGRAM
from tensorfab.runtime.interpreter import GraphProgram, run_program

from .digits_cnn import load_digits_split, model_path

__all__ = ["CALIBRATION_IMAGES", "DigitsInt8", "LayerInfo", "compile_digits_int8", "mac_layers",
           "on_executor", "predict_in_batches"]

#: Training images used to calibrate the quantizer (8 batches of 64).
CALIBRATION_IMAGES = 512


@dataclass(frozen=True)
class LayerInfo:
    """One multiply-accumulate layer of the integer graph: its operator, the device it
    runs on, its output shape and its MACs for the compiled batch."""

    name: str
    op: str
    device: str
    out_shape: tuple[int, ...]
    macs: int


@dataclass
class DigitsInt8:
    """The compiled model.

    Attributes
    ----------
    program : GraphProgram
        The runtime program: convolutions as ``accel.program`` nodes, the rest on the CPU.
    reference : GraphProgram
        The same integer graph entirely on the CPU interpreter (the bit-exact reference).
    qdq : onnx.ModelProto
        onnxruntime's QDQ model (what onnxruntime itself would execute in int8).
    layers : list of LayerInfo
        The convolution and dense layers with their devices and MACs.
    batch : int
        The batch the model was compiled for.
    config : str
        The accelerator's config name.
    """

    program: GraphProgram
    reference: GraphProgram
    qdq: onnx.ModelProto
    layers: list[LayerInfo]
    batch: int
    config: str

    @property
    def accel_mac_fraction(self) -> float:
        """The fraction of all MACs that run on the accelerator."""
        total = sum(layer.macs for layer in self.layers)
        return sum(layer.macs for layer in self.layers if layer.device == "accel") / total


def _mac_layers(fn: Any) -> list[tuple[str, tuple[int, ...], int, str]]:
    from tensorfab.compiler.graph import Call, infer_types, post_order

    infer_types(fn)
    out = []
    for e in post_order(fn):
        if isinstance(e, Call) and e.op in ("qnn.conv2d_integer", "qnn.matmul_integer"):
            w = tuple(int(d) for d in infer_types(e.args[1]).shape)  # type: ignore[union-attr]
            y = tuple(int(d) for d in infer_types(e).shape)  # type: ignore[union-attr]
            red = w[1] * w[2] * w[3] if e.op == "qnn.conv2d_integer" else w[0]
            dev = e.virtual_device.kind if e.virtual_device is not None else "cpu"
            out.append((e.op, y, int(np.prod(y)) * red, dev))
    return out


def mac_layers(plain: Any, planned: Any) -> list[LayerInfo]:
    """MACs from the plain integer graph (no channel padding), devices from the planned
    one (the same MAC operators in the same order)."""
    devices = [d for _, _, _, d in _mac_layers(planned)]
    layers = []
    for i, ((op, shape, macs, _), dev) in enumerate(zip(_mac_layers(plain), devices,
                                                         strict=True)):
        kind = "conv" if op == "qnn.conv2d_integer" else "dense"
        layers.append(LayerInfo(f"{kind}{i + 1}", op, dev, shape, macs))
    return layers


def compile_digits_int8(batch: int = 40, config: str | HwConfig = "default",
                        model: onnx.ModelProto | str | None = None,
                        per_channel: bool = True, requant_stage: str = "store") -> DigitsInt8:
    """Quantize and compile the digits CNN (the shipped file unless ``model`` is given)
    for a fixed ``batch``, its convolution chains for the accelerator ``config`` (a
    :class:`~tensorfab.isa.HwConfig`, a preset name or a JSON config file).

    The dense layer runs as a 1×1 convolution
    (:func:`~tensorfab.compiler.graph.dense_as_conv.dense_as_conv`), so all three
    layers run on the accelerator. With ``per_channel`` the weights are quantized per
    output channel and the layers requantize with ``qnn.requantize_q31`` (one REQUANT
    pass where the config has it, else TFLite's exact arithmetic, the accelerator's
    MULHI epilogue); otherwise per tensor with ``qnn.requantize_fixed``.
    ``requant_stage`` is where a REQUANT pass runs (``"store"``: requantizing STOREs,
    ``"alu"``: an ALU pass, :attr:`~tensorfab.compiler.Epilogue.requant_stage`).
    """
    from tensorfab.compiler.frontend import from_onnx, quantize_onnx
    from tensorfab.compiler.graph import accel
    from tensorfab.compiler.graph.accel_lowering import lower_accelerator_chains
    from tensorfab.compiler.graph.constant_folding import fold_constants
    from tensorfab.compiler.graph.dense_as_conv import dense_as_conv
    from tensorfab.compiler.graph.fixed_point import fixed_point_requantize, rounding_for
    from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
    from tensorfab.compiler.graph.lower_runtime import lower_to_runtime
    from tensorfab.compiler.graph.partitioning import annotate_accelerator
    from tensorfab.compiler.graph.planning import plan_devices
    from tensorfab.compiler.graph.qdq_lowering import lower_qdq

    float_model = onnx.load(str(model_path())) if model is None else (
        onnx.load(model) if isinstance(model, str) else model)
    xtr, _, _, _ = load_digits_split(0)
    qdq = quantize_onnx(float_model,
                        [{"image": xtr[i:i + 64]} for i in range(0, CALIBRATION_IMAGES, 64)],
                        per_channel=per_channel)
    f = from_onnx(qdq, input_shapes={"image": (batch, 1, 8, 8)})
    integer = lower_qdq(fold_constants(f))
    # the dense layer as a 1x1 convolution: on the accelerator like the convolutions
    cfg = config if isinstance(config, HwConfig) else get_config(config)
    g = fixed_point_requantize(dense_as_conv(integer), per_channel=per_channel,
                               rounding=rounding_for(cfg), every_q31=not cfg.vector_alu)
    planned = pack_accel_layouts(plan_devices(annotate_accelerator(g, accel(cfg))))
    compiled = lower_accelerator_chains(planned, requant_stage=requant_stage)
    return DigitsInt8(program=lower_to_runtime(compiled), reference=lower_to_runtime(g),
                      qdq=qdq, layers=mac_layers(integer, planned), batch=batch,
                      config=cfg.name)


def on_executor(program: GraphProgram, executor: str) -> GraphProgram:
    """``program`` with every ``accel.program`` node running on ``executor``
    (a target of :func:`tensorfab.isa.device.open_device`)."""
    nodes = [dataclasses.replace(n, attrs={**n.attrs, "executor": executor})
             if n.op == ACCEL_PROGRAM else n for n in program.nodes]
    return dataclasses.replace(program, nodes=nodes)


def predict_in_batches(program: GraphProgram, images: np.ndarray, batch: int) -> np.ndarray:
    """The outputs of ``program`` (compiled for ``batch`` images) on all ``images``; the
    last batch is padded with zero images whose outputs are dropped."""
    outs = []
    for i in range(0, len(images), batch):
        chunk = images[i:i + batch]
        n = len(chunk)
        if n < batch:
            chunk = np.concatenate([chunk, np.zeros((batch - n, *chunk.shape[1:]),
                                                    chunk.dtype)])
        outs.append(np.asarray(run_program(program, [chunk]))[:n])
    return np.concatenate(outs)

"""Post-training quantization of an ONNX model into QDQ form, with onnxruntime's
quantizer (min/max calibration on data the caller gives).

The result has ``QuantizeLinear``/``DequantizeLinear`` pairs around every quantized
tensor (int8, symmetric by default, per-channel weights, int32 biases), which
:func:`~tensorfab.compiler.frontend.from_onnx` imports as ``qnn.quantize`` /
``qnn.dequantize`` calls.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import onnx

from .onnx_ops import OnnxImportError


def quantize_onnx(model: onnx.ModelProto, calibration: Iterable[Mapping[str, np.ndarray]], *,
                  per_channel: bool = True, symmetric: bool = True,
                  preprocess: bool = True, method: str = "minmax",
                  percentile: float = 99.99,
                  activation_dtype: str = "int8") -> onnx.ModelProto:
    """A QDQ int8 copy of ``model`` calibrated on the input feeds of ``calibration``.

    Parameters
    ----------
    model : onnx.ModelProto
        A float model.
    calibration : iterable of mappings
        Input feeds (input name to array), e.g. a few batches of training data.
    per_channel : bool
        One weight scale per output channel.
    symmetric : bool
        Zero points of 0 for activations and weights (as the accelerator's int8 path).
    preprocess : bool
        First run onnxruntime's ``quant_pre_process`` (graph optimizations such as
        folding batch normalization into convolutions, so that they quantize as one).
    method : str
        onnxruntime's calibration: ``"minmax"`` or ``"percentile"``.
    percentile : float
        The percentile of the ``percentile`` method (onnxruntime's ``CalibPercentile``).
    activation_dtype : str
        ``"int8"`` or ``"uint8"`` (onnxruntime's default for ``quantize_static``: with
        ``symmetric=False``, asymmetric activations with zero points).
    """
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    methods = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile}
    if method not in methods:
        raise OnnxImportError(f"quantize_onnx: unknown calibration method {method!r}; "
                              f"known: {', '.join(methods)}")
    activation_types = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
    if activation_dtype not in activation_types:
        raise OnnxImportError(f"quantize_onnx: activation_dtype {activation_dtype!r}; "
                              f"known: {', '.join(activation_types)}")
    feeds = [dict(f) for f in calibration]
    if not feeds:
        raise OnnxImportError("quantize_onnx: the calibration data is empty")

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(feeds)

        def get_next(self) -> dict | None:
            return next(self.items, None)

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs advice about pre-processing
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "quantized.onnx"
            if preprocess:
                from onnxruntime.quantization.shape_inference import quant_pre_process

                prepared = Path(tmp) / "prepared.onnx"
                quant_pre_process(model, prepared, skip_symbolic_shape=True)
                model = onnx.load(prepared)
            with contextlib.redirect_stdout(io.StringIO()):  # its percentile calibrator prints
                quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ,
                                activation_type=activation_types[activation_dtype],
                                weight_type=QuantType.QInt8,
                                per_channel=per_channel, calibrate_method=methods[method],
                                extra_options={"ActivationSymmetric": symmetric,
                                               "WeightSymmetric": symmetric,
                                               "CalibPercentile": percentile})
            return onnx.load(out)
    finally:
        root.setLevel(level)

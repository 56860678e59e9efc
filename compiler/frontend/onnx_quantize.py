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

    Raises
    ------
    OnnxImportError
        An unknown method or activation type, empty calibration data, or onnxruntime's
        quantizer failing on the model (its error and where it was raised).

    Notes
    -----
    A model of an older opset is first converted to opset 13 when ``per_channel`` (the
    quantizer would write per-channel ``DequantizeLinear`` nodes, whose ``axis`` opset
    13 introduced, into an opset-11 model), and a model of IR version < 4 becomes IR 4
    with its initializers off the graph inputs (the quantizer adds initializers that IR
    3 would require among the inputs; in IR 3 they are constants either way, in IR 4 a
    listed one would be an input).
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

    model = _quantizable_version(model, per_channel)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs advice about pre-processing
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "quantized.onnx"
            if preprocess:
                from onnxruntime.quantization.shape_inference import quant_pre_process

                # from a file: given a ModelProto, onnxruntime moves its initializers
                # into external data in place (the caller's model then points at a
                # deleted file, and the optimizer cannot read a Reshape's shape)
                source = Path(tmp) / "float.onnx"
                onnx.save(model, source)
                prepared = Path(tmp) / "prepared.onnx"
                quant_pre_process(str(source), prepared, skip_symbolic_shape=True)
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
    except Exception as e:  # onnxruntime's own errors, from deep inside its quantizer
        raise OnnxImportError(f"quantize_onnx: onnxruntime's quantizer fails on this model: "
                              f"{type(e).__name__}: {e} ({_innermost(e)}); tensorfab's own "
                              "quantizer (--quantizer tensorfab) does not use it") from e
    finally:
        root.setLevel(level)


def _innermost(e: BaseException) -> str:
    """Where ``e`` was raised: ``file:line in function`` of its innermost frame."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "no traceback"
    code = tb.tb_frame.f_code
    return f"{Path(code.co_filename).name}:{tb.tb_lineno} in {code.co_name}"


def _quantizable_version(model: onnx.ModelProto, per_channel: bool) -> onnx.ModelProto:
    """``model`` at an opset and IR version whose quantized form is a valid model (see
    :func:`quantize_onnx`'s notes); ``model`` itself when it is one already."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if (not per_channel or opset >= 13) and model.ir_version >= 4:
        return model
    if per_channel and opset < 13:
        from onnx import version_converter

        try:
            converted = version_converter.convert_version(model, 13)
        except Exception as e:  # the converter raises its own (C++) error types
            raise OnnxImportError(f"quantize_onnx: converting the opset-{opset} model to "
                                  f"opset 13 for per-channel quantization failed: {e}"
                                  ) from None
    else:
        converted = onnx.ModelProto()
        converted.CopyFrom(model)
    if converted.ir_version < 4:  # IR 3's initializers are constants, listed as inputs or
        inits = {t.name for t in converted.graph.initializer}  # not: from IR 4 on, a
        kept = [i for i in converted.graph.input if i.name not in inits]  # listed one is
        del converted.graph.input[:]  # an overridable input
        converted.graph.input.extend(kept)
        converted.ir_version = 4
    return converted

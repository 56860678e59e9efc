"""tensorfab.compiler.frontend: model importers into the graph IR (ONNX)."""

from .onnx_import import MAX_OPSET, MIN_OPSET, PreparedOnnx, from_onnx, load_onnx, prepare_model
from .onnx_ops import OnnxImportError, supported_op_types
from .onnx_quantize import quantize_onnx

__all__ = ["MAX_OPSET", "MIN_OPSET", "OnnxImportError", "PreparedOnnx", "from_onnx",
           "load_onnx", "prepare_model", "quantize_onnx", "supported_op_types"]

"""tensorfab.compiler.frontend: model importers (ONNX)."""

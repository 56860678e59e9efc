"""Models made by code in the repository (trained or seeded), shipped as ONNX."""
